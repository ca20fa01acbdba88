"""Latency traffic: ping and requests flows in a scenario (their fields and errors), their plan, the
parsing of their output and the queue's delay (analysis.runs.latency), and the requests program on real
sockets of this machine (testbed/guest/shortflows.py)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from analysis.runs.latency import latency_frames, ping_samples, queue_delays, request_samples
from testbed.guest.clients import listening, process_state
from testbed.plan.connections import plan_connections
from testbed.plan.latency import SHORTFLOWS, ping_argv, plan_latency, requests_client_argv
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario_text
from topologies.dumbbell import Dumbbell

FLOWS = """\
topology: {name: dumbbell, bottleneck: {rate_mbit: 10, queue_pkts: 100}}
flows:
  - {cc: cubic, rtt_ms: 50}
  - {kind: ping, rtt_ms: 50, interval_ms: 200}
  - {kind: requests, cc: reno, rtt_ms: 50, size_kb: 100, think_ms: 500, start_s: 5}
duration_s: 20
"""


def scenario(text: str = FLOWS):
    return load_scenario_text(textwrap.dedent(text), name="test.yaml").points[0].scenario


def test_ping_and_requests_flows_are_planned_beside_the_bulk_flow_on_pairs_of_their_own():
    resolved = scenario()
    topology = Dumbbell.from_scenario(resolved)
    (bulk,) = plan_connections(resolved, topology)
    ping, requests = plan_latency(resolved, topology)
    assert (bulk.pair, ping.pair, requests.pair) == (0, 1, 2)
    assert (ping.id, ping.kind, ping.interval_ms, ping.cc) == ("p0", "ping", 200, None)
    assert (requests.id, requests.size_bytes, requests.think_ms, requests.start_s) == ("q1", 100_000, 500, 5)
    # its connections bind ports below the ephemeral range the control lane recognises
    assert requests.client_port_first + 64 < 0xF000
    argv = ping_argv(ping)
    assert argv[argv.index("-c") + 1] == "100" and argv[argv.index("-i") + 1] == "0.2" and "-D" in argv
    assert "--cc" in requests_client_argv(requests, "python3")


@pytest.mark.parametrize(
    ("flow", "expected"),
    [
        ("{kind: ping, cc: reno, rtt_ms: 50}", "a ping flow sends ICMP echoes, not TCP: leave cc out"),
        ("{kind: requests, cc: reno, rtt_ms: 50}", "a requests flow needs size_kb"),
        ("{kind: requests, rtt_ms: 50, size_kb: 10}", "a requests flow needs cc"),
        ("{cc: reno, rtt_ms: 50, interval_ms: 100}", "interval_ms is a field of kind: ping flows"),
        ("{kind: ping, rtt_ms: 50, size_mb: 1}", "size_mb is a field of bulk flows"),
        ("{kind: pings, rtt_ms: 50}", "valid: bulk, ping, requests (did you mean 'ping'?)"),
        ("{kind: ping, rtt_ms: 50, interval_ms: 1}", "interval_ms"),
    ],
)
def test_a_wrong_latency_flow_is_a_line_numbered_error(flow, expected):
    text = FLOWS.replace("  - {kind: ping, rtt_ms: 50, interval_ms: 200}", f"  - {flow}")
    with pytest.raises(ScenarioError) as caught:
        scenario(text)
    assert expected in str(caught.value)
    assert any(problem.line == 4 for problem in caught.value.problems)


def test_a_scenario_of_pings_alone_is_refused():
    text = FLOWS.replace("  - {cc: cubic, rtt_ms: 50}\n", "").replace(
        "  - {kind: requests, cc: reno, rtt_ms: 50, size_kb: 100, think_ms: 500, start_s: 5}\n", ""
    )
    with pytest.raises(ScenarioError, match="at least one flow must be kind: bulk"):
        scenario(text)


PING = """\
PING 10.2.1.1 (10.2.1.1) from 10.1.1.1 : 56(84) bytes of data.
[1000.500000] 64 bytes from 10.2.1.1: icmp_seq=1 ttl=62 time=51.2 ms
[1000.600000] 64 bytes from 10.2.1.1: icmp_seq=2 ttl=62 time=180 ms
[1000.800000] 64 bytes from 10.2.1.1: icmp_seq=4 ttl=62 time=320.5 ms

--- 10.2.1.1 ping statistics ---
4 packets transmitted, 3 received, 25% packet loss, time 301ms
"""


def test_ping_output_gives_each_reply_and_the_lost_echoes():
    replies, lost = ping_samples(PING)
    assert replies == [(1000.5, 51.2), (1000.6, 180.0), (1000.8, 320.5)] and lost == 1


def test_requests_output_gives_completions_and_counts_failures_and_a_cut_line():
    text = "\n".join(
        [
            json.dumps({"start_unix": 1001.0, "completion_s": 0.25, "bytes": 100_000}),
            json.dumps({"start_unix": 1002.0, "completion_s": 60.0, "bytes": 0, "error": "timeout"}),
            '{"start_unix": 1003.0, "compl',
        ]
    )
    assert request_samples(text) == ([(1001.0, 250.0)], 1)


def test_a_runs_latency_samples_and_percentiles_are_on_its_time_axis(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "ping-p0.txt").write_text(PING)
    manifest = {
        "t0_unix_s": 1000.0,
        "latency_flows": [
            {"id": "p0", "kind": "ping", "flow": 1, "direction": "forward"},
            {"id": "q1", "kind": "requests", "flow": 2, "direction": "forward"},
        ],
    }
    samples, summary = latency_frames(raw, manifest)
    assert list(samples["t_s"]) == pytest.approx([0.5, 0.6, 0.8])
    ping = summary.set_index("id").loc["p0"]
    assert (ping["samples"], ping["lost"], ping["p50_ms"]) == (3, 1, 180.0)
    assert summary.set_index("id").loc["q1", "samples"] == 0  # its client wrote nothing: no samples, not an error


def test_the_queues_delay_is_its_backlog_over_its_rate(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    pd.DataFrame(
        {
            "t_s": [0.1, 0.2],
            "node": "rl",
            "intf": "rl-eth0",
            "bytes": [0, 1],
            "packets": [0, 1],
            "drops": [0, 2],
            "overlimits": 0,
            "backlog_bytes": [12_500, 125_000],
            "backlog_pkts": [9, 83],
            "marks": [0, 5],
            "delay_ms": [4.0, 6.5],
        }
    ).to_csv(raw / "queues.csv", index=False)
    bottleneck = {"node": "rl", "intf": "rl-eth0", "rate_mbit": 10, "direction": "forward"}
    manifest = {"topology": {"bottlenecks": [bottleneck]}}
    delays = queue_delays(raw, manifest)
    assert list(delays["delay_ms"]) == [10.0, 100.0]  # 12.5 kB at 10 Mbit/s
    assert list(delays["aqm_delay_ms"]) == [4.0, 6.5] and list(delays["direction"]) == ["forward", "forward"]


def test_shortflows_times_each_transfer_on_a_new_connection_of_its_own_port(tmp_path):
    """The requests program on this machine's loopback: held until continued, then transfers in turn."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(SHORTFLOWS), "serve", "--bind", "127.0.0.1", "--port", str(port), "--cc", "reno"]
    )
    client = None
    try:
        deadline = time.monotonic() + 10
        while not listening(server.pid, port):
            assert time.monotonic() < deadline and server.poll() is None, "the server did not listen"
            time.sleep(0.02)
        client = subprocess.Popen(
            [
                sys.executable,
                str(SHORTFLOWS),
                "fetch",
                "--server",
                "127.0.0.1",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--first-port",
                "21000",
                "--ports",
                "4",
                "--size",
                "200000",
                "--think-ms",
                "50",
                "--duration-s",
                "1",
                "--cc",
                "reno",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        while process_state(client.pid) != "T":  # ready and holding itself
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.02)
        client.send_signal(signal.SIGCONT)
        out, _ = client.communicate(timeout=30)
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) >= 5, records  # 1 s of transfers with 50 ms between
    assert all(r["bytes"] == 200_000 and "error" not in r and r["completion_s"] > 0 for r in records), records
