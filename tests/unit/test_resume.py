"""Resume identity: which earlier session a sweep continues in, and which of its runs count as done."""

from __future__ import annotations

import pytest

from testbed.plan.resume import find_resumable, is_done
from testbed.plan.resume import note_older_code as _note_older_code
from testbed.results import rundir
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import scenario_from_dict


def sweep(ccs, seeds=(1,)):
    return scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
            "flows": [{"cc": ccs, "rtt_ms": 20}],
            "duration_s": 10,
            "seeds": list(seeds),
        },
        name="s",
    )


def fake_session(root, runs, release, status="complete", stamp="20261121T120000Z-abc1234"):
    session = root / "s" / stamp
    for run in runs:
        manifest = {"status": status, "identity": run.identity(), "kernel": {"release": release}}
        rundir.write_json_atomic(rundir.run_dir(session, run.point_id, run.seed) / "manifest.json", manifest)
    rundir.write_json_atomic(session / "session.json", {"backend": {"kernel_release": release}, "runs": []})
    return session


def test_complete_runs_of_the_same_scenario_seed_and_kernel_are_done(tmp_path):
    runs = sweep(["reno", "cubic"]).runs()
    session = fake_session(tmp_path, runs, "6.1.0-41-amd64")
    directory = rundir.run_dir(session, runs[0].point_id, runs[0].seed)
    assert is_done(directory, runs[0], "6.1.0-41-amd64")
    assert not is_done(directory, runs[0], "6.12.57+deb12-amd64")  # another kernel
    assert not is_done(directory, runs[1], "6.1.0-41-amd64")  # another point's identity
    topology = {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}}
    longer = scenario_from_dict(
        {"topology": topology, "flows": [{"cc": "reno", "rtt_ms": 20}], "duration_s": 11}, name="s"
    ).runs()[0]
    assert not is_done(directory, longer, "6.1.0-41-amd64")  # the resolved scenario changed


def test_failed_runs_are_not_done_and_the_newest_matching_session_is_resumed(tmp_path):
    runs = sweep(["reno", "cubic"]).runs()
    old = fake_session(tmp_path, runs, "6.1.0-41-amd64", stamp="20261120T000000Z-abc1234")
    new = fake_session(tmp_path, runs[:1], "6.1.0-41-amd64", status="failed")
    other_kernel = fake_session(tmp_path, runs, "6.12.57+deb12-amd64", stamp="20261122T000000Z-abc1234")
    assert find_resumable(tmp_path, "s", runs, "6.1.0-41-amd64") == new
    assert not is_done(rundir.run_dir(new, runs[0].point_id, 1), runs[0], "6.1.0-41-amd64")
    assert find_resumable(tmp_path, "s", runs, "6.12.57+deb12-amd64") == other_kernel
    assert find_resumable(tmp_path, "s", runs, "6.1.0-99-amd64") is None
    assert old.exists()


def test_added_seeds_resume_the_same_session(tmp_path):
    session = fake_session(tmp_path, sweep("reno", seeds=[1]).runs(), "6.1.0-41-amd64")
    more = sweep("reno", seeds=[1, 2, 3]).runs()
    assert find_resumable(tmp_path, "s", more, "6.1.0-41-amd64") == session
    done = [is_done(rundir.run_dir(session, r.point_id, r.seed), r, "6.1.0-41-amd64") for r in more]
    assert done == [True, False, False]


def test_a_selected_part_keeps_its_identity_and_the_whole_sweep_resumes_around_it(tmp_path):
    whole = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": [5, 10.0], "queue_pkts": 50}},
            "flows": [{"cc": ["reno", "cubic"], "rtt_ms": 20}],
            "duration_s": 10,
            "seeds": [1, 2],
        },
        name="s",
    )
    part = whole.select(["cc=cubic", "rate_mbit=10"], seeds=[2])
    assert [(r.point_id, r.seed) for r in part.runs()] == [("rate_mbit=10.0,cc=cubic", 2)]
    session = fake_session(tmp_path, part.runs(), "6.1.0-41-amd64")
    runs = whole.runs()
    assert find_resumable(tmp_path, "s", runs, "6.1.0-41-amd64") == session
    done = [r for r in runs if is_done(rundir.run_dir(session, r.point_id, r.seed), r, "6.1.0-41-amd64")]
    assert [(r.point_id, r.seed) for r in done] == [("rate_mbit=10.0,cc=cubic", 2)]
    assert len(whole.select(["cc=reno,cubic"]).runs()) == 8  # a list of values keeps each


def test_a_selection_of_what_the_sweep_lacks_names_what_it_has():
    whole = sweep(["reno", "cubic"], seeds=[1, 2])
    with pytest.raises(ScenarioError) as caught:
        whole.select(["c=reno", "cc=vegas", "ccreno"], seeds=[7])
    text = str(caught.value)
    assert "'c' is not swept here; swept: cc" in text
    assert "cc has no value vegas; its values: reno, cubic" in text
    assert "'ccreno': expected KEY=VALUE" in text
    assert "seed 7 is not in this profile; its seeds: 1, 2" in text


def test_resuming_says_when_kept_runs_were_made_by_other_code(tmp_path, capsys):
    runs = sweep(["reno", "cubic"]).runs()
    session = fake_session(tmp_path, runs, "6.1.0-41-amd64")
    for run, sha in zip(runs, ["a" * 40, "b" * 40], strict=True):
        manifest_path = rundir.run_dir(session, run.point_id, run.seed) / "manifest.json"
        manifest = rundir.read_json(manifest_path)
        rundir.write_json_atomic(manifest_path, {**manifest, "git": {"sha": sha, "dirty": False}})
    _note_older_code(session, runs, {"sha": "a" * 40, "dirty": False})
    assert "kept runs were made by other code (1 at bbbbbbb; this checkout: aaaaaaa)" in capsys.readouterr().out
    _note_older_code(session, runs[:1], {"sha": "a" * 40, "dirty": False})
    assert capsys.readouterr().out == ""
