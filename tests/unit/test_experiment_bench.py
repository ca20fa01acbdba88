"""testbed bench --part experiment: the figures it reads from a session's manifests."""

from __future__ import annotations

from types import SimpleNamespace

from testbed.host.session import SessionResult
from testbed.results import rundir
from testbed.results.manifest import write_manifest
from testbed.workflows.experiment_bench import experiment_figures


def run(session, name: str, wall_s: int, traffic_s: float, phases: dict, trusted: bool):
    directory = session / name / "seed=1"
    directory.mkdir(parents=True)
    write_manifest(
        directory,
        {
            "status": "complete",
            "started_utc": "2026-11-26T10:00:00+00:00",
            "ended_utc": f"2026-11-26T10:{wall_s // 60:02d}:{wall_s % 60:02d}+00:00",
            "timing": {"traffic_s": traffic_s, "phases_s": phases},
            "fidelity": {"trustworthy": trusted},
        },
    )
    return directory


def test_overhead_per_run_and_per_phase_come_from_the_manifests(tmp_path):
    runs = [
        run(tmp_path, "a", 40, 15.0, {"network_up": 5.0, "delay_calibration": 10.0}, True),
        run(tmp_path, "b", 75, 15.0, {"network_up": 9.0, "delay_calibration": 30.0}, False),
        run(tmp_path, "c", 30, 15.0, {"network_up": 3.0, "delay_calibration": 2.0}, True),
    ]
    rundir.write_json_atomic(tmp_path / rundir.SESSION, {"timing": {"guest": {"ready_s": 21.5}, "runs_wall_s": 150}})
    result = SessionResult(tmp_path, runs, {str(r): "complete" for r in runs}, {"kind": "guest"})
    report = SimpleNamespace(verdicts=[])
    figures = experiment_figures(result, report, wall_s=160.0, report_s=4.0)
    assert figures["overhead_per_run_s"] == {"median": 25.0, "max": 60.0, "runs": 3}  # 40-15, 75-15, 30-15
    assert figures["phases_per_run_s"]["delay_calibration"] == {"median": 10.0, "max": 30.0, "runs": 3}
    # what no phase names: 25-15, 60-39, 15-5
    assert figures["phases_per_run_s"]["unaccounted"] == {"median": 10.0, "max": 21.0, "runs": 3}
    assert (figures["complete"], figures["trustworthy"], figures["guest_ready_s"]) == (3, 2, 21.5)
    assert figures["traffic_s"] == 45.0 and figures["status"] == "complete"


def test_a_run_without_a_manifest_counts_as_not_complete(tmp_path):
    (tmp_path / "a" / "seed=1").mkdir(parents=True)
    rundir.write_json_atomic(tmp_path / rundir.SESSION, {})
    result = SessionResult(tmp_path, [tmp_path / "a" / "seed=1"], {}, {"kind": "guest"})
    figures = experiment_figures(result, SimpleNamespace(verdicts=[]), wall_s=1.0, report_s=0.1)
    assert figures["status"] == "not complete" and figures["overhead_per_run_s"]["runs"] == 0


def test_a_run_that_records_its_wall_time_is_timed_to_the_millisecond(tmp_path):
    directory = run(tmp_path, "a", 14, 10.25, {"network_up": 0.5}, True)
    manifest = rundir.read_json(directory / "manifest.json")
    manifest["timing"]["run_wall_s"] = 13.87  # the UTC stamps say 14 s
    write_manifest(directory, manifest)
    rundir.write_json_atomic(tmp_path / rundir.SESSION, {})
    result = SessionResult(tmp_path, [directory], {str(directory): "complete"}, {"kind": "guest"})
    figures = experiment_figures(result, SimpleNamespace(verdicts=[]), wall_s=20.0, report_s=0.1)
    assert figures["overhead_per_run_s"]["median"] == 3.62
