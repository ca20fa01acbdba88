"""The cost model (testbed/plan/costs.py): what earlier runs of an experiment took on the host, on the same
clock, scales the model's estimate; the runner's time left in virtual time follows it. Session folders
here are written by the test as a session and its runs would write them (simulated data)."""

from __future__ import annotations

from testbed.guest.runner import time_left_s
from testbed.plan import costs
from testbed.plan.plan import PLAN
from testbed.results import rundir


def session(root, name, stamp, clock, runs):
    """A session folder: ``runs`` as (experiment, estimate_s, status, run_wall_s or None)."""
    folder = root / name / f"{stamp}-abc1234"
    entries = []
    for i, (experiment, estimate_s, status, wall_s) in enumerate(runs):
        run_dir = f"{experiment}.p/seed={i}"
        entries.append({"scenario_name": experiment, "run_dir": run_dir, "estimate_s": estimate_s})
        host = {"run_wall_s": wall_s} if wall_s is not None else {}
        manifest = {"status": status, "backend": {"kind": "guest", "clock": clock}, "host": host}
        rundir.write_json_atomic(folder / run_dir / rundir.MANIFEST, manifest)
    rundir.write_json_atomic(folder / PLAN, {"context": {}, "runs": entries})
    rundir.write_json_atomic(folder / rundir.SESSION, {"backend": {"kind": "guest", "clock": clock}})
    return folder


def test_the_median_measured_ratio_per_experiment_and_clock_scales_the_model(tmp_path):
    session(
        tmp_path,
        "suite-a",
        "20261201T000000Z",
        "virtual",
        [
            ("mobile", 30.0, "complete", 6.0),
            ("mobile", 30.0, "complete", 9.0),
            ("mobile", 30.0, "failed", 90.0),  # a failed run says nothing of what a run costs
            ("busy", 20.0, "complete", 60.0),
            ("busy", 20.0, "complete", None),  # written before the host measured runs
        ],
    )
    session(tmp_path, "suite-b", "20261202T000000Z", "virtual", [("mobile", 30.0, "complete", 12.0)])
    session(tmp_path, "suite-a", "20261203T000000Z", "real", [("mobile", 30.0, "complete", 33.0)])
    found = costs.measured(tmp_path, "virtual", {"mobile", "busy", "never"})
    assert found.ratios == {"mobile": 0.3, "busy": 3.0} and found.runs == {"mobile": 3, "busy": 1}
    assert found.cost_s("mobile", 40.0) == 12.0 and found.cost_s("busy", 10.0) == 30.0
    assert found.cost_s("never", 40.0) is None  # never measured on this clock: the model stands
    assert found.describe() == (
        "costs: virtual time measured at busy 3.00x (1 runs), mobile 0.30x (3 runs) of the model's estimate"
    )
    real = costs.measured(tmp_path, "real", {"mobile"})
    assert real.ratios == {"mobile": 1.1}


def test_nothing_measured_or_nothing_readable_leaves_the_model(tmp_path):
    assert costs.measured(tmp_path / "missing", "virtual", {"mobile"}).ratios == {}
    folder = session(tmp_path, "s", "20261201T000000Z", "virtual", [("mobile", 30.0, "complete", 6.0)])
    (folder / PLAN).write_text("{not json")
    escaping = session(tmp_path, "t", "20261202T000000Z", "virtual", [])
    outside = {"scenario_name": "mobile", "run_dir": "../s", "estimate_s": 1}  # a plan pointing out of its session
    rundir.write_json_atomic(escaping / PLAN, {"runs": [outside]})
    found = costs.measured(tmp_path, "virtual", {"mobile"})
    assert found.ratios == {}
    assert found.describe() == "costs: no earlier virtual-time run measured here; the estimate is the model's"


def test_the_newest_runs_decide_and_the_scan_stops_once_each_experiment_has_enough(tmp_path, monkeypatch):
    monkeypatch.setattr(costs, "RECENT_RUNS", 2)
    session(tmp_path, "s", "20261201T000000Z", "virtual", [("mobile", 10.0, "complete", 50.0)] * 2)
    session(tmp_path, "s", "20261202T000000Z", "virtual", [("mobile", 10.0, "complete", 2.0)] * 2)
    assert costs.measured(tmp_path, "virtual", {"mobile"}).ratios == {"mobile": 0.2}


def test_a_virtual_time_runner_counts_down_the_measured_costs_a_real_time_one_its_own_pace():
    # 100 s expected, 40 done in 20 s of the runner's clock
    assert time_left_s(100.0, 40.0, 20.0, "real") == 30.0
    assert time_left_s(100.0, 40.0, 20.0, "virtual") == 60.0  # the guest's clock cannot see the host's pace
    assert time_left_s(100.0, 0.0, 0.0, "real") == 100.0


def test_each_experiments_speed_is_its_traffic_over_the_hosts_wall_time_for_its_runs():
    from testbed.workflows.equivalence import run_speeds

    def manifest(experiment, status, wall_s, duration_s=25):
        host = {"run_wall_s": wall_s} if wall_s else {}
        return {"scenario": experiment, "status": status, "host": host, "resolved": {"duration_s": duration_s}}

    manifests = [
        manifest("mobile", "complete", 5.0),
        manifest("mobile", "complete", 7.5),
        manifest("mobile", "failed", 100.0),  # not counted: what it cost says nothing of a run
        manifest("busy", "complete", 30.0, duration_s=15),
        manifest("busy", "complete", None),  # the host did not time it
    ]
    assert run_speeds(manifests) == {"busy": 0.5, "mobile": 4.0}


def test_an_oversized_or_linked_manifest_is_not_read(tmp_path, monkeypatch):
    folder = session(tmp_path, "s", "20261201T000000Z", "virtual", [("mobile", 30.0, "complete", 6.0)] * 2)
    big = folder / "mobile.p/seed=0" / rundir.MANIFEST
    elsewhere = tmp_path / "elsewhere.json"
    rundir.write_json_atomic(
        elsewhere, {"status": "complete", "backend": {"clock": "virtual"}, "host": {"run_wall_s": 3}}
    )
    linked = folder / "mobile.p/seed=1" / rundir.MANIFEST
    linked.unlink()
    linked.symlink_to(elsewhere)
    assert costs.measured(tmp_path, "virtual", {"mobile"}).ratios == {"mobile": 0.2}  # seed 0 alone
    manifest = rundir.read_json(big)
    rundir.write_json_atomic(big, {**manifest, "padding": "x" * 10_000})
    monkeypatch.setattr(costs, "MAX_FILE_BYTES", 5_000)  # the session's plan and record still fit
    assert costs.measured(tmp_path, "virtual", {"mobile"}).ratios == {}
    monkeypatch.setattr(costs, "MAX_FILE_BYTES", 20_000)
    assert costs.measured(tmp_path, "virtual", {"mobile"}).ratios == {"mobile": 0.2}
