"""Per-flow TCP options on the host kernel: a fixed-size transfer, delayed ACKs off, SACK, RACK, TLP
and F-RTO off and an initial window of 3, set where the flow's hosts are and seen on the wire, and
undone for the next run on the same network."""

from __future__ import annotations

import json
import subprocess

from testbed.guest.collect import apply_flow_options, flow_options
from testbed.guest.network import Network
from testbed.host.session import run_session
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict
from topologies.dumbbell import Dumbbell


def options_scenario(duration_s=10):
    return scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
            "flows": [
                {
                    "cc": "reno",
                    "rtt_ms": 0,
                    "size_mb": 2,
                    "delayed_ack": False,
                    "sack": False,
                    "initcwnd_segs": 3,
                    "rack": False,
                    "tlp": False,
                    "frto": False,
                },
                {"cc": "cubic", "rtt_ms": 0},
            ],
            "duration_s": duration_s,
        },
        name="options",
    )


def test_options_land_on_the_flow_hosts_routes_and_sysctls(clean_kernel):
    scenario = options_scenario().points[0].scenario
    topology = Dumbbell.from_scenario(scenario)
    with Network(topology.netspec(), "flow-options") as net:
        applied = apply_flow_options(net, flow_options(topology, scenario))
        both = ["l0", "r0"]
        assert applied == {
            "route_metrics": {"l0": {"initcwnd": 3}, "r0": {"quickack": 1}},
            "sack_off": both,
            "rack_off": both,
            "tlp_off": both,
            "frto_off": both,
            "ecn_on": [],
        }
        assert "initcwnd 3" in net.cmd("l0", "ip route show default")
        assert "quickack 1" in net.cmd("r0", "ip route show default")
        for host in both:  # RACK, TLP and F-RTO off: the papers' loss recovery
            assert net.cmd(
                host, "sysctl -n net.ipv4.tcp_sack net.ipv4.tcp_recovery net.ipv4.tcp_early_retrans net.ipv4.tcp_frto"
            ).split() == ["0", "0", "0", "0"]
        # the other flow's hosts keep the defaults
        assert "initcwnd" not in net.cmd("l1", "ip route show default")
        assert net.cmd("l1", "sysctl -n net.ipv4.tcp_sack").strip() == "1"
        # the next run on this (kept) network has other options: the first run's are undone
        other = {"route_metrics": {"l1": {"quickack": 1}}, "sack_off": ["l1"], "ecn_on": ["l1", "r1"]}
        apply_flow_options(net, other, previous=applied)
        assert "initcwnd" not in net.cmd("l0", "ip route show default")
        assert "quickack" not in net.cmd("r0", "ip route show default")
        assert net.cmd(
            "l0", "sysctl -n net.ipv4.tcp_sack net.ipv4.tcp_recovery net.ipv4.tcp_early_retrans net.ipv4.tcp_frto"
        ).split() == ["1", "1", "3", "2"]  # the kernel's defaults
        assert "quickack 1" in net.cmd("l1", "ip route show default")
        assert net.cmd("l1", "sysctl -n net.ipv4.tcp_sack").strip() == "0"
        assert net.cmd("r1", "sysctl -n net.ipv4.tcp_ecn").strip() == "1"
        apply_flow_options(net, {"route_metrics": {}, "sack_off": [], "ecn_on": []}, previous=other)
        assert net.cmd("r1", "sysctl -n net.ipv4.tcp_ecn").strip() == "2"


def test_a_fixed_size_transfer_without_sack_runs_to_its_size(tmp_path, clean_kernel):
    result = run_session(options_scenario(), backend="local", results_root=tmp_path)
    (run,) = result.runs
    manifest = rundir.read_json(run / "manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    client = json.loads((run / "raw" / "iperf3-c0-client.json").read_text())
    assert client["end"]["sum_sent"]["bytes"] == 2_000_000
    syns = subprocess.run(
        ["tcpdump", "-r", str(run / "raw" / "rl.pcap"), "-n", "-v", "tcp[tcpflags] & tcp-syn != 0 and tcp port 40000"],
        capture_output=True,
        text=True,
    ).stdout
    assert "mss" in syns and "sackOK" not in syns, syns
    syns_other = subprocess.run(
        ["tcpdump", "-r", str(run / "raw" / "rl.pcap"), "-n", "-v", "tcp[tcpflags] & tcp-syn != 0 and tcp port 40001"],
        capture_output=True,
        text=True,
    ).stdout
    assert "sackOK" in syns_other
