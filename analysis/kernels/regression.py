"""The verdict of a kernel regression run (``testbed regress``, issue 7): the same suite on a baseline
and a candidate kernel, N interleaved repetitions each, compared per point x algorithm x metric.

Metrics of one run, per point and algorithm (the forward flows of that algorithm; as in
analysis/verdicts/claims.py): ``goodput`` (mean sender goodput, paper 000 §3.1; higher is better),
``total_goodput`` (their sum; higher is better) and ``jain`` (Jain's index over them), both only where
there are two flows or more (one flow's total is its goodput: compared once), higher is better, and
``retrans_ratio`` (retransmitted / sent bytes; lower is better).

**The rule.** ``change = mean(candidate) / mean(baseline) - 1``. The repetitions are **paired**:
repetition r runs seed r on both kernels, one right after the other, so the pair shares its loss
pattern (the seeded channels) and the machine's state at that time. The test is the paired t-test on
the pairs' log ratios ``ln(candidate_r / baseline_r)`` (on their differences when a value is 0 or
less, e.g. a retransmission ratio of 0), which takes out what varies from seed to seed. Where the
runs do not pair up (a seed repeated on a side, or fewer than two seeds run on both), Welch's t-test
on the two sides instead; a run whose seed the other side lacks is left out of a paired test.
Either way the noise is estimated from the repetitions themselves, never assumed. A change counts
when ``p < 0.05`` and ``|change| > 5 %`` (for ``retrans_ratio`` also more than 0.1 percentage point
apart: a tiny ratio doubling is not a regression). It is a **regression** when it goes the bad way,
an **improvement** the good way; otherwise **no change**. With fewer than two runs (pairs) on a side
the verdict is **too few runs**. **Multiplicity**: a run makes many comparisons (about 40 for the
default regression suite), so the p-values are adjusted by Holm's procedure over all of a run's
comparisons before the 0.05 is applied (``adjust``; analysis/verdicts/stats.py): the chance that an A/A run
(the same kernel on both sides) raises any alarm is then at most 5 %, where 40 unadjusted tests would
raise one in most runs. Holm rather than the false discovery rate because each alarm sends a kernel
developer to bisect, hours of work: the run as a whole should be wrong rarely (docs/regression.md).
Also reported: the test used, Cohen's d (the change in pooled
standard deviations of the two sides) and the smallest change the repetitions could have detected
(80 % power, two-sided, at the level the alarm needs: 5 % / the family's comparisons), from the noise
measured in this very run.

Why paired: on a wireless point with the seeded timed channel, New Reno's goodput was 1.33 and 0.60
Mbit/s for seeds 1 and 2 on one kernel; with SACK off on the candidate it fell to 0.65 and 0.32
(ratios 0.49 and 0.54). Welch's test on 2 + 2 runs gave p = 0.40 for that 50 % drop; the paired
test gives p = 0.047.

**Default repetitions: 5 per kernel.** Under TCG here, the goodput of a 10 s flow has a standard
deviation of about 1.8 % across repetitions (stock Westwood+ 8.95 / 8.78 / 8.64 Mbit/s in the guest
tier). Even when the pairs share nothing (unseeded netem loss), a pair's log ratio then has a
standard deviation of about 1.8 % x sqrt(2) = 2.5 %, and with n = 5 pairs one test at 5 % would find
(t(0.975, 4) + t(0.80, 4)) x 2.5 % / sqrt(5) = 4.2 %. But an alarm is judged after Holm's adjustment:
a change alone among the default suite's 34 comparisons must reach 5 % / 34, where the smallest
change found with 80 % power is 10.8 % (5 pairs), 48 % (3 pairs), 4.4 % (10 pairs): the noncentral t's
shift (``stats.power_factor``) times 2.5 % / sqrt(n). That is the **detectable** change each comparison
prints (``adjust``; before 2026-12-04 it printed the lone test's, 2.6 times smaller at 5 pairs and 34
comparisons, which a change of that size reached only about one time in ten). Pairs that share a seed's
loss pattern vary less; noisier metrics get a larger detectable change: measured values in
docs/regression.md. The shift was at first the usual shortcut, t(1 - 0.025/34, 4) + t(0.80, 4)
(9.8 % at 5 pairs), whose power at 4 degrees of freedom and Holm's level is 70 %, not 80 %
(tests/unit/test_regression.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.runs import metrics
from analysis.runs.latency import summarize
from analysis.verdicts import stats

PRACTICAL = 0.05
ALPHA = stats.ALPHA
RATIO_FLOOR = 0.001
DEFAULT_REPEAT = 5
#: metric -> True when higher is better
FLOW_METRICS = {"goodput": True, "total_goodput": True, "jain": True, "retrans_ratio": False}
#: metrics of a group of several flows (a point's single flow has neither)
SEVERAL_FLOWS = ("total_goodput", "jain")
#: latency under load (analysis.runs.latency): per run, the ping flows' and the requests flows' percentiles
#: over all their samples; lower is better (a latency regression is a regression)
LATENCY_METRICS = {
    "ping_p50_ms": ("ping", "p50_ms"),
    "ping_p99_ms": ("ping", "p99_ms"),
    "request_p50_ms": ("requests", "p50_ms"),
    "request_p99_ms": ("requests", "p99_ms"),
}
METRICS = FLOW_METRICS | {name: False for name in LATENCY_METRICS}
VERDICTS = ("regression", "improvement", "no change", "too few runs")
COLUMNS = ["run", "point", "seed", "cc", "metric", "value"]


@dataclass
class MetricChange:
    point: str
    cc: str
    metric: str
    baseline: list[float]
    candidate: list[float]
    change: float  # mean(candidate) / mean(baseline) - 1
    p_value: float
    cohen_d: float
    detectable: float  # the smallest relative change these repetitions could detect, at the level of the alarm
    verdict: str
    test: str = "Welch"  # "paired" (repetition r vs repetition r) or "Welch" (runs that do not pair up)
    p_raw: float = math.nan  # the test's own p, before Holm's adjustment over the run's comparisons

    @property
    def name(self) -> str:
        return f"{self.point} / {self.cc} / {self.metric}"


def run_metrics(flows: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, point, algorithm, metric) from ``claims.flow_rows``-shaped flows."""
    rows = []
    if flows.empty:
        return pd.DataFrame(rows, columns=COLUMNS)
    forward = flows[flows["direction"] == "forward"]
    for run, run_flows in forward.groupby("run", sort=False):
        point = run_flows["point"].iloc[0] if "point" in run_flows else run
        seed = run_flows["seed"].iloc[0] if "seed" in run_flows else None
        for cc, group in run_flows.groupby("cc", sort=True):
            if group["goodput_mbit"].isna().any():
                continue
            # one flow: its total is its goodput and Jain's index has no meaning; each is compared once
            wanted = [m for m in FLOW_METRICS if len(group) > 1 or m not in SEVERAL_FLOWS]
            rows += [
                {
                    "run": run,
                    "point": point,
                    "seed": seed,
                    "cc": cc,
                    "metric": m,
                    "value": metrics.group_metric(group, m),
                }
                for m in wanted
            ]
    return pd.DataFrame(rows, columns=COLUMNS)


def latency_metrics(analyses) -> pd.DataFrame:
    """One row per (run, point, metric) of :data:`LATENCY_METRICS` from complete runs with ping or requests
    flows; ``cc`` is the kind ("ping", "requests")."""
    rows = []
    for analysed in analyses:
        samples = analysed.latency_samples
        if analysed.status != "complete" or samples.empty:
            continue
        manifest = analysed.manifest
        for metric, (kind, stat) in LATENCY_METRICS.items():
            values = samples[samples["kind"] == kind]["value_ms"]
            if not values.empty:
                rows.append(
                    {
                        "run": str(analysed.run_dir),
                        "point": manifest.get("point_id"),
                        "seed": manifest.get("seed"),
                        "cc": kind,
                        "metric": metric,
                        "value": summarize(values.astype(float))[stat],
                    }
                )
    return pd.DataFrame(rows, columns=COLUMNS)


def _paired(baseline: list[float], candidate: list[float], alpha: float = ALPHA) -> tuple[float, float]:
    """(p, detectable relative change at ``alpha``) of the paired test on log ratios, or on differences
    when a value is not positive (module doc)."""
    if all(v > 0 for v in baseline + candidate):  # the claims' paired effect, two-sided
        effect = stats.paired_ratio_effect(dict(enumerate(candidate)), dict(enumerate(baseline)))
        return effect.p_two_sided(0.0), effect.detectable(alpha, sides=2)
    test = stats.paired_t_test([c - b for b, c in zip(baseline, candidate, strict=True)])
    smallest = stats.power_factor(test.df, alpha) * test.se
    mean_b = sum(baseline) / len(baseline)
    return test.p_value, smallest / abs(mean_b) if mean_b else math.inf


def compare_one(
    point: str,
    cc: str,
    metric: str,
    baseline: list[float],
    candidate: list[float],
    paired: bool = False,
    alpha: float = ALPHA,
) -> MetricChange:
    """The verdict of one point x algorithm x metric (module doc). ``paired``: ``baseline[i]`` and
    ``candidate[i]`` are one repetition (same seed) on each kernel. ``alpha``: the level its p will be
    judged at, for the detectable change (:func:`adjust` sets it for a family)."""
    if paired:  # a pair with a value missing drops out whole
        pairs = [(b, c) for b, c in zip(baseline, candidate, strict=True) if not (math.isnan(b) or math.isnan(c))]
        baseline, candidate = [b for b, _ in pairs], [c for _, c in pairs]
    else:
        baseline = [v for v in baseline if not math.isnan(v)]
        candidate = [v for v in candidate if not math.isnan(v)]
    test = "paired" if paired else "Welch"
    if len(baseline) < 2 or len(candidate) < 2:
        return MetricChange(
            point, cc, metric, baseline, candidate, math.nan, math.nan, math.nan, math.nan, "too few runs", test
        )
    mean_b, mean_c = sum(baseline) / len(baseline), sum(candidate) / len(candidate)
    change = (mean_c / mean_b - 1) if mean_b else (0.0 if mean_c == 0 else math.inf)
    p_value = _paired(baseline, candidate)[0] if paired else stats.welch_t_test(candidate, baseline).p_value
    detectable = _detectable(baseline, candidate, paired, alpha)
    var_b = sum((v - mean_b) ** 2 for v in baseline) / (len(baseline) - 1)
    var_c = sum((v - mean_c) ** 2 for v in candidate) / (len(candidate) - 1)
    pooled = math.sqrt((var_b + var_c) / 2)
    if pooled:
        cohen_d = (mean_c - mean_b) / pooled
    else:
        cohen_d = 0.0 if mean_c == mean_b else math.copysign(math.inf, mean_c - mean_b)
    verdict = _verdict(metric, change, p_value, mean_c - mean_b)
    return MetricChange(
        point, cc, metric, baseline, candidate, change, p_value, cohen_d, detectable, verdict, test, p_value
    )


def _verdict(metric: str, change: float, p_value: float, difference: float) -> str:
    """regression / improvement / no change of one comparison by the module's rule."""
    counts = p_value < ALPHA and abs(change) > PRACTICAL
    if metric == "retrans_ratio":
        counts = counts and abs(difference) > RATIO_FLOOR
    if not counts:
        return "no change"
    better = (change > 0) == METRICS[metric]
    return "improvement" if better else "regression"


def _detectable(baseline: list[float], candidate: list[float], paired: bool, alpha: float) -> float:
    return _paired(baseline, candidate, alpha)[1] if paired else stats.detectable_change(baseline, candidate, alpha)


def adjust(comparisons: list[MetricChange], alpha: float = ALPHA) -> list[MetricChange]:
    """Holm's adjustment over one family of comparisons (module doc): each p becomes its Holm-adjusted p
    (``p_raw`` keeps the test's own), and its verdict is decided again on it. Each detectable change is
    then the one a test at ``alpha`` / the family's size finds: Holm's first step, the level a change
    alone in its family must reach to raise an alarm (at 5 pairs and 34 comparisons, 2.3 times the
    change a lone test at 5 % finds)."""
    adjusted = stats.holm([c.p_value for c in comparisons])
    for c, p_value in zip(comparisons, adjusted, strict=True):
        if c.verdict == "too few runs":
            continue
        c.detectable = _detectable(c.baseline, c.candidate, c.test == "paired", alpha / len(comparisons))
        c.p_value = p_value
        c.verdict = _verdict(
            c.metric, c.change, p_value, sum(c.candidate) / len(c.candidate) - sum(c.baseline) / len(c.baseline)
        )
    return comparisons


def _side(frame: pd.DataFrame, point, cc, metric) -> pd.DataFrame:
    return frame[(frame["point"] == point) & (frame["cc"] == cc) & (frame["metric"] == metric)]


def _common_seeds(sides: list[pd.DataFrame]) -> list:
    """The seeds both sides ran once each; none when a side lacks seeds or repeats one."""
    seeds = [list(side["seed"]) if "seed" in side else [None] for side in sides]
    if any(s is None or pd.isna(s) for s in seeds[0] + seeds[1]):
        return []
    if any(len(set(s)) != len(s) for s in seeds):
        return []
    return sorted(set(seeds[0]) & set(seeds[1]))


def compare(
    baseline: pd.DataFrame, candidate: pd.DataFrame, adjusted: bool = True, alpha: float = ALPHA
) -> list[MetricChange]:
    """Every point x algorithm x metric that either side measured (``run_metrics`` frames), their p-values
    Holm-adjusted over all of them (:func:`adjust`; ``adjusted=False`` leaves that to a caller whose family
    is larger, as a kernel series' is). The runs
    are paired by seed when each side ran each seed once and two or more seeds ran on both sides; a
    run whose seed the other side lacks (its guest failed there) is then left out of the test."""
    keys = pd.concat([baseline[["point", "cc", "metric"]], candidate[["point", "cc", "metric"]]]).drop_duplicates()
    out = []
    for point, cc, metric in keys.itertuples(index=False):
        sides = [_side(f, point, cc, metric) for f in (baseline, candidate)]
        values = [[float(v) for v in side["value"]] for side in sides]
        if metric == "jain" and all(math.isnan(v) for v in values[0] + values[1]):
            continue  # one flow of that algorithm: no index
        common = _common_seeds(sides)
        if len(common) >= 2:
            values = [
                [float(v) for v in side[side["seed"].isin(common)].sort_values("seed")["value"]] for side in sides
            ]
        out.append(compare_one(point, cc, metric, values[0], values[1], paired=len(common) >= 2))
    return adjust(out, alpha) if adjusted else out


def counts(comparisons: list[MetricChange]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS if any(c.verdict == v for c in comparisons)}
