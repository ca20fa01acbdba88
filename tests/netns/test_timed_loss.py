"""The papers' time-based two-state loss channel (tc-BPF) on the host kernel: realized loss per state,
a lossless Good state, the same packets lost for the same seed, and a whole run that records it all."""

from __future__ import annotations

import json
import sys
import time

import pytest

from testbed.guest import lossbpf
from testbed.guest.network import Network
from testbed.host.session import run_session
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict
from tests.prerequisites import require_tools
from topologies.lossmodel import TimedTwoStateLoss, timeline
from topologies.netspec import LinkSpec, NetSpec
from topologies.shaping import EgressPlan


@pytest.fixture(autouse=True)
def _needs_the_bpf_tools():
    require_tools(lossbpf.TOOLS, "the timed loss channel")


#: UDP packets at a fixed schedule: packet n leaves at t0 + (n + 0.5) * GAP_S, half a gap away from
#: any state boundary (boundaries fall on multiples of STATE_S = a whole number of gaps)
GAP_S = 0.005
STATE_S = 0.25
PACKETS = 500  # 10 states of 50 packets
SENDER = """
import socket, sys, time
dst, t0, gap, count = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for n in range(count):
    delay = t0 + (n + 0.5) * gap - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    sock.sendto(n.to_bytes(4, "big") + bytes(100), (dst, 9000))
"""
RECEIVER = """
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("0.0.0.0", 9000))
sock.settimeout(3)
got = []
try:
    while True:
        got.append(int.from_bytes(sock.recv(2048)[:4], "big"))
except TimeoutError:
    pass
print(" ".join(map(str, got)))
"""


def line_spec(model: TimedTwoStateLoss) -> NetSpec:
    """h1 -- r -- h2, the channel on r's egress toward h2."""
    spec = NetSpec(hosts=["h1", "h2"], routers=["r"])
    spec.links += [LinkSpec("h1", "h1-eth0", "r", "r-eth0"), LinkSpec("h2", "h2-eth0", "r", "r-eth1")]
    spec.addresses.update(
        {
            ("h1", "h1-eth0"): "10.1.0.1/24",
            ("r", "r-eth0"): "10.1.0.254/24",
            ("h2", "h2-eth0"): "10.2.0.1/24",
            ("r", "r-eth1"): "10.2.0.254/24",
        }
    )
    spec.routes.update({"h1": [("default", "10.1.0.254")], "h2": [("default", "10.2.0.254")]})
    spec.egress[("r", "r-eth1")] = EgressPlan.with_loss(model)
    return spec


def udp_through_channel(model: TimedTwoStateLoss, seed: int, run_id: str) -> tuple[set[int], dict]:
    """Send PACKETS numbered UDP packets through the channel; return the numbers lost and the channel's record."""
    with Network(line_spec(model), run_id) as net:
        receiver = net.popen("h2", [sys.executable, "-c", RECEIVER], stdout=-1)
        time.sleep(0.5)
        t0 = time.monotonic() + 0.5
        channel = lossbpf.Channel("r", "r-eth1", net.netns_path("r"), model, stream=0)
        channel.arm(round(t0 * 1e9), seed, timeline(model, seed, PACKETS * GAP_S + 5))
        sender = net.popen("h1", [sys.executable, "-c", SENDER, "10.2.0.1", repr(t0), repr(GAP_S), str(PACKETS)])
        sender.wait(timeout=60)
        received = {int(n) for n in receiver.communicate(timeout=30)[0].split()}
        record = channel.read()
    return set(range(PACKETS)) - received, record


def near_boundary(n: int, per_state: int, slack: int = 2) -> bool:
    """Packet n is within ``slack`` packets (10 ms) of a state boundary: sender jitter can move it across."""
    offset = n % per_state
    return min(offset + 1, per_state - offset) <= slack


def test_same_seed_drops_the_same_packets_and_good_state_drops_none(clean_kernel):
    model = TimedTwoStateLoss(good_s=STATE_S, bad_s=STATE_S, bad_loss_pct=50, good_loss_pct=0)
    lost_a, record_a = udp_through_channel(model, seed=7, run_id="tl-a")
    lost_b, record_b = udp_through_channel(model, seed=7, run_id="tl-b")
    lost_c, _ = udp_through_channel(model, seed=8, run_id="tl-c")
    # what the receiver missed is exactly what the program says it dropped (packet n is index n)
    assert lost_a == set(record_a["dropped_packet_indices"])
    assert record_a["packets_seen"] == PACKETS
    # A packet's fate is its seeded draw in the state of its own time: the same seed loses the same
    # packets, except where the sender's timing jitter (a loaded host: a few ms) moved a packet sent
    # next to a state boundary into the neighbouring state.
    per_state = int(STATE_S / GAP_S)
    differ = lost_a ^ lost_b
    assert all(near_boundary(n, per_state) for n in differ) and len(differ) <= 4, sorted(differ)
    inner = {n for n in range(PACKETS) if not near_boundary(n, per_state)}
    assert lost_a & inner != lost_c & inner, "another seed lost the same packets"
    # alternating 0.25 s states: packet n is in a Bad state when (n * GAP_S) // STATE_S is odd
    assert all((n // per_state) % 2 == 1 for n in lost_a & inner), "a packet was lost in a Good state (loss 0)"
    assert record_a["per_state"]["good"]["dropped"] == 0
    bad = record_a["per_state"]["bad"]
    assert abs(bad["seen"] - PACKETS // 2) <= 4
    assert abs(bad["realized_loss_pct"] - 50) < 10  # 250 draws at p = 0.5: sd 3.2 pp


def test_a_run_records_the_timeline_and_realizes_the_configured_loss_per_state(tmp_path, clean_kernel):
    scenario = scenario_from_dict(
        {
            "topology": {
                "name": "dumbbell",
                "bottleneck": {
                    "rate_mbit": 10,
                    "queue_pkts": 100,
                    "loss": {
                        "model": "timed_two_state",
                        "good_s": 0.5,
                        "bad_s": 0.5,
                        "durations": "exponential",
                        "good_loss_pct": 0,
                        "bad_loss_pct": 5,
                    },
                },
            },
            "flows": [{"cc": "reno", "rtt_ms": 0}],
            "duration_s": 8,
            "seeds": [3],
        },
        name="timed-loss",
    )
    result = run_session(scenario, backend="local", results_root=tmp_path)
    (run,) = result.runs
    manifest = rundir.read_json(run / "manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    data_channel = json.loads((run / "raw" / "loss-rr-rr-eth1.json").read_text())  # forward data direction
    ack_channel = json.loads((run / "raw" / "loss-rl-rl-eth1.json").read_text())
    assert data_channel["stream"] != ack_channel["stream"]
    assert [s["start_s"] for s in data_channel["states"][:3]] != [s["start_s"] for s in ack_channel["states"][:3]]
    good, bad = data_channel["per_state"]["good"], data_channel["per_state"]["bad"]
    assert good["dropped"] == 0 and good["seen"] > 500
    assert bad["seen"] > 1000
    assert abs(bad["realized_loss_pct"] - 5) <= 2
    # the realized timeline is the seeded one: recomputing it from the seed gives the same states
    model = TimedTwoStateLoss(**data_channel["model"])
    expected = timeline(model, 3, 8 + 30, data_channel["stream"])
    assert [round(s["end_s"], 9) for s in data_channel["states"]] == [round(s.end_s, 9) for s in expected]
    checks = {c["name"]: c for c in manifest["fidelity"]["checks"]}
    assert checks["loss bad rr/rr-eth1"]["ok"]
