"""``testbed bench --part experiment``: where ``make experiment``'s time goes, and how much of it is trusted.

Runs the default suite as ``make experiment`` does (a new session, the same backend choice, the runs
analysed while it runs: testbed/report/live/ahead.py), writes its report, then reads every run's manifest:

* the session's wall time, the guest's boot to the runner's first line, the report's time (from the
  last run's end: what the analysis ahead had left, then the report);
* per run, its overhead: wall time (``timing.run_wall_s``, or manifest start to end) minus its
  traffic, with the median and the largest over the runs, and the same for every phase the runner
  times (``timing.phases_s``: prepare (topology, modules, tools), network up (0 on a network kept
  from the run before), delay calibration, captures, client start, collection steps with the rate
  checks, teardown); what no phase names (the schedule's lead, the manifest and its file hashes) is
  ``unaccounted``;
* trustworthy runs, and the claims' verdicts the report printed.

Numbers, not assertions: printed and written to ``bench/experiment-<UTC time>.json``.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime
from pathlib import Path

from testbed import PROJECT
from testbed.host.session import SessionResult, run_session
from testbed.report.live.ahead import AheadAnalysis
from testbed.report.pages.sessionpage import SessionReport, write_session_report
from testbed.results import rundir
from testbed.results.manifest import Manifest, read_manifest
from testbed.results.rundir import LoadError
from testbed.scenario.suite import find_suite, load_suite
from testbed.workflows.bench import write_figures

SUITE = "default"


def bench_experiment(kernel_version: str | None = None, out_dir: Path = PROJECT / "bench") -> dict:
    """Run the default suite in a new session and measure it (module doc)."""
    suite = load_suite(find_suite(SUITE, PROJECT / "scenarios" / "suites"), PROJECT / "scenarios")
    started = time.monotonic()
    with AheadAnalysis() as ahead:  # the runs analysed while the session runs: the report finds them cached
        result = run_session(
            suite,
            kernel_version=kernel_version,
            results_root=out_dir / "results",
            force=True,
            observers=[ahead.observer],
        )
        runs_done = time.monotonic()
        ahead.finish()  # counted in the report's time: it is time after the last run
        report = write_session_report(result.directory)
    figures = experiment_figures(
        result, report, wall_s=time.monotonic() - started, report_s=time.monotonic() - runs_done
    )
    return write_figures(out_dir, "experiment", figures)


def experiment_figures(result: SessionResult, report: SessionReport, wall_s: float, report_s: float) -> dict:
    """The figures of one session (module doc) from its manifests, session.json and report."""
    manifests = [_manifest(run) for run in result.runs]
    read = [m for m in manifests if m is not None]
    session = rundir.read_json(result.directory / rundir.SESSION)
    timing = session.get("timing", {})
    complete = sum(m.status == "complete" for m in read)
    trusted = sum(bool(m.fidelity and m.fidelity.trustworthy) for m in read)
    return {
        "status": "complete" if complete == len(result.runs) else "not complete",
        "session": str(result.directory),
        "runs": len(result.runs),
        "complete": complete,
        "trustworthy": trusted,
        "wall_s": round(wall_s, 1),
        "runs_wall_s": timing.get("runs_wall_s"),
        "guest_ready_s": timing.get("guest", {}).get("ready_s"),
        "report_s": round(report_s, 1),
        "traffic_s": round(sum(m.timing.get("traffic_s", 0.0) for m in read), 1),
        "overhead_per_run_s": _spread([o for o in map(_overhead_s, read) if o is not None]),
        "phases_per_run_s": _phase_spreads(read),
        "verdicts": {v.claim.id: v.verdict for v in report.verdicts},
    }


def _manifest(run: Path) -> Manifest | None:
    try:
        return read_manifest(run)
    except LoadError:
        return None


def _overhead_s(manifest: Manifest) -> float | None:
    """A run's wall time beyond its traffic (None when it did not record both ends and its traffic)."""
    if not (manifest.started_utc and manifest.ended_utc and "traffic_s" in manifest.timing):
        return None
    if "run_wall_s" in manifest.timing:
        return manifest.timing["run_wall_s"] - manifest.timing["traffic_s"]
    wall = datetime.fromisoformat(manifest.ended_utc) - datetime.fromisoformat(manifest.started_utc)
    return wall.total_seconds() - manifest.timing["traffic_s"]  # runs made before run_wall_s: whole seconds


def _phase_spreads(manifests: list[Manifest]) -> dict[str, dict]:
    """Median and largest of each timed phase over the runs, and of what no phase accounts for."""
    per_phase: dict[str, list[float]] = {}
    for manifest in manifests:
        phases = manifest.timing.get("phases_s") or {}
        for name, seconds in phases.items():
            per_phase.setdefault(name, []).append(seconds)
        overhead = _overhead_s(manifest)
        if overhead is not None and phases:
            per_phase.setdefault("unaccounted", []).append(overhead - sum(phases.values()))
    return {name: _spread(values) for name, values in per_phase.items()}


def _spread(values: list[float]) -> dict:
    if not values:
        return {"median": None, "max": None, "runs": 0}
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2), "runs": len(values)}
