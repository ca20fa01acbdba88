"""A session's latency under load: per point, the bulk flows' goodput beside the ping RTTs, the request
completion times and the bottleneck queue's delay (percentiles over every sample of the point's
complete runs), as a table, the throughput-vs-delay scatter (Flent's and Pantheon's view) and the
CDFs of the ping RTTs and of the queueing delay. Shown when a run of the session has a ping or
requests flow or an AQM queue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figures import plots
from analysis.runs.analyze import RunAnalysis
from analysis.runs.latency import summarize
from testbed.report.pages import templating

COLUMNS = [
    "point",
    "runs",
    "goodput_mbit",
    "ping_p50_ms",
    "ping_p99_ms",
    "request_p50_ms",
    "request_p99_ms",
    "queue_p50_ms",
    "queue_p99_ms",
    "drops",
    "marks",
]
HEADERS = {
    "goodput_mbit": "bulk goodput Mbit/s",
    "ping_p50_ms": "ping p50 ms",
    "ping_p99_ms": "ping p99 ms",
    "request_p50_ms": "request p50 ms",
    "request_p99_ms": "request p99 ms",
    "queue_p50_ms": "queueing delay p50 ms",
    "queue_p99_ms": "queueing delay p99 ms",
    "drops": "queue drops",
    "marks": "ECN marks",
}


def wanted(analyses: list[RunAnalysis]) -> bool:
    return any(not a.latency.empty or a.queue_delays["marks"].notna().any() for a in analyses if a.status == "complete")


def point_table(
    analyses: list[RunAnalysis], point_of
) -> tuple[pd.DataFrame, dict[str, pd.Series], dict[str, pd.Series]]:
    """One row per point (``COLUMNS``), and each point's ping RTTs and queueing delays (for the CDFs)."""
    by_point: dict[str, list[RunAnalysis]] = {}
    for analysed in analyses:
        if analysed.status == "complete":
            by_point.setdefault(point_of(analysed), []).append(analysed)
    rows, pings, delays = [], {}, {}
    for point, runs in sorted(by_point.items()):
        samples = pd.concat([a.latency_samples for a in runs], ignore_index=True)
        ping = samples[samples["kind"] == "ping"]["value_ms"]
        request = samples[samples["kind"] == "requests"]["value_ms"]
        queue = pd.concat([_forward_queue(a) for a in runs], ignore_index=True)
        pings[point], delays[point] = ping, queue["delay_ms"]
        rows.append(
            {
                "point": point,
                "runs": len(runs),
                "goodput_mbit": _bulk_goodput(runs),
                **_pair("ping", ping),
                **_pair("request", request),
                **_pair("queue", queue["delay_ms"]),
                "drops": _counted(runs, "drops"),
                "marks": _counted(runs, "marks"),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS), pings, delays


def _pair(name: str, values: pd.Series) -> dict[str, float]:
    stats = summarize(values.astype(float))
    return {f"{name}_p50_ms": stats["p50_ms"], f"{name}_p99_ms": stats["p99_ms"]}


def _forward_queue(analysed: RunAnalysis) -> pd.DataFrame:
    """The forward bottleneck queue's samples during the traffic."""
    queues = analysed.queue_delays
    duration = (analysed.manifest.get("resolved") or {}).get("duration_s") or np.inf
    return queues[(queues["direction"] == "forward") & (queues["t_s"] >= 0) & (queues["t_s"] <= duration)]


def _counted(runs: list[RunAnalysis], column: str) -> float:
    """The forward queue's drops (or marks) during the traffic, the mean over runs."""
    counts = []
    for run in runs:
        queue = _forward_queue(run)
        if queue.empty or queue[column].isna().all():
            continue
        counts.append(sum(float(q[column].max() - q[column].min()) for _, q in queue.groupby(["node", "intf"])))
    return float(np.mean(counts)) if counts else np.nan


def _bulk_goodput(runs: list[RunAnalysis]) -> float:
    """The forward bulk flows' receiver goodput added up, the mean over runs."""
    totals = []
    for run in runs:
        flows = run.flows
        if not flows.empty and "recv_goodput_mbit" in flows:
            totals.append(float(flows[flows["direction"] == "forward"]["recv_goodput_mbit"].sum()))
    return float(np.mean(totals)) if totals else np.nan


def section(session_dir: Path, analyses: list[RunAnalysis], point_of) -> dict | None:
    """The report's latency section: table, scatter and CDF (written beside the report as PNGs)."""
    if not wanted(analyses):
        return None
    table, pings, delays = point_table(analyses, point_of)
    figures = session_dir / "figures"
    figures.mkdir(exist_ok=True)
    scatter, cdf = figures / "latency-vs-goodput.png", figures / "delay-cdfs.png"
    scatter.write_bytes(plots.latency_scatter_png(table))
    cdf.write_bytes(plots.delay_cdfs_png(pings, delays))
    return {
        "table": templating.table(table, headers=HEADERS),
        "scatter": scatter.read_bytes(),
        "cdf": cdf.read_bytes(),
        "paths": [str(p.relative_to(session_dir)) for p in (scatter, cdf)],
    }


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table with its headers and values as text (the terminal's summary)."""
    return pd.DataFrame(
        {
            HEADERS.get(c, c): [templating.fmt(v, 3) if isinstance(v, float) else str(v) for v in table[c]]
            for c in table.columns
        }
    )
