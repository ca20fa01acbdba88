"""Does a faster way of running give the same answer as a run alone in real time? (``testbed equivalence``)

A faster way (a guest in virtual time, runs side by side) is worth having only where it answers as the
reference does: a run alone, in real time. Both run the same experiments at the same seeds, so each run
of the candidate has its twin in the reference: the same point, algorithm and seed, hence the same loss
draws. Per experiment and metric, the candidate relative to the reference is tested **paired** on the
twins' log ratios (:func:`analysis.verdicts.stats.paired_ratio_effect`), and **equivalence** is shown by two
one-sided tests (TOST, :func:`analysis.verdicts.stats.tost_p`) at 5 %: the 90 % interval of the ratio inside
``±margin``. "No difference found" is not equivalence: a difference too noisy to see fails TOST as
surely as one that is there.

An experiment is equivalent when its goodput is shown within ±3 % (the margin issue 60 set), every other
metric with twins is shown within its own margin (:data:`MARGINS`: retransmissions and tail latency are
noisier), the candidate had no more untrustworthy runs than the reference, and every claim judged on
the experiment reads the same verdict on both. Only runs trustworthy on both sides are paired. The
margins are chosen before the runs, here, and every test of every metric is reported, passed or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from analysis.verdicts import stats

#: metric -> the relative margin within which the candidate must be shown (TOST at ALPHA)
MARGINS = {
    "goodput": 0.03,
    "total_goodput": 0.03,
    "jain": 0.03,
    "retrans_ratio": 0.10,
    "ping_p50_ms": 0.05,
    "ping_p99_ms": 0.10,
    "request_p50_ms": 0.05,
    "request_p99_ms": 0.10,
}
#: the metric every experiment must show equivalent (the papers' goodput)
PRIMARY = "goodput"
ALPHA = stats.ALPHA


@dataclass(frozen=True)
class MetricEquivalence:
    metric: str
    pairs: int
    change: float  # candidate / reference - 1 (geometric mean of the twins' ratios)
    low: float  # the 90 % interval (the TOST at 5 %)
    high: float
    p_tost: float
    margin: float
    #: twins at which the TOST would show the margin (80 % power) were the two ways equal, at this spread
    twins_needed: int | None = None

    @property
    def equivalent(self) -> bool:
        return self.p_tost < ALPHA

    def line(self) -> str:
        shown = "shown within" if self.equivalent else "not shown within"
        needed = (
            f"; at this spread {self.twins_needed} twins would show it, were the two ways equal"
            if self.twins_needed and not self.equivalent
            else ""
        )
        return (
            f"{self.metric}: {self.change:+.1%} (90 % interval {self.low:+.1%} to {self.high:+.1%}, "
            f"{self.pairs} twins), {shown} ±{self.margin:.0%} (TOST p = {self.p_tost:.2g}){needed}"
        )


@dataclass
class ExperimentEquivalence:
    experiment: str
    metrics: list[MetricEquivalence] = field(default_factory=list)
    #: metrics with twins but no log ratio (a value of 0, as retransmissions on a lossless path)
    untested: list[str] = field(default_factory=list)
    untrustworthy: tuple[int, int] = (0, 0)  # (reference, candidate)
    #: claim id -> (its verdict on the reference, on the candidate)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        """What keeps it from being equivalent; none: equivalent."""
        found = [m.line() for m in self.metrics if not m.equivalent]
        if not any(m.metric == PRIMARY for m in self.metrics):
            found.append(f"no {PRIMARY} twins (fewer than two trustworthy on both sides)")
        reference, candidate = self.untrustworthy
        if candidate > reference:
            found.append(f"{candidate} untrustworthy runs against {reference} in the reference")
        found += [
            f"claim {claim}: {a} in the reference, {b} in the candidate"
            for claim, (a, b) in sorted(self.verdicts.items())
            if a != b
        ]
        return found

    @property
    def equivalent(self) -> bool:
        return not self.problems


def compare(reference: pd.DataFrame, candidate: pd.DataFrame, experiment: str) -> ExperimentEquivalence:
    """One experiment's metrics (``compare.side_metrics``' rows: run, point, seed, cc, metric, value, from
    trustworthy runs) in the candidate against the reference, twin by twin."""
    found = ExperimentEquivalence(experiment)
    for metric in sorted(set(reference["metric"]) & set(candidate["metric"])):
        if metric not in MARGINS:
            continue
        a, b = _values(candidate, metric), _values(reference, metric)
        if len(set(a) & set(b)) < 2:
            continue
        effect = stats.paired_ratio_effect(a, b)
        if effect is None:
            found.untested.append(metric)
            continue
        margin = MARGINS[metric]
        low, high = effect.interval(1 - 2 * ALPHA)
        found.metrics.append(
            MetricEquivalence(
                metric,
                len(effect.pairs),
                effect.relative,
                low,
                high,
                stats.tost_p(effect, margin),
                margin,
                stats.pairs_for_equivalence(effect, margin),
            )
        )
    return found


def _values(frame: pd.DataFrame, metric: str) -> dict[tuple, float]:
    rows = frame[frame["metric"] == metric]
    return {
        (point, cc, seed): float(value)
        for point, cc, seed, value in zip(rows["point"], rows["cc"], rows["seed"], rows["value"], strict=True)
        if not math.isnan(float(value))
    }
