"""The comparison core (testbed/workflows/compare.py): a killed comparison resumes in its folder without
running its complete sub-sessions again, and a new one starts when asked or when anything differs.

``run_session`` is replaced by one that records what it was asked to run and writes a complete run's
manifest (the schedule's bookkeeping is under test here; the guest tier runs real series)."""

from __future__ import annotations

import pytest

from testbed.results import rundir
from testbed.scenario.suite import load_suite
from testbed.workflows import compare
from testbed.workflows import series as series_workflow
from testbed.workflows.sessions import Where
from tests.conftest import PROJECT

KERNELS = ["6.1.0-54", "6.1.0-55", "6.1.0-56"]


class Killed(BaseException):
    """What SIGKILL is to the controller: nothing after it runs (not an Exception: nothing catches it)."""


@pytest.fixture
def suite():
    return load_suite(PROJECT / "scenarios" / "suites" / "regression-check.yaml", PROJECT / "scenarios")


@pytest.fixture
def sessions(monkeypatch):
    """Every (kernel, seed) run_session was asked for, in order; ``kill_at``: the call that is killed."""
    ran: list[tuple[str, int]] = []
    state = {"kill_at": None, "fail": set()}

    def run_session(scenario, kernel_version, results_root, **_):
        if len(ran) + 1 == state["kill_at"]:
            raise Killed
        (seed,) = {s for point in scenario.points for s in point.scenario.seeds}
        ran.append((kernel_version, seed))
        folder = results_root / scenario.name / f"{kernel_version}-seed{seed}"  # a session resumes in its folder
        status = "failed" if (kernel_version, seed) in state["fail"] else "complete"
        rundir.write_json_atomic(folder / "run" / "manifest.json", {"status": status, "reason": "iperf3 died"})
        return type("Result", (), {"directory": folder})()

    monkeypatch.setattr(compare, "run_session", run_session)
    monkeypatch.setattr(series_workflow.kernels, "fetch", lambda kernel, log: None)
    monkeypatch.setattr(series_workflow, "judge_series", lambda result, kept, *a, **k: result)
    return ran, state


def test_a_killed_series_resumes_without_running_its_complete_sessions_again(tmp_path, suite, sessions):
    ran, state = sessions
    state["kill_at"] = 5  # killed during repetition 2 of the second kernel
    with pytest.raises(Killed):
        series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))
    assert ran == [("6.1.0-54", 1), ("6.1.0-55", 1), ("6.1.0-56", 1), ("6.1.0-54", 2)]
    [folder] = (tmp_path / "regress").iterdir()
    assert not rundir.read_json(folder / compare.STATE_FILE)["finished"]

    state["kill_at"] = None
    ran.clear()
    result = series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))
    assert result.directory == folder  # the same folder, going on
    assert ran == [("6.1.0-55", 2), ("6.1.0-56", 2)] + [(k, 3) for k in KERNELS]  # only what was not complete
    state_file = rundir.read_json(folder / compare.STATE_FILE)
    assert state_file["finished"] and all(len(reps) == 3 for reps in state_file["sessions"].values())

    ran.clear()  # finished: the same arguments start a new series
    again = series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))
    assert again.directory != folder and len(ran) == 9


def test_every_comparison_packs_its_sessions_as_asked(tmp_path, suite, monkeypatch):
    """--guests and --side-by-side reach every sub-session of regress, a series and a bisection (they
    were once accepted by those commands and dropped on the way)."""
    from testbed.workflows import bisect as bisect_workflow
    from testbed.workflows import regress as regress_workflow

    asked: list[tuple[int, int]] = []

    def run_session(scenario, kernel_version, results_root, guests=1, side_by_side=1, **_):
        asked.append((guests, side_by_side))
        folder = results_root / f"{kernel_version}-{len(asked)}"
        rundir.write_json_atomic(folder / "run" / "manifest.json", {"status": "complete"})
        return type("Result", (), {"directory": folder})()

    for module in (compare, bisect_workflow):
        monkeypatch.setattr(module, "run_session", run_session)
    monkeypatch.setattr(regress_workflow.kernels, "fetch", lambda kernel, log: None)
    monkeypatch.setattr(regress_workflow, "judge_comparison", lambda *a, **k: None)
    monkeypatch.setattr(series_workflow, "judge_series", lambda result, kept, *a, **k: result)
    packed = Where(results=tmp_path, guests=2, side_by_side=3)
    regress_workflow.regress(KERNELS[0], KERNELS[1], suite, 2, packed)
    series_workflow.run_series(KERNELS, suite, 2, packed)
    measure = bisect_workflow.Measurer(suite, KERNELS, tmp_path, None, None, None, None, "virtual", 2, 3)
    measure(KERNELS[0], [1, 2])  # the stub's runs carry no metrics: what the session was asked is the point
    assert len(asked) == 4 + 6 + 1 and set(asked) == {(2, 3)}


def test_force_or_other_arguments_start_a_new_comparison(tmp_path, suite, sessions):
    ran, state = sessions
    state["kill_at"] = 3
    with pytest.raises(Killed):
        series_workflow.run_series(KERNELS, suite, 2, Where(results=tmp_path))
    state["kill_at"] = None
    other = series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))  # another --repeat
    forced = series_workflow.run_series(KERNELS, suite, 2, Where(results=tmp_path, force=True))
    assert len({p.parent for p in (tmp_path / "regress").glob(f"*/{compare.STATE_FILE}")}) == 3
    assert other.directory != forced.directory


def test_a_kernel_dropped_stays_dropped_when_the_series_resumes(tmp_path, suite, sessions, monkeypatch):
    ran, state = sessions
    real = compare.run_session

    def refusing(scenario, kernel_version, results_root, **kw):
        if kernel_version == "6.1.0-55":
            raise compare.GuestError("the guest did not boot")
        return real(scenario, kernel_version, results_root, **kw)

    monkeypatch.setattr(compare, "run_session", refusing)
    state["kill_at"] = 4
    with pytest.raises(Killed):
        series_workflow.run_series(KERNELS, suite, 2, Where(results=tmp_path))
    state["kill_at"] = None
    ran.clear()
    result = series_workflow.run_series(KERNELS, suite, 2, Where(results=tmp_path))
    assert ran == [("6.1.0-56", 2)]  # 6.1.0-54's second repetition ran before the kill
    assert result.failures == [
        "6.1.0-55: it refused the suite before any run (the guest did not boot); the series goes on without it"
    ]


def test_the_schedule_stops_when_fewer_than_two_sides_are_left(tmp_path, suite, sessions, monkeypatch):
    ran, _ = sessions
    real = compare.run_session

    def refusing(scenario, kernel_version, results_root, **kw):
        if kernel_version != "6.1.0-54":
            raise compare.GuestError("the guest did not boot")
        return real(scenario, kernel_version, results_root, **kw)

    monkeypatch.setattr(compare, "run_session", refusing)
    result = series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))
    assert ran == [("6.1.0-54", 1)] and result.exit_code == 2 and len(result.failures) == 2


def test_a_session_with_a_failed_run_runs_again_on_resume_and_only_it(tmp_path, suite, sessions):
    ran, state = sessions
    state["fail"] = {("6.1.0-55", 2)}
    state["kill_at"] = 7  # after the second repetition, whose 6.1.0-55 session had a run fail
    with pytest.raises(Killed):
        series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))
    [folder] = (tmp_path / "regress").iterdir()
    assert rundir.read_json(folder / compare.STATE_FILE)["incomplete"] == ["6.1.0-55/2"]
    state["kill_at"], state["fail"] = None, set()
    ran.clear()
    series_workflow.run_series(KERNELS, suite, 3, Where(results=tmp_path))
    assert ran == [("6.1.0-55", 2)] + [(k, 3) for k in KERNELS]
    assert rundir.read_json(folder / compare.STATE_FILE)["incomplete"] == []


def test_untrustworthy_runs_are_left_out_of_the_sides_metrics_and_said_so(tmp_path):
    """The fixture run's fidelity checks failed (base RTT, bottleneck rate): measured only once trusted."""
    import json
    import shutil

    session = tmp_path / "s"
    for seed, trusted in ((1, False), (2, True)):
        run = session / "p" / f"seed={seed}"
        shutil.copytree(PROJECT / "tests" / "fixtures" / "run-westwood", run)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest.update(point_id="p", seed=seed)
        if trusted:
            manifest["fidelity"] = {"trustworthy": True, "problems": [], "checks": []}
        (run / "manifest.json").write_text(json.dumps(manifest))
    (session / "session.json").write_text(json.dumps({"scenario": "x", "runs": ["p/seed=1", "p/seed=2"]}))
    metrics, statuses = compare.side_metrics({session})
    assert set(metrics["seed"]) == {2}
    assert compare.failed_runs("p", statuses) == []  # left out, not failed: the comparison goes on
    assert compare.left_out_runs(statuses, "baseline") == [
        "baseline: p: 1 untrustworthy run(s) left out (base RTT pair 0, bottleneck rate forward)"
    ]
    every, _ = compare.side_metrics({session}, untrusted=True)  # for the sensitivity line only
    assert set(every["seed"]) == {1, 2}


def test_the_sensitivity_line_names_each_verdict_the_left_out_runs_would_change():
    judged = {"p reno goodput": "no change", "p reno retransmissions": "no change"}
    assert compare.sensitivity(judged, dict(judged)) == [
        "with the untrustworthy runs included, no verdict would change"
    ]
    changed = {**judged, "p reno goodput": "regression"}
    assert compare.sensitivity(judged, changed) == [
        "with the untrustworthy runs, p reno goodput would be regression (without them: no change)"
    ]


def test_a_comparison_resumed_with_an_edited_patch_is_refused_naming_it(tmp_path):
    before = {"kernels": ["6.1.0-56", f"6.1+patch:/w/fix.patch@sha256:{'a' * 64}"], "repeat": 3}
    started = compare.ComparisonFolder.open(tmp_path, "series", "s", before)
    again = compare.ComparisonFolder.open(tmp_path, "series", "s", before)  # the same inputs: resumed
    assert again.directory == started.directory and again.resumed
    edited = {**before, "kernels": ["6.1.0-56", f"6.1+patch:/w/fix.patch@sha256:{'b' * 64}"]}
    with pytest.raises(ValueError, match=r"started with other contents of /w/fix.patch .*--force"):
        compare.ComparisonFolder.open(tmp_path, "series", "s", edited)
    assert compare.ComparisonFolder.open(tmp_path, "series", "s", edited, force=True).directory != started.directory
    other = {**before, "repeat": 5}  # another comparison altogether: a new one, no refusal
    assert compare.ComparisonFolder.open(tmp_path, "series", "s", other).directory != started.directory


def test_in_virtual_time_each_kernels_repetitions_are_one_session_and_resume_whole(tmp_path, suite, monkeypatch):
    """--clock virtual: a kernel's repetitions run as one session of seeds 1..repeat (the host's drift does
    not reach the guest's clock, so nothing is gained by interleaving); killed, the comparison resumes with
    the session that had a failed run and those not run, and the judge gets each kernel's one session."""
    asked: list[tuple[str, tuple[int, ...]]] = []
    state = {"fail": {"6.1.0-55"}, "kill_at": 3}

    def run_session(scenario, kernel_version, results_root, **_):
        if len(asked) + 1 == state["kill_at"]:
            raise Killed
        seeds = tuple(sorted({s for point in scenario.points for s in point.scenario.seeds}))
        asked.append((kernel_version, seeds))
        folder = results_root / f"{kernel_version}-seeds{len(seeds)}"
        for seed in seeds:
            status = "failed" if kernel_version in state["fail"] and seed == 2 else "complete"
            rundir.write_json_atomic(folder / f"seed{seed}" / "manifest.json", {"status": status, "reason": "x"})
        return type("Result", (), {"directory": folder})()

    monkeypatch.setattr(compare, "run_session", run_session)
    monkeypatch.setattr(series_workflow.kernels, "fetch", lambda kernel, log: None)
    judged = {}
    monkeypatch.setattr(series_workflow, "judge_series", lambda result, kept, sessions, *a: judged.update(sessions))
    virtual = Where(results=tmp_path, clock="virtual", guests=2)
    with pytest.raises(Killed):
        series_workflow.run_series(KERNELS, suite, 3, virtual)
    assert asked == [(k, (1, 2, 3)) for k in KERNELS[:2]]
    [folder] = (tmp_path / "regress").iterdir()
    assert rundir.read_json(folder / compare.STATE_FILE)["incomplete"] == [f"6.1.0-55/{r}" for r in (1, 2, 3)]
    state["fail"], state["kill_at"] = set(), None
    asked.clear()
    series_workflow.run_series(KERNELS, suite, 3, virtual)
    assert asked == [(k, (1, 2, 3)) for k in KERNELS[1:]]
    assert {k: len(s) for k, s in judged.items()} == dict.fromkeys(KERNELS, 1)
    # real time interleaves, one repetition at a time
    sides = [compare.KernelSide(k, k) for k in KERNELS[:2]]
    assert compare.schedule(sides, 2, "real") == [([1], sides[0]), ([1], sides[1]), ([2], sides[0]), ([2], sides[1])]
