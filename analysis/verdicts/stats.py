"""The project's statistics, in one place: every workflow that asks "is there a difference, is it
absent, or can we not tell" (the claims' verdicts and, through them, the labs' verdict questions;
kernel regression, series and bisection; ablations) calls this module and keeps no test of its own
(docs/layout.md: one statistics module). Pure functions on lists of numbers, scipy underneath; the
rules built on them are stated where they are used (analysis/verdicts/claims.py, analysis/kernels/regression.py) and
in docs/results.md.

* Per point: the mean over seeds and its Student-t interval (:func:`seed_stats`).
* Two samples: Welch's t-test, the paired t-test, the smallest difference a test finds with 80 %
  power (:func:`detectable_change`).
* **Effects as ratios** (:class:`Effect`): side a relative to side b (or to a fixed value), on the log
  scale, so that "+50 %" and "-33 %" are the same distance from "no difference", with its interval,
  one-sided tests against any bound (a practical threshold, an equivalence margin, the paper's effect;
  two of them at once are TOST) and the seeds per side that would decide a test at the measured noise.
* **Paired by seed** (:func:`seeded_effect`): when both sides ran the same seeds, each seed's two runs
  share the seed's random numbers (its loss timeline, its schedules), so the effect is tested on the
  seeds' own log ratios (the paired t-test) and what varies from seed to seed drops out; Welch's test on
  the two sides only where the runs do not pair up. Claims, explain's moves, regress, series and bisect
  all take their effects from here.
* **Multiplicity**: Holm's step-down adjustment (:func:`holm`); over repeated looks at growing data,
  alpha spent look by look (analysis/verdicts/sequential.py).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, stats

from analysis.runs.metrics import number_or_nan

ALPHA = 0.05
POWER = 0.80
#: seeds per side beyond which "how many would decide it" is answered "more than this"
SEED_LIMIT = 200


def _present(values: Iterable) -> np.ndarray:
    """The numbers among ``values`` as a float array, missing ones (None/NaN) left out."""
    numbers = np.array([number_or_nan(v) for v in values], dtype=float)
    return numbers[~np.isnan(numbers)]


def _quiet_ttest(test, *samples, **options):
    """``test`` (a scipy.stats t-test) without scipy's warning about nearly identical values: those get
    a huge t and a p near 0, as they always did here (exact ties are answered before scipy is asked)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred in moment calculation", RuntimeWarning)
        return test(*samples, **options)


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with ``df`` degrees of freedom."""
    return float(stats.t.cdf(t, df))


def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (e.g. 0.975, 2 -> 4.3027)."""
    if not 0 < p < 1 or not df > 0:  # scipy answers NaN or an infinity here; a caller's mistake should raise
        raise ValueError("need 0 < p < 1 and df > 0")
    return float(stats.t.ppf(p, df))


@dataclass(frozen=True)
class SeedStats:
    """Summary of one quantity over the seeds of a point. ``ci_low``/``ci_high``: the two-sided confidence
    interval of the mean with Student's t (NaN for fewer than two values: one run gives no interval)."""

    n: int
    mean: float
    min: float
    max: float
    ci_low: float
    ci_high: float
    confidence: float = 0.95

    @property
    def ci_half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2


def seed_stats(values: Iterable, confidence: float = 0.95) -> SeedStats:
    """Mean, min, max and the Student-t confidence interval of the mean over seeds.

    Missing values (None/NaN) are left out and not counted in ``n``. With n = 1 the mean, min and max
    are that value and the interval is NaN; with n = 0 everything is NaN.
    """
    clean = [v for v in (number_or_nan(x) for x in values) if not math.isnan(v)]
    n = len(clean)
    if n == 0:
        return SeedStats(0, math.nan, math.nan, math.nan, math.nan, math.nan, confidence)
    mean = sum(clean) / n
    low = high = math.nan
    if n >= 2:
        std = math.sqrt(sum((v - mean) ** 2 for v in clean) / (n - 1))
        half = student_t_quantile(0.5 + confidence / 2, n - 1) * std / math.sqrt(n)
        low, high = mean - half, mean + half
    return SeedStats(n, mean, min(clean), max(clean), low, high, confidence)


@dataclass(frozen=True)
class TTest:
    """A t-test of a vs b: the statistic, its degrees of freedom, the two-sided p-value and the
    standard error of the difference it tests."""

    t: float
    df: float
    p_value: float
    se: float = math.nan


def _mean_and_squared_se(values: np.ndarray) -> tuple[float, float]:
    """The mean of ``values`` and its squared standard error (variance / n). numpy's mean and deviations
    are scipy's, so both see "no spread" alike. An infinite value makes them NaN without numpy's
    warning, as the plain-float arithmetic before scipy did."""
    with np.errstate(invalid="ignore"):
        return float(values.mean()), float(values.var(ddof=1)) / len(values)


def _test_without_scipy(estimate: float, se: float, df: float) -> TTest | None:
    """The test where scipy's answer is not ours, else None. No spread at all (se 0): p = 1 when the
    estimate is 0, else p = 0 with t = +-inf; scipy gives t = 0/0 = NaN and p NaN for the first. An
    infinite value (se NaN): NaN, while scipy's Welch test would put df = 1 for its undefined df."""
    if se == 0 and estimate == 0:
        return TTest(0.0, df, 1.0, 0.0)
    if se == 0:
        return TTest(math.copysign(math.inf, estimate), df, 0.0, 0.0)
    if math.isnan(se):
        return TTest(math.nan, df, math.nan, math.nan)
    return None


def welch_t_test(a: Iterable, b: Iterable) -> TTest:
    """Welch's two-sample t-test of mean(a) vs mean(b) (unequal variances, Welch-Satterthwaite degrees
    of freedom); needs two or more values on each side (else every field is NaN). Two samples with no
    spread at all: p = 1 when their means are equal, else 0."""
    xs, ys = _present(a), _present(b)
    if len(xs) < 2 or len(ys) < 2:
        return TTest(math.nan, math.nan, math.nan)
    (mean_x, square_x), (mean_y, square_y) = _mean_and_squared_se(xs), _mean_and_squared_se(ys)
    se = math.sqrt(square_x + square_y)
    if special := _test_without_scipy(mean_x - mean_y, se, math.nan):
        return special
    result = _quiet_ttest(stats.ttest_ind, xs, ys, equal_var=False)
    return TTest(float(result.statistic), float(result.df), float(result.pvalue), se)


def paired_t_test(differences: Iterable) -> TTest:
    """The paired t-test: is the mean of the pairs' ``differences`` zero? (n - 1 degrees of freedom;
    NaN fields with fewer than two pairs). Differences with no spread: p = 1 when they are all zero,
    else 0."""
    ds = _present(differences)
    if len(ds) < 2:
        return TTest(math.nan, math.nan, math.nan)
    mean, square = _mean_and_squared_se(ds)
    se = math.sqrt(square)
    if special := _test_without_scipy(mean, se, len(ds) - 1):
        return special
    result = _quiet_ttest(stats.ttest_1samp, ds, 0.0)
    return TTest(float(result.statistic), len(ds) - 1, float(result.pvalue), se)


# ------------------------------------------------------------------------------- power and detection


@functools.lru_cache(maxsize=4096)
def power_factor(df: float, alpha: float = ALPHA, power: float = POWER, sides: int = 2) -> float:
    """The true difference, in standard errors, that a t-test at ``alpha`` (two-sided unless ``sides`` is
    1) with ``df`` degrees of freedom finds with probability ``power``: a standard error times this is the
    smallest difference it finds so. Exact, from the noncentral t (the statistic's law when the difference
    is real). The usual shortcut, the two t quantiles added, promises too much at few runs and a small
    level: at 4 degrees of freedom and 0.05 / 34 (Holm's first step over regress's family) a difference of
    its size is found 70 % of the time, not 80 %."""
    critical = student_t_quantile(1 - alpha / sides, df)
    shortcut = critical + student_t_quantile(power, df)
    if not power > alpha / sides or df > 1e6:  # no shift is needed; or the normal's case, where it is exact
        return max(shortcut, 0.0)

    def shortfall(shift: float) -> float:
        upper = stats.nct.sf(critical, df, shift)
        lower = stats.nct.cdf(-critical, df, shift) if sides == 2 else 0.0
        # scipy's far tail is sometimes NaN where it is below 1e-15: nothing beside ``power``
        return float(upper) + (float(lower) if math.isfinite(lower) else 0.0) - power

    high = max(shortcut, 1.0)
    for _ in range(60):  # the shortcut is near: a few widenings at most
        if shortfall(high) >= 0:
            break
        high *= 1.5
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-6))


def detectable_change(baseline: Sequence[float], candidate: Sequence[float], alpha: float = ALPHA) -> float:
    """The smallest relative change Welch's test at ``alpha`` (two-sided) would find with 80 % power at these
    sizes and this noise (pooled standard deviation), relative to the baseline's mean; NaN with fewer
    than 2 a side."""
    nb, nc = len(baseline), len(candidate)
    if nb < 2 or nc < 2:
        return math.nan
    var_b, var_c = float(np.var(baseline, ddof=1)), float(np.var(candidate, ddof=1))
    pooled = math.sqrt(((nb - 1) * var_b + (nc - 1) * var_c) / (nb + nc - 2))
    mean_b = float(np.mean(baseline))
    return power_factor(nb + nc - 2, alpha) * pooled * math.sqrt(1 / nb + 1 / nc) / abs(mean_b) if mean_b else math.inf


# ------------------------------------------------------------------------------------ effects as ratios


@dataclass(frozen=True)
class Effect:
    """Side a's mean relative to side b's (or to a fixed value, ``n_b == 0``) on the log scale.

    ``log_ratio`` is ``ln(mean(a) / mean(b))``; its standard error is the delta method's,
    ``sqrt(var_a / n_a + var_b / n_b)`` with each side's variance relative to its squared mean, and its
    degrees of freedom Welch-Satterthwaite's: Welch's test on the log ratio of means. On the log scale
    +50 % and -33 % are the same distance from no difference. Simulated at 3 and 5 runs a side with
    10-30 % noise, normal and lognormal, its one-sided 5 % test errs 3.7-5.0 % of the time
    (tests/unit/test_verdict_rule.py measures it). ``var_a``, ``var_b``: one run's relative variance,
    from which the runs a test needs are worked out. ``se`` is NaN with one run on a side (no noise
    estimate: nothing can be shown) and 0 when no side varies."""

    log_ratio: float
    se: float
    df: float
    n_a: int
    n_b: int
    var_a: float
    var_b: float
    #: a paired effect's seeds and their log ratios ``ln(a_s / b_s)`` (:func:`paired_ratio_effect`: then
    #: ``log_ratio`` is their mean, ``var_a`` their variance, ``var_b`` 0); empty when the sides did not pair
    pairs: tuple[tuple[object, float], ...] = ()
    #: runs of either side left out of a paired test because the other side has no run of that seed
    unpaired: int = 0
    #: runs folded into their seed's mean before pairing (a seed run more than once on a side)
    averaged: int = 0

    @property
    def paired(self) -> bool:
        return bool(self.pairs)

    @property
    def test(self) -> str:
        """How it was tested, for a verdict's line: 'paired over 3 seeds', 'Welch, 3 vs 2 runs'."""
        if self.paired:
            left = f", {self.unpaired} unpaired run{'s' * (self.unpaired != 1)} left out" if self.unpaired else ""
            if self.averaged:
                left += f", {self.averaged} repeated run{'s' * (self.averaged != 1)} averaged into their seed's"
            return f"paired over {len(self.pairs)} seeds{left}"
        if self.n_b == 0:
            return f"one-sample, {self.n_a} runs"
        return f"Welch, {self.n_a} vs {self.n_b} runs"

    @property
    def relative(self) -> float:
        """a / b - 1 (e.g. +0.30: a is 30 % above b)."""
        return math.expm1(self.log_ratio)

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """The two-sided interval of ``relative`` (NaN, NaN without a noise estimate)."""
        if math.isnan(self.se):
            return math.nan, math.nan
        if self.se == 0:
            return self.relative, self.relative
        half = student_t_quantile(0.5 + confidence / 2, self.df) * self.se
        return math.expm1(self.log_ratio - half), math.expm1(self.log_ratio + half)

    def p_above(self, bound: float) -> float:
        """One-sided p of "a / b - 1 is at most ``bound``": small when the runs show it above ``bound``."""
        return self._one_sided(self.log_ratio - math.log1p(bound))

    def p_below(self, bound: float) -> float:
        """One-sided p of "a / b - 1 is at least ``bound``": small when the runs show it below ``bound``."""
        return self._one_sided(math.log1p(bound) - self.log_ratio)

    def p_two_sided(self, bound: float = 0.0) -> float:
        """Two-sided p of "a / b - 1 is ``bound``" (a move either way)."""
        return min(1.0, 2 * min(self.p_above(bound), self.p_below(bound)))

    def _one_sided(self, distance: float) -> float:
        if math.isnan(self.se):
            return math.nan
        if self.se == 0:
            return 0.0 if distance > 0 else 1.0
        return float(stats.t.sf(distance / self.se, self.df))

    def detectable(self, alpha: float = ALPHA, power: float = POWER, sides: int = 1) -> float:
        """The smallest relative effect (away from none) the test at ``alpha`` (one-sided unless ``sides``
        is 2) shows with ``power`` at this noise and these runs; NaN without a noise estimate."""
        if math.isnan(self.se):
            return math.nan
        return math.expm1(power_factor(self.df, alpha, power, sides=sides) * self.se)

    def seeds_to_show(self, bound: float, above: bool, alpha: float = ALPHA, power: float = POWER) -> int | None:
        """Runs per side at which the one-sided test at ``alpha`` shows the effect above (or below)
        ``bound`` with ``power``, were the truth the measured effect and each run as noisy as measured;
        None when the measured effect is not on that side of ``bound`` (no number of seeds shows it) or
        there is no noise estimate, ``SEED_LIMIT + 1`` when more than ``SEED_LIMIT`` would be needed."""
        distance = (self.log_ratio - math.log1p(bound)) * (1 if above else -1)
        if distance <= 0 or math.isnan(self.var_a) or math.isnan(self.var_b):
            return None

        def shown(n: int) -> bool:  # a paired effect is a one-sample test of its seeds' log ratios
            df = n - 1 if self.n_b == 0 or self.paired else 2 * n - 2
            se = math.sqrt(self.var_a / n + (self.var_b / n if self.n_b else 0.0))
            return distance >= power_factor(df, alpha, power, sides=1) * se

        if not shown(SEED_LIMIT):
            return SEED_LIMIT + 1
        low, high = 1, SEED_LIMIT  # shown(high) holds; bisect for the smallest n >= 2 that shows it
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if shown(middle) else (middle, high)
        return max(high, 2)


def tost_p(effect: Effect, margin: float) -> float:
    """Two one-sided tests of equivalence: small when the runs show ``effect.relative`` within ``±margin``
    (above ``-margin`` and below ``+margin``, each at the level asked; the larger p of the two, as the
    90 % interval inside the margins for a level of 0.05). NaN without a noise estimate."""
    return max(effect.p_above(-margin), effect.p_below(margin))


def pairs_for_equivalence(effect: Effect, margin: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """Pairs at which the TOST shows ``±margin`` with ``power`` were the sides truly equal and each pair's
    log ratio as spread as in ``effect`` (a paired effect); ``SEED_LIMIT + 1`` beyond ``SEED_LIMIT``, None
    without a spread. For equal sides both one-sided tests must pass: t(1 - alpha) + t(1 - (1 - power) / 2)."""
    if not effect.paired or math.isnan(effect.var_a):
        return None
    sd, bound = math.sqrt(effect.var_a), math.log1p(margin)
    for n in range(2, SEED_LIMIT + 1):
        # the standard approximation for equal sides (both tests pass when the estimate lies this far inside
        # the margins); the noncentral t of power_factor is the law of one shifted test, not of this
        factor = student_t_quantile(1 - alpha, n - 1.0) + student_t_quantile(1 - (1 - power) / 2, n - 1.0)
        if factor * sd / math.sqrt(n) <= bound:
            return n
    return SEED_LIMIT + 1


def effect_shift(effect: Effect, baseline: Effect) -> Effect:
    """How far ``effect`` moved from ``baseline`` (``testbed explain``: a factor's effect against the
    baseline's): their ratio, on the log scale. When both are paired and share two seeds or more, paired
    again: each shared seed's log ratio minus the baseline's at that seed, a one-sample test of those
    (the seed's random numbers drop out of the move as they did of each effect). Otherwise the two effects
    are taken as independent: the standard error their combined, Welch's degrees of freedom over the four
    samples."""
    if effect.paired and baseline.paired:
        base = dict(baseline.pairs)
        moves = [(seed, d - base[seed]) for seed, d in effect.pairs if seed in base]
        if len(moves) >= 2:
            return _one_sample_log(moves, unpaired=len(effect.pairs) + len(baseline.pairs) - 2 * len(moves))
    terms = [(effect.var_a, effect.n_a), (baseline.var_a, baseline.n_a)]
    terms += [(v, n) for v, n in ((effect.var_b, effect.n_b), (baseline.var_b, baseline.n_b)) if n]
    se = math.sqrt(effect.se**2 + baseline.se**2)
    df = math.nan if math.isnan(se) else _welch_df(terms)
    return Effect(
        effect.log_ratio - baseline.log_ratio,
        se,
        df,
        effect.n_a,
        baseline.n_a,
        effect.var_a + effect.var_b,
        baseline.var_a + baseline.var_b,
    )


def _welch_df(terms: list[tuple[float, int]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of ``variance / n`` terms."""
    squares = [(v / n) ** 2 / (n - 1) for v, n in terms]
    total = sum(v / n for v, n in terms)
    if not sum(squares):
        return float(sum(n - 1 for _, n in terms))
    return total**2 / sum(squares)


def ratio_effect(a: Sequence[float], b: Sequence[float]) -> Effect | None:
    """Side a's runs relative to side b's (:class:`Effect`); None when a side has no run or its mean is
    0 or less (no ratio to speak of)."""
    xs, ys = _present(a), _present(b)
    if not len(xs) or not len(ys) or xs.mean() <= 0 or ys.mean() <= 0:
        return None
    var_a, var_b = _var(xs) / xs.mean() ** 2, _var(ys) / ys.mean() ** 2
    se = math.sqrt(var_a / len(xs) + var_b / len(ys))
    df = math.nan if math.isnan(se) else _welch_df([(var_a, len(xs)), (var_b, len(ys))])
    return Effect(math.log(xs.mean() / ys.mean()), se, df, len(xs), len(ys), var_a, var_b)


def paired_ratio_effect(a: Mapping[object, float], b: Mapping[object, float]) -> Effect | None:
    """Side a relative to side b paired by seed (``a[seed]``, ``b[seed]``: one run's value each): the mean
    of the seeds' log ratios ``ln(a_s / b_s)``, a one-sample t-test of them (n - 1 degrees of freedom).
    Its ``relative`` is the geometric mean of the seeds' ratios. None with fewer than two seeds on both
    sides or a value of 0 or less among them (no log ratio)."""
    shared = [seed for seed in a if seed in b]
    values = [(number_or_nan(a[seed]), number_or_nan(b[seed])) for seed in shared]
    if len(shared) < 2 or any(not (x > 0 and y > 0) for x, y in values):
        return None
    logs = [(seed, math.log(x / y)) for seed, (x, y) in zip(shared, values, strict=True)]
    return _one_sample_log(logs, unpaired=len(a) + len(b) - 2 * len(shared))


def _one_sample_log(logs: list[tuple[object, float]], unpaired: int = 0) -> Effect:
    """The paired effect of these seeds' log ratios (or log moves)."""
    values = np.array([d for _, d in logs], dtype=float)
    variance = _var(values)
    se = math.sqrt(variance / len(values))
    return Effect(
        float(values.mean()),
        se,
        len(values) - 1.0,
        len(values),
        len(values),
        variance,
        0.0,
        pairs=tuple(logs),
        unpaired=unpaired,
    )


def seeded_effect(a: Sequence[tuple[object, float]], b: Sequence[tuple[object, float]]) -> Effect | None:
    """Side a relative to side b from ``(seed, value)`` runs, by the design: **paired** (:func:`
    paired_ratio_effect`) when two seeds or more ran on both (a run whose seed the other side lacks is
    left out, and the effect says so); else **Welch** on all runs (:func:`ratio_effect`). A seed run more
    than once on a side (two sessions at the same seeds) is one replicate, not several: its runs are
    averaged first, so that repeating seeds never buys the power of new ones (pseudo-replication). The
    choice depends on which seeds ran, never on the values, so it spends no alpha; a value of 0 or less (a
    ratio of 0 retransmissions) has no log ratio and falls back to Welch."""
    a_map, b_map = _seed_means(a), _seed_means(b)
    paired = paired_ratio_effect(a_map, b_map)
    if paired is None:  # Welch, one value per seed
        return ratio_effect(list(a_map.values()), list(b_map.values()))
    folded = sum(1 for s, v in [*a, *b] if not math.isnan(number_or_nan(v))) - len(a_map) - len(b_map)
    return replace(paired, averaged=folded)


def _seed_means(runs: Sequence[tuple[object, float]]) -> dict[object, float]:
    """Each seed's mean value over its runs (a seed run once: its value)."""
    by_seed: dict[object, list[float]] = {}
    for index, (seed, value) in enumerate(runs):
        if not math.isnan(number_or_nan(value)):  # a run without a seed is a replicate of its own
            by_seed.setdefault(("run", index) if seed is None else seed, []).append(float(value))
    return {seed: sum(values) / len(values) for seed, values in by_seed.items()}


def ratio_to_value(a: Sequence[float], value: float) -> Effect | None:
    """Side a's runs relative to a fixed ``value`` (a paper's number): the one-sample version; None
    without runs or when ``value`` or a's mean is not positive."""
    xs = _present(a)
    if not len(xs) or value <= 0 or xs.mean() <= 0:
        return None
    var_a = _var(xs) / xs.mean() ** 2
    return Effect(math.log(xs.mean() / value), math.sqrt(var_a / len(xs)), len(xs) - 1.0, len(xs), 0, var_a, 0.0)


def _var(values: np.ndarray) -> float:
    """The sample variance (NaN for fewer than two values)."""
    return float(values.var(ddof=1)) if len(values) >= 2 else math.nan


# ---------------------------------------------------------------------------------------- multiplicity


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order: a family of tests whose adjusted p is
    below alpha has a family-wise error rate of at most alpha, whatever their dependence. NaN (a test
    that could not be made) counts as 1. Written here because scipy has only the false discovery rate's
    procedure (``false_discovery_control``) and statsmodels' ``multipletests`` is a large dependency for
    a few lines."""
    ps = [1.0 if math.isnan(p) else min(1.0, p) for p in p_values]
    order = sorted(range(len(ps)), key=ps.__getitem__)
    adjusted, running = [1.0] * len(ps), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[index]))
        adjusted[index] = running
    return adjusted
