"""Fidelity probes before traffic: each pair's base RTT (from the calibration's pings) and a UDP
rate probe of each bottleneck direction that carries flows."""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path

from testbed.guest import fidelity
from testbed.guest.network import Network
from testbed.plan.connections import Connection

UDP_PROBE_S = 3.0


UDP_PROBE_PORT = 5100


#: a probe that reads off (a busy moment of the emulator, or its start-up datagram lost) is run once more;
#: both are recorded, the check is the last one
UDP_PROBE_ATTEMPTS = 2


UDP_PROBE_SLACK_S = 12.0


def probe_paths(net: Network, topology, connections: list[Connection], raw: Path,
                 pings: dict[int, str]) -> fidelity.FidelityReport:  # fmt: skip
    """The fidelity checks before traffic: each pair's base RTT from ``pings`` (the calibration's
    last measurement), then one UDP rate probe per topology probe in a direction that has flows."""
    report = fidelity.FidelityReport()
    for pair, out in sorted(pings.items()):
        (raw / f"ping-pair{pair}.txt").write_text(out)
        report.checks.append(fidelity.rtt_check(f"base RTT pair {pair}", out, topology.base_rtt_ms(pair)))
    directions = {c.direction for c in connections}
    probes = [probe for probe in topology.probes() if probe.direction in directions]
    for index, probe in enumerate(probes):
        # a second probe in one direction (another path of the topology) is named by its pair
        first = all(p.direction != probe.direction for p in probes[:index])
        label = probe.direction if first else f"{probe.direction}-pair{probe.pair}"
        expected = fidelity.expected_udp_rate_mbit(probe.rate_mbit, probe.loss_pct)
        attempts = []
        for attempt in range(1, UDP_PROBE_ATTEMPTS + 1):
            client_out, server_out = udp_probe(net, topology, probe)
            measured = fidelity.udp_steady_rate_mbit(server_out)
            attempts.append(measured)
            final = fidelity.rate_check("", measured, expected).ok or attempt == UDP_PROBE_ATTEMPTS
            prefix = f"udp-probe-{label}" if final else f"udp-probe-{label}-attempt{attempt}"
            (raw / f"{prefix}-client.json").write_text(client_out)
            (raw / f"{prefix}-server.json").write_text(server_out)
            # let the probe's standing queue drain before the next probe or TCP
            time.sleep((probe.queue_pkts or 100) * 1514 * 8 / (probe.rate_mbit * 1e6) + 0.5)
            if final:
                break
        check = fidelity.rate_check(f"bottleneck rate {label.replace('-pair', ' pair ')}", measured, expected)
        if len(attempts) > 1:
            shown = ", ".join("no result" if m is None else f"{m:.3f}" for m in attempts[:-1])
            check = replace(check, detail=f"{check.detail}; attempt {len(attempts)} (before: {shown})")
        report.checks.append(check)
    return report


def udp_probe(net: Network, topology, probe) -> tuple[str, str]:
    """One UDP rate probe (iperf3 -u at 1.2 x the rate for UDP_PROBE_S); the client's and server's JSON.

    iperf3 3.12 starts a UDP test with one datagram each way and no retry: on a lossy link that
    handshake is lost now and then, and the client would wait 30 s. It gets UDP_PROBE_S + twice the
    path's RTT + UDP_PROBE_SLACK_S, then both ends are killed (the attempt has no result)."""
    sender, receiver = topology.endpoints(probe.pair, probe.direction)
    server = net.popen(receiver.node, ["iperf3", "-s", "-1", "-J", "-i", "0.5", "-p", str(UDP_PROBE_PORT)],
                       stdout=subprocess.PIPE)  # fmt: skip
    time.sleep(0.5)
    client = net.popen(
        sender.node,
        ["iperf3", "-c", receiver.ip, "-B", sender.ip, "-p", str(UDP_PROBE_PORT), "-u",
         "-b", f"{probe.rate_mbit * 1.2:.3f}M", "-l", str(fidelity.UDP_PAYLOAD_BYTES), "-t", f"{UDP_PROBE_S:g}", "-J"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    outputs = []
    timeout = UDP_PROBE_S + 2 * topology.base_rtt_ms(probe.pair) / 1000 + UDP_PROBE_SLACK_S
    for proc, wait in ((client, timeout), (server, 10.0)):
        try:
            out = proc.communicate(timeout=wait)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        outputs.append(out.decode(errors="replace"))
    return outputs[0], outputs[1]
