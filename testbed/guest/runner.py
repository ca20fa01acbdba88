"""The runner: executes runs on this kernel, as root (inside the guest, or on a host that can).

One run = build the topology, check fidelity, start captures, start one iperf3 server and
client per connection at its start time, wait, collect, tear down, write the manifest. A
failing connection (iperf3 dying, an algorithm the kernel lacks) fails its run with the reason,
keeps the raw files, and the next run of the plan goes on. Ctrl-C / SIGTERM mark the run
``incomplete`` and stop the plan; the topology is always torn down.

Invoked as ``python -m testbed.guest.runner PLAN.json`` (what the guest executes) or through
:func:`execute_plan` from the CLI when the local kernel can run the plan itself. In the lab VM the
host copies the session folder in, runs the same command over ssh and copies it back.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

from testbed.guest import capture, fidelity, launch, lossbpf, spray
from testbed.guest.network import MARKER, Network, cleanup_leftovers
from testbed.guest.shaping import set_delay, set_delays
from testbed.plan import progress
from testbed.plan.connections import Connection, plan_connections
from testbed.plan.plan import Plan, PlanContext
from testbed.results import provenance, rundir
from testbed.results.manifest import SCHEMA_VERSION, read_manifest, write_manifest
from testbed.results.pcapfile import first_bulk_times
from testbed.scenario.algorithms import lookup as cc_lookup
from testbed.scenario.points import RunSpec
from testbed.scenario.schema import Scenario
from topologies import TOPOLOGIES
from topologies.lossmodel import timeline
from topologies.shaping import CONTROL_PORT_MIN

#: sysctls set in every host namespace before traffic: no metrics carried from one connection to the
#: next (the papers' labs); the ephemeral ports of iperf3's control connections (topologies.shaping.CONTROL_PORT_MIN)
HOST_SYSCTLS = {"net.ipv4.tcp_no_metrics_save": "1", "net.ipv4.ip_local_port_range": f"{CONTROL_PORT_MIN} 65535"}
#: how long iperf3 may overrun its planned stop before the run is declared failed: this, plus a little
#: per connection (under TCG, 210 iperf3 pairs ending at once write their JSON slowly)
CLIENT_GRACE_S = 30.0
CLIENT_GRACE_S_PER_CONNECTION = 0.1
#: every client must be started and stopped (held for its start time) within this long
CLIENT_PRESTART_TIMEOUT_S = 600.0
#: traffic starts at least this long after the schedule is computed (servers listening, captures on)
START_DELAY_S = 1.0
#: iperf3's cookie, the first thing a client sends on a data connection: a larger segment starts the data
IPERF3_COOKIE_BYTES = 37
UDP_PROBE_S = 3.0
UDP_PROBE_PORT = 5100
#: a probe that reads off (a busy moment of the emulator, or its start-up datagram lost) is run once more;
#: both are recorded, the check is the last one
UDP_PROBE_ATTEMPTS = 2
UDP_PROBE_SLACK_S = 12.0
PING_COUNT = 10
#: seconds between pings (10 in a second: the min over more samples reads the emulator's least latency)
PING_INTERVAL_S = 0.1
#: a pair whose idle RTT misses the configured one by more than this gets its netem delay corrected
CALIBRATION_THRESHOLD_MS = 0.25
#: at most this many rounds of measure-and-correct per pair
CALIBRATION_ROUNDS = 3
#: a pair whose base RTT check would fail is measured again this many more rounds at most (its lowest counts)
RTT_RECHECK_ROUNDS = 2


#: a run may take this many times its estimate (plus RUN_WATCHDOG_SLACK_S) before the watchdog fails it
RUN_WATCHDOG_FACTOR = 2.0
RUN_WATCHDOG_SLACK_S = 120.0


class RunFailed(Exception):
    """A run could not complete; the message says why and what to do."""


#: the steps after the traffic, each named on the console when done: a guest that falls silent after
#: the traffic (twice on record under TCG, without even the watchdog's stack dump) shows how far it got
COLLECT_PHASES = ("servers_exit", "traces_stop", "tcpdump_stop", "data_starts", "tc_stats", "bpf_counters",
                  "network_down")  # fmt: skip


class RunTimedOut(RunFailed):
    """The run watchdog fired: something in the run blocked far beyond its time budget."""


_logger = logging.getLogger(__name__)


def log(message: str) -> None:
    """A status line on the console (``[testbed] ...`` once :func:`main` configured logging)."""
    _logger.info(message)


def available_ccs() -> list[str]:
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def load_project_modules(paths: dict[str, str | None]) -> dict[str, str]:
    """insmod this project's modules; returns the .ko path of each as loaded.

    A path of None means "build it here for the running kernel" (the lab VM: the host has no
    headers for the VM's kernel). A module of the same name already loaded from another build
    (the lab VM's DKMS copy, loaded at boot) is replaced, so that what runs is what the manifest
    records.
    """
    from testbed.guest import modules

    loaded = {}
    for name, path in paths.items():
        ko = Path(path) if path else modules.build(os.uname().release, log=log)
        wanted = provenance.module_info(str(ko)) or {}
        sys_module = Path(f"/sys/module/{name}")
        if sys_module.exists():
            current = (sys_module / "srcversion").read_text().strip() if (sys_module / "srcversion").exists() else None
            if current and current == wanted.get("srcversion"):
                loaded[name] = str(ko)
                continue
            out = subprocess.run(["rmmod", name], capture_output=True, text=True)
            if out.returncode != 0:
                raise RunFailed(f"another build of {name} is loaded and cannot be unloaded ({out.stderr.strip()}): "
                                f"end the connections that use it, or 'rmmod {name}'")  # fmt: skip
        out = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
        if out.returncode != 0:
            raise RunFailed(f"insmod {ko} failed: {out.stderr.strip()} (built for another kernel? see dmesg)")
        loaded[name] = str(ko)
    return loaded


def ensure_kernel_support(scenario: Scenario, needs_netem: bool, project_modules: dict[str, str | None]) -> dict:
    """Load the modules a run needs; fail with what the kernel has when something is missing.

    Returns the project modules as loaded (name -> .ko path)."""
    wanted = sorted({flow.cc for flow in scenario.flows})
    loaded = load_project_modules(
        {m: p for m, p in project_modules.items() if m in {cc_lookup(cc).module for cc in wanted}}
    )
    modules = [cc_lookup(cc).module for cc in wanted if cc_lookup(cc).module and not cc_lookup(cc).project_module]
    modules += ["sch_htb", "cls_u32"] + (["sch_netem", "sch_prio"] if needs_netem else [])
    subprocess.run(["modprobe", "-a", "-q", *modules], capture_output=True)
    have = available_ccs()
    missing = [cc for cc in wanted if cc not in have]
    if missing:
        raise RunFailed(
            f"this kernel ({os.uname().release}) has no congestion control {', '.join(missing)}; it has: "
            f"{', '.join(have)}. westwood and vegas are modules of Debian's kernel: run in the guest "
            f"(testbed run --backend guest, the default when the host kernel lacks them)"
        )
    return loaded


def _ping_pairs(net: Network, connections: list[Connection]) -> dict[int, str]:
    """ping output per topology pair (sender to receiver of its first connection), all pairs at once.

    Started from each sender's shell in the background (a fork there costs far less than a process
    started from the runner, which matters with hundreds of pairs under TCG), from the sender's
    address: on a host with one address per flow, that selects the flow's path."""
    first: dict[int, Connection] = {}
    for c in connections:
        first.setdefault(c.pair, c)
    ping = f"ping -n -q -c {PING_COUNT} -i {PING_INTERVAL_S}"
    with tempfile.TemporaryDirectory(prefix="cc-testbed-ping-") as tmp:
        scripts: dict[str, list[str]] = {}
        for pair, c in first.items():
            line = f"{ping} -I {c.sender_ip} {c.receiver_ip} > {tmp}/{pair}.txt 2>&1 &"
            scripts.setdefault(c.sender, []).append(line)
        for node, lines in scripts.items():  # a script, not one long line: a shell's tty takes 4095 bytes a line
            Path(tmp, f"{node}.sh").write_text("\n".join([*lines, "wait", ""]))
        net.cmd_each({node: f"sh {tmp}/{node}.sh" for node in scripts})
        return {pair: Path(tmp, f"{pair}.txt").read_text(errors="replace") for pair in first}


def _calibrate_delays(net: Network, topology, connections: list[Connection]) -> tuple[list[dict], dict[int, str]]:
    """Correct each pair's netem delay for the emulator's own latency, measured idle.

    Forwarding and netem's timers add latency of their own (about 1.5-4 ms per round trip in a
    TCG guest, depending on the netem stages on the path; ~0.05 ms with KVM): the pair's one-way
    delay is lowered by half that excess. The excess varies from one round of pings to the next
    (a busy moment adds 2 ms to every ping of a round), and it only ever adds, so the estimate is
    the smallest excess seen so far: a round that reads high changes nothing, one that reads lower
    lowers the delay and is measured again (up to CALIBRATION_ROUNDS rounds).

    Returns the record per pair and, per pair, the ping output for its fidelity check: of the rounds
    measured at the pair's final delay, the one with the lowest minimum (the base RTT is the least
    latency the path shows). A pair changed in the last round is pinged once more for it, and a pair
    whose check would miss its tolerance (a TCG stall delays every ping of a round: 261.9 ms against
    250 once, after rounds of 252.5 and 249.7) gets up to RTT_RECHECK_ROUNDS more rounds.
    """
    adjustable = hasattr(topology, "delay_egress")
    records: dict[int, dict] = {}
    at_final: dict[int, list[str]] = {}  # per pair, the ping outputs measured at its current delay
    pending = connections
    for _ in range(CALIBRATION_ROUNDS if adjustable else 1):
        changed = set()
        per_destination: dict[tuple[str, str], dict[str, float]] = {}  # set together, one bpftool per interface
        for pair, out in _ping_pairs(net, pending).items():
            at_final.setdefault(pair, []).append(out)
            configured, nominal = topology.base_rtt_ms(pair), topology.one_way_delay_ms(pair)
            summary = fidelity.parse_ping(out)
            if summary is None or not adjustable or configured <= 0:
                continue
            record = records.setdefault(pair, {"pair": pair, "configured_rtt_ms": configured, "measured_min_rtt_ms": [],
                                               "one_way_netem_delay_ms": nominal, "excess_ms": None})  # fmt: skip
            applied = record["one_way_netem_delay_ms"]
            record["measured_min_rtt_ms"].append(summary["min_ms"])
            excess = summary["min_ms"] - (configured + 2 * (applied - nominal))
            record["excess_ms"] = round(excess if record["excess_ms"] is None else min(record["excess_ms"], excess), 3)
            target = max(0.0, nominal - record["excess_ms"] / 2)
            if abs(summary["min_ms"] - configured) <= CALIBRATION_THRESHOLD_MS or abs(target - applied) < 0.01:
                continue
            for node, intf, *dst in topology.delay_egress(pair):
                if dst:
                    per_destination.setdefault((node, intf), {})[dst[0]] = target
                else:
                    set_delay(net.netns_path(node), intf, target)
            record["one_way_netem_delay_ms"] = round(target, 3)
            at_final[pair] = []
            changed.add(pair)
        for (node, intf), delays in per_destination.items():
            set_delays(net.netns_path(node), intf, delays)
        pending = [c for c in connections if c.pair in changed]
        if not pending:
            break
    for recheck in range(RTT_RECHECK_ROUNDS + 1):
        for pair, out in (_ping_pairs(net, pending) if pending else {}).items():
            at_final[pair].append(out)
        missing = {pair for pair, outs in at_final.items()
                   if not fidelity.rtt_check("", _lowest_ping(outs), topology.base_rtt_ms(pair)).ok}  # fmt: skip
        if not missing or recheck == RTT_RECHECK_ROUNDS:
            break
        pending = [c for c in connections if c.pair in missing]
    for pair, record in records.items():
        record["check_rounds"] = len(at_final[pair])
    return [records[pair] for pair in sorted(records)], {pair: _lowest_ping(outs) for pair, outs in at_final.items()}


def _lowest_ping(outputs: list[str]) -> str:
    """The ping output with the lowest minimum RTT (one without replies only if no other has any)."""

    def minimum(out: str) -> float:
        summary = fidelity.parse_ping(out)
        return float("inf") if summary is None else summary["min_ms"]

    return min(outputs, key=minimum)


def _probe_paths(net: Network, topology, connections: list[Connection], raw: Path,
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
            client_out, server_out = _udp_probe(net, topology, probe)
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


def _udp_probe(net: Network, topology, probe) -> tuple[str, str]:
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


def _prestart_clients(net: Network, connections: list[Connection], raw: Path,
                      scratch: Path) -> dict[str, subprocess.Popen]:  # fmt: skip
    """Every connection's iperf3 client, started before traffic and held (stopped at its first
    connect(), :mod:`testbed.guest.launch`) until it is continued shortly before its start time.

    Starting a process costs tens of milliseconds in a TCG guest, seconds for hundreds of them.
    We wait until every one has stopped, so that no SIGCONT can come before its SIGSTOP."""
    library = launch.hold_library()
    clients = {
        c.id: net.popen(c.sender, launch.client_command(c, scratch, library), output=raw / f"iperf3-{c.id}-client.json")
        for c in connections
    }
    deadline = time.monotonic() + CLIENT_PRESTART_TIMEOUT_S
    for cid, proc in clients.items():
        while _process_state(proc.pid) != "T":
            if proc.poll() is not None or time.monotonic() > deadline:
                output = (raw / f"iperf3-{cid}-client.json").read_text(errors="replace").strip()[-300:]
                raise RunFailed(f"the iperf3 client of {cid} could not be started and held before traffic "
                                f"(exit status {proc.poll()}; its output: {output!r}); is iperf3 installed in "
                                f"the guest?")  # fmt: skip
            time.sleep(0.01)
    return clients


def _data_starts(connections: list[Connection], raw: Path, t0_unix: float) -> tuple[dict[str, float], list[str]]:
    """How late each connection's data started against its schedule, from the captures (the first segment
    larger than iperf3's cookie where its packets enter the network); and what could not be read."""
    lag: dict[str, float] = {}
    problems = []
    for node in sorted({c.capture_node for c in connections}):
        mine = {(c.sender_ip, c.client_port): c for c in connections if c.capture_node == node}
        found, problem = first_bulk_times(raw / f"{node}.pcap", set(mine), IPERF3_COOKIE_BYTES)
        if problem:
            problems.append(problem)
        for key, ts in found.items():
            c = mine[key]
            lag[c.id] = round(ts - (t0_unix + c.start_s), 3)
    return lag, problems


def _process_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``T``: stopped), or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _apply_flow_options(net: Network, topology, scenario: Scenario) -> dict:
    """Per-flow TCP options, set on the flow's hosts: delayed ACKs off (route ``quickack`` on the
    receiver), SACK off (``net.ipv4.tcp_sack=0`` on sender and receiver), initial window (route
    ``initcwnd`` on the sender). A host is shared by the flows of one pair: they get the union."""
    from testbed.guest.netnsutil import iproute

    routes: dict[str, dict[str, int]] = {}
    no_sack: set[str] = set()
    for flow, pairs in zip(scenario.flows, topology.flow_pairs(scenario.flows), strict=True):
        for pair in pairs:
            sender, receiver = (e.node for e in topology.endpoints(pair, flow.direction))
            if not flow.delayed_ack:
                routes.setdefault(receiver, {})["quickack"] = 1
            if flow.initcwnd_segs:
                routes.setdefault(sender, {})["initcwnd"] = flow.initcwnd_segs
            if not flow.sack:
                no_sack.update((sender, receiver))
    for node, metrics in sorted(routes.items()):
        with iproute(net.netns_path(node)) as ns:
            for dst, gateway in net.spec.routes.get(node, []):
                ns.route("replace", dst="0.0.0.0/0" if dst == "default" else dst, gateway=gateway, metrics=metrics)
    for node in sorted(no_sack):
        net.cmd(node, "sysctl -qw net.ipv4.tcp_sack=0")
    return {"route_metrics": routes, "sack_off": sorted(no_sack)}


def _tc_stats(net: Network) -> dict:
    """``tc -s -j qdisc show`` of every interface as ``{"node/intf": [qdisc, ...]}``; one call per node,
    all nodes at once (a shell round trip costs ~0.2 s in a TCG guest; a 60-node topology has 120
    interfaces)."""
    stats = {}
    for node, out in net.cmd_all("tc -s -j qdisc show").items():
        try:
            qdiscs = json.loads(out)
        except ValueError:
            qdiscs = None
        for intf in net.spec.interfaces(node):
            if qdiscs is None:
                stats[f"{node}/{intf}"] = {"unparsed": out}
            else:
                stats[f"{node}/{intf}"] = [q for q in qdiscs if q.get("dev") == intf]
    return stats


def _read_sysctls(net: Network, node: str) -> dict:
    # one shell round trip for all keys (each costs ~0.1 s in a TCG guest)
    script = "; ".join(f'echo "{key}=$(sysctl -n {key} 2>/dev/null)"' for key in provenance.SYSCTLS)
    values = dict(line.split("=", 1) for line in net.cmd(node, script).splitlines() if "=" in line)
    return {key: values.get(key, "").strip() or None for key in provenance.SYSCTLS}


def run_one(spec: RunSpec, directory: Path, context: PlanContext) -> dict:
    """Execute one run into ``directory``; returns its manifest. Never raises for a failed run."""
    raw = directory / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    scenario = spec.scenario
    run_id = f"{os.getpid()}-{time.monotonic_ns()}"
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "status": "running",
        "reason": None,
        "scenario": spec.scenario_name,
        "profile": spec.profile,
        "point_id": spec.point_id,
        "params": spec.params,
        "seed": spec.seed,
        "identity": spec.identity(),
        "resolved": scenario.model_dump(mode="json"),
        "started_utc": rundir.utc_iso(),
        "backend": context.backend,
        "git": context.git,
        "kernel": provenance.kernel_info(),
    }
    write_manifest(directory, manifest)
    trace = module_trace = scratch = None
    dumps: list[subprocess.Popen] = []
    try:
        topology = TOPOLOGIES[scenario.topology.name].from_scenario(scenario)
        netspec = topology.netspec()
        connections = plan_connections(scenario, topology)
        # capture where senders' packets enter the network, before any queue can drop them
        capture_nodes = sorted({c.capture_node for c in connections})
        manifest["topology"] = {
            "name": scenario.topology.name,
            "queue_pkts": getattr(topology, "queue_pkts", None),
            "bottlenecks": [b.__dict__ for b in netspec.bottlenecks],
            "capture_nodes": capture_nodes,
        }
        manifest["connections"] = [c.to_dict() for c in connections]
        project_modules = ensure_kernel_support(scenario, netspec.needs_netem, context.project_modules)
        manifest["modules"] = {
            m: provenance.module_info(project_modules.get(m, m))
            for m in sorted({cc_lookup(c.cc).module for c in connections if cc_lookup(c.cc).module}
                            | ({"sch_netem", "sch_prio"} if netspec.needs_netem else set()) | {"sch_htb"}
                            | ({"sch_fq"} if netspec.needs_fq else set()))
        }  # fmt: skip
        uses_project_module = any(cc_lookup(c.cc).project_module for c in connections)
        manifest["tools"] = provenance.tool_versions()
        cleanup_leftovers()
        t_setup = time.monotonic()
        phases: dict[str, float] = {}
        last = [t_setup]

        def mark(phase: str) -> None:  # seconds spent in each phase, for the manifest (where time goes)
            now = time.monotonic()
            phases[phase] = round(now - last[0], 3)
            last[0] = now
            if phase in COLLECT_PHASES:
                log(f"  collected: {phase} in {phases[phase]:.1f} s")

        with Network(netspec, run_id, host_sysctls=HOST_SYSCTLS) as net:
            mark("network_up")
            manifest["host_options"] = _apply_flow_options(net, topology, scenario)
            manifest["sysctls"] = _read_sysctls(net, connections[0].sender)
            sprayers = [(s, spray.setup(net.netns_path(s.node), s)) for s in netspec.sprayers]
            mark("options_sysctls_sprayers")
            manifest["timing"] = {"setup_s": round(time.monotonic() - t_setup, 3), "phases_s": phases}
            t_check = time.monotonic()
            manifest["delay_calibration"], pings = _calibrate_delays(net, topology, connections)
            mark("delay_calibration")
            report = _probe_paths(net, topology, connections, raw, pings)
            mark("rtt_rate_probes")
            manifest["timing"]["fidelity_check_s"] = round(time.monotonic() - t_check, 3)
            for check in report.checks:
                log(f"  fidelity: {check.name}: {'ok' if check.ok else 'OFF'}: {check.detail}")

            ports = [c.client_port for c in connections]
            trace = capture.tcp_probe_trace(raw / "tcp_probe.txt", ports)
            trace.start()
            if uses_project_module:
                module_trace = capture.module_trace(raw / "westwood_tb.txt", ports)
                module_trace.start()
            for node in capture_nodes:
                # tcpdump writes the pcap itself (-w); its log ends with its own drop counts
                log_path = raw / f"tcpdump-{node}.log"
                argv = capture.tcpdump_argv(raw / f"{node}.pcap", netspec.capture_filters.get(node, "tcp"))
                dumps.append(net.popen(node, argv, output=log_path))
            for node, proc in zip(capture_nodes, dumps, strict=True):  # no traffic before every capture is open
                problem = capture.wait_tcpdump_listening(proc, raw / f"tcpdump-{node}.log")
                if problem:
                    raise RunFailed(f"the capture on {node} did not start: {problem}")
            mark("captures_ready")
            scratch = launch.make_scratch()
            servers = {c.id: net.popen(c.receiver, launch.server_command(c, scratch),
                                       output=raw / f"iperf3-{c.id}-server.json") for c in connections}  # fmt: skip
            clients = _prestart_clients(net, connections, raw, scratch)
            mark("clients_prestart")
            time.sleep(0.5)
            grace_s = CLIENT_GRACE_S + CLIENT_GRACE_S_PER_CONNECTION * len(connections)
            channels = _load_loss_channels(net, spec, scenario.duration_s + grace_s)
            # a client is continued ahead of its start time by its set-up time (launch.release_lead_s), so that
            # its data leaves on schedule; the schedule's zero leaves room for the earliest
            setup_rtt = getattr(topology, "setup_rtt_ms", None)
            lead = {c.id: launch.release_lead_s(c, setup_rtt(c.pair) if setup_rtt else None) for c in connections}
            t0 = time.monotonic() + max([START_DELAY_S] + [lead[c.id] - c.start_s for c in connections])
            t0_unix = time.time() + (t0 - time.monotonic())  # the captures' clock
            manifest["t0_monotonic"] = t0
            manifest["t0_unix_s"] = t0_unix
            lossbpf.start(channels, round(t0 * 1e9))
            sprayed_before = [spray.sent(maps, len(s.paths) + 1) for s, maps in sprayers]
            cpu_before = fidelity.cpu_times()
            # the host samples its own load from here to the window's end (hostload)
            log(progress.format_line(progress.TrafficWindow(edge="begins")))
            pending = sorted(connections, key=lambda c: c.start_s - lead[c.id])
            deadline = t0 + max(c.stop_s for c in connections) + grace_s
            release_lag: dict[str, float] = {}
            last_progress = 0.0
            while True:
                now = time.monotonic()
                while pending and now >= t0 + pending[0].start_s - lead[pending[0].id]:
                    c = pending.pop(0)
                    clients[c.id].send_signal(signal.SIGCONT)
                    # a late client still runs its whole duration, so its own deadline moves; how late its
                    # data started is a fidelity check (from the captures, below)
                    started = time.monotonic()
                    release_lag[c.id] = round(started - (t0 + c.start_s - lead[c.id]), 3)
                    deadline = max(deadline, started + c.duration_s + grace_s)
                    now = time.monotonic()
                running = [c.id for c in connections if c.id in release_lag and clients[c.id].poll() is None]
                if not pending and not running:
                    break
                if now > deadline:
                    raise RunFailed(
                        f"connections {', '.join(running)} still running {grace_s:g} s after "
                        f"their planned stop (counted from their actual start); iperf3 hung or the guest is too slow"
                    )
                if now >= t0 and now - last_progress >= 10:
                    log(progress.format_line(progress.TrafficTick(t_s=now - t0, duration_s=scenario.duration_s,
                                                                  active=len(running))))  # fmt: skip
                    last_progress = now
                time.sleep(0.05)
            manifest["timing"]["traffic_s"] = round(time.monotonic() - t0, 3)
            manifest["timing"]["client_release_lag_s"] = release_lag
            t_teardown = time.monotonic()
            last[0] = t_teardown
            cpu_after = fidelity.cpu_times()
            log(progress.format_line(progress.TrafficWindow(edge="ends")))
            report.checks.append(fidelity.cpu_check(fidelity.busy_pct(cpu_before, cpu_after)))
            for proc in servers.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            mark("servers_exit")
            manifest["capture"] = {"tcp_probe": trace.stop()}
            trace = None
            if module_trace is not None:
                manifest["capture"]["westwood_tb"] = module_trace.stop()
                module_trace = None
            if manifest["capture"]["tcp_probe"]["lost"]:
                report.checks.append(fidelity.Check("tcp_probe events", False, manifest["capture"]["tcp_probe"]["lost"],
                                                    0, "ring buffer lost events"))  # fmt: skip
            mark("traces_stop")
            for proc in dumps:
                capture.stop_tcpdump(proc)
            mark("tcpdump_stop")
            manifest["capture"]["pcap"] = {
                node: capture.tcpdump_stats((raw / f"tcpdump-{node}.log").read_text(errors="replace"))
                for node in capture_nodes
            }
            for node, stats in manifest["capture"]["pcap"].items():
                report.checks.append(fidelity.capture_check(node, stats))
            start_lag, unread = _data_starts(connections, raw, t0_unix)
            manifest["timing"]["data_start_lag_s"] = start_lag
            report.checks.append(fidelity.start_lag_check(connections, start_lag, unread))
            mark("data_starts")
            tc_stats = _tc_stats(net)
            rundir.write_json_atomic(raw / "tc-stats.json", tc_stats)
            mark("tc_stats")
            manifest["spray"] = _read_sprayers(sprayers, sprayed_before, tc_stats, report)
            manifest["loss_channels"] = _read_loss_channels(channels, raw, report)
            mark("bpf_counters")
            manifest["fidelity"] = report.to_dict()
            failures = _connection_failures(connections, clients, raw)
            last[0] = time.monotonic()
        mark("network_down")
        manifest["timing"]["collect_teardown_s"] = round(time.monotonic() - t_teardown, 3)
        if failures:
            raise RunFailed("; ".join(failures))
        manifest["status"] = "complete"
    except KeyboardInterrupt:
        manifest["status"] = "incomplete"
        manifest["reason"] = "interrupted (Ctrl-C or SIGTERM); raw files kept"
        raise
    except RunFailed as err:
        manifest["status"] = "failed"
        manifest["reason"] = str(err)
    except Exception as err:  # noqa: BLE001 - any failure is recorded in the manifest, not lost
        manifest["status"] = "failed"
        manifest["reason"] = f"{type(err).__name__}: {err}"
        (raw / "runner-traceback.txt").write_text(traceback.format_exc())
    finally:
        for leftover_trace in (trace, module_trace):
            if leftover_trace is not None:
                try:
                    leftover_trace.stop()
                except Exception:  # noqa: BLE001 - the run's own error is what gets reported
                    for name in capture.INSTANCES:
                        capture.remove_instance(name)
        for proc in dumps:
            capture.stop_tcpdump(proc)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        manifest["ended_utc"] = rundir.utc_iso()
        manifest["files"] = rundir.file_hashes(directory)
        write_manifest(directory, manifest)
    return manifest


def _load_loss_channels(net: Network, spec: RunSpec, horizon_s: float) -> list[lossbpf.Channel]:
    """Load every timed two-state loss channel of the topology with its timeline from the run's seed.

    Channel k (interfaces in sorted order) uses stream k of the seed: independent channels, the
    same ones again for the same seed."""
    timed = sorted((key, plan.timed_loss) for key, plan in net.spec.egress.items() if plan.timed_loss is not None)
    channels = []
    for stream, ((node, intf), model) in enumerate(timed):
        channel = lossbpf.Channel(node, intf, net.netns_path(node), model, stream)
        channel.load(spec.seed, timeline(model, spec.seed, horizon_s, stream))
        channels.append(channel)
    return channels


def _read_loss_channels(channels: list[lossbpf.Channel], raw: Path, report: fidelity.FidelityReport) -> list[dict]:
    """Write each channel's realized timeline to raw/loss-<node>-<intf>.json; summaries for the manifest."""
    summaries = []
    for channel in channels:
        data = channel.read()
        rundir.write_json_atomic(raw / f"loss-{channel.node}-{channel.ifname}.json", data)
        for kind, total in data["per_state"].items():
            report.checks.append(fidelity.loss_check(f"loss {kind} {channel.node}/{channel.ifname}", total["seen"],
                                                     total["dropped"], total["configured_loss_pct"]))  # fmt: skip
        summaries.append({key: data[key] for key in ("node", "interface", "stream", "packets_seen", "per_state")})
    return summaries


def _read_sprayers(sprayers, before: list[list[int]], tc_stats: dict, report: fidelity.FidelityReport) -> list[dict]:
    """Packets each sprayer put on each path during traffic (its own counters) and what each path's
    queue sent over the whole run (tc); the check: every path carried traffic, in equal turns."""
    records = []
    for (sprayer, maps), first in zip(sprayers, before, strict=True):
        counts = [end - start for end, start in zip(spray.sent(maps, len(first)), first, strict=True)]
        interfaces = [sprayer.intf] + [intf for intf, _ in sprayer.paths]
        queue_sent = []
        for intf in interfaces:
            qdiscs = tc_stats.get(f"{sprayer.node}/{intf}") or []
            roots = [q for q in qdiscs if isinstance(q, dict) and q.get("root")]
            queue_sent.append(roots[0].get("packets") if roots else None)
        ok = min(counts) > 0 and max(counts) - min(counts) <= 1 and all(n for n in queue_sent)
        detail = (f"{sprayer.direction} packets per path during traffic {counts}, sent by each path's queue "
                  f"(whole run) {queue_sent}")  # fmt: skip
        report.checks.append(fidelity.Check(f"spray {sprayer.node}", ok, float(sum(counts)), None, detail))
        records.append({"node": sprayer.node, "direction": sprayer.direction, "interfaces": interfaces,
                        "sprayed_packets": counts, "queue_sent_packets": queue_sent})  # fmt: skip
    return records


def _connection_failures(connections: list[Connection], clients: dict, raw: Path) -> list[str]:
    failures = []
    for c in connections:
        proc = clients.get(c.id)
        text = (raw / f"iperf3-{c.id}-client.json").read_text(errors="replace")
        error = None
        try:
            error = json.loads(text).get("error")
        except ValueError:
            error = f"output is not JSON: {text.strip()[:200]!r}"
        if proc is not None and proc.returncode != 0 or error:
            failures.append(
                f"connection {c.id} ({c.cc} {c.sender}->{c.receiver}) failed: iperf3 exit "
                f"{proc.returncode if proc else 'not started'}: {error or 'no error text'}"
            )
    return failures


def _fail_manifest(directory: Path, reason: str) -> dict:
    manifest = read_manifest(directory).model_copy(update={"status": "failed", "reason": reason,
                                                           "ended_utc": rundir.utc_iso()})  # fmt: skip
    write_manifest(directory, manifest)
    return manifest.to_data()


def execute_plan(plan: Plan, session_dir: Path) -> int:
    """Run every run of a plan (see :mod:`testbed.host.session`); returns the number of runs not complete.

    Run directories in the plan are relative to ``session_dir`` (the plan's folder), so a plan
    runs wherever its session folder is: here, in a virtme-ng guest, or copied into the lab VM.
    """
    runs = plan.runs
    lossbpf.use_objects(plan.context.bpf_objects)
    launch.use_hold_library(plan.context.hold_library)
    not_complete = 0
    started = time.monotonic()
    done_s = 0.0
    total_s = sum(r.estimate_s for r in runs)
    for i, run in enumerate(runs, 1):
        spec = run.spec()
        elapsed = time.monotonic() - started
        eta = (total_s - done_s) * (elapsed / done_s) if done_s else total_s - done_s
        log(progress.format_line(progress.RunStarted(index=i, total=len(runs), scenario=spec.scenario_name,
                                                     point_id=spec.point_id, seed=spec.seed, eta_s=eta)))  # fmt: skip
        budget_s = run_budget_s(run.estimate_s)
        try:
            with _watchdog(budget_s):
                manifest = run_one(spec, session_dir / run.run_dir, plan.context)
        except RunTimedOut as err:
            # fired during run_one's own cleanup: record it and clean up here
            manifest = _fail_manifest(session_dir / run.run_dir, str(err))
            os.environ.pop(MARKER, None)
            cleanup_leftovers()
        done_s += run.estimate_s
        if manifest["status"] != "complete":
            not_complete += 1
        log(progress.format_line(progress.RunEnded(index=i, total=len(runs), status=manifest["status"],
                                                   reason=manifest.get("reason"))))  # fmt: skip
    return not_complete


def run_budget_s(estimate_s: float) -> float:
    """How long a run may take before the watchdog fails it (the host's hang detection counts on it)."""
    return estimate_s * RUN_WATCHDOG_FACTOR + RUN_WATCHDOG_SLACK_S


_MAIN_PID = os.getpid()


@contextlib.contextmanager
def _watchdog(budget_s: float):
    """Fail the current run when it takes longer than ``budget_s``.

    Two parts: SIGALRM raises :class:`RunTimedOut` in the runner (a wait on a process or a pipe
    that never ends), and faulthandler prints every thread's stack to stderr (the guest console)
    a little earlier, which also works when the runner is stuck inside a system call that no
    signal interrupts.
    """
    previous = signal.signal(signal.SIGALRM, _timed_out)
    faulthandler.dump_traceback_later(max(1.0, budget_s - 5), exit=False)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


def _timed_out(signum, frame) -> None:
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signum)
    raise RunTimedOut(
        "the run exceeded its time budget (watchdog); the stacks of the runner at that moment are in the "
        "guest console log (or stderr)"
    )


def _interrupt(signum, frame) -> None:
    # pyroute2's netns helpers are forks of this process and inherit the handler: only the
    # runner itself turns SIGTERM into an orderly stop
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.guest.runner", description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path, help="plan JSON written by `testbed run`")
    args = parser.parse_args(argv)
    progress.configure_logging()
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print("testbed.guest.runner: must run as root (network namespaces, qdiscs, tracing)", file=sys.stderr)
        return 2
    plan = Plan.read(args.plan)
    try:
        failed = execute_plan(plan, args.plan.parent)
    except KeyboardInterrupt:
        log("interrupted: the current run is marked incomplete; the topology was torn down")
        return 130
    (args.plan.parent / "plan.done").write_text(f"{failed}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
