"""A short dumbbell run in a real Debian kernel with Westwood+ (the papers' algorithm, as a module), made in the
guest tier's one session (tests/guest/tierpoints.py)."""

from __future__ import annotations

import json
import re

import pytest

from testbed.guest.run import COLLECT_PHASES
from testbed.results import rundir
from tests.guest import tierpoints
from topologies.params import tcp_goodput_limit_mbit

RATE_MBIT, DURATION_S = tierpoints.ML_VS_STOCK_RATE_MBIT, tierpoints.ML_VS_STOCK_TRAFFIC_S


@pytest.fixture(scope="module")
def westwood_run(tier_session):
    """The stock westwood's first run against westwood_ml in the guest tier's one session
    (tests/guest/tierpoints.py): at 40 ms slow start ends in the first second, so 10 s of traffic measure the
    steady state the goodput limit refers to."""
    (run,) = [
        r for r in tierpoints.runs_of(tier_session, f"{tierpoints.ML_VS_STOCK}.cc=westwood") if r.name == "seed=1"
    ]
    return run, rundir.read_json(run / "manifest.json"), tier_session.directory


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
    # a guest that falls silent after its traffic shows on its console how far the collection got: every
    # run of the session (and every attempt run again alone) names each step, in order
    _, manifest, session = westwood_run
    console = (session / "guest-console.log").read_text(errors="replace")
    done = re.findall(r"collected: (\w+) in [\d.]+ s", console)
    runs = len(done) // len(COLLECT_PHASES)
    assert runs >= 1 and done == list(COLLECT_PHASES) * runs
    assert set(COLLECT_PHASES) <= set(manifest["timing"]["phases_s"])
