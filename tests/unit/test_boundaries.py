"""Typed boundaries: the plan and the manifest models, their one reader and writer, and that every
folder made before they existed (the fixtures, the shapes older code wrote) still loads and reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testbed.host import session as host_session
from testbed.plan.plan import PLAN, Plan, PlanContext
from testbed.results import rundir
from testbed.results.manifest import MANIFEST, Manifest, read_manifest, run_status, write_manifest
from testbed.scenario.load import scenario_from_dict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: the keys of a plan run as session.py wrote them before the Plan model
PLAN_RUN_KEYS = {
    "scenario_name",
    "point_id",
    "params",
    "seed",
    "profile",
    "scenario",
    "run_dir",
    "estimate_s",
    "cost_s",
    "busy_pct",
}


def sweep():
    return scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
            "flows": [{"cc": ["reno", "cubic"], "rtt_ms": 20}],
            "duration_s": 10,
            "seeds": [1, 2],
        },
        name="s",
    )


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("**/" + MANIFEST)), ids=lambda p: p.parent.name)
def test_every_fixture_manifest_loads_and_keeps_every_key(path):
    original = json.loads(path.read_text())
    manifest = read_manifest(path.parent)
    # the older fixtures have the key's old name, "schema"
    assert manifest.schema_version == 1 and original.get("schema", original.get("schema_version")) == 1
    assert manifest.status == "complete" and manifest.run_status == "complete"
    assert manifest.kernel.release == original["kernel"]["release"]
    assert manifest.connections == original["connections"]
    assert manifest.fidelity is not None and manifest.fidelity.trustworthy is original["fidelity"]["trustworthy"]
    data = manifest.to_data()
    assert "schema" not in data
    assert data == {"schema_version": 1, **{k: v for k, v in original.items() if k != "schema"}}


def test_old_shapes_load(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps({"schema": 1, "status": "running", "scenario": "s", "extra": [1]}))
    manifest = read_manifest(tmp_path)
    assert manifest.schema_version == 1 and manifest.run_status == "incomplete"
    assert manifest.model_extra == {"extra": [1]}
    (tmp_path / MANIFEST).write_text(json.dumps({"status": "failed"}))  # no version at all: 1
    assert read_manifest(tmp_path).schema_version == 1
    assert Manifest.model_validate({"status": "complete"}).git.sha is None  # absent parts read as empty


def test_a_manifest_written_keeps_unknown_keys_and_gains_the_version(tmp_path):
    write_manifest(tmp_path, {"status": "complete", "modules": {"tcp_westwood": None}, "timing": {"setup_s": 1.5}})
    data = json.loads((tmp_path / MANIFEST).read_text())
    assert data == {
        "schema_version": 1,
        "status": "complete",
        "timing": {"setup_s": 1.5},
        "modules": {"tcp_westwood": None},
    }
    assert run_status(tmp_path) == "complete"


def test_a_bad_manifest_is_an_error_naming_the_file(tmp_path):
    (tmp_path / MANIFEST).write_text('{"status": "complete",')
    with pytest.raises(rundir.LoadError, match=r"^manifest\.json: JSON cut short"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"status": "complete", "seed": "first"}))
    with pytest.raises(rundir.LoadError, match=r"^manifest\.json: not a manifest: seed: "):
        read_manifest(tmp_path)
    with pytest.raises(ValueError, match="seed"):  # the writer refuses what would not read back
        write_manifest(tmp_path, {"seed": "first"})
    assert run_status(tmp_path) == "incomplete"  # unreadable: not complete


def test_a_plan_written_by_the_session_round_trips(tmp_path):
    scenario = sweep()
    runs = scenario.runs()
    context = PlanContext(
        git={"sha": "abc", "dirty": False},
        backend={"kind": "local"},
        project_modules={"tcp_westwood_tb": None},
        hold_library="/x/hold.so",
    )
    plan = Plan(context=context, runs=[host_session._plan_entry(r, scenario, tmp_path) for r in runs])
    plan.write(tmp_path / PLAN)
    on_disk = json.loads((tmp_path / PLAN).read_text())
    assert set(on_disk) == {"schema_version", "context", "runs"}  # the keys an older runner reads, plus the version
    assert all(set(run) == PLAN_RUN_KEYS for run in on_disk["runs"])
    assert on_disk["runs"][0]["run_dir"] == str(rundir.run_dir(tmp_path, runs[0].point_id, 1).relative_to(tmp_path))
    again = Plan.read(tmp_path / PLAN)
    assert again == plan
    assert [r.spec().identity() for r in again.runs] == [r.identity() for r in runs]
    del on_disk["schema_version"]  # a plan of an older checkout
    (tmp_path / "old.json").write_text(json.dumps(on_disk))
    assert Plan.read(tmp_path / "old.json").schema_version == 1
    (tmp_path / "bad.json").write_text(json.dumps({"runs": [{"run_dir": "x"}]}))
    with pytest.raises(rundir.LoadError, match=r"^bad\.json: not a plan"):
        Plan.read(tmp_path / "bad.json")


def test_runs_a_backend_did_not_finish_are_marked_through_the_model(tmp_path):
    scenario = sweep()
    runs = scenario.runs()[:3]
    plan = Plan(runs=[host_session._plan_entry(r, scenario, tmp_path) for r in runs])
    done, running, _never = (tmp_path / r.run_dir for r in plan.runs)
    write_manifest(done, {"status": "complete"})
    write_manifest(running, {"status": "running", "tools": {"iperf3": "3.12"}})
    host_session._mark_unfinished(plan, tmp_path, "the guest fell silent")
    assert [run_status(tmp_path / r.run_dir) for r in plan.runs] == ["complete", "incomplete", "failed"]
    assert read_manifest(running).model_extra == {"tools": {"iperf3": "3.12"}}  # kept
    never = read_manifest(tmp_path / plan.runs[2].run_dir)
    assert never.reason == "the guest fell silent" and never.seed == runs[2].seed
    assert never.resolved == runs[2].scenario.model_dump(mode="json")


def test_a_session_made_before_the_models_still_analyses_and_reports(tmp_path):
    from testbed.report.pages.sessionpage import write_session_report

    session = tmp_path / "short" / "20261121T074018Z-nogit"
    shutil.copytree(FIXTURES / "run-westwood", session / "default" / "seed=1")
    shutil.copytree(FIXTURES / "westwood_tb", session / "default" / "seed=2")
    info = json.loads((FIXTURES / "session-westwood.json").read_text())
    (session / rundir.SESSION).write_text(json.dumps({**info, "runs": ["default/seed=1", "default/seed=2"]}))
    before = {p: p.read_bytes() for p in session.rglob(MANIFEST)}
    report = write_session_report(session)
    assert report.html_path.exists() and report.md_path.exists()
    assert all((session / "default" / f"seed={seed}" / "flows.csv").exists() for seed in (1, 2))
    assert "2/2" in report.summary_text  # both runs complete
    assert {p: p.read_bytes() for p in session.rglob(MANIFEST)} == before  # reading changes no manifest


def test_the_one_atomic_writer_leaves_no_temporary_on_failure(tmp_path):
    path = tmp_path / "flows.csv"
    rundir.write_text_atomic(path, "a\n")

    with pytest.raises(TypeError):
        rundir.write_text_atomic(path, 42)  # type: ignore[arg-type]
    assert path.read_text() == "a\n" and [p.name for p in tmp_path.iterdir()] == ["flows.csv"]
