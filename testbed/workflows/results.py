"""``testbed results``: every run under a results folder, listed and filtered through its catalog
(analysis/runs/catalog.py), as runs, flows or latency rows; optionally written to CSV or made into a report
of the matching runs (from the stored runs: nothing runs again)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import pandas as pd

from analysis.runs import catalog

View = Literal["runs", "flows", "latency"]
RUN_COLUMNS = {
    "run_id": "run",
    "scenario": "scenario",
    "seed": "seed",
    "kernel_release": "kernel",
    "accel": "accel",
    "status": "status",
    "trustworthy": "trusted",
    "flows": "flows",
    "goodput_mbit": "fwd goodput Mbit/s",
}
FLOW_COLUMNS = [
    "run_id",
    "conn",
    "cc",
    "direction",
    "goodput_mbit",
    "recv_goodput_mbit",
    "retrans_ratio",
    "kernel_release",
    "status",
]
LATENCY_COLUMNS = ["run_id", "id", "kind", "samples", "lost", "p50_ms", "p90_ms", "p99_ms", "kernel_release", "status"]


def listing(
    results_root: Path,
    filters: dict,
    view: View = "runs",
    csv: Path | None = None,
    report: Path | None = None,
    update: bool = True,
    rebuild: bool = False,
) -> int:
    """Print the catalogued rows that match every filter (module doc); exit status 1 when a report was
    asked for and nothing matches."""
    if update:
        print(catalog.ingest(results_root, rebuild=rebuild).summary(), file=sys.stderr)
    runs = catalog.runs(results_root, **filters)
    if report:
        return _report(results_root, runs, report, filters)
    frame, shown = _rows(results_root, filters, view, runs)
    if csv:
        frame.to_csv(csv, index=False)
        print(f"{len(frame)} rows written to {csv}", file=sys.stderr)
    if shown.empty:
        print("no catalogued run matches")
        return 0
    with pd.option_context("display.max_rows", None, "display.width", 250, "display.max_colwidth", 90):
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def _rows(results_root: Path, filters: dict, view: View, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of ``view`` (every column, for CSV) and the columns shown; in the runs view, a run's forward
    flows' goodput added up."""
    if view == "latency":
        frame = catalog.latency(results_root, **filters)
        return frame, frame[LATENCY_COLUMNS]
    flows = catalog.flows(results_root, **filters)
    if view == "flows":
        return flows, flows[FLOW_COLUMNS]
    forward = flows[flows["direction"] == "forward"].groupby("run_id")
    runs = runs.set_index("run_id")
    runs["flows"] = flows.groupby("run_id").size()
    runs["goodput_mbit"] = forward["goodput_mbit"].sum(min_count=1)
    shown = runs.reset_index()[list(RUN_COLUMNS)].rename(columns=RUN_COLUMNS)
    return shown, shown


def _report(results_root: Path, runs: pd.DataFrame, out: Path, filters: dict) -> int:
    from testbed.report.pages.sessionpage import write_selection
    from testbed.workflows.sessions import write_report

    if runs.empty:
        print("testbed: no catalogued run matches: nothing to report", file=sys.stderr)
        return 1
    write_report(write_selection(results_root, runs, out, filters))
    return 0
