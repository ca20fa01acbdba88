"""Figures for the run and session reports, rendered to PNG bytes (no display, no pyplot state).

Names, colours and markers of the algorithms come from testbed/scenario/algorithms.py, so every figure agrees.
Past 500 lines because it holds every figure of a run's and a session's report, each a short function
sharing the labels and helpers above; split by figure, the pieces would import one another.
The ssthresh that tcp_probe reports is the kernel's tcp_current_ssthresh() (outside recovery
max(ssthresh, 3/4 cwnd)), not the real ssthresh: its label says so. The real ssthresh comes only from
our module's trace (westwood_tb_cong events, kernel-patch/README.md), drawn by ``real_ssthresh_png``.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.runs.metrics import tcp_goodput_limit_mbit
from testbed.scenario.algorithms import lookup

#: more lines than this make a time plot unreadable; the figure says how many it leaves out
MAX_CONNECTIONS_PLOTTED = 12
SSTHRESH_LABEL = "ssthresh_current (tcp_current_ssthresh, not the real ssthresh)"
SENDER_GOODPUT_LABEL = "sender goodput, Mbit/s\n(sent - retransmitted) / transfer time"
RECEIVER_GOODPUT_LABEL = "receiver goodput, Mbit/s (iperf3 server)"
REAL_SSTHRESH_LABEL = "ssthresh (real snd_ssthresh, module trace)"
#: marker per westwood_tb_cong kind (kernel-patch/README.md, "Trace events")
CONGESTION_MARKERS = {
    "recovery": "v",
    "cwr": "<",
    "loss": "X",
    "loss_repeat": "x",
    "complete_cwr": "^",
    "undo": "D",
}


def figure_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _connection_label(conn: str, cc: str) -> str:
    return f"{conn} {lookup(cc).label}"


def _limited(connections: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    if len(connections) <= MAX_CONNECTIONS_PLOTTED:
        return connections, ""
    return (
        connections.head(MAX_CONNECTIONS_PLOTTED),
        f" (first {MAX_CONNECTIONS_PLOTTED} of {len(connections)} connections)",
    )


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777777")
    ax.set_xticks([])
    ax.set_yticks([])


#: the x axis of every figure over a run's time
TIME_LABEL = "time since the run's start, s"


@dataclass(frozen=True)
class TimeAxes:
    """How a figure over a run's time is labelled: its y axis, what it says when there is nothing to draw,
    where its legend goes (None: the drawing makes its own) and whether its y axis starts at 0."""

    ylabel: str
    empty: str
    legend: dict | None = field(default_factory=lambda: {"loc": "upper left"})
    from_zero: bool = False


def time_figure_png(height: float, title: str, axes: TimeAxes, draw: Callable[[Axes], tuple[bool, str]]) -> bytes:
    """The one skeleton of every figure over a run's time: one axes 9 inches wide, drawn by ``draw`` (it
    returns whether it drew anything and what the title adds), then labelled, or saying why it is empty."""
    fig = Figure(figsize=(9, height))
    ax = fig.add_subplot()
    drawn, more = draw(ax)
    _label_time_axes(ax, axes, drawn)
    ax.set_title(title + more, fontsize=10)
    return figure_png(fig)


def _label_time_axes(ax, axes: TimeAxes, drawn: bool) -> None:
    """One time axes labelled as ``axes`` says, or saying why it is empty (figures of one or two axes)."""
    if not drawn:
        _empty(ax, axes.empty)
        return
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(axes.ylabel)
    if axes.from_zero:
        ax.set_ylim(bottom=0)
    if axes.legend is not None:
        ax.legend(fontsize=7, **axes.legend)
    ax.grid(alpha=0.3)


def cwnd_ssthresh_png(series: pd.DataFrame, connections: pd.DataFrame) -> bytes:
    """cwnd (solid) and tcp_current_ssthresh (dashed) in packets vs run time, per connection."""
    shown, note = _limited(connections)

    def draw(ax) -> tuple[bool, str]:
        plotted = False
        for conn in shown.itertuples():
            style = lookup(conn.cc)
            mine = series[series["conn"] == conn.conn]
            cwnd = mine[mine["metric"] == "cwnd_pkts"]
            ssthresh = mine[mine["metric"] == "ssthresh_current_pkts"]
            if not cwnd.empty:
                label = f"{_connection_label(conn.conn, conn.cc)} cwnd"
                ax.step(cwnd["t_s"], cwnd["value"], where="post", color=style.colour, linewidth=1, label=label)
                plotted = True
            if ssthresh["value"].notna().any():
                ax.step(
                    ssthresh["t_s"],
                    ssthresh["value"],
                    where="post",
                    color=style.colour,
                    linewidth=1,
                    linestyle="--",
                    alpha=0.7,
                    label=f"{conn.conn} {SSTHRESH_LABEL}",
                )
        return plotted, note

    title = "cwnd and ssthresh_current (tcp_probe, sender side)"
    return time_figure_png(4, title, TimeAxes("packets", "no tcp_probe data"), draw)


def srtt_png(series: pd.DataFrame, connections: pd.DataFrame) -> bytes:
    """Smoothed RTT (the sender kernel's srtt) vs run time, per connection."""
    shown, note = _limited(connections)

    def draw(ax) -> tuple[bool, str]:
        plotted = False
        for conn in shown.itertuples():
            data = series[(series["conn"] == conn.conn) & (series["metric"] == "srtt_ms")]
            if not data.empty:
                label = _connection_label(conn.conn, conn.cc)
                ax.plot(data["t_s"], data["value"], color=lookup(conn.cc).colour, linewidth=1, label=label)
                plotted = True
        return plotted, note

    title = "smoothed RTT (tcp_probe srtt, sender side)"
    return time_figure_png(3.2, title, TimeAxes("srtt, ms", "no tcp_probe data"), draw)


#: the sequence plot shows every forward flow of paper 000's M = 20 case, and a few more
MAX_SEQUENCE_LINES = 40


def sequence_png(series: pd.DataFrame, connections: pd.DataFrame) -> bytes:
    """Acknowledged data (tcp_probe snd_una since the first event) vs time, one line per connection,
    like paper 000 Figs 14-16's sequence numbers of M flows: the spread of the final values shows
    the (un)fairness."""
    if "direction" in connections and (connections["direction"] == "forward").any():
        connections = connections[connections["direction"] == "forward"]  # the papers plot the M forward flows
    shown = connections.head(MAX_SEQUENCE_LINES)
    note = f" (first {MAX_SEQUENCE_LINES} of {len(connections)} connections)" if len(connections) > len(shown) else ""

    def draw(ax) -> tuple[bool, str]:
        finals = []
        for conn in shown.itertuples():
            data = series[(series["conn"] == conn.conn) & (series["metric"] == "acked_mb")]
            if not data.empty:
                style = lookup(conn.cc)
                ax.plot(data["t_s"], data["value"], color=style.colour, linewidth=0.9, label=style.label)
                finals.append(float(data["value"].iloc[-1]))
        if not finals:
            return False, note
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))  # one entry per algorithm, not per connection
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left")
        return True, f"{note}; final values {min(finals):.2f} .. {max(finals):.2f} MB"

    title = "acknowledged data per connection (tcp_probe snd_una), 000 Figs 14-16"
    return time_figure_png(3.6, title, TimeAxes("data acknowledged, MB", "no tcp_probe data", legend=None), draw)


def interval_goodput_png(intervals: pd.DataFrame, connections: pd.DataFrame) -> bytes:
    """Receiver goodput per interval (``intervals``: conn, t_start_s, t_end_s, goodput_mbit) as steps."""
    shown, note = _limited(connections)

    def draw(ax) -> tuple[bool, str]:
        width = None
        for conn in shown.itertuples():
            data = intervals[intervals["conn"] == conn.conn].sort_values("t_start_s")
            if data.empty or data["goodput_mbit"].isna().all():
                continue
            width = float((data["t_end_s"] - data["t_start_s"]).median())
            x = np.append(data["t_start_s"].to_numpy(), data["t_end_s"].iloc[-1])
            y = np.append(data["goodput_mbit"].to_numpy(), data["goodput_mbit"].iloc[-1])
            label = _connection_label(conn.conn, conn.cc)
            ax.step(x, y, where="post", color=lookup(conn.cc).colour, linewidth=1.2, label=label)
        interval = f" per {width:g} s interval" if width else ""
        return width is not None, f"{interval} (iperf3 server){note}"

    ylabel = RECEIVER_GOODPUT_LABEL.replace(", Mbit/s", "\nMbit/s")
    axes = TimeAxes(ylabel, "no iperf3 server intervals", legend={"loc": "lower right"}, from_zero=True)
    return time_figure_png(3.2, "receiver goodput", axes, draw)


#: a bar's label is wrapped at this many characters per line
BAR_LABEL_WIDTH = 14


def _bar_layout(labels: list[str]) -> tuple[float, list[str], int]:
    """(figure width in inches, wrapped labels, tick rotation): a bar gets room for its label's longest line
    (about 0.09 inch per character at 8 pt) so labels sit side by side; past 12 bars they are tilted."""
    wrapped = ["\n".join(textwrap.fill(line, BAR_LABEL_WIDTH) for line in str(label).splitlines()) for label in labels]
    longest = max((len(line) for label in wrapped for line in label.splitlines()), default=1)
    per_bar = max(0.7, 0.09 * longest + 0.2)
    rotation = 30 if len(labels) > 12 else 0
    if rotation:
        per_bar = 0.45
    return max(4.5, per_bar * len(labels) + 2.5), wrapped, rotation


def point_bars_png(table: pd.DataFrame, value: str, low: str, high: str, ylabel: str, title: str) -> bytes:
    """One bar per table row (``label`` column), coloured by its ``cc``, with whiskers from ``low`` to
    ``high`` (min and max across seeds). Rows without a value get no bar and an "n/a" mark. The figure's
    width grows with the number of bars and their labels (wrapped, tilted past 12 bars) so they do not overlap."""
    width, labels, rotation = _bar_layout(list(table["label"]) if "label" in table else [])
    fig = Figure(figsize=(width, 4))
    ax = fig.add_subplot()
    if table.empty:
        _empty(ax, "no complete runs")
        return figure_png(fig)
    x = np.arange(len(table))
    heights = pd.to_numeric(table[value], errors="coerce").to_numpy(dtype=float)
    lows = pd.to_numeric(table[low], errors="coerce").to_numpy(dtype=float)
    highs = pd.to_numeric(table[high], errors="coerce").to_numpy(dtype=float)
    colours = [lookup(cc).colour if isinstance(cc, str) and "+" not in cc else "#7f7f7f" for cc in table["cc"]]
    ax.bar(x, np.nan_to_num(heights), color=colours, edgecolor="black", linewidth=0.5)
    for i, (height, lo, hi) in enumerate(zip(heights, lows, highs, strict=True)):
        if math.isnan(height):
            ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=8)
        elif not math.isnan(lo) and not math.isnan(hi) and hi > lo:
            ax.errorbar(i, height, yerr=[[height - lo], [hi - height]], color="black", capsize=4, linewidth=1)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=rotation, ha="right" if rotation else "center", fontsize=8)
    ax.set_xlim(-0.6, len(table) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    seen = []
    for cc in table["cc"]:
        if isinstance(cc, str) and "+" not in cc and cc not in seen:
            seen.append(cc)
    if seen:
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color=lookup(cc).colour, label=lookup(cc).label) for cc in seen],
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
        )
    return figure_png(fig)


#: a time series longer than this is thinned (every k-th point) before it is drawn: the figure is a few hundred
#: pixels wide, and drawing every ACK of a long run costs seconds
MAX_POINTS_DRAWN = 4000


def thin(frame: pd.DataFrame, limit: int = MAX_POINTS_DRAWN) -> pd.DataFrame:
    """Every k-th row of ``frame`` (and its last) so that at most about ``limit`` rows are left."""
    if len(frame) <= limit:
        return frame
    step = math.ceil(len(frame) / limit)
    return pd.concat([frame.iloc[::step], frame.iloc[[-1]]])


def trace_comparison_png(traces: list[tuple[str, str, pd.DataFrame]], title: str) -> bytes:
    """The algorithms of one experiment side by side over time: ``traces`` are (label, cc, series of one
    connection: ``t_s``, ``metric``, ``value``). Top: cwnd (solid) and ssthresh, the real one from the module
    trace (``ssthresh_pkts``, dashed) where the connection has it, else tcp_probe's ``ssthresh_current_pkts``
    (dotted); bottom: Westwood+'s bandwidth estimate (``bwe_mbit``), for the connections that have one."""
    fig = Figure(figsize=(9, 5.6))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    for label, cc, series in traces:
        style = lookup(cc)
        cwnd = thin(series[series["metric"] == "cwnd_pkts"])
        if not cwnd.empty:
            top.step(cwnd["t_s"], cwnd["value"], where="post", color=style.colour, linewidth=1, label=f"{label} cwnd")
        real = series[series["metric"] == "ssthresh_pkts"]
        ssthresh = thin(real if real["value"].notna().any() else series[series["metric"] == "ssthresh_current_pkts"])
        if ssthresh["value"].notna().any():
            name = "ssthresh (real)" if real["value"].notna().any() else "ssthresh_current"
            # the value each event left holds until the next one: drawn to the end of the connection's data
            end = pd.DataFrame({"t_s": [series["t_s"].max()], "value": [ssthresh["value"].iloc[-1]]})
            ssthresh = pd.concat([ssthresh[["t_s", "value"]], end], ignore_index=True)
            top.step(
                ssthresh["t_s"],
                ssthresh["value"],
                where="post",
                color=style.colour,
                linewidth=1.2,
                linestyle="--" if name == "ssthresh (real)" else ":",
                label=f"{label} {name}",
            )
        estimate = thin(series[series["metric"] == "bwe_mbit"])
        if not estimate.empty:
            bottom.plot(estimate["t_s"], estimate["value"], color=style.colour, linewidth=1.3, label=f"{label} BWE")
    for ax, ylabel in ((top, "packets"), (bottom, "bandwidth estimate, Mbit/s")):
        drawn = bool(ax.get_legend_handles_labels()[0])
        _label_time_axes(ax, _beside(ylabel, "no data (tcp_probe or westwood_tb)"), drawn)
    top.set_xlabel("")
    top.set_title(title, fontsize=10)
    return figure_png(fig)


def estimate_png(
    series: pd.DataFrame,
    connections: pd.DataFrame,
    bottleneck_rate_mbit: float | None = None,
    mss_bytes: float = 1448,
) -> bytes:
    """Westwood+'s filtered bandwidth estimate (line, ``bwe_mbit``) and its raw samples (dots,
    ``bwe_sample_mbit``) in Mbit/s vs run time, per connection, as paper 000 Figs. 1-2 show it; beside
    them horizontal lines at the bottleneck's TCP goodput limit (``rate * mss / 1514``, grey) and at each
    connection's receiver goodput (``connections["recv_goodput_mbit"]`` when given, dashed)."""
    shown, note = _limited(connections)

    def draw(ax) -> tuple[bool, str]:
        plotted = [_draw_estimate(ax, conn, series[series["conn"] == conn.conn]) for conn in shown.itertuples()]
        limit = tcp_goodput_limit_mbit(bottleneck_rate_mbit, mss_bytes) if bottleneck_rate_mbit else math.nan
        if any(plotted) and not math.isnan(limit):
            ax.axhline(
                limit,
                color="#555555",
                linestyle=":",
                linewidth=1.2,
                label=f"bottleneck goodput limit {limit:.2f} Mbit/s ({bottleneck_rate_mbit:g} x {mss_bytes:g}/1514)",
            )
        return any(plotted), note

    title = "Westwood+ bandwidth estimate and samples (module trace, sender side)"
    return time_figure_png(4, title, _beside("Mbit/s", "no westwood_tb samples"), draw)


def _draw_estimate(ax, conn, mine: pd.DataFrame) -> bool:
    """One connection's estimate, samples and receiver goodput; False when it has neither series."""
    style = lookup(conn.cc)
    estimate = mine[mine["metric"] == "bwe_mbit"]
    raw_samples = mine[mine["metric"] == "bwe_sample_mbit"]
    if estimate.empty and raw_samples.empty:
        return False
    label = _connection_label(conn.conn, conn.cc)
    ax.plot(
        raw_samples["t_s"],
        raw_samples["value"],
        linestyle="none",
        marker=".",
        markersize=4,
        color=style.colour,
        alpha=0.45,
        label=f"{label} samples",
    )
    ax.plot(estimate["t_s"], estimate["value"], color=style.colour, linewidth=1.5, label=f"{label} estimate")
    received = getattr(conn, "recv_goodput_mbit", math.nan)
    if received is not None and not pd.isna(received):
        ax.axhline(
            received,
            color=style.colour,
            linestyle="--",
            linewidth=1,
            label=f"{conn.conn} receiver goodput {received:.2f} Mbit/s",
        )
    return True


def _beside(ylabel: str, empty: str) -> TimeAxes:
    """The module trace's figures: the y axis from 0, the legend beside the axes (many entries per connection)."""
    return TimeAxes(ylabel, empty, legend={"loc": "upper left", "bbox_to_anchor": (1.0, 1.0)}, from_zero=True)


def real_ssthresh_png(
    series: pd.DataFrame,
    connections: pd.DataFrame,
    events: pd.DataFrame,
    samples: pd.DataFrame | None = None,
) -> bytes:
    """cwnd and the **real** ssthresh in packets vs run time, per connection, with the congestion events
    marked by kind.

    cwnd: tcp_probe's ``cwnd_pkts`` in ``series`` (every ACK) where the connection has it, else the
    ``cwnd`` of the module's ``samples`` (``conn``, ``t_s``, ``cwnd``; one per sampling window). ssthresh:
    ``ssthresh_pkts`` in ``series`` (the value each congestion event left) as a step function held to the
    end of the cwnd curve, not drawn while infinite. ``events`` (``conn``, ``t_s``, ``kind``,
    ``cwnd_before``, ``cwnd_after``): a marker per event at the cwnd it found (``cwnd_after`` when the
    kernel did not tell, loss_repeat)."""
    shown, note = _limited(connections)

    def draw(ax) -> tuple[bool, str]:
        plotted = False
        kinds_seen: list[str] = []
        for conn in shown.itertuples():
            if _draw_cwnd_and_ssthresh(ax, conn, series[series["conn"] == conn.conn], samples):
                own_events = events[events["conn"] == conn.conn] if not events.empty else events
                _mark_events(ax, own_events, kinds_seen)
                plotted = True
        return plotted, note

    title = "cwnd and the real ssthresh, congestion events marked by kind (module trace)"
    return time_figure_png(4, title, _beside("packets", "no cwnd or westwood_tb data"), draw)


def _draw_cwnd_and_ssthresh(ax, conn, mine: pd.DataFrame, samples: pd.DataFrame | None) -> bool:
    """One connection's cwnd (steps) and real ssthresh (dashed steps); False when it has neither."""
    style = lookup(conn.cc)
    cwnd = mine[mine["metric"] == "cwnd_pkts"][["t_s", "value"]]
    source = "tcp_probe"
    if cwnd.empty and samples is not None and not samples.empty:
        own = samples[samples["conn"] == conn.conn]
        cwnd = pd.DataFrame({"t_s": own["t_s"], "value": own["cwnd"]})
        source = "module samples"
    ssthresh = mine[mine["metric"] == "ssthresh_pkts"].sort_values("t_s")
    if cwnd.empty and ssthresh.empty:
        return False
    if not cwnd.empty:
        ax.step(
            cwnd["t_s"],
            cwnd["value"],
            where="post",
            color=style.colour,
            linewidth=1,
            label=f"{_connection_label(conn.conn, conn.cc)} cwnd ({source})",
        )
    if ssthresh["value"].notna().any():
        end = max(float(ssthresh["t_s"].max()), float(cwnd["t_s"].max()) if not cwnd.empty else -math.inf)
        x = np.append(ssthresh["t_s"].to_numpy(dtype=float), end)
        y = np.append(ssthresh["value"].to_numpy(dtype=float), ssthresh["value"].iloc[-1])
        ax.step(
            x,
            y,
            where="post",
            color=style.colour,
            linewidth=1.5,
            linestyle="--",
            label=f"{conn.conn} {REAL_SSTHRESH_LABEL}",
        )
    return True


def _mark_events(ax, own_events: pd.DataFrame, kinds_seen: list[str]) -> None:
    """A marker per congestion event at the cwnd it found; each kind in the legend once."""
    for kind, group in own_events.groupby("kind", sort=False):
        y = group["cwnd_before"].where(group["cwnd_before"] > 0, group["cwnd_after"])
        ax.plot(
            group["t_s"],
            y,
            linestyle="none",
            marker=CONGESTION_MARKERS.get(kind, "o"),
            markersize=7,
            markerfacecolor="none",
            markeredgecolor="black",
            label=kind if kind not in kinds_seen else None,
        )
        kinds_seen.append(kind)


def latency_png(samples: pd.DataFrame, queues: pd.DataFrame) -> bytes:
    """Latency under load vs run time: each ping's RTT and each request's completion time (top), and
    the delay each bottleneck queue held, its backlog over its rate (bottom)."""
    fig = Figure(figsize=(9, 5.2))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for (fid, kind), data in samples.groupby(["id", "kind"], sort=True):
        what = "ping RTT" if kind == "ping" else "request completion"
        top.plot(data["t_s"], data["value_ms"], marker=".", markersize=3, linewidth=0.6, label=f"{fid} {what}")
    _label_time_axes(top, TimeAxes("ms", "no ping or requests flow"), not samples.empty)
    top.set_xlabel("")
    top.set_title("latency under load", fontsize=10)
    for (node, intf, direction), data in queues.groupby(["node", "intf", "direction"], sort=True, dropna=False):
        bottom.plot(data["t_s"], data["delay_ms"], linewidth=0.8, label=f"{node}/{intf} ({direction}): backlog / rate")
        if data["aqm_delay_ms"].notna().any():
            bottom.plot(
                data["t_s"],
                data["aqm_delay_ms"],
                linewidth=0.8,
                linestyle="--",
                label=f"{node}/{intf}: the discipline's own delay",
            )
    _label_time_axes(bottom, TimeAxes("queueing delay, ms", "no queue samples"), not queues.empty)
    bottom.set_xlabel(TIME_LABEL)
    return figure_png(fig)


def latency_scatter_png(table: pd.DataFrame) -> bytes:
    """Throughput against delay, one marker per point (testbed/report/pages/latencypage.py's table): the ping's p99
    RTT where the point has pings, else its queueing delay's p99. Up and left is better."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    delay = table["ping_p99_ms"].where(table["ping_p99_ms"].notna(), table["queue_p99_ms"])
    shown = table.assign(delay=delay).dropna(subset=["delay", "goodput_mbit"])
    if shown.empty:
        _empty(ax, "no delay or goodput to show")
        return figure_png(fig)
    for row in shown.itertuples():
        ax.scatter(row.delay, row.goodput_mbit, s=30)
        ax.annotate(row.point, (row.delay, row.goodput_mbit), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("delay under load, ms (ping p99; queueing delay p99 without a ping), log scale")
    ax.set_ylabel("bulk goodput, Mbit/s")
    ax.set_title("throughput vs delay (up and left is better)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    return figure_png(fig)


def delay_cdfs_png(pings: dict[str, pd.Series], queues: dict[str, pd.Series]) -> bytes:
    """The CDFs of each point's ping RTTs (left) and of its forward bottleneck queue's delay (right)."""
    fig = Figure(figsize=(10, 4.2))
    left, right = fig.subplots(1, 2)
    _draw_cdfs(left, pings, "ping RTT under load, ms (log scale)", "ping RTTs", "no ping samples")
    _draw_cdfs(right, queues, "queueing delay, ms (log scale)", "bottleneck queue delay (10 Hz)", "no queue samples")
    return figure_png(fig)


def _draw_cdfs(ax, series: dict[str, pd.Series], xlabel: str, title: str, empty: str) -> None:
    drawn = False
    for point, values in sorted(series.items()):
        ordered = np.sort(values.dropna().to_numpy(dtype=float))
        ordered = ordered[ordered > 0]  # a log axis: an empty queue (0 ms) is left of every other value
        if len(ordered) == 0:
            continue
        ax.step(ordered, np.arange(1, len(ordered) + 1) / len(ordered), where="post", label=point, linewidth=1)
        drawn = True
    if not drawn:
        _empty(ax, empty)
        return
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of samples")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=6, loc="lower right")
    ax.grid(alpha=0.3, which="both")


#: the forest plot's colour per claim verdict
VERDICT_COLOURS = {
    "reproduced": "#2a7d2a",
    "opposite": "#b22222",
    "not reproduced": "#d2691e",
    "short of the paper": "#b8860b",
    "undecided": "#6a6a9a",
}


def forest_png(
    effects: pd.DataFrame,
    title: str = "the papers' claims: each condition's effect with its interval",
    legend: str = "claim verdict",
) -> bytes:
    """The claims' effects (analysis/verdicts/claims.py ``effects_table``), one line per condition: the effect
    (a / b - 1, on a log axis) with its two-sided interval at the claim's level (thin: 95 % at 0.05) and
    the one its one-sided tests decide by (thick: 90 % at 0.05), both at a sequential look's own level
    (its alpha printed beside the label where it is not 0.05), the margin or threshold shaded, the
    paper's effect as a diamond, coloured by the claim's verdict."""
    rows = effects.dropna(subset=["effect"]).reset_index(drop=True)
    fig = Figure(figsize=(9, 1.2 + 0.32 * max(len(rows), 1)))
    ax = fig.add_subplot()
    if rows.empty:
        _empty(ax, "no claim had runs on both sides")
        return figure_png(fig)
    for y, row in enumerate(rows.itertuples()):
        colour = VERDICT_COLOURS.get(row.verdict, "#444444")
        ax.fill_betweenx([y - 0.4, y + 0.4], 1 + row.margin_low, 1 + row.margin_high, color="#dddddd", lw=0)
        if not math.isnan(row.low):
            ax.plot([1 + row.low, 1 + row.high], [y, y], color=colour, lw=1)
            ax.plot([1 + row.low90, 1 + row.high90], [y, y], color=colour, lw=3.5, solid_capstyle="butt")
        ax.plot(1 + row.effect, y, "o", color=colour, ms=5)
        if not math.isnan(row.paper):
            ax.plot(1 + row.paper, y, "D", color="black", ms=5, fillstyle="none")
    ax.axvline(1, color="#888888", lw=0.8)
    ax.set_xscale("log")
    ticks = [t for t in (0.25, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 3, 4) if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    ax.set_xticks(ticks, [f"{t - 1:+.0%}" for t in ticks])
    ax.minorticks_off()
    alphas = rows["alpha"] if "alpha" in rows else pd.Series([0.05] * len(rows))
    labels = [
        textwrap.shorten(f"{r.claim} [{r.condition}]", 70) + ("" if abs(a - 0.05) < 1e-9 else f" (alpha {a:.3g})")
        for r, a in zip(rows.itertuples(), alphas, strict=True)
    ]
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(
        "effect: a / b - 1 (log scale); thin: two-sided interval at the claim's alpha (95 % at 0.05), "
        "thick: the one-sided tests' (90 %); diamond: the paper's effect; grey: the threshold or margin",
        fontsize=8,
    )
    handles = [ax.plot([], [], "o-", color=c, label=v)[0] for v, c in VERDICT_COLOURS.items() if v in set(rows.verdict)]
    ax.legend(handles=handles, fontsize=7, loc="lower right", title=legend, title_fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return figure_png(fig)


def lengths_png(table: pd.DataFrame, paper: dict[str, float]) -> bytes:
    """Each claim's effect against the window it is measured over (analysis/verdicts/lengths.py ``table``): one
    panel per claim and condition, the first-T-seconds windows left to right and the warm-ups after them,
    the effect with its 95 % interval, the paper's effect (``paper[claim]``) as a dashed line."""
    groups = list(table.groupby(["claim", "point"], sort=False)) if not table.empty else []
    fig = Figure(figsize=(9, 2.6 * max(len(groups), 1)))
    if not groups:
        _empty(fig.add_subplot(), "no goodput claim had runs long enough to window")
        return figure_png(fig)
    for index, ((claim, condition), rows) in enumerate(groups):
        ax = fig.add_subplot(len(groups), 1, index + 1)
        x = range(len(rows))
        ax.errorbar(
            x,
            1 + rows["effect"],
            yerr=[rows["effect"] - rows["low"], rows["high"] - rows["effect"]],
            fmt="o",
            color="#1f77b4",
            capsize=3,
        )
        ax.axhline(1, color="#888888", lw=0.8)
        if not math.isnan(paper.get(claim, math.nan)):
            ax.axhline(1 + paper[claim], color="black", ls="--", lw=0.8, label="the paper's effect")
            ax.legend(fontsize=7, loc="best")
        ax.set_yscale("log")
        ticks = [t for t in (0.25, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 3, 4) if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
        ax.set_yticks(ticks, [f"{t - 1:+.0%}" for t in ticks])
        ax.minorticks_off()
        ax.set_xticks(list(x), list(rows["window"]), fontsize=7)
        ax.set_title(textwrap.shorten(f"{claim} [{condition}]", 90), fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.supxlabel("window of each run measured (0-T: the first T s; W-end: the first W s left out)", fontsize=8)
    fig.supylabel("effect a / b - 1 (95 % interval)", fontsize=8)
    return figure_png(fig)
