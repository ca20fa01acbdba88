"""Bisection of a kernel change (``testbed bisect``, issue 40): which version between a good and a bad
kernel first moved a metric. Pure: the runs come from a ``measure`` callable, so the search is tested
on simulated metrics of known truth (tests/unit/test_bisection.py) and run on real kernels by
testbed/workflows/bisect.py.

**Step 0** confirms the change: the good and the bad kernel run seeds 1..r, every point x algorithm x
metric is compared (analysis/kernels/regression.py's paired rule, Holm over all of them), and the metric to
follow is the one that counts with the smallest p (or the one asked for). Nothing counting is an
error: there is nothing to bisect at these repetitions, and the message says the smallest change
they could detect.

**Each later step** runs the version halfway between the last good and the first bad one with the
same seeds and compares it, paired by seed, with both ends: it is **bad** (the change happened at or
before it) when it differs from the good kernel the way the bad one does, **good** when it is still
apart from the bad kernel the same way the good one is, and **undecided** when neither counts; then
every kernel of the step runs ``repeat`` more seeds, up to ``max_repeat``, after which it goes to the
end its mean is nearer (said in its evidence). A step's share of alpha is 0.05 / (the search's
planned steps): Bonferroni over the planned decisions bounds the chance that any step calls a version
moved when it did not by 5 %. Within a step (and step 0), each time repetitions are added the
comparison is made again: those looks spend the step's share by the one group-sequential design of
analysis/verdicts/sequential.py (Pocock-type spending over the looks ``--repeat`` up to ``--max-repeat`` allows),
so adding repetitions does not buy a decision. A comparison counts at its look's level and a change
beyond 5 %. With N versions the search takes ceil(log2(N - 1)) steps after step 0.

**A commit graph** (``parents``, a tree's commits with their merges: testbed/host/kernelsource.py) is
searched as ``git bisect`` searches it: the candidates are the versions the current bad one descends
from that no good one does; the step's version is the candidate whose ancestors among them come nearest
half of them (on a line: the middle); a good version makes its every ancestor good, a bad one becomes the
first bad. So a change on a merged branch is found on that branch, and a merge is named only when both
its parents are good. Without ``parents`` the versions are a line (Debian's kernels).

**A version that cannot be run** (it does not build, boot or complete the suite: ``measure`` raises
:class:`Skip`) is skipped, as ``git bisect skip``: the search tries the untried version nearest the
middle of what is left, and when only skipped versions lie between the last good and the first bad,
the answer is that range (:attr:`Bisection.between`), not one version. Going round a skipped version
can take more decisions than planned; each is still made at 0.05 / (planned steps), and the answer
says how many were made (the bound on a wrong step grows with them).

**The answer is confirmed** on seeds the search never used: the first bad and the last good version
run ``repeat`` fresh seeds each and are compared, paired, at a step's level; unless the change holds
there, the way step 0 saw it, the answer is **unconfirmed** (:attr:`Bisection.confirmed`), as a
maintainer would ask before a "first bad commit" mail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from analysis.kernels import regression
from analysis.verdicts import sequential, stats

#: (point, cc, metric): what a bisection follows
Key = tuple[str, str, str]
#: measure(kernel, seeds) -> run_metrics rows (point, seed, cc, metric, value) of those seeds on that kernel
Measure = Callable[[str, list[int]], pd.DataFrame]
#: version -> its parents (a commit graph). A parent that is not one of the versions is older than the good
#: one's line, so good; None: the versions are a line, each one's parent the one before it
Parents = dict[str, list[str]]


class NothingToBisect(ValueError):
    """The good and the bad kernel do not differ at these repetitions (or a bad input: the message says)."""


class Skip(Exception):
    """``measure`` cannot run ``kernel`` (it does not build, boot or complete the suite): skipped."""

    def __init__(self, kernel: str, why: str):
        super().__init__(f"{kernel}: {why}")
        self.kernel, self.why = kernel, why


@dataclass
class Evidence:
    """One version judged: its comparisons with the good and the bad kernel on the same seeds."""

    kernel: str
    seeds: list[int]
    vs_good: regression.MetricChange
    vs_bad: regression.MetricChange | None  # None at step 0 (the bad kernel itself)
    side: str  # "good", "bad"
    note: str = ""

    def line(self) -> str:
        def said(c: regression.MetricChange) -> str:
            return f"{c.change:+.1%} (p = {c.p_value:.2g}, detectable {c.detectable:.1%})"

        against_bad = f", vs bad {said(self.vs_bad)}" if self.vs_bad else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.kernel}: {self.side}{note}: vs good {said(self.vs_good)}{against_bad}, {len(self.seeds)} seeds"


@dataclass
class Bisection:
    versions: list[str]  # oldest first (a graph's: every parent before its children); the good one, ..., the bad
    parents: Parents | None = None
    key: Key | None = None
    alpha: float = regression.ALPHA
    steps: list[Evidence] = field(default_factory=list)
    first_bad: str | None = None
    last_good: str | None = None
    #: versions skipped (they could not be run), with why
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: skipped versions left between the last good and the first bad: the first bad is one of them or it
    between: list[str] = field(default_factory=list)
    #: the first bad against the last good version on fresh seeds (None: not run), and whether it held
    confirmation: regression.MetricChange | None = None
    confirmed: bool | None = None
    confirmation_seeds: list[int] = field(default_factory=list)
    confirmation_note: str = ""

    @property
    def planned_steps(self) -> int:
        return planned_steps(len(self.versions))

    @property
    def decisions(self) -> int:
        """The steps that decided a version (step 0 included): more than planned when skips forced it."""
        return len(self.steps)


def planned_steps(n_versions: int) -> int:
    """Step 0 and the halvings of the versions strictly between good and bad."""
    return 1 + (math.ceil(math.log2(n_versions - 1)) if n_versions > 2 else 0)


def counts(c: regression.MetricChange, alpha: float) -> bool:
    return c.verdict != "too few runs" and c.p_value < alpha and abs(c.change) > regression.PRACTICAL


def _values(frame: pd.DataFrame, key: Key, seeds: list[int]) -> list[float]:
    point, cc, metric = key
    chosen = frame[(frame["point"] == point) & (frame["cc"] == cc) & (frame["metric"] == metric)]
    by_seed = dict(zip(chosen["seed"], chosen["value"], strict=True))
    return [float(by_seed.get(s, math.nan)) for s in seeds]


def _pair(key: Key, a: pd.DataFrame, b: pd.DataFrame, seeds: list[int], alpha: float) -> regression.MetricChange:
    return regression.compare_one(*key, _values(a, key, seeds), _values(b, key, seeds), paired=True, alpha=alpha)


class Runs:
    """Every kernel's measured seeds, measured once each (more seeds are added, never run again)."""

    def __init__(self, measure: Measure):
        self.measure = measure
        self.frames: dict[str, pd.DataFrame] = {}

    def upto(self, kernel: str, n: int) -> pd.DataFrame:
        have = self.frames.get(kernel)
        done = set() if have is None else set(have["seed"])
        missing = [s for s in range(1, n + 1) if s not in done]
        if missing:
            new = self.measure(kernel, missing)
            self.frames[kernel] = new if have is None else pd.concat([have, new], ignore_index=True)
        return self.frames[kernel]


def _choose(good: pd.DataFrame, bad: pd.DataFrame, wanted: dict, alpha: float) -> regression.MetricChange | None:
    """The comparison of good vs bad to follow: the one that counts with the smallest Holm-adjusted p,
    among those matching ``wanted`` (point, cc, metric given on the command line)."""
    found = regression.compare(good, bad, alpha=alpha)
    found = [c for c in found if all(getattr(c, name) == value for name, value in wanted.items() if value)]
    moved = [c for c in found if counts(c, alpha)]
    return min(moved, key=lambda c: c.p_value) if moved else None


def looks(repeat: int, max_repeat: int) -> int:
    """The looks a step can take: at ``repeat`` repetitions, then ``repeat`` more each, up to ``max_repeat``."""
    return 1 + math.ceil((max_repeat - repeat) / repeat)


def confirm(runs: Runs, result: Bisection, wanted: dict, repeat: int, max_repeat: int) -> int:
    """Step 0 (module doc): the repetitions it took; raises NothingToBisect when nothing counts."""
    good, bad = result.versions[0], result.versions[-1]
    design, look, n = sequential.Design(looks(repeat, max_repeat), regression.ALPHA), 1, repeat
    while True:
        chosen = _choose(runs.upto(good, n), runs.upto(bad, n), wanted, design.alpha_at(look))
        if chosen is not None or n >= max_repeat:
            break
        n, look = min(n + repeat, max_repeat), look + 1
    if chosen is None:
        raise NothingToBisect(
            f"{good} and {bad} do not differ on {_wanted_text(wanted)} at {n} repetitions "
            f"(Holm over the suite's comparisons): nothing to bisect. Give --max-repeat higher, "
            f"or another --point/--metric"
        )
    result.key = (chosen.point, chosen.cc, chosen.metric)
    seeds = list(range(1, n + 1))
    result.steps.append(Evidence(bad, seeds, chosen, None, "bad", "step 0: the change confirmed, Holm-adjusted p"))
    return n


def _wanted_text(wanted: dict) -> str:
    shown = ", ".join(f"{k} {v}" for k, v in wanted.items() if v)
    return shown or "any point x algorithm x metric of the suite"


def judge_version(runs: Runs, result: Bisection, kernel: str, n: int, repeat: int, max_repeat: int) -> Evidence:
    """One later step (module doc): ``kernel`` against both ends, adding repetitions while undecided."""
    good, bad = result.versions[0], result.versions[-1]
    left = looks(repeat, max_repeat) - looks(repeat, n) + 1  # the looks from n repetitions on
    design, look = sequential.Design(left, regression.ALPHA / result.planned_steps), 1
    while True:
        alpha = design.alpha_at(look)
        seeds = list(range(1, n + 1))
        frames = {k: runs.upto(k, n) for k in (good, bad, kernel)}
        vs_good = _pair(result.key, frames[good], frames[kernel], seeds, alpha)
        vs_bad = _pair(result.key, frames[kernel], frames[bad], seeds, alpha)
        direction = math.copysign(1, result.steps[0].vs_good.change)
        like_bad = counts(vs_good, alpha) and math.copysign(1, vs_good.change) == direction
        like_good = counts(vs_bad, alpha) and math.copysign(1, vs_bad.change) == direction
        if like_bad or like_good:
            return Evidence(kernel, seeds, vs_good, vs_bad, "bad" if like_bad else "good")
        if n >= max_repeat:
            nearer_bad = abs(math.log1p(vs_good.change)) > abs(math.log1p(vs_bad.change))
            return Evidence(
                kernel,
                seeds,
                vs_good,
                vs_bad,
                "bad" if nearer_bad else "good",
                f"undecided at {n} repetitions: the nearer end",
            )
        n, look = min(n + repeat, max_repeat), look + 1


def bisect(
    versions: list[str],
    measure: Measure,
    wanted: dict | None = None,
    repeat: int = 3,
    max_repeat: int = 9,
    parents: Parents | None = None,
) -> Bisection:
    """Binary search of ``versions`` (oldest first: the good kernel, ..., the bad one; a commit graph when
    ``parents`` is given) for the first version whose metric moved (module doc)."""
    if len(versions) < 2:
        raise NothingToBisect(f"bisection needs a good and a bad kernel; got {versions}")
    if repeat < 2 or max_repeat < repeat:
        raise NothingToBisect(f"--repeat {repeat} / --max-repeat {max_repeat}: at least 2, and max at least repeat")
    result = Bisection(list(versions), parents)
    graph = Graph(versions, parents)
    runs = Runs(measure)
    try:
        n = confirm(runs, result, wanted or {}, repeat, max_repeat)
    except Skip as err:
        raise NothingToBisect(
            f"an end of the range cannot be run ({err}): choose ends that build, boot and run the suite"
        ) from err
    good, bad, skipped = graph.ancestry(versions[0]), versions[-1], set()
    while (mid := graph.next_step(bad, good, skipped)) is not None:
        try:
            evidence = judge_version(runs, result, mid, n, repeat, max_repeat)
        except Skip as err:
            if err.kernel != mid:  # an end that ran before fails now: no answer can be trusted
                raise NothingToBisect(f"an end of the range stopped running ({err})") from err
            skipped.add(mid)
            result.skipped.append((err.kernel, err.why))
            continue
        result.steps.append(evidence)
        if evidence.side == "good":
            good |= graph.ancestry(mid)
        else:
            bad = mid
    result.first_bad = bad
    result.between = graph.names(graph.ancestry(bad) & ~good & ~graph.bit(bad))  # all skipped
    ran_good = [versions[0], *(e.kernel for e in result.steps[1:] if e.side == "good")]
    # the newest good version that ran, and that the first bad descends from; none when the first bad's
    # branch left the line before the good end (its parent outside the versions): the good end then
    result.last_good = max(
        (v for v in ran_good if graph.ancestry(bad) & graph.bit(v)), key=versions.index, default=versions[0]
    )
    if not result.between:
        confirm_answer(runs, result, repeat)
    return result


class Graph:
    """The versions' ancestry as bit sets (bit i: ``versions[i]``): Python's integers do the set
    arithmetic in C, so a step over a tree's thousands of commits (a merge window) counts at once."""

    def __init__(self, versions: list[str], parents: Parents | None):
        self.versions, self.index = versions, {v: i for i, v in enumerate(versions)}
        self.masks: list[int] = []
        for i, version in enumerate(versions):
            above = [versions[i - 1]] if parents is None and i else (parents or {}).get(version, [])
            mask = 1 << i
            for parent in above:
                if parent in self.index:
                    if self.index[parent] >= i:
                        raise NothingToBisect(f"{parent} comes after its child {version}: give parents first")
                    mask |= self.masks[self.index[parent]]
            self.masks.append(mask)

    def bit(self, version: str) -> int:
        return 1 << self.index[version]

    def ancestry(self, version: str) -> int:
        """``version`` and every version it descends from."""
        return self.masks[self.index[version]]

    def names(self, mask: int) -> list[str]:
        return [v for i, v in enumerate(self.versions) if mask >> i & 1]

    def next_step(self, bad: str, good: int, skipped: set[str]) -> str | None:
        """The candidate to run next (module doc): among the versions ``bad`` descends from that are not
        known good (``bad`` counted), the one whose ancestors there come nearest half of them; on a tie
        the older. None when every candidate but ``bad`` was skipped."""
        candidates = self.ancestry(bad) & ~good
        total = candidates.bit_count()
        best, best_score = None, -1
        for version in self.names(candidates & ~self.bit(bad)):
            if version in skipped:
                continue
            below = (self.ancestry(version) & candidates).bit_count()
            if min(below, total - below) > best_score:
                best, best_score = version, min(below, total - below)
        return best


def confirm_answer(runs: Runs, result: Bisection, repeat: int) -> None:
    """The answer run again (module doc): the first bad and the last good version on ``repeat`` seeds no
    step used, compared paired at a step's level, the change counting the way step 0's did."""
    used = max(int(seed) for frame in runs.frames.values() for seed in frame["seed"])
    seeds = list(range(used + 1, used + repeat + 1))
    result.confirmation_seeds = seeds
    try:
        good, bad = runs.measure(result.last_good, seeds), runs.measure(result.first_bad, seeds)
    except Skip as err:
        result.confirmed, result.confirmation_note = False, f"it could not be run: {err}"
        return
    level = regression.ALPHA / result.planned_steps
    result.confirmation = _pair(result.key, good, bad, seeds, level)
    direction = math.copysign(1, result.steps[0].vs_good.change)
    result.confirmed = counts(result.confirmation, level) and math.copysign(1, result.confirmation.change) == direction


def measured(result: Bisection, kernel: str) -> dict[int, float]:
    """A kernel's values of the followed metric by seed, from every step that measured it (a comparison
    that left out a seed, a run without the metric, is skipped: its values no longer line up with its seeds)."""
    good, bad = result.versions[0], result.versions[-1]
    values: dict[int, float] = {}
    for e in result.steps:
        sides = [
            (e.kernel == kernel, e.vs_good.candidate),
            (kernel == good, e.vs_good.baseline),
            (kernel == bad and e.vs_bad is not None, e.vs_bad.candidate if e.vs_bad else []),
        ]
        for wanted, side in sides:
            if wanted and len(side) == len(e.seeds):
                values.update(zip(e.seeds, side, strict=True))
    return values


def change_at(result: Bisection) -> stats.Effect | None:
    """The first bad version against the last good one, paired by the seeds both ran: the change it made
    and its interval (None before a version is named, or with fewer than two shared seeds)."""
    if result.first_bad is None or result.last_good is None:
        return None
    return stats.paired_ratio_effect(measured(result, result.first_bad), measured(result, result.last_good))
