"""The verdict of a kernel series (``testbed regress --series``, issue 40): the same suite on several
kernels in version order, each metric across the versions, and its **change points**: the versions
after which a metric moved.

**The method.** Each kernel's repetitions are compared with the previous kernel's, per point x
algorithm x metric, by analysis/kernels/regression.py's rule (paired by seed: repetition r runs seed r on
every kernel, so a pair shares its seeded losses; a change counts at p < 0.05 and beyond 5 %), and the
first kernel with the last (a drift made of steps each too small to count). All of a series'
comparisons are one family: their p-values are Holm-adjusted together (analysis/verdicts/stats.py), so a
series in which nothing changed raises any alarm in at most 5 % of series however long it is; the
price is power, and every comparison states the smallest change its repetitions could detect. A
change point is an adjacent comparison that counts: the version after which the metric moved, its
size, p and the test.

Why adjacent paired comparisons and not a change-point method such as E-divisive means (as
MongoDB's and Hunter's performance CI use): those find shifts in a long history of single
measurements, one per commit; a Debian series is ten or twenty versions with a few paired
repetitions each, where a paired test uses the pairing, names the version pair and states its error
rate and its power exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.kernels import regression
from analysis.verdicts import stats

#: what a comparison of a series compares: the kernel with the one before it, or the last with the first
ADJACENT, OVERALL = "adjacent", "first-last"
TREND_COLUMNS = ["kernel", "point", "cc", "metric", "n", "mean", "ci_low", "ci_high"]


@dataclass
class Step:
    """One comparison of a series: ``after``'s runs against ``before``'s."""

    before: str
    after: str
    kind: str  # ADJACENT or OVERALL
    comparison: regression.MetricChange

    @property
    def moved(self) -> bool:
        return self.comparison.verdict in ("regression", "improvement")


def compare_series(frames: dict[str, pd.DataFrame], order: list[str], extra: list[Step] = ()) -> list[Step]:
    """Every adjacent pair of ``order`` (kernels whose runs are in ``frames``, ``run_metrics`` shaped)
    and the first against the last, Holm-adjusted as one family (module doc) with the ``extra`` steps
    (unadjusted: a suite's positive controls, which must be found at the series' own threshold)."""
    if len(order) < 2:
        raise ValueError(f"a series needs two kernels or more; got {order}")
    pairs = [(a, b, ADJACENT) for a, b in zip(order, order[1:], strict=False)]  # the second is one shorter
    if len(order) > 2:
        pairs.append((order[0], order[-1], OVERALL))
    steps = [
        Step(a, b, kind, c) for a, b, kind in pairs for c in regression.compare(frames[a], frames[b], adjusted=False)
    ]
    steps += list(extra)
    regression.adjust([s.comparison for s in steps])
    return steps


def change_points(steps: list[Step]) -> list[Step]:
    """The adjacent comparisons that count: where a metric moved, and after which version."""
    return [s for s in steps if s.kind == ADJACENT and s.moved]


def trend(frames: dict[str, pd.DataFrame], order: list[str]) -> pd.DataFrame:
    """Each kernel's mean of every point x algorithm x metric with its 95 % t-interval over the repetitions."""
    rows = []
    for kernel in order:
        frame = frames[kernel]
        for (point, cc, metric), group in frame.groupby(["point", "cc", "metric"], sort=False):
            summary = stats.seed_stats(group["value"])
            rows.append(
                {
                    "kernel": kernel,
                    "point": point,
                    "cc": cc,
                    "metric": metric,
                    "n": summary.n,
                    "mean": summary.mean,
                    "ci_low": summary.ci_low,
                    "ci_high": summary.ci_high,
                }
            )
    return pd.DataFrame(rows, columns=TREND_COLUMNS)


def relative_trend(table: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``trend`` with every value relative to the first kernel's mean of its point x algorithm x metric
    (``mean``, ``ci_low``, ``ci_high`` as changes: 0.1 = 10 % above the first kernel), so that points of
    different scales share a figure."""
    first = table[table["kernel"] == order[0]].set_index(["point", "cc", "metric"])["mean"]
    out = table.copy()
    base = [first.get((p, c, m), math.nan) for p, c, m in zip(out["point"], out["cc"], out["metric"], strict=True)]
    for column in ("mean", "ci_low", "ci_high"):
        out[column] = [v / b - 1 if b else math.nan for v, b in zip(out[column], base, strict=True)]
    return out
