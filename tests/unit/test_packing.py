"""Packed guests (testbed/host/packing.py): the split, the clock rule, each guest's plan and record, and a
run that failed its checks packed running again alone. The guests here are a stand-in that writes the
manifests a runner would (simulated data); the guest tier boots real ones."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from testbed.host import backends, packing, virtme
from testbed.plan import estimate
from testbed.plan.plan import Plan, PlanContext, PlanRun
from testbed.results.manifest import read_manifest, write_manifest


def plan_of(estimates: list[float]) -> Plan:
    runs = [
        PlanRun(
            scenario_name="s",
            point_id="p",
            params={},
            seed=seed,
            scenario={},
            run_dir=f"p/seed-{seed}",
            estimate_s=estimate_s,
        )
        for seed, estimate_s in enumerate(estimates, 1)
    ]
    return Plan(context=PlanContext(backend={"kind": "guest", "clock": "virtual"}), runs=runs)


def test_the_longest_runs_go_first_to_the_least_loaded_guest_and_each_shard_keeps_the_plans_order():
    plan = plan_of([10, 30, 20, 20, 10])
    split = packing.shards(plan.runs, 2)
    assert [[r.seed for r in shard] for shard in split] == [[1, 2, 5], [3, 4]]
    assert [sum(r.estimate_s for r in shard) for shard in split] == [50, 40]
    assert packing.makespan_s([10, 30, 20, 20, 10], 2) == 50
    assert packing.makespan_s([10, 30, 20, 20, 10], 1) == 90


def test_the_split_weighs_runs_by_their_measured_cost_where_earlier_runs_measured_one():
    # by the model the four runs weigh alike; measured, the first two cost five times the others
    plan = plan_of([20, 20, 20, 20])
    runs = [run.model_copy(update={"cost_s": cost}) for run, cost in zip(plan.runs, [50, 50, 10, None], strict=True)]
    split = packing.shards(runs, 2)
    assert [[r.seed for r in shard] for shard in split] == [[1, 4], [2, 3]]
    assert [sum(r.expected_s for r in shard) for shard in split] == [70, 60]


def test_a_comparisons_shared_runs_are_placed_alike_whether_or_not_its_side_runs_the_controls():
    """The candidate runs the positive control and the baseline does not: the runs both have go to the same
    guests, after the same runs, on both; the controls come last on their guests, wherever the plan has them."""

    def run(point: str, seed: int, estimate_s: float) -> PlanRun:
        return PlanRun(
            scenario_name=point.removesuffix(".control"),
            point_id=point,
            params={},
            seed=seed,
            scenario={},
            run_dir=f"{point}/seed-{seed}",
            estimate_s=estimate_s,
        )

    # one repetition; weighed by the model, the control (its window cut) longer than the upload it repeats
    shared = [run(point, 1, e) for point, e in (("geo", 30), ("wireless", 20), ("upload", 10), ("short", 5))]
    controls = [run("upload.control", 1, 12)]
    candidate = shared[:3] + controls + shared[3:]  # the suite may list its control anywhere
    baseline_split = packing.shards(shared, 2)
    candidate_split = packing.shards(candidate, 2)
    assert [[r.run_dir for r in shard if r in shared] for shard in candidate_split] == [
        [r.run_dir for r in shard] for shard in baseline_split
    ]
    for shard in candidate_split:  # each guest's shared runs first, then its controls
        kinds = [r.point_id.endswith(".control") for r in shard]
        assert kinds == sorted(kinds), [r.run_dir for r in shard]
    assert sum(len(shard) for shard in candidate_split) == len(candidate)


def test_guests_are_packed_only_in_virtual_time_and_at_most_one_per_core():
    assert packing.guests_for(2, "virtual", 2) == (2, "2 guests at once, one per core (virtual time)")
    count, why = packing.guests_for(2, "real", 2)
    assert count == 1 and "only in virtual time" in why and "one guest" in why
    assert packing.guests_for(1, "virtual", 2)[0] == 1
    with pytest.raises(ValueError, match="--guests 3: .* 2 core"):
        packing.guests_for(3, "virtual", 2)


def test_each_guests_plan_lies_in_its_own_folder_and_names_the_runs_beside_it(tmp_path):
    plan = plan_of([10, 10, 10])
    written = packing.shard_plans(plan, tmp_path, 2, [0, 1])
    assert [path.relative_to(tmp_path).as_posix() for path, _ in written] == [
        ".guests/g0/plan.json",
        ".guests/g1/plan.json",
    ]
    first = Plan.read(written[0][0])
    assert [r.run_dir for r in first.runs] == ["p/seed-1", "p/seed-3"]
    assert first.context.backend["packed"] == {"guests": 2, "guest": 0, "core": 0, "beside": ["p/seed-2"]}
    assert first.context.backend["clock"] == "virtual"
    assert Plan.read(written[1][0]).context.backend["packed"]["beside"] == ["p/seed-1", "p/seed-3"]


def test_a_slots_new_plan_leaves_no_done_marker_from_an_earlier_session(tmp_path):
    stale = tmp_path / ".slots" / "s1" / "plan.done"
    stale.parent.mkdir(parents=True)
    stale.write_text("0\n")  # an earlier attempt's slot 1, all complete
    written = packing.side_by_side_plans(plan_of([10, 10, 10]), tmp_path, 2)
    assert [path.parent.name for path, _ in written] == ["s0", "s1"]
    assert not stale.exists()  # else a slot 1 whose runner dies now would read as complete


def test_a_side_by_side_runs_manifest_names_the_other_slots_runs_going_on_at_the_same_time(tmp_path):
    spans = {"a": ("00:00", "00:10"), "b": ("00:10", "00:20"), "c": ("00:05", "00:10"), "d": ("00:12", "00:20")}
    for run, (start, end) in spans.items():
        manifest = {"status": "complete", "backend": {"side_by_side": {"runs_at_once": 2, "beside": []}}}
        manifest |= {"started_utc": f"2026-12-05T06:{start}+00:00", "ended_utc": f"2026-12-05T06:{end}+00:00"}
        (tmp_path / run).mkdir()
        (tmp_path / run / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "e").mkdir()  # a run that left no manifest: passed over
    packing.name_overlaps(tmp_path, [["a", "b"], ["c", "d", "e"]])
    records = {run: read_manifest(tmp_path / run).backend.model_dump()["side_by_side"] for run in spans}
    overlapped = {run: record["overlapped"] for run, record in records.items()}
    # c ends in the second b starts: one after the other, not at once
    assert overlapped == {"a": ["c"], "b": ["d"], "c": ["a"], "d": ["b"]}


def test_a_plan_smaller_than_the_guests_boots_no_idle_guest(tmp_path):
    written = packing.shard_plans(plan_of([10]), tmp_path, 2, [0, 1])
    assert len(written) == 1
    assert Plan.read(written[0][0]).context.backend["packed"] == {"guests": 1, "guest": 0, "core": 0, "beside": []}


def needs_two_cores() -> list[int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("this process may use one core: two guests cannot be packed here (the split is tested above)")
    return cores


class StandInGuests:
    """Writes each plan's manifests as a runner would: seed 2 fails its checks when packed, and every run
    is trustworthy when it runs alone; records each guest's core."""

    def __init__(self, session):
        self.session, self.cores, self.plans = session, {}, []
        self.lock = threading.Lock()

    def __call__(self, plan_path, console, budget_s, name):
        plan = Plan.read(plan_path)
        packed = plan.context.backend["packed"]
        assert name == plan_path.parent.name  # the name its lines are shown with: g0, g1, alone
        with self.lock:
            self.plans.append(plan_path.parent.name)
            self.cores[plan_path.parent.name] = os.sched_getaffinity(0)
        for run in plan.runs:
            bad = packed["guests"] > 1 and run.seed == 2
            fidelity = {"trustworthy": not bad, "problems": ["cpu headroom: 97 % busy"] if bad else []}
            manifest = {"status": "complete", "seed": run.seed, "backend": plan.context.backend, "fidelity": fidelity}
            (self.session / run.run_dir).mkdir(parents=True, exist_ok=True)
            write_manifest(self.session / run.run_dir, manifest)
        console.write_text("console\n")
        return {"wall_s": 1.0, "not_complete": 0}


def test_a_run_that_failed_its_checks_packed_runs_again_alone_and_the_record_says_so(tmp_path):
    cores = needs_two_cores()
    guests = StandInGuests(tmp_path)
    record = packing.run_packed(plan_of([10, 10, 10]), tmp_path, 2, guests, log=lambda _: None)
    # each packed guest on a core of its own; the run alone on this process's cores, pinned to none
    assert guests.cores == {"g0": {cores[0]}, "g1": {cores[1]}, "alone": set(os.sched_getaffinity(0))}
    assert record["rerun_alone"] == {"p/seed-2": "fidelity checks failed when packed: cpu headroom: 97 % busy"}
    again = read_manifest(tmp_path / "p/seed-2")
    assert again.fidelity.trustworthy is True
    assert again.backend.model_dump()["packed"] == {"guests": 1, "alone_after": "packed"}
    assert read_manifest(tmp_path / "p/seed-1").backend.model_dump()["packed"]["guests"] == 2
    attempts = list((tmp_path / ".attempts" / "p").iterdir())
    assert [a.name.split("-2026")[0][:6] for a in attempts] == ["seed-2"]
    assert json.loads((tmp_path / packing.PACKING_JSON).read_text())["rerun_alone"] == record["rerun_alone"]
    assert (tmp_path / "guest-console-g0.log").exists() and (tmp_path / "guest-console-alone.log").exists()


def test_a_guest_that_failed_leaves_its_runs_to_run_again_alone(tmp_path):
    calls = []

    def boot_one(plan_path, console, budget_s, name):
        plan = Plan.read(plan_path)
        calls.append(plan_path.parent.name)
        if plan_path.parent.name == "g1":
            raise virtme.GuestBootError("the guest did not boot")
        for run in plan.runs:
            (tmp_path / run.run_dir).mkdir(parents=True, exist_ok=True)
            write_manifest(tmp_path / run.run_dir, {"status": "complete", "fidelity": {"trustworthy": True}})
        return {"wall_s": 1.0}

    needs_two_cores()
    record = packing.run_packed(plan_of([10, 10]), tmp_path, 2, boot_one, log=lambda _: None)
    assert record["shards"][1]["error"] == "GuestBootError: the guest did not boot"
    assert record["rerun_alone"] == {"p/seed-2": "missing when packed"}
    assert calls[-1] == "alone" and read_manifest(tmp_path / "p/seed-2").status == "complete"


def test_each_packed_guests_lines_are_shown_with_its_name():
    shown, given = [], {}

    def boot(**kwargs):
        given.update(kwargs)
        kwargs["log"]("run 1/5: mobile-bernoulli seed=4 (ETA 2.6 min)")
        return {"wall_s": 1.0}

    one = backends.GuestBackend._boot_one(boot, shown.append)
    one(Path("g1/plan.json"), Path("guest-console-g1.log"), 30.0, "g1")
    assert shown == ["g1: run 1/5: mobile-bernoulli seed=4 (ETA 2.6 min)"]
    assert given["console"] == Path("guest-console-g1.log") and given["total_s"] == 30.0 + estimate.GUEST_BOOT_S


def test_packing_is_refused_where_it_cannot_pack():
    with pytest.raises(ValueError, match="--guests 2 packs virtme-ng guests"):
        backends.create("local", guests=2)


def test_a_packed_guests_runner_is_told_the_session_folder(tmp_path):
    command = virtme._runner_command([tmp_path / ".guests" / "g0" / "plan.json"], tmp_path)
    assert command.endswith(f".guests/g0/plan.json --session {tmp_path}")
    assert "--session" not in virtme._runner_command([tmp_path / "plan.json"])
