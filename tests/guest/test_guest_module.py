"""Our instrumented Westwood+ module (kernel-patch/) in a real Debian kernel, beside the stock one."""

from __future__ import annotations

import pytest

from testbed.results import rundir
from tests.guest import tierpoints


@pytest.fixture(scope="module")
def mixed_run(tier_session):
    """westwood and westwood_paper side by side, in the guest tier's one session (tests/guest/tierpoints.py)."""
    (run,) = tierpoints.runs_of(tier_session, tierpoints.MODULE_POINT)
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
