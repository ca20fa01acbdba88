"""A short dumbbell run in a real Debian kernel with Westwood+ (the papers' algorithm, as a module)."""

from __future__ import annotations

import json
import re

import pytest

from testbed.guest.run import COLLECT_PHASES
from testbed.host.session import run_session
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict
from topologies.params import tcp_goodput_limit_mbit

RATE_MBIT = 10
RTT_MS = 20
DURATION_S = 10


@pytest.fixture(scope="module")
def westwood_run(tmp_path_factory):
    # 20 ms keeps slow start short, so 10 s of traffic measure the steady state the limit refers to
    scenario = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": RATE_MBIT, "queue_bdp": 1}},
            "flows": [{"cc": "westwood", "rtt_ms": RTT_MS}],
            "duration_s": DURATION_S,
        },
        name="guest-westwood",
    )
    result = run_session(scenario, backend="guest", results_root=tmp_path_factory.mktemp("results"))
    (run,) = result.runs
    return run, rundir.read_json(run / "manifest.json"), result.directory


def test_the_run_completed_in_a_guest_kernel_with_westwood(westwood_run):
    run, manifest, _ = westwood_run
    assert manifest["status"] == "complete", manifest.get("reason")
    assert manifest["backend"]["kind"] == "guest"
    assert manifest["backend"]["accel"] in ("kvm", "tcg")
    assert re.match(r"\d+\.\d+\.\d+-\d+-amd64", manifest["kernel"]["release"])
    assert manifest["connections"][0]["cc"] == "westwood"
    assert manifest["modules"]["tcp_westwood"]["sha256"]
    assert "westwood" in manifest["sysctls"]["net.ipv4.tcp_available_congestion_control"]
    client = json.loads((run / "raw" / "iperf3-c0-client.json").read_text())
    assert client["end"]["sender_tcp_congestion"] == "westwood"


def test_fidelity_checks_passed(westwood_run):
    _, manifest, _ = westwood_run
    checks = {c["name"]: c for c in manifest["fidelity"]["checks"]}
    assert checks["base RTT pair 0"]["ok"], checks["base RTT pair 0"]["detail"]
    assert checks["bottleneck rate forward"]["ok"], checks["bottleneck rate forward"]["detail"]


def test_tcp_probe_rows_exist_for_the_data_flow(westwood_run):
    run, manifest, _ = westwood_run
    port = manifest["connections"][0]["client_port"]
    trace = (run / "raw" / "tcp_probe.txt").read_text()
    rows = [line for line in trace.splitlines() if f":{port} dest=" in line]
    assert len(rows) > 50 * DURATION_S, f"only {len(rows)} tcp_probe rows for the data flow"
    assert all("snd_cwnd=" in row for row in rows)
    assert manifest["capture"]["tcp_probe"]["lost"] == 0


def test_goodput_within_10_percent_of_the_limit(westwood_run):
    run, _, _ = westwood_run
    server = json.loads((run / "raw" / "iperf3-c0-server.json").read_text())
    goodput = server["end"]["sum_received"]["bits_per_second"] / 1e6
    limit = tcp_goodput_limit_mbit(RATE_MBIT)
    assert goodput == pytest.approx(limit, rel=0.10), f"{goodput:.2f} Mbit/s vs the {limit:.2f} limit"


def test_the_console_names_each_step_after_the_traffic_in_order(westwood_run):
    # a guest that falls silent after its traffic shows on its console how far the collection got
    _, manifest, session = westwood_run
    console = (session / "guest-console.log").read_text(errors="replace")
    done = re.findall(r"collected: (\w+) in [\d.]+ s", console)
    assert done == list(COLLECT_PHASES)
    assert set(COLLECT_PHASES) <= set(manifest["timing"]["phases_s"])
