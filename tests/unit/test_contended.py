"""Runs the host took the CPU from run once more (testbed.host.contended): which ones, once only, their first
attempts kept, and what their manifests say. The guest here is a stand-in that writes the manifests a runner
would (simulated data); the netns tier runs a contended local run for real, and the guest tier a hogged one."""

from __future__ import annotations

import json

from testbed.host import contended
from testbed.plan.plan import Plan
from testbed.results.manifest import read_manifest, write_manifest
from testbed.workflows import compare
from tests.unit.test_packing import plan_of

QUIET = {"name": "host contention", "ok": True, "detail": "the host's 2 CPUs busy 40 %"}
STOLEN = {"name": "host contention", "ok": False, "detail": "the hypervisor stole 17 % of the CPU time"}
HEADROOM = {"name": "cpu headroom", "ok": False, "detail": "96 % busy"}


def _write(session, run, checks, status="complete", backend=None):
    (session / run.run_dir).mkdir(parents=True, exist_ok=True)
    fidelity = {"trustworthy": all(c["ok"] for c in checks), "checks": checks}
    write_manifest(
        session / run.run_dir, {"status": status, "seed": run.seed, "fidelity": fidelity, "backend": backend or {}}
    )


def _first_attempts(session, plan, checks_by_seed, status_by_seed=None):
    for run in plan.runs:
        _write(session, run, checks_by_seed.get(run.seed, [QUIET]), (status_by_seed or {}).get(run.seed, "complete"))


def _quiet_guest(session, booted):
    def boot_one(plan_path, console, budget_s, name):
        plan = Plan.read(plan_path)
        booted.append((name, [run.run_dir for run in plan.runs], budget_s))
        for run in plan.runs:
            _write(session, run, [QUIET], backend=plan.context.backend)
        return {"wall_s": 1.0}

    return boot_one


def test_only_complete_runs_whose_host_check_failed_run_again_with_its_words(tmp_path):
    plan = plan_of([10, 20, 30, 40])
    # seed 2: stolen, and its CPU headroom failed with it; 3: only its own CPU; 4: stolen but never completed
    _first_attempts(tmp_path, plan, {2: [STOLEN, HEADROOM], 3: [QUIET, HEADROOM], 4: [STOLEN]}, {4: "failed"})
    assert contended.contended(tmp_path, plan) == {"p/seed-2": STOLEN["detail"]}
    assert contended.contended(tmp_path, plan, skip=frozenset({"p/seed-2"})) == {}


def test_a_contended_run_runs_once_more_alone_its_first_attempt_kept(tmp_path):
    plan, booted, lines = plan_of([10, 20, 30]), [], []
    _first_attempts(tmp_path, plan, {1: [STOLEN], 3: [STOLEN]})
    record = contended.run_again(plan, tmp_path, _quiet_guest(tmp_path, booted), lines.append)
    assert booted == [("again", ["p/seed-1", "p/seed-3"], 40)]  # one guest for both, named as the bar reads it
    assert record["runs"] == {"p/seed-1": STOLEN["detail"], "p/seed-3": STOLEN["detail"]}
    (first,) = (tmp_path / ".attempts" / "p").glob("seed-1-*")
    assert json.loads((first / "manifest.json").read_text())["fidelity"]["trustworthy"] is False
    again = read_manifest(tmp_path / "p/seed-1")
    assert again.fidelity.trustworthy is True
    assert again.backend.model_dump()["run_again"] == contended.RUN_AGAIN["run_again"]
    assert read_manifest(tmp_path / "p/seed-2").backend.model_dump().get("run_again") is None  # never moved
    # the check's words were said as each run was judged (testbed.host.hostload.HostWatch): named, not repeated
    assert lines and lines[0] == "host contention: 2 run(s) alone: p/seed-1, p/seed-3 (why: above)"


def test_a_quiet_session_boots_nothing_more(tmp_path):
    plan, booted = plan_of([10, 20]), []
    _first_attempts(tmp_path, plan, {})
    assert contended.run_again(plan, tmp_path, _quiet_guest(tmp_path, booted), print) is None
    assert booted == [] and not (tmp_path / ".attempts").exists()


def test_a_run_already_run_twice_is_not_run_a_third_time(tmp_path):
    plan, booted = plan_of([10, 20]), []
    _first_attempts(tmp_path, plan, {1: [STOLEN], 2: [STOLEN]})
    record = contended.run_again(plan, tmp_path, _quiet_guest(tmp_path, booted), print, frozenset({"p/seed-1"}))
    assert list(record["runs"]) == ["p/seed-2"]
    assert booted[0][1] == ["p/seed-2"]


def test_a_comparison_counts_a_run_by_its_last_attempt_not_the_one_set_aside(tmp_path):
    plan = plan_of([10])
    _write(tmp_path, plan.runs[0], [QUIET])
    aside = tmp_path / ".attempts" / "p" / "seed-1-20261203T000000Z"
    aside.mkdir(parents=True)
    write_manifest(aside, {"status": "failed", "reason": "insmod: File exists"})
    assert compare.completed_runs(tmp_path) == (1, [])


def test_a_guest_that_fails_to_run_them_again_leaves_their_first_attempts_as_they_were(tmp_path):
    plan = plan_of([10, 20])
    _first_attempts(tmp_path, plan, {1: [STOLEN], 2: [STOLEN]})

    def failing(plan_path, console, budget_s, name):  # runs seed 1 again, then its guest stops
        run = Plan.read(plan_path).runs[0]
        _write(tmp_path, run, [QUIET])
        (tmp_path / "p/seed-2").mkdir()
        raise RuntimeError("the guest stopped responding")

    record = contended.run_again(plan, tmp_path, failing, print)
    assert record["error"] == "RuntimeError: the guest stopped responding"
    assert read_manifest(tmp_path / "p/seed-1").fidelity.trustworthy is True  # its second attempt, complete
    second = read_manifest(tmp_path / "p/seed-2")  # its first attempt, back
    assert second.status == "complete" and second.fidelity.checks == [STOLEN]
    (failed,) = (tmp_path / ".attempts" / "p").glob("seed-2-*" + contended.FAILED_AGAIN)
    assert not (failed / "manifest.json").exists()


def test_only_runs_that_ran_in_a_slot_and_then_alone_have_had_their_second_attempt():
    record = {
        "slots": [{"slot": 0, "runs": ["p/seed-1", "p/seed-2"]}, {"slot": 1, "runs": ["p/seed-3"]}],
        "rerun_alone": {"p/seed-2": "fidelity checks failed when side by side", "p/seed-4": "not admitted"},
    }
    assert contended.twice(record) == {"p/seed-2"}
    assert contended.twice({"slots": [], "rerun_alone": {"p/seed-1": "nothing admitted beside it"}}) == frozenset()
