"""The results catalog (analysis/runs/catalog.py) over copies of the committed real run (tests/fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.runs import catalog
from testbed.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run-westwood"


def _copy_run(root: Path, scenario: str, point: str, seed: int, **manifest_changes) -> Path:
    run = root / scenario / "20261122T000000Z-abc1234" / f"{scenario}.{point}" / f"seed={seed}"
    shutil.copytree(FIXTURE, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(scenario=scenario, point_id=f"{scenario}.{point}", seed=seed, **manifest_changes)
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    _copy_run(root, "lab", "cc=westwood", 1)
    _copy_run(root, "lab", "cc=westwood", 2)
    _copy_run(root, "geo", "bad_s=1", 1, status="failed", reason="iperf3 c0 exited with 1")
    return root


def test_ingest_catalogues_every_run_and_its_flows(results):
    done = catalog.ingest(results)
    assert len(done.added) == 3 and not done.problems
    runs = catalog.runs(results)
    assert sorted(runs["scenario"]) == ["geo", "lab", "lab"]
    assert set(runs["kernel_release"]) == {"6.1.0-56-amd64"}
    failed = runs[runs["status"] == "failed"].iloc[0]
    assert failed["reason"] == "iperf3 c0 exited with 1" and failed["trustworthy"] == 0
    flows = catalog.flows(results, scenario="lab")
    assert len(flows) == 2 and set(flows["cc"]) == {"westwood"}
    # the values are the run's own analysis (flows.csv written next to the manifest)
    goodput = flows["goodput_mbit"].iloc[0]
    assert 1 < goodput < 10
    assert (results / flows["run_id"].iloc[0] / "flows.csv").exists()


def test_a_second_ingest_changes_nothing_and_sees_changed_and_removed_runs(results):
    catalog.ingest(results)
    again = catalog.ingest(results)
    assert again.unchanged == 3 and not again.added and not again.updated
    [geo] = [d for d in catalog.run_folders(results) if "geo" in str(d)]
    manifest = json.loads((geo / "manifest.json").read_text())
    manifest["status"] = "complete"
    (geo / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(next(d for d in catalog.run_folders(results) if d.name == "seed=2"))
    third = catalog.ingest(results)
    assert len(third.updated) == 1 and len(third.removed) == 1
    assert list(catalog.runs(results)["status"]) == ["complete", "complete"]


def test_filters_select_and_a_misspelled_filter_names_the_valid_ones(results):
    catalog.ingest(results)
    assert len(catalog.runs(results, seed=2)) == 1
    assert len(catalog.runs(results, kernel="6.1.0-56")) == 3  # a release prefix
    assert catalog.runs(results, kernel="6.12").empty
    assert len(catalog.runs(results, cc="westwood")) == 3 and catalog.runs(results, cc="cubic").empty
    with pytest.raises(catalog.CatalogError, match="unknown filter 'kernal'; valid: scenario, profile"):
        catalog.runs(results, kernal="6.1")


def test_a_broken_manifest_is_reported_and_the_others_catalogued(results):
    broken = next(catalog.run_folders(results))
    (broken / "manifest.json").write_text("{not json")
    done = catalog.ingest(results)
    assert len(done.added) == 2
    assert any("manifest.json" in p and "not catalogued" in p for p in done.problems), done.problems


def test_an_unreadable_catalog_says_how_to_rebuild_it(results):
    catalog.catalog_path(results).write_text("this is not sqlite" * 100)
    with pytest.raises(catalog.CatalogError, match="testbed results --rebuild"):
        catalog.ingest(results)
    assert len(catalog.ingest(results, rebuild=True).added) == 3


def test_cli_lists_filters_and_regenerates_a_report_from_stored_runs(results, tmp_path, capsys):
    assert main(["results", "--results", str(results), "--scenario", "lab"]) == 0
    out = capsys.readouterr().out
    assert out.count("lab/") == 2 and "geo/" not in out
    report_dir = tmp_path / "report"
    assert main(["results", "--results", str(results), "--scenario", "lab", "--report", str(report_dir)]) == 0
    summary = (report_dir / "summary.md").read_text()
    assert "2/2 runs complete" in summary
    session = json.loads((report_dir / "session.json").read_text())
    assert all((report_dir / r / "manifest.json").exists() for r in session["runs"])
    assert main(["results", "--results", str(results), "--scenario", "nothing", "--report", str(report_dir)]) == 1


def test_a_runs_latency_flows_are_catalogued(results):
    """latency.csv (ping and requests flows' percentiles, analysis.runs.latency) is the catalog's latency table."""
    run = next(results.glob("lab/*/lab.cc=westwood/seed=1"))
    (run / "latency.csv").write_text(
        "id,kind,flow,direction,samples,lost,p50_ms,p90_ms,p99_ms,mean_ms\n"
        "p1,ping,1,forward,190,2,52.5,80.1,120.0,60.2\n"
    )
    catalog.ingest(results)
    (row,) = catalog.latency(results).itertuples()
    assert (row.id, row.kind, row.samples, row.lost, row.p99_ms) == ("p1", "ping", 190, 2, 120.0)
    assert row.run_id.endswith("lab.cc=westwood/seed=1") and row.scenario == "lab"
    assert catalog.latency(results, seed=2).empty
