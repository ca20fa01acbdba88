"""Runs side by side on one kernel: each slot's plan and record, its ports and tracing instances, its lines,
a cleanup that spares another live runner, and a run that failed its checks beside others running again
alone. The slots here are a stand-in that writes the manifests a runner would (simulated data); the netns
tier runs real ones on the host kernel."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from analysis.verdicts import equivalence
from testbed.cli.options import slot_count
from testbed.guest import capture, kernellock, network
from testbed.host import backends, packing, slotchoice, timebase
from testbed.plan import costs, progress
from testbed.plan.connections import AUTO_SLOTS, CLIENT_PORT_BASE, SERVER_PORT_BASE, SLOT_PORTS, plan_connections
from testbed.plan.plan import PLAN, Plan
from testbed.results import rundir
from testbed.results.manifest import read_manifest, write_manifest
from testbed.scenario.load import load_scenario_text
from testbed.workflows import equivalence as equivalence_workflow
from tests.conftest import PROJECT
from tests.unit.test_packing import plan_of
from tests.unit.test_timebase import twins
from topologies import Dumbbell


def test_each_slots_plan_lies_in_its_own_folder_and_names_the_runs_beside_it(tmp_path):
    written = packing.side_by_side_plans(plan_of([10, 10, 10]), tmp_path, 2)
    assert [path.relative_to(tmp_path).as_posix() for path, _ in written] == [
        ".slots/s0/plan.json",
        ".slots/s1/plan.json",
    ]
    first, second = (Plan.read(path) for path, _ in written)
    assert first.context.backend["side_by_side"] == {"runs_at_once": 2, "slot": 0, "beside": ["p/seed-2"]}
    assert second.context.backend["side_by_side"]["beside"] == ["p/seed-1", "p/seed-3"]
    assert "packed" not in first.context.backend


def test_a_run_that_failed_its_checks_beside_others_runs_again_alone(tmp_path):
    seen = []

    def slots(plan_paths):
        for path in plan_paths:
            plan = Plan.read(path)
            seen.append(path.parent.name)
            for run in plan.runs:
                bad = run.seed == 2
                fidelity = {"trustworthy": not bad, "problems": ["cpu headroom: 96 % busy"] if bad else []}
                _write(tmp_path, run, {"status": "complete", "backend": plan.context.backend, "fidelity": fidelity})
        return {"wall_s": 1.0}

    def alone(plan_path, console, budget_s, name):
        plan = Plan.read(plan_path)
        seen.append(name)
        for run in plan.runs:
            manifest = {"status": "complete", "backend": plan.context.backend, "fidelity": {"trustworthy": True}}
            _write(tmp_path, run, manifest)
        return {}

    record = packing.run_side_by_side(plan_of([10, 10, 10]), tmp_path, 2, slots, alone, log=lambda _: None)
    assert seen == ["s0", "s1", "alone"]
    assert record["rerun_alone"] == {"p/seed-2": "fidelity checks failed when side by side: cpu headroom: 96 % busy"}
    assert read_manifest(tmp_path / "p/seed-2").backend.model_dump()["side_by_side"] == {
        "runs_at_once": 1,
        "alone_in": "side by side",
    }
    assert read_manifest(tmp_path / "p/seed-1").backend.model_dump()["side_by_side"]["runs_at_once"] == 2
    assert json.loads((tmp_path / packing.PACKING_JSON).read_text())["slots"][1]["runs"] == ["p/seed-2"]


def _write(session, run, manifest):
    (session / run.run_dir).mkdir(parents=True, exist_ok=True)
    write_manifest(session / run.run_dir, {**manifest, "seed": run.seed})


def test_each_slots_lines_reach_that_slots_follower_without_its_name():
    heard = {0: [], 1: []}
    on_line = packing.by_slot([lambda text, now, k=k: heard[k].append(text) for k in (0, 1)])
    for text in ("s1: run 1/2: s seed=2", "s0: run 1/1: s seed=1", "run 1/3: not a slot's", "s7: no such slot"):
        on_line(text, 0.0)
    assert heard == {0: ["run 1/1: s seed=1"], 1: ["run 1/2: s seed=2"]}
    assert progress.slot_of(progress.slot_line(3, "traffic window begins")) == (3, "traffic window begins")
    assert progress.slot_of("run 1/3: s seed=1") is None


SCENARIO = """
topology: {name: dumbbell, bottleneck: {rate_mbit: 2, queue_pkts: 40}}
flows:
  - {cc: westwood, rtt_ms: 50, count: 3}
duration_s: 8
"""


def test_each_slot_takes_a_block_of_ports_of_its_own():
    (point,) = load_scenario_text(SCENARIO, name="t").points
    topology = Dumbbell.from_scenario(point.scenario)
    alone = plan_connections(point.scenario, topology)
    assert [c.client_port for c in alone] == [CLIENT_PORT_BASE, CLIENT_PORT_BASE + 1, CLIENT_PORT_BASE + 2]
    ports = [{(c.client_port, c.server_port) for c in plan_connections(point.scenario, topology, k)} for k in (0, 1)]
    assert not ports[0] & ports[1]
    assert min(ports[1]) == (CLIENT_PORT_BASE + SLOT_PORTS, SERVER_PORT_BASE + SLOT_PORTS)
    # the tracing filters are port ranges: one slot's range holds none of another's ports
    assert max(p for p, _ in ports[0]) < min(p for p, _ in ports[1])
    with pytest.raises(ValueError, match="slot 4: at most 4 runs side by side"):
        plan_connections(point.scenario, topology, 4)


def test_each_slot_traces_into_instances_of_its_own():
    try:
        capture.use_slot(1)
        assert capture.own_instance(capture.INSTANCE) == "cc-testbed-s1"
        assert capture.own_instance(capture.MODULE_INSTANCE) == "cc-testbed-module-s1"
    finally:
        capture.use_slot(None)
    assert capture.own_instance(capture.INSTANCE) == "cc-testbed"
    assert {"cc-testbed", "cc-testbed-s1", "cc-testbed-module-s3"} <= set(capture.INSTANCES)


def test_a_cleanup_spares_the_runs_of_another_live_runner_only():
    other = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        now_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        assert network._other_live_runner(f"{other.pid}-{now_ns}")  # a runner beside this one
        assert not network._other_live_runner(f"{other.pid}-{now_ns - 3_600_000_000_000}")  # its pid, reused since
        assert not network._other_live_runner(f"{os.getpid()}-{now_ns}")  # this runner's own earlier run
        assert not network._other_live_runner("shell-p-1") and not network._other_live_runner(None)
    finally:
        other.kill()
        other.wait()
    assert not network._other_live_runner(f"{other.pid}-{now_ns}")  # its runner gone: leftovers
    assert network.run_id().startswith(f"{os.getpid()}-")


def test_runs_side_by_side_need_a_guest_or_the_local_kernel():
    with pytest.raises(ValueError, match=r"--side-by-side 2 runs side by side in a guest \(--backend guest\) or on"):
        backends.create("vagrant", side_by_side=2)
    assert backends.create("local", side_by_side=2).at_once == 2
    assert backends.create("guest", side_by_side=2).at_once == 2


def test_a_guest_follows_each_slots_runs_and_is_hung_only_when_a_slot_with_runs_left_is_late():
    from testbed.guest.runner import run_budget_s
    from testbed.host.remote import HANG_MARGIN_S, SlotsProgress

    slots = SlotsProgress([[10.0], [10.0, 10.0]], started=0.0, start_timeout_s=60.0)
    slots.line("s0: run 1/1: s p seed=1 (ETA 0.2 min)", 70.0)
    slots.line("s1: run 1/2: s p seed=2 (ETA 0.3 min)", 70.0)
    slots.line("s0: run 1/1 complete", 80.0)  # slot 0 is done: never late
    slots.line("s1: run 1/2 complete", 80.0)
    slots.line("s1: run 2/2: s p seed=3 (ETA 0.2 min)", 81.0)
    assert not slots.overdue(81.0 + run_budget_s(10.0) + HANG_MARGIN_S - 1)
    assert slots.overdue(81.0 + run_budget_s(10.0) + HANG_MARGIN_S + 1)
    assert slots.done == {0}


def test_each_experiments_cpu_is_measured_from_its_runs_alone_only(tmp_path):
    folder = tmp_path / "suite" / "20261203T000000Z-abc1234"
    entries = []
    for i, (busy, at_once) in enumerate([(6.0, None), (10.0, 1), (40.0, 2)]):
        run_dir = f"mobile.p/seed={i}"
        entries.append({"scenario_name": "mobile", "run_dir": run_dir, "estimate_s": 30.0})
        backend = {"kind": "guest", "clock": "real", **({"side_by_side": {"runs_at_once": at_once}} if at_once else {})}
        checks = [{"name": "cpu headroom", "ok": True, "measured": busy, "expected": 90.0}]
        manifest = {
            "status": "complete",
            "backend": backend,
            "host": {"run_wall_s": 35.0},
            "fidelity": {"checks": checks},
        }
        rundir.write_json_atomic(folder / run_dir / rundir.MANIFEST, manifest)
    rundir.write_json_atomic(folder / PLAN, {"context": {}, "runs": entries})
    rundir.write_json_atomic(folder / rundir.SESSION, {"backend": {"kind": "guest", "clock": "real"}})
    # the run beside another (40 %) measured the two together: not this experiment's own CPU
    assert costs.measured(tmp_path, "real", {"mobile"}).busy_pct == {"mobile": 8.0}


def test_runs_too_busy_to_share_the_guest_run_alone_and_unmeasured_ones_are_admitted(tmp_path):
    plan = plan_of([10, 10, 10, 10])
    runs = [
        run.model_copy(update={"busy_pct": busy}) for run, busy in zip(plan.runs, [6.0, 30.0, None, 6.0], strict=True)
    ]
    chosen, alone = packing.admitted(runs, 2)
    assert [run.seed for run in chosen] == [1, 3, 4]
    assert alone == {
        "p/seed-2": "s kept its guest's CPU 30 % busy alone; 2 at once would need 60 % (admitted up to 50 %)"
    }
    seen = []

    def slots(plan_paths):
        seen.extend(run.run_dir for path in plan_paths for run in Plan.read(path).runs)
        for path in plan_paths:
            for run in Plan.read(path).runs:
                _write(tmp_path, run, {"status": "complete", "fidelity": {"trustworthy": True}})
        return {}

    def alone_boot(plan_path, console, budget_s, name):
        seen.append(("alone", [run.run_dir for run in Plan.read(plan_path).runs]))
        return {}

    record = packing.run_side_by_side(plan.with_runs(runs), tmp_path, 2, slots, alone_boot, log=lambda _: None)
    assert sorted(seen[:3]) == ["p/seed-1", "p/seed-3", "p/seed-4"] and seen[3] == ("alone", ["p/seed-2"])
    assert record["not_admitted"] == alone and record["rerun_alone"] == {}


TCG2 = {"accel": "tcg", "vcpus": 2}


def test_auto_runs_side_by_side_only_what_was_shown_equivalent_so_on_such_a_guest():
    table = {
        "mobile-bernoulli": {"equivalent": True, "slots": 2, "guest": TCG2},
        "rtt-fairness": {"equivalent": False, "slots": 2, "guest": TCG2},
        "multipath": {"equivalent": True, "slots": 3, "guest": TCG2},
    }
    chosen = slotchoice.choose(AUTO_SLOTS, {"mobile-bernoulli"}, {**TCG2, "clock": "real", "memory": "2G"}, table)
    assert (chosen.count, chosen.alone) == (2, {})
    assert slotchoice.choose(3, {"rtt-fairness"}, {**TCG2, "clock": "virtual"}, table).count == 3  # asked for
    alone = {
        "bufferbloat not yet measured": ({"bufferbloat"}, TCG2),
        "rtt-fairness not shown equivalent": ({"rtt-fairness"}, TCG2),
        "another guest": ({"mobile-bernoulli"}, {"accel": "kvm", "vcpus": 2}),
        "virtual time runs one": ({"mobile-bernoulli"}, {**TCG2, "clock": "virtual"}),
    }
    for why, (experiments, guest) in alone.items():
        chosen = slotchoice.choose(AUTO_SLOTS, experiments, guest, table)
        assert chosen.count == 1 and why in chosen.why, chosen.why
    # a session of several experiments: those shown go side by side, the others' runs alone after them
    mixed = slotchoice.choose(AUTO_SLOTS, {"mobile-bernoulli", "rtt-fairness", "multipath", "x"}, TCG2, table)
    assert mixed.count == 2 and sorted(mixed.alone) == ["multipath", "rtt-fairness", "x"]
    assert mixed.alone["multipath"] == "shown at 3 at once, not 2" and "run alone after them" in mixed.why
    runs = plan_of([10, 10, 10]).runs
    runs[1] = runs[1].model_copy(update={"scenario_name": "rtt-fairness"})
    together, why = packing.admitted(runs, 2, mixed.alone)
    assert [r.run_dir for r in together] == [runs[0].run_dir, runs[2].run_dir]
    assert why == {runs[1].run_dir: "rtt-fairness not shown equivalent side by side"}


def test_the_option_takes_auto_by_default_or_a_count_and_says_what_is_valid():
    from testbed.cli.options import run_options

    parser = argparse.ArgumentParser()
    run_options(parser)
    assert parser.parse_args([]).side_by_side == AUTO_SLOTS
    assert parser.parse_args(["--side-by-side", "auto"]).side_by_side == AUTO_SLOTS
    assert parser.parse_args(["--side-by-side", "2"]).side_by_side == 2
    with pytest.raises(argparse.ArgumentTypeError, match="give auto or 1 to 4"):
        slot_count("0")
    assert backends.LocalBackend(side_by_side=AUTO_SLOTS).at_once == 1  # measured in a guest only


def test_recording_side_by_side_writes_the_file_auto_then_reads(tmp_path):
    path = tmp_path / "side-by-side.yaml"
    path.write_text("# header kept\nexperiments: {}\n")
    results = [equivalence.compare(*twins(0.0, 0.001, 6, np.random.default_rng(5)), "mobile-bernoulli")]
    alone = equivalence_workflow.AnalysedSession(tmp_path / "a", "real", 100.0, 50.0, machine=TCG2)
    beside = equivalence_workflow.AnalysedSession(tmp_path / "s", "real", 60.0, 50.0, slots=2, machine=TCG2)
    assert equivalence_workflow.record(alone, beside, results, path) == path
    table = timebase.equivalence(path)
    assert path.read_text().startswith("# header kept\n")
    assert table["mobile-bernoulli"]["slots"] == 2 and table["mobile-bernoulli"]["guest"] == TCG2
    assert slotchoice.choose(AUTO_SLOTS, {"mobile-bernoulli"}, TCG2, table).count == 2
    assert "2 side by side in real time against alone" in equivalence_workflow.text(alone, beside, results)
    with pytest.raises(ValueError, match="the reference ran 2 side by side"):
        equivalence_workflow.record(beside, alone, results, path)


def test_one_process_at_a_time_loads_modules_into_the_kernel():
    """Two slots' first runs once inserted our module at once, and the second insmod failed ("File exists")."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from testbed.guest import kernellock\n"
            "with kernellock.loading_modules():\n    print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with open(kernellock.lock_path("modules"), "a+") as handle, pytest.raises(BlockingIOError):
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    with kernellock.loading_modules():  # free again once its holder is gone, however it went
        pass


def test_a_mixed_sessions_estimate_runs_the_experiments_not_shown_so_alone_after_the_slots_in_a_second_guest():
    guest = backends.GuestBackend(side_by_side=2)
    guest.alone_experiments = {"multipath": "not shown equivalent side by side"}
    names = ["mobile-bernoulli"] * 4 + ["multipath"] * 2
    # four 30 s runs two at a time (60 s), then two 20 s runs alone (40 s), and two boots of 10 s
    assert guest.wall_s([30, 30, 30, 30, 20, 20], 10, names) == pytest.approx(60 + 40 + 20)
    assert guest.wall_s([30, 30, 30, 30], 10, names[:4]) == pytest.approx(60 + 10)  # none apart: one boot
    assert guest.wall_s([20, 20], 10, names[4:]) == pytest.approx(40 + 10)  # all apart: one boot
    assert guest.wall_s([30, 20, 20], 10, names[3:]) == pytest.approx(70 + 10)  # one admitted runs with them
    guest.side_by_side = 1  # one at a time: nothing is apart
    assert guest.wall_s([30, 30, 30, 30, 20, 20], 10, names) == pytest.approx(160 + 10)
