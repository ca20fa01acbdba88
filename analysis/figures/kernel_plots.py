"""Figures of kernel comparisons (``regress``, ``regress --series``, ``bisect``), rendered to PNG bytes.

Apart from analysis/figures/plots.py (a run's and a session's figures) because these draw the comparing
workflows' own tables: every repetition of two sides, a metric across a series of versions, and the
versions a bisection tried. Colours come from testbed/scenario/algorithms.py, as in every figure.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.plots import figure_png
from analysis.kernels import series
from testbed.scenario.algorithms import lookup

METRIC_LABELS = {"goodput": "sender goodput, Mbit/s", "retrans_ratio": "retransmitted / sent"}


def spread_png(chosen: pd.DataFrame, metric: str, sides: tuple[str, str] = ("baseline", "candidate")) -> bytes:
    """Every repetition of ``metric`` per point and algorithm, the first side (circles) beside the second
    (triangles); ``chosen`` has columns point, cc, side and value."""
    groups = list(dict.fromkeys(zip(chosen["point"], chosen["cc"], strict=True)))
    fig = Figure(figsize=(max(6, 1.1 * len(groups) + 2), 4))
    ax = fig.add_subplot()
    for i, (point, cc) in enumerate(groups):
        for offset, side, marker in ((-0.15, sides[0], "o"), (0.15, sides[1], "^")):
            values = chosen[(chosen["point"] == point) & (chosen["cc"] == cc) & (chosen["side"] == side)]["value"]
            ax.scatter(
                [i + offset] * len(values),
                values,
                color=lookup(cc).colour,
                marker=marker,
                alpha=0.8,
                label=side if i == 0 else None,
            )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{p}\n{lookup(c).label}" for p, c in groups], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{metric}: every repetition, {sides[0]} (circles) and {sides[1]} (triangles)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


def trend_png(trend: pd.DataFrame, order: list[str], metric: str, points: list[series.Step]) -> bytes:
    """One line per point x algorithm: its mean across the kernels relative to the first kernel's, with
    95 % intervals; a change point is a red ring on the version where the metric moved."""
    relative = series.relative_trend(trend[trend["metric"] == metric], order)
    fig = Figure(figsize=(max(6, 0.9 * len(order) + 3), 4.2))
    ax = fig.add_subplot()
    groups = list(dict.fromkeys(zip(relative["point"], relative["cc"], strict=True)))
    for i, (point, cc) in enumerate(groups):
        mine = relative[(relative["point"] == point) & (relative["cc"] == cc)].set_index("kernel").reindex(order)
        x = [j + (i - len(groups) / 2) * 0.03 for j in range(len(order))]
        y, low, high = (100 * mine[c].to_numpy(dtype=float) for c in ("mean", "ci_low", "ci_high"))
        ax.errorbar(
            x,
            y,
            yerr=[y - low, high - y],
            marker="o",
            markersize=3,
            capsize=2,
            lw=1,
            color=lookup(cc).colour if cc not in ("ping", "requests") else None,
            alpha=0.85,
            label=f"{point} {cc}",
        )
        for s in points:
            if (s.comparison.point, s.comparison.cc, s.comparison.metric) == (point, cc, metric):
                j = order.index(s.after)
                ax.scatter([x[j]], [y[j]], s=160, facecolors="none", edgecolors="red", linewidths=2, zorder=5)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{metric}, % vs {order[0]}")
    ax.set_title(f"{metric} across the kernels (mean, 95 % interval; red ring: a change point)", fontsize=10)
    ax.grid(alpha=0.3)
    if len(groups) <= 14:
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return figure_png(fig)


#: a bisection over more versions than this (a tree's commit graph) shows only those it tried on its axis
BISECT_AXIS_ALL = 30


def bisect_png(result) -> bytes:
    """The followed metric of every version a bisection (analysis.kernels.bisection.Bisection) tried, each seed a
    dot, coloured by the side it was put on; a dashed line before the first bad version. Past
    :data:`BISECT_AXIS_ALL` versions, the axis holds the tried ones only, in the versions' order."""
    first = result.steps[0].vs_good
    tried = [(result.versions[0], first.baseline, "good"), (result.versions[-1], first.candidate, "bad")]
    tried += [(e.kernel, e.vs_good.candidate, e.side) for e in result.steps[1:]]
    shown = result.versions
    if len(shown) > BISECT_AXIS_ALL:
        named = {k for k, _, _ in tried} | {result.first_bad, result.last_good}
        shown = [v for v in result.versions if v in named]
    fig = Figure(figsize=(max(6, 0.8 * len(shown) + 2), 3.8))
    ax = fig.add_subplot()
    colours = {"good": "tab:green", "bad": "tab:red"}
    for kernel, values, side in tried:
        x = shown.index(kernel)
        ax.scatter([x] * len(values), values, color=colours[side], alpha=0.8)
    ax.set_xticks(range(len(shown)))
    ax.set_xticklabels(shown, rotation=30, ha="right", fontsize=8)
    ax.axvline(shown.index(result.first_bad) - 0.5, color="red", ls="--", lw=1)
    ax.set_ylabel(result.key[2])
    ax.set_title(f"bisect: {' '.join(result.key)}; first bad {result.first_bad} (green good, red bad)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return figure_png(fig)
