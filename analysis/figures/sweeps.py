"""The papers' sweep figures from our runs: a metric against the swept parameter, one line per
algorithm, min / mean / max over the seeds (issue 6).

``FIGURES`` says, per experiment, which figures of the papers it reproduces: the metric, which
flows it is about (the parking lot's C1 and the wireless TCP1 are flow 0), the x parameter and the
paper's figure numbers. Each figure is drawn from ``claims.flow_rows`` (one row per flow of every
complete run); other swept parameters (the number of paths, the RTT) become panels, and the lines
are the algorithm of the flows plotted. A figure whose parameter was not swept in the session (a
suite's single point) is left out: the report draws bars per algorithm for it instead.
``experiment_figures`` adds, for an experiment that ``FIGURES`` does not name (or whose named
parameters were not the ones swept), the sender goodput against its first swept parameter.

Metrics of one run, before the seeds are combined (the same as analysis/verdicts/claims.py):
``goodput`` the mean sender goodput of the chosen flows, ``total_goodput`` their sum, ``jain``
Jain's index over them, ``retrans_ratio`` their retransmitted / sent bytes in %, and
``c1_plus_cross`` the parking lot's total: C1's goodput + the mean of the forward cross flows
(paper 000 §3.3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.plots import figure_png
from analysis.runs import metrics
from testbed.scenario.algorithms import lookup


@dataclass(frozen=True)
class SweepFigure:
    experiment: str
    metric: str  # goodput / recv_goodput / total_goodput / jain / retrans_ratio / c1_plus_cross
    x: str  # the swept parameter on the x axis
    title: str  # with the paper's figure numbers
    flow: int | None = None  # only this flow index (C1, TCP1)
    log_x: bool = False


FIGURES = [
    SweepFigure("rtt-fairness", "total_goodput", "count", "total goodput vs M (000 Fig. 12)"),
    SweepFigure("rtt-fairness", "jain", "count", "Jain's fairness index vs M (000 Fig. 13)"),
    SweepFigure("parking-lot", "goodput", "hops", "C1 goodput vs hops (000 Figs 18, 20, 22, 24)", flow=0),
    SweepFigure(
        "parking-lot",
        "c1_plus_cross",
        "hops",
        "total goodput (C1 + mean forward cross) vs hops (000 Figs 19, 21, 23, 25)",
    ),
    SweepFigure(
        "wireless-gilbert", "goodput", "bad_s", "TCP1 goodput vs Bad duration (000 Figs 27, 30)", flow=0, log_x=True
    ),
    SweepFigure("geo-satellite", "goodput", "bad_s", "goodput vs Bad duration (000 Fig. 32)", log_x=True),
    SweepFigure("mobile-bernoulli", "goodput", "loss_pct", "throughput vs loss rate (001 Figs 3, 7)", flow=0),
    SweepFigure("mobile-burst", "goodput", "bad_loss_pct", "throughput vs Bad-state loss (001 Figs 6, 8)", flow=0),
    SweepFigure("geo-friendliness", "goodput", "loss_pct", "mean throughput vs loss rate (001 Fig. 9)"),
    SweepFigure("geo-friendliness", "goodput", "bad_loss_pct", "mean throughput vs Bad-state loss (001 Fig. 10)"),
    SweepFigure("multipath", "recv_goodput", "delay_ms", "end-to-end throughput vs link delay (004 Figs 12-14)"),
    SweepFigure("pipe-size", "goodput", "rate_mbit", "goodput vs bottleneck rate = pipe size (000 §4, Figs 33-38)"),
    SweepFigure("pipe-size", "retrans_ratio", "rate_mbit", "retransmission ratio vs pipe size (000 §4, Fig. 34)"),
]

#: draws a figure's table (a cache may stand in for :func:`sweep_png`)
Draw = Callable[[pd.DataFrame, SweepFigure], bytes]

YLABELS = {
    "goodput": "sender goodput, Mbit/s",
    "recv_goodput": "receiver goodput, Mbit/s",
    "total_goodput": "total goodput, Mbit/s",
    "jain": "Jain's fairness index",
    "retrans_ratio": "retransmitted / sent bytes, %",
    "c1_plus_cross": "C1 + mean forward cross, Mbit/s",
}


def _is_cc_key(key: str) -> bool:
    return key == "cc" or key.endswith(".cc")


def run_values(flows: pd.DataFrame, figure: SweepFigure) -> pd.DataFrame:
    """One row per (run, algorithm) with the figure's x, its panel (the other swept parameters) and
    the metric's value (module doc)."""
    rows = []
    own = flows[(flows["experiment"] == figure.experiment) & (flows["direction"] == "forward")]
    for _run, run_flows in own.groupby("run", sort=False):
        params = run_flows["params"].iloc[0]
        if figure.x not in params:
            continue
        panel = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k != figure.x and not _is_cc_key(k))
        chosen = run_flows if figure.flow is None else run_flows[run_flows["flow"] == figure.flow]
        if figure.metric == "c1_plus_cross":
            c1 = run_flows[run_flows["flow"] == 0]
            cross = run_flows[run_flows["flow"] != 0]
            if c1.empty or cross.empty:
                continue
            value = float(c1["goodput_mbit"].iloc[0] + cross["goodput_mbit"].mean())
            rows.append({"x": params[figure.x], "panel": panel, "cc": c1["cc"].iloc[0], "value": value})
            continue
        for cc, group in chosen.groupby("cc", sort=True):
            value = metrics.group_metric(group, figure.metric)
            if figure.metric == "retrans_ratio":
                value *= 100
            if not math.isnan(value) or figure.metric == "jain":
                rows.append({"x": params[figure.x], "panel": panel, "cc": cc, "value": value})
    return pd.DataFrame(rows, columns=["x", "panel", "cc", "value"])


def summary(values: pd.DataFrame) -> pd.DataFrame:
    """Mean, min, max and runs per (panel, cc, x)."""
    if values.empty:
        return pd.DataFrame(columns=["panel", "cc", "x", "mean", "min", "max", "runs"])
    clean = values.dropna(subset=["value"])
    grouped = clean.groupby(["panel", "cc", "x"], sort=True)["value"]
    table = grouped.agg(["mean", "min", "max", "count"]).reset_index().rename(columns={"count": "runs"})
    return table


def sweep_png(table: pd.DataFrame, figure: SweepFigure) -> bytes:
    """The figure: one panel per other-parameter combination, one line per algorithm, whiskers from
    the lowest to the highest seed."""
    panels = list(dict.fromkeys(table["panel"])) or [""]
    columns = min(len(panels), 3)
    rows = math.ceil(len(panels) / columns)
    fig = Figure(figsize=(max(6.0, 4.6 * columns), 3.2 * rows + 0.6))
    shared = None
    for index, panel in enumerate(panels):
        ax = fig.add_subplot(rows, columns, index + 1, sharey=shared)
        shared = shared or ax
        for cc, lines in table[table["panel"] == panel].groupby("cc", sort=True):
            style = lookup(cc)
            x = pd.to_numeric(lines["x"]).to_numpy(dtype=float)
            mean = lines["mean"].to_numpy(dtype=float)
            low = mean - lines["min"].to_numpy(dtype=float)
            high = lines["max"].to_numpy(dtype=float) - mean
            ax.errorbar(
                x,
                mean,
                yerr=[low, high],
                color=style.colour,
                marker=style.marker,
                capsize=3,
                linewidth=1.2,
                markersize=5,
                label=style.label,
            )
        if figure.log_x:
            ax.set_xscale("log")
        ticks = sorted(pd.to_numeric(table.loc[table["panel"] == panel, "x"]).unique())
        if len(ticks) <= 12:
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=8)
            ax.minorticks_off()
        ax.set_xlabel(figure.x)
        if index % columns == 0:
            ax.set_ylabel(YLABELS[figure.metric])
        ax.set_title(panel or figure.experiment, fontsize=9)
        ax.grid(alpha=0.3)
        if figure.metric == "jain":
            ax.set_ylim(0, 1.05)
        else:
            ax.set_ylim(bottom=0)
    if shared.get_legend_handles_labels()[0]:
        shared.legend(fontsize=8, loc="best")
    fig.suptitle(f"{figure.experiment}: {figure.title}\n(mean over seeds; whiskers: min and max)", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)


def sweep_figures(flows: pd.DataFrame, draw: Draw | None = None) -> list[tuple[SweepFigure, pd.DataFrame, bytes]]:
    """Every figure of ``FIGURES`` whose experiment ran in ``flows`` with its x parameter swept over two
    values or more: (figure, its table, PNG drawn by ``draw(table, figure)``, :func:`sweep_png` by default)."""
    draw = draw or sweep_png
    out = []
    if flows.empty:
        return out
    for figure in FIGURES:
        table = summary(run_values(flows, figure))
        if table.empty or table["x"].nunique() < 2:
            continue
        out.append((figure, table, draw(table, figure)))
    return out


def swept_parameters(flows: pd.DataFrame, experiment: str) -> list[str]:
    """The numeric parameters of ``experiment`` (not the algorithms) that took two values or more in ``flows``."""
    own = flows[flows["experiment"] == experiment]
    values: dict[str, set] = {}
    numeric: dict[str, bool] = {}
    for params in own["params"]:
        for key, value in params.items():
            if not _is_cc_key(key):
                values.setdefault(key, set()).add(repr(value))
                numeric[key] = numeric.get(key, True) and isinstance(value, int | float) and not isinstance(value, bool)
    return [key for key, seen in values.items() if len(seen) > 1 and numeric[key]]


def experiment_figures(flows: pd.DataFrame, draw: Draw | None = None) -> list[tuple[SweepFigure, pd.DataFrame, bytes]]:
    """:func:`sweep_figures`, and for each experiment that got none of them but swept a parameter, its sender
    goodput against that parameter (the first swept; the others become panels), one line per algorithm."""
    draw = draw or sweep_png
    out = sweep_figures(flows, draw)
    if flows.empty:
        return out
    drawn = {figure.experiment for figure, _, _ in out}
    for experiment in dict.fromkeys(flows["experiment"].dropna()):
        swept = swept_parameters(flows, experiment)
        if experiment in drawn or not swept:
            continue
        figure = SweepFigure(experiment, "goodput", swept[0], f"sender goodput vs {swept[0]}")
        table = summary(run_values(flows, figure))
        if table.empty or table["x"].nunique() < 2:
            continue
        out.append((figure, table, draw(table, figure)))
    return out
