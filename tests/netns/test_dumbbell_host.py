"""The dumbbell on the host kernel: HTB bottleneck, reno/cubic/bbr, 5 s flows, nothing left behind."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time

import pytest

from analysis.raw.loaders import load_tc_stats
from analysis.raw.pcap import account_pcap
from testbed.host.session import run_session
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict
from tests.conftest import tcptrace_connection
from tests.prerequisites import require_tools
from topologies.params import tcp_goodput_limit_mbit

RATE_MBIT = 10


def host_scenario(ccs, duration_s=5, name="host-dumbbell"):
    # rtt_ms 0: the host kernel has no netem, so only the bottleneck (HTB + pfifo) is emulated
    return scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": RATE_MBIT, "queue_pkts": 100}},
            "flows": [{"cc": ccs, "rtt_ms": 0}],
            "duration_s": duration_s,
        },
        name=name,
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from tests.conftest import leftovers

    assert leftovers() == []
    result = run_session(
        host_scenario(["reno", "cubic", "bbr"]), backend="local", results_root=tmp_path_factory.mktemp("results")
    )
    return result


@pytest.mark.parametrize("cc", ["reno", "cubic", "bbr"])
def test_goodput_within_10_percent_of_the_limit(sweep, cc):
    (run,) = [r for r in sweep.runs if r.parent.name == f"cc={cc}"]
    manifest = rundir.read_json(run / "manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    assert manifest["connections"][0]["cc"] == cc
    server = json.loads((run / "raw" / "iperf3-c0-server.json").read_text())
    goodput = server["end"]["sum_received"]["bits_per_second"] / 1e6
    limit = tcp_goodput_limit_mbit(RATE_MBIT)
    assert goodput == pytest.approx(limit, rel=0.10), f"{cc}: {goodput:.2f} Mbit/s vs limit {limit:.2f}"
    client = json.loads((run / "raw" / "iperf3-c0-client.json").read_text())
    assert client["end"]["sender_tcp_congestion"] == cc


def test_run_directory_is_complete(sweep):
    run = sweep.runs[0]
    manifest = rundir.read_json(run / "manifest.json")
    raw = {p.name for p in (run / "raw").iterdir()}
    assert {
        "iperf3-c0-client.json",
        "iperf3-c0-server.json",
        "rl.pcap",
        "tcpdump-rl.log",
        "tcp_probe.txt",
        "tc-stats.json",
    } <= raw
    assert "rr.pcap" not in raw, "forward-only traffic is captured where it enters the bottleneck, at rl only"
    assert manifest["capture"]["pcap"]["rl"]["dropped"] == 0
    assert manifest["capture"]["tcp_probe"]["events"] > 100
    assert manifest["capture"]["tcp_probe"]["lost"] == 0
    assert manifest["kernel"]["release"]
    assert manifest["backend"]["kind"] == "local"
    assert set(manifest["files"]) >= {f"raw/{name}" for name in raw}
    assert manifest["fidelity"]["checks"], "fidelity checks were recorded"
    bottleneck_checks = [c for c in manifest["fidelity"]["checks"] if c["name"].startswith("bottleneck rate")]
    assert bottleneck_checks and bottleneck_checks[0]["ok"], bottleneck_checks
    # the local backend is watched for contention as a guest is, its run's process tree being the "guest"
    (host,) = [c for c in manifest["fidelity"]["checks"] if c["name"] == "host contention"]
    assert host["ok"] and "by others than the run's processes" in host["detail"], host
    assert manifest["host"]["subject"] == "run" and manifest["host"]["guest_cpu_s"] > 0


def test_runs_after_the_first_use_its_network_and_count_their_own_packets(sweep):
    """reno, cubic and bbr differ only in the algorithm: the first run builds the network, the next two
    get it kept (testbed.guest.keeper), bind the same client port again (no TIME_WAIT left), and their
    bottleneck counters, less where the run before left them, are their own run's bytes, not the sum."""
    runs = {r.parent.name: r for r in sweep.runs}
    kept = {cc: rundir.read_json(runs[f"cc={cc}"] / "manifest.json")["network"] for cc in ("reno", "cubic", "bbr")}
    assert kept["reno"] == {"kept_from_earlier_runs": False, "runs_before_on_it": 0, "sockets_left_before": 0}
    assert {k: v for k, v in kept["cubic"].items() if k != "sockets_left_before"} == {
        "kept_from_earlier_runs": True,
        "runs_before_on_it": 1,
    }
    assert kept["bbr"]["kept_from_earlier_runs"] and kept["bbr"]["runs_before_on_it"] == 2
    assert all(isinstance(kept[cc]["sockets_left_before"], int) for cc in kept)
    for cc in ("cubic", "bbr"):
        raw = runs[f"cc={cc}"] / "raw"
        tc = load_tc_stats(raw / "tc-stats.json", before=raw / "tc-stats-before.json")
        sent = tc[(tc["node"] == "rl") & (tc["intf"] == "rl-eth0") & tc["root"]]["bytes"].iloc[0]
        cumulative = load_tc_stats(raw / "tc-stats.json")
        since_start = cumulative[(cumulative["node"] == "rl") & (cumulative["intf"] == "rl-eth0") & cumulative["root"]][
            "bytes"
        ].iloc[0]
        received = json.loads((raw / "iperf3-c0-server.json").read_text())["end"]["sum_received"]["bytes"]
        # a run whose traffic never kept the queue busy (bbr) is probed after it, through the same queue
        probes = [json.loads(p.read_text())["end"]["sum"]["bytes"] for p in raw.glob("udp-probe-*-client.json")]
        assert received <= sent <= 1.1 * (received + sum(probes)) + 200_000, (cc, sent, received, probes)
        assert since_start > 1.5 * received, "the counters went on from the runs before"


def test_every_run_traces_its_own_connection_through_the_kept_trace_instance(sweep):
    """The tracing instance is made by the first run and kept (testbed.guest.capture): each run's trace
    holds its own events only, from its own start, none lost."""
    starts = []
    for run in sweep.runs:
        manifest = rundir.read_json(run / "manifest.json")
        assert manifest["capture"]["tcp_probe"]["events"] > 100 and manifest["capture"]["tcp_probe"]["lost"] == 0
        first = (run / "raw" / "tcp_probe.txt").read_text().split("tcp_probe:")[0].split()[-1].rstrip(":")
        starts.append((float(first), manifest["t0_monotonic"]))
    for first_event, t0 in starts:
        assert t0 - 5 < first_event < t0 + 10, "a trace began with the run before's events"


def test_fresh_networks_build_every_run_anew(tmp_path):
    result = run_session(
        host_scenario(["reno", "cubic"], duration_s=2, name="fresh"),
        backend="local",
        results_root=tmp_path,
        keep_networks=False,
    )
    for run in result.runs:
        manifest = rundir.read_json(run / "manifest.json")
        assert manifest["status"] == "complete", manifest.get("reason")
        assert manifest["network"]["kept_from_earlier_runs"] is False
        assert not (run / "raw" / "tc-stats-before.json").exists()


def test_nothing_left_behind(sweep):
    from tests.conftest import leftovers

    assert leftovers() == []


def test_westwood_on_the_host_kernel_is_refused_with_what_it_has(tmp_path, clean_kernel):
    result = run_session(host_scenario(["westwood"], duration_s=2), backend="local", results_root=tmp_path)
    manifest = rundir.read_json(result.runs[0] / "manifest.json")
    assert manifest["status"] == "failed"
    assert "no congestion control westwood" in manifest["reason"]
    assert "it has: " in manifest["reason"] and "reno" in manifest["reason"]
    assert "guest" in manifest["reason"]


def test_reverse_flows_share_the_bottleneck_reverse_direction(tmp_path, clean_kernel):
    scenario = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": RATE_MBIT, "queue_pkts": 100}},
            "flows": [{"cc": "reno", "rtt_ms": 0}, {"cc": "cubic", "rtt_ms": 0, "direction": "reverse"}],
            "duration_s": 5,
        },
        name="host-reverse",
    )
    result = run_session(scenario, backend="local", results_root=tmp_path)
    (run,) = result.runs
    manifest = rundir.read_json(run / "manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    forward, reverse = manifest["connections"]
    assert (forward["sender"], reverse["sender"]) == ("l0", "r1")
    assert manifest["topology"]["capture_nodes"] == ["rl", "rr"]
    assert (run / "raw" / "rr.pcap").stat().st_size > 0
    limit = tcp_goodput_limit_mbit(RATE_MBIT)
    for conn in ("c0", "c1"):
        server = json.loads((run / "raw" / f"iperf3-{conn}-server.json").read_text())
        goodput = server["end"]["sum_received"]["bits_per_second"] / 1e6
        # each direction has its own bottleneck queue: both flows get most of the rate
        assert goodput > 0.6 * limit, f"{conn}: {goodput:.2f} Mbit/s"
    rates = [c for c in manifest["fidelity"]["checks"] if c["name"].startswith("bottleneck rate")]
    assert sorted(c["name"] for c in rates) == ["bottleneck rate forward", "bottleneck rate reverse"]


@pytest.mark.parametrize("cc", ["reno", "cubic", "bbr"])
def test_pcap_accounting_agrees_with_tcptrace_on_fresh_captures(sweep, cc):
    require_tools(("tcptrace",), "the pcap cross-check")
    (run,) = [r for r in sweep.runs if r.parent.name == f"cc={cc}"]
    conn = rundir.read_json(run / "manifest.json")["connections"][0]
    pcap = run / "raw" / "rl.pcap"
    output = subprocess.run(["tcptrace", "-l", "-n", str(pcap)], capture_output=True, text=True, check=True).stdout
    theirs = tcptrace_connection(output, conn["client_port"])
    ours = account_pcap(pcap).direction(
        conn["sender_ip"], conn["client_port"], conn["receiver_ip"], conn["server_port"]
    )
    assert ours.data_bytes > 1_000_000, "a 5 s flow at 10 Mbit/s"
    pairs = {
        "actual data pkts": ours.data_pkts,
        "actual data bytes": ours.data_bytes,
        "rexmt data pkts": ours.rexmit_pkts,
        "rexmt data bytes": ours.rexmit_bytes,
        "unique bytes sent": ours.unique_bytes,
        "data xmit time": ours.transfer_s,
    }
    for label, value in pairs.items():
        message = f"{cc} {label}: ours {value}, tcptrace {theirs[label]}"
        assert value == pytest.approx(theirs[label], rel=0.01, abs=1e-3), message


def test_a_local_run_beside_a_cpu_hog_is_untrustworthy_naming_the_host_and_runs_once_more(tmp_path, caplog):
    # busy loops outside this process's tree (a child of this test would count as the run's own): each
    # started in the background by a shell that exits at once; they outlive the session, so the run's second
    # attempt (testbed.host.contended) is contended too, and there is no third
    loops = " ".join(["sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!;"] * (os.cpu_count() or 1))
    hogs = [int(pid) for pid in subprocess.run(["sh", "-c", loops], capture_output=True, text=True).stdout.split()]
    caplog.set_level(logging.INFO, logger="testbed")
    try:
        result = run_session(
            host_scenario(["reno"], duration_s=2, name="hogged"), backend="local", results_root=tmp_path
        )
    finally:
        for pid in hogs:
            os.kill(pid, 9)
    manifest = rundir.read_json(result.runs[0] / "manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    assert manifest["fidelity"]["trustworthy"] is False
    (problem,) = [p for p in manifest["fidelity"]["problems"] if p.startswith("host contention")]
    assert "others than the run's processes used" in problem, problem
    assert "busiest others: " in problem and " sh -c while :; do :; done: " in problem, problem  # who they were
    assert "1/1 complete, 1 untrustworthy" in caplog.text, caplog.text[-2000:]
    # said as the run was judged, then named (not said again) when it runs once more
    assert f": host contention: failed: {problem.removeprefix('host contention: ')}" in caplog.text, caplog.text[-2000:]
    assert "host contention: 1 run(s) alone: " in caplog.text and "(why: above)" in caplog.text, caplog.text[-2000:]
    assert "run_again" in manifest["backend"], manifest["backend"]
    (first,) = (result.directory / ".attempts").glob("*/*/")  # the first attempt, set aside
    assert rundir.read_json(first / "manifest.json")["fidelity"]["trustworthy"] is False
    timing = rundir.read_json(result.directory / rundir.SESSION)["timing"]
    assert list(timing["run_again"]["runs"]) == [result.runs[0].relative_to(result.directory).as_posix()]


#: a peer that accepts and never reads: the client's window closes and its unsent data keeps a socket closed by
#: a kill in FIN-WAIT-1, as a peer whose RST a lossy link lost does
SILENT_PEER = """
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5999)); s.listen(); conn, _ = s.accept(); time.sleep(60)
"""
#: a client on a fixed port, as iperf3 --cport binds it, that sends until its buffers are full
FIXED_PORT_CLIENT = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
s.bind(("0.0.0.0", 40000)); s.connect((sys.argv[1], 5999)); s.setblocking(False)
while True:
    try: s.send(b"x" * 65536)
    except BlockingIOError: print("full", flush=True); break
import time; time.sleep(60)
"""
BIND_40000 = 'python3 -c \'import socket; socket.socket().bind(("0.0.0.0", 40000)); print("bound")\' 2>&1 | tail -1'


def test_a_socket_a_run_left_on_its_client_port_is_destroyed_before_the_next_run(clean_kernel):
    """iperf3's "Address already in use" (one run of 135 in make reproduce): a run's client killed with data
    unsent, its peer silent, leaves its socket on the fixed client port; a kept network's next run could not
    bind it. Ending the run destroys it (testbed.guest.network.Network.end_run)."""
    from testbed.guest.network import Network
    from topologies.dumbbell import Dumbbell

    topology = Dumbbell.from_scenario(host_scenario(["reno"]).points[0].scenario)
    sender, receiver = topology.endpoints(0, "forward")
    with Network(topology.netspec(), "orphans") as net:
        # not started by the run (Network.popen): end_run spares it
        peer = net.nodes[receiver.node].popen(
            ["python3", "-c", SILENT_PEER], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            for _ in range(100):  # until the peer listens
                if ":5999" in net.cmd(receiver.node, "ss -ltnH 'sport = :5999'"):
                    break
                time.sleep(0.05)
            client = net.popen(sender.node, ["python3", "-c", FIXED_PORT_CLIENT, receiver.ip], stdout=subprocess.PIPE)
            assert client.stdout.readline().strip() == b"full"
            client.kill()
            client.wait()
            assert "FIN-WAIT-1" in net.cmd(sender.node, "ss -tanH 'sport = :40000'")
            assert "Address already in use" in net.cmd(sender.node, BIND_40000)
            assert net.end_run() >= 1
            assert net.cmd(sender.node, "ss -tanH 'sport = :40000'").strip() == ""
            assert net.cmd(sender.node, BIND_40000).strip() == "bound"
        finally:
            peer.kill()
            peer.wait()
