"""Every shipped experiment runs on a Debian kernel: the first point of its quick profile, compressed
to a few seconds of traffic, all in one guest. Every run completes, every pair's base RTT and every
bottleneck's rate pass their fidelity checks, and a timed loss channel leaves its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed import rundir
from testbed.scenario import Point, ScenarioFile, load_scenario, scenario_from_dict
from testbed.session import run_session

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
EXPERIMENTS = sorted(p for p in SCENARIOS.glob("*.yaml") if p.stem != "default")
#: seconds of traffic per experiment here (the quick profile's shape, compressed further)
SMOKE_S = 8.0


def smoke_point(path: Path) -> Point:
    point = load_scenario(path, profile="quick").points[0]
    data = point.scenario.model_dump(mode="json", exclude_none=True)
    data = {**data, "time_scale": SMOKE_S / data["duration_s"], "seeds": [1]}
    (compressed,) = scenario_from_dict(data, name=path.stem).points
    return Point(path.stem, f"{path.stem}.{point.point_id}", point.params, compressed.scenario)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    points = [smoke_point(path) for path in EXPERIMENTS]
    combined = ScenarioFile("experiments-smoke", SCENARIOS, "quick", "every experiment, compressed", points)
    return run_session(combined, backend="guest", results_root=tmp_path_factory.mktemp("results"))


def test_there_are_experiments():
    assert len(EXPERIMENTS) >= 8


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_each_experiment_completes_and_passes_its_fidelity_checks(smoke, path):
    (run,) = [r for r in smoke.runs if r.parent.name.startswith(f"{path.stem}.")]
    manifest = rundir.read_json(run / "manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    for connection in manifest["connections"]:
        client = json.loads((run / "raw" / f"iperf3-{connection['id']}-client.json").read_text())
        assert "error" not in client and client["end"]["sum_sent"]["bytes"] > 0, connection["id"]
    checks = manifest["fidelity"]["checks"]
    rtt = [c for c in checks if c["name"].startswith("base RTT")]
    assert len(rtt) == len({c["pair"] for c in manifest["connections"]})
    assert all(c["ok"] for c in rtt), [c["detail"] for c in rtt if not c["ok"]]
    rate = [c for c in checks if c["name"].startswith("bottleneck rate")]
    assert rate and all(c["ok"] for c in rate), [c["detail"] for c in rate]
    if "timed_two_state" in path.read_text():
        records = list((run / "raw").glob("loss-*.json"))
        assert records, "no loss channel record"
        for record in records:
            data = json.loads(record.read_text())
            assert data["per_state"]["good"]["dropped"] <= data["per_state"]["good"]["seen"]
            assert data["states"] and data["packets_seen"] > 0
