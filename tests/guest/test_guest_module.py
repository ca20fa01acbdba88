"""Our instrumented Westwood+ module (kernel-patch/) in a real Debian kernel, beside the stock one."""

from __future__ import annotations

import pytest

from testbed.host.session import run_session
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    # stock westwood and the papers' variant side by side, one flow each, sharing the bottleneck
    scenario = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_bdp": 1}},
            "flows": [{"cc": "westwood", "rtt_ms": 40}, {"cc": "westwood_paper", "rtt_ms": 40}],
            "duration_s": 8,
        },
        name="guest-module",
    )
    result = run_session(scenario, backend="guest", results_root=tmp_path_factory.mktemp("results"))
    (run,) = result.runs
    return run, rundir.read_json(run / "manifest.json")


def test_module_loads_next_to_the_stock_westwood(mixed_run):
    _, manifest = mixed_run
    assert manifest["status"] == "complete", manifest.get("reason")
    available = manifest["sysctls"]["net.ipv4.tcp_available_congestion_control"].split()
    assert {"westwood", "westwood_ml", "westwood_paper"} <= set(available)
    module = manifest["modules"]["tcp_westwood_tb"]
    assert module["filename"].endswith("tcp_westwood_tb.ko") and module["sha256"] and module["version"]
    assert manifest["modules"]["tcp_westwood"]["sha256"], "the stock module is recorded too"


def test_module_events_for_the_papers_flow_only(mixed_run):
    run, manifest = mixed_run
    stock, paper = manifest["connections"]
    events = (run / "raw" / "westwood_tb.txt").read_text().splitlines()
    samples = [e for e in events if "westwood_tb_sample:" in e]
    assert len(samples) > 20, f"{len(samples)} bandwidth samples in 8 s at 40 ms RTT"
    assert all("variant=paper" in e and f"sport={paper['client_port']} " in e for e in samples)
    assert not any(f"sport={stock['client_port']} " in e for e in events)
    assert manifest["capture"]["westwood_tb"]["lost"] == 0
