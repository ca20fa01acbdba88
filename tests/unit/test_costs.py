"""The cost model (testbed/plan/costs.py): what earlier runs of an experiment took on the host, on the same
clock, scales the model's estimate; the runner's time left in virtual time follows it. Session folders
here are written by the test as a session and its runs would write them (simulated data)."""

from __future__ import annotations

from pathlib import Path

from testbed.guest.runner import time_left_s
from testbed.plan import costs
from testbed.plan.plan import PLAN
from testbed.results import rundir


def session(root, name, stamp, clock, runs, timing=None, built=()):
    """A session folder: ``runs`` as (experiment, estimate_s, status, run_wall_s or None); the runs whose
    index is in ``built`` built their network, the others used the one kept from the run before."""
    folder = root / name / f"{stamp}-abc1234"
    entries = []
    for i, (experiment, estimate_s, status, wall_s) in enumerate(runs):
        run_dir = f"{experiment}.p/seed={i}"
        entries.append({"scenario_name": experiment, "run_dir": run_dir, "estimate_s": estimate_s})
        host = {"run_wall_s": wall_s} if wall_s is not None else {}
        manifest = {"status": status, "backend": {"kind": "guest", "clock": clock}, "host": host}
        if built:
            manifest["network"] = {"kept_from_earlier_runs": i not in built}
        rundir.write_json_atomic(folder / run_dir / rundir.MANIFEST, manifest)
    rundir.write_json_atomic(folder / PLAN, {"context": {}, "runs": entries})
    record = {"backend": {"kind": "guest", "clock": clock}, **({"timing": timing} if timing else {})}
    rundir.write_json_atomic(folder / rundir.SESSION, record)
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
        "costs: virtual time measured at busy 3.00x (1 runs); mobile 0.30x (3 runs) of the model's estimate"
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


def test_runs_that_built_their_network_and_a_guests_boot_are_priced_apart(tmp_path):
    # the default suite in virtual time: the first run built the network (15 s), the others used it (5 s)
    runs = [("mobile", 30.0, "complete", 15.0)] + [("mobile", 30.0, "complete", 5.0)] * 4
    one = {"guest": {"ready_s": 15.2, "wall_s": 50.0}}
    packed = {"guest": {"shards": [{"timing": {"ready_s": 16.0}}, {"timing": {"ready_s": 15.9}}, {"error": "x"}]}}
    session(tmp_path, "a", "20261201T000000Z", "virtual", runs, timing=one, built={0})
    session(tmp_path, "b", "20261202T000000Z", "virtual", runs[:2], timing=packed, built={0})
    session(tmp_path, "c", "20261203T000000Z", "real", runs[:1], timing={"guest": {"ready_s": 12.0}}, built={0})
    found = costs.measured(tmp_path, "virtual", {"mobile"})
    assert found.ratios == {"mobile": 0.167} and found.built == {"mobile": 0.5}
    assert found.runs == {"mobile": 5} and found.built_runs == {"mobile": 2}
    assert found.boot_s == 15.9 and found.boots == 3  # the real-time session's boot is not counted
    assert found.cost_s("mobile", 30.0) == 5.0 and found.cost_s("mobile", 30.0, builds=True) == 15.0
    assert found.describe() == (
        "costs: virtual time measured at mobile 0.17x (5 runs), 0.50x building its network (2 runs) of the "
        "model's estimate; a guest's boot 15.9 s (3 guests)"
    )
    only_built = costs.Costs("virtual", built={"x": 0.5}, built_runs={"x": 1})
    assert only_built.cost_s("x", 10.0) == 5.0  # the other kind where only it was measured


def test_a_run_builds_its_network_first_and_after_a_different_one():
    from testbed.scenario.suite import find_suite, load_suite

    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    default = load_suite(find_suite("default", scenarios / "suites"), scenarios).runs()
    assert costs.builds_network(default) == [True] + [False] * (len(default) - 1)  # one path, its seeds and sides
    assert costs.builds_network(default, keep_networks=False) == [True] * len(default)
    tour = load_suite(find_suite("tour", scenarios / "suites"), scenarios).runs()
    names = [run.scenario_name for run in tour]
    changed = [i == 0 or names[i] != names[i - 1] for i in range(len(tour))]
    assert costs.builds_network(tour) == changed
