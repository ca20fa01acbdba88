"""One run, as phases: prepare, build the network, calibrate, capture, traffic, collect and check, write.

:func:`run_one` reads as the list of phases; each phase is a function of the run's :class:`RunState`
(what the phases share: the manifest being written, the network, the processes started). A failing
phase fails the run with its reason, keeps the raw files, and the plan goes on with the next run;
Ctrl-C / SIGTERM mark it ``incomplete``; whatever happens the topology is torn down and the
manifest written (``_finish``). Past 500 lines because the phases are read as one list, each phase a
short function of the same :class:`RunState`; what a phase calls lives in the modules it names.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from testbed.guest import calibrate, capture, clients, collect, fidelity, launch, lossbpf, probes, queues, spray
from testbed.guest.console import log
from testbed.guest.errors import RunFailed
from testbed.guest.keeper import Lease, NetworkKeeper
from testbed.guest.kernel import ensure_kernel_support
from testbed.guest.latency import LatencyTraffic
from testbed.guest.network import Network
from testbed.plan import progress
from testbed.plan.connections import Connection, plan_connections
from testbed.plan.latency import LatencyFlow, plan_latency
from testbed.plan.plan import PlanContext
from testbed.results import provenance, rundir
from testbed.results.manifest import SCHEMA_VERSION, write_manifest
from testbed.scenario.algorithms import lookup as cc_lookup
from testbed.scenario.points import RunSpec
from topologies import TOPOLOGIES
from topologies.shaping import CONTROL_PORT_MIN

#: sysctls set in every host namespace before traffic: no metrics carried from one connection to the
#: next (the papers' labs); the ephemeral ports of iperf3's control connections (topologies.shaping.CONTROL_PORT_MIN);
#: no TIME_WAIT sockets, so that a run on a network kept from the run before binds the same fixed client
#: ports (testbed.guest.keeper; closing skips TIME_WAIT, the data transfer is untouched)
HOST_SYSCTLS = {
    "net.ipv4.tcp_no_metrics_save": "1",
    "net.ipv4.ip_local_port_range": f"{CONTROL_PORT_MIN} 65535",
    "net.ipv4.tcp_max_tw_buckets": "0",
}
#: the steps after the traffic, each named on the console when done: a guest that falls silent after
#: the traffic (twice on record under TCG, without even the watchdog's stack dump) shows how far it got
COLLECT_PHASES = (
    "queues_stop",
    "servers_exit",
    "traces_stop",
    "tcpdump_stop",
    "data_starts",
    "rate_checks",
    "tc_stats",
    "bpf_counters",
    "network_down",
)
#: seconds between the runner's "traffic t=..." lines
TRAFFIC_PROGRESS_S = 10


@dataclass
class RunState:
    """What the phases of one run share."""

    spec: RunSpec
    directory: Path
    context: PlanContext
    manifest: dict
    topology: object = None
    netspec: object = None
    flow_options: dict = field(default_factory=dict)
    reuse_key: str | None = None  # runs with the same key can share one network (testbed.guest.keeper)
    lease: Lease | None = None
    connections: list[Connection] = field(default_factory=list)
    latency_flows: list[LatencyFlow] = field(default_factory=list)  # ping and requests flows
    latency: LatencyTraffic | None = None
    capture_nodes: list[str] = field(default_factory=list)
    uses_project_module: bool = False
    trace: object = None
    module_trace: object = None
    sampler: queues.QueueSampler | None = None
    dumps: list[subprocess.Popen] = field(default_factory=list)
    scratch: Path | None = None
    phases: dict[str, float] = field(default_factory=dict)
    last: float = 0.0  # when the phase being timed began
    t_start: float = field(default_factory=time.monotonic)
    t_setup: float = 0.0
    t_teardown: float = 0.0
    #: in virtual time, where raw files are written until the run ends (a tmpfs in the guest, :func:`_start`)
    staging: Path | None = None

    @property
    def raw(self) -> Path:
        return self.staging or self.directory / "raw"

    def mark(self, phase: str) -> None:
        """Seconds spent in each phase, for the manifest (where time goes)."""
        now = time.monotonic()
        self.phases[phase] = round(now - self.last, 3)
        self.last = now
        if phase in COLLECT_PHASES:
            log(f"  collected: {phase} in {self.phases[phase]:.1f} s")


@dataclass
class Traffic:
    """The processes and the schedule of a run's traffic."""

    servers: dict[str, subprocess.Popen]
    clients: dict[str, subprocess.Popen]
    channels: list[lossbpf.Channel]
    sprayers: list
    lead: dict[str, float]
    grace_s: float
    t0: float
    t0_unix: float


def run_one(spec: RunSpec, directory: Path, context: PlanContext, keeper: NetworkKeeper | None = None) -> dict:
    """Execute one run into ``directory``; returns its manifest. Never raises for a failed run.

    ``keeper``: hands the run the network of the run before when they are the same (else a new one),
    and keeps this run's network for the next when the run went well; without it, a network of its own."""
    state = _start(spec, directory, context)
    manifest = state.manifest
    keeper = keeper or NetworkKeeper(enabled=False)
    try:
        _prepare(state)
        with keeper.network(state.netspec, state.reuse_key, HOST_SYSCTLS) as lease:
            state.lease, net = lease, lease.net
            manifest["network"] = {
                "kept_from_earlier_runs": lease.reused,
                "runs_before_on_it": lease.runs_before,
                "sockets_left_before": lease.carried.get("sockets_left", 0),  # by the run before: destroyed
            }
            state.mark("network_up")
            sprayers = _configure_hosts(state, net)
            report, endpoints = _check_and_start(state, net)
            traffic = _start_traffic(state, net, endpoints, sprayers)
            failures = _traffic_and_collect(state, net, traffic, report)
            # only a network that served its run well is handed on
            lease.keep = not failures and report.trustworthy
            state.last = time.monotonic()
        state.mark("network_down")
        manifest["timing"]["collect_teardown_s"] = round(time.monotonic() - state.t_teardown, 3)
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
        (state.raw / "runner-traceback.txt").write_text(traceback.format_exc())
    finally:
        _finish(state)
    return manifest


def _start(spec: RunSpec, directory: Path, context: PlanContext) -> RunState:
    """The run's folder and its first manifest, ``running``: a run killed from here on is seen as such."""
    (directory / "raw").mkdir(parents=True, exist_ok=True)
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
        "resolved": spec.scenario.model_dump(mode="json"),
        "started_utc": rundir.utc_iso(),
        "backend": context.backend,
        "git": context.git,
        "kernel": provenance.kernel_info(),
    }
    write_manifest(directory, manifest)
    # In virtual time a vCPU that waits for the host (a write to the shared run folder) is idle, and QEMU's
    # icount with sleep=off then jumps the guest's clock to its next timer: the host's I/O would reach the
    # run's clock (a client started 5.5 s late that way). Raw files stay in the guest until the run ends.
    virtual = (context.backend or {}).get("clock") == "virtual"
    staging = launch.make_scratch(kind="raw") if virtual else None
    return RunState(spec, directory, context, manifest, staging=staging)


def _prepare(state: RunState) -> None:
    """The topology and its connections, the kernel modules loaded, the tools' versions."""
    scenario, manifest = state.spec.scenario, state.manifest
    state.topology = TOPOLOGIES[scenario.topology.name].from_scenario(scenario)
    state.netspec = netspec = state.topology.netspec()
    state.connections = connections = plan_connections(scenario, state.topology, state.context.slot)
    # capture where senders' packets enter the network, before any queue can drop them
    state.capture_nodes = sorted({c.capture_node for c in connections})
    manifest["topology"] = {
        "name": scenario.topology.name,
        "queue_pkts": getattr(state.topology, "queue_pkts", None),
        "bottlenecks": [b.__dict__ for b in netspec.bottlenecks],
        "capture_nodes": state.capture_nodes,
    }
    manifest["connections"] = [c.to_dict() for c in connections]
    state.latency_flows = plan_latency(scenario, state.topology)
    manifest["latency_flows"] = [f.to_dict() for f in state.latency_flows]
    state.flow_options = collect.flow_options(state.topology, scenario)
    # the per-flow options are not part of it: a kept network's hosts get the next run's options
    state.reuse_key = repr((netspec, HOST_SYSCTLS))
    project_modules = ensure_kernel_support(
        scenario, netspec.needs_netem, state.context.project_modules, netspec.qdisc_modules
    )
    manifest["modules"] = {
        m: provenance.module_info(project_modules.get(m, m))
        for m in sorted(
            {cc_lookup(c.cc).module for c in connections if cc_lookup(c.cc).module}
            | ({"sch_netem", "sch_prio"} if netspec.needs_netem else set())
            | {"sch_htb"}
            | ({"sch_fq"} if netspec.needs_fq else set())
            | set(netspec.qdisc_modules)
        )
    }
    state.uses_project_module = any(cc_lookup(c.cc).project_module for c in connections)
    manifest["tools"] = provenance.tool_versions()
    state.t_setup = state.last = time.monotonic()
    state.phases["prepare"] = round(state.t_setup - state.t_start, 3)


def _configure_hosts(state: RunState, net: Network) -> list:
    """Per-flow TCP options set (on a kept network: changed from the run before's) and the sender's
    sysctls recorded; the multipath sprayers attached (on a kept network: the run before's, counting on)."""
    manifest, carried = state.manifest, state.lease.carried
    manifest["host_options"] = carried["flow_options"] = collect.apply_flow_options(
        net, state.flow_options, previous=carried.get("flow_options")
    )
    manifest["sysctls"] = collect.read_sysctls(net, state.connections[0].sender)
    if "sprayers" not in carried:
        carried["sprayers"] = [(s, spray.setup(net.netns_path(s.node), s)) for s in state.netspec.sprayers]
    state.mark("options_sysctls_sprayers")
    manifest["timing"] = {"setup_s": round(time.monotonic() - state.t_setup, 3), "phases_s": state.phases}
    return carried["sprayers"]


def _check_and_start(state: RunState, net: Network) -> tuple[fidelity.FidelityReport, Endpoints]:
    """The base RTT checks, the captures and the iperf3 endpoints (servers listening, clients held).

    A network built for this run is calibrated idle first (an emulator's latency measured under load
    would be too high). On a kept network the delays stand and the RTTs are only checked: those pings
    go on beside the start of the captures and the endpoints (the check reads their minimum, the
    least latency the path shows, which a busy moment does not raise; a round that misses is pinged
    again), which saves the pings' 0.6 s per run; where they still miss, the RTTs are checked once more
    when the endpoints are up and all is idle. The servers start while the captures start; the
    clients only once every capture is open, so that a run stopped from there on (Ctrl-C) has them."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        checking = pool.submit(_calibrate, state, net) if state.lease.reused else None
        report = None if checking else _calibrate(state, net)
        if report is not None:
            state.mark("delay_calibration")
        _start_captures(state, net)
        servers = _start_servers(state, net)
        _await_captures(state, net)
        endpoints = _start_clients(state, net, servers)
        if checking is not None:
            report = checking.result()
            if not report.trustworthy:
                # those pings shared two vCPUs with the start of every capture and endpoint, which can raise
                # even a round's least RTT (a 6-hop parking lot's read +7 ms of 200); now all is idle
                log("  an RTT check missed while the endpoints started: the RTTs checked again, idle")
                report = _calibrate(state, net)
            state.mark("delay_calibration")  # what was left of it after the captures and the endpoints
    return report, endpoints


def _calibrate(state: RunState, net: Network) -> fidelity.FidelityReport:
    """Delays corrected for the emulator's latency, then the base RTT checks before traffic (the rate
    checks read the queues during the traffic: ``_check_rates``)."""
    manifest, t_check = state.manifest, time.monotonic()
    # a ping or requests flow on a pair of its own has its base RTT calibrated and checked as a connection's
    bulk_pairs = {c.pair for c in state.connections}
    paths = state.connections + [f for f in state.latency_flows if f.pair not in bulk_pairs]
    manifest["delay_calibration"], pings = calibrate.calibrate_delays(
        net, state.topology, paths, shape=repr(state.netspec), delays_set=state.lease.reused
    )
    report = fidelity.FidelityReport(probes.rtt_checks(state.topology, state.raw, pings))
    manifest["timing"]["fidelity_check_s"] = round(time.monotonic() - t_check, 3)
    _log_checks(report.checks)
    return report


def _log_checks(checks: list[fidelity.Check]) -> None:
    for check in checks:
        log(f"  fidelity: {check.name}: {'ok' if check.ok else 'OFF'}: {check.detail}")


def _start_captures(state: RunState, net: Network) -> None:
    """tcp_probe (and the module's trace) and one tcpdump per capture node started (``_await_captures``
    waits for them)."""
    raw, ports = state.raw, [c.client_port for c in state.connections]
    state.trace = capture.tcp_probe_trace(raw / "tcp_probe.txt", ports)
    state.trace.start()
    if state.uses_project_module:
        state.module_trace = capture.module_trace(raw / "westwood_tb.txt", ports)
        state.module_trace.start()
    for node in state.capture_nodes:
        # tcpdump writes the pcap itself (-w); its log ends with its own drop counts
        argv = capture.tcpdump_argv(raw / f"{node}.pcap", state.netspec.capture_filters.get(node, "tcp"))
        state.dumps.append(net.popen(node, argv, output=raw / f"tcpdump-{node}.log"))


def _await_captures(state: RunState, net: Network) -> None:
    """Every tcpdump open (no traffic before), then the queues sampled."""
    for node, proc in zip(state.capture_nodes, state.dumps, strict=True):
        problem = capture.wait_tcpdump_listening(proc, state.raw / f"tcpdump-{node}.log")
        if problem:
            raise RunFailed(f"the capture on {node} did not start: {problem}")
    spec = state.netspec
    disciplined = frozenset(
        key for key, plan in spec.egress.items() if plan.discipline is not None and plan.discipline.discipline != "fifo"
    )
    state.sampler = queues.QueueSampler(
        [(b.node, b.intf) for b in spec.bottlenecks],
        net.netns_path,
        hz=state.context.queue_hz,
        disciplined=disciplined,
        live_path=state.raw / queues.LIVE_CSV,
    )
    state.sampler.start()
    state.mark("captures_ready")


@dataclass
class Endpoints:
    """A run's iperf3 servers (listening) and clients (held before their first connect())."""

    servers: dict[str, subprocess.Popen]
    clients: dict[str, subprocess.Popen]


def _start_servers(state: RunState, net: Network) -> dict[str, subprocess.Popen]:
    """Every connection's iperf3 server started (``_start_clients`` waits until they listen)."""
    state.scratch = scratch = launch.make_scratch()
    state.latency = LatencyTraffic(net, state.latency_flows, state.raw)
    state.latency.start_servers()
    return {
        c.id: launch.start(net, c.receiver, launch.server_command(c, scratch), state.raw / f"iperf3-{c.id}-server.json")
        for c in state.connections
    }


def _start_clients(state: RunState, net: Network, servers: dict[str, subprocess.Popen]) -> Endpoints:
    """Clients started and held, servers listening."""
    connections = state.connections
    held = clients.prestart_clients(net, connections, state.raw, state.scratch)
    state.latency.prestart()
    clients.wait_listening(servers, {c.id: c.server_port for c in connections}, state.raw)
    state.mark("clients_prestart")
    return Endpoints(servers, held)


def _start_traffic(state: RunState, net: Network, endpoints: Endpoints, sprayers: list) -> Traffic:
    """Loss channels armed; the schedule's time zero."""
    connections, scenario = state.connections, state.spec.scenario
    grace_s = clients.CLIENT_GRACE_S + clients.CLIENT_GRACE_S_PER_CONNECTION * len(connections)
    channels = collect.load_loss_channels(net, state.spec, scenario.duration_s + grace_s)
    # a client is continued ahead of its start time by its set-up time (launch.release_lead_s), so that
    # its data leaves on schedule; the schedule's zero leaves room for the earliest
    setup_rtt = getattr(state.topology, "setup_rtt_ms", None)
    lead = {c.id: launch.release_lead_s(c, setup_rtt(c.pair) if setup_rtt else None) for c in connections}
    t0 = time.monotonic() + max([clients.START_DELAY_S] + [lead[c.id] - c.start_s for c in connections])
    t0_unix = time.time() + (t0 - time.monotonic())  # the captures' clock
    state.manifest["t0_monotonic"] = t0
    state.manifest["t0_unix_s"] = t0_unix
    # the running run's manifest with its time zero, connections and topology: what the live page
    # (testbed/report/live/livefeed.py) puts the growing traces on; one small file, before the traffic
    write_manifest(state.directory, state.manifest)
    lossbpf.start(channels, round(t0 * 1e9))
    state.latency.release(t0)
    return Traffic(endpoints.servers, endpoints.clients, channels, sprayers, lead, grace_s, t0, t0_unix)


def _traffic_and_collect(state: RunState, net: Network, traffic: Traffic, report: fidelity.FidelityReport) -> list[str]:
    """The traffic window (the host samples its own load between its two lines), then the collection;
    returns the connections that failed."""
    sprayed_before = [spray.sent(maps, len(s.paths) + 1) for s, maps in traffic.sprayers]
    cpu_before = fidelity.cpu_times()
    # the host samples its own load from here to the window's end (hostload)
    log(progress.format_line(progress.TrafficWindow(edge="begins")))
    release_lag = _release_and_wait(state, traffic)
    latency_failures = state.latency.wait(traffic.t0)
    state.manifest["timing"]["traffic_s"] = round(time.monotonic() - traffic.t0, 3)
    state.manifest["timing"]["client_release_lag_s"] = release_lag
    state.t_teardown = state.last = time.monotonic()
    cpu_after = fidelity.cpu_times()
    log(progress.format_line(progress.TrafficWindow(edge="ends")))
    report.checks.append(fidelity.cpu_check(fidelity.busy_pct(cpu_before, cpu_after)))
    samples = _stop_sampler(state, traffic.t0)
    probed = state.lease.carried.setdefault("probed", {})
    with ThreadPoolExecutor(max_workers=1) as pool:
        # without a probe to come (it would cross the queues), the qdiscs are read beside the collection
        early = (
            None
            if probes.will_probe(state.netspec, state.connections, samples, probed)
            else pool.submit(collect.tc_stats, net)
        )
        _collect_captures(state, traffic, report)
        _check_rates(state, net, samples, report)
        tc_stats = collect.tc_stats(net) if early is None else early.result()
    rundir.write_json_atomic(state.raw / "tc-stats.json", tc_stats)
    # on a kept network the counters go on from the run before: the analysis subtracts where they stood
    carried = state.lease.carried
    if "tc_stats" in carried:
        rundir.write_json_atomic(state.raw / "tc-stats-before.json", carried["tc_stats"])
    report.checks += collect.netem_loss_checks(state.netspec, tc_stats, carried.get("tc_stats"))
    carried["tc_stats"] = tc_stats
    state.mark("tc_stats")
    state.manifest["spray"] = collect.read_sprayers(traffic.sprayers, sprayed_before, tc_stats, report)
    state.manifest["loss_channels"] = collect.read_loss_channels(traffic.channels, state.raw, report)
    state.manifest["random_sources"] = collect.random_sources(state.netspec.egress, state.spec.seed)
    state.mark("bpf_counters")
    state.manifest["fidelity"] = report.to_dict()
    return collect.connection_failures(state.connections, traffic.clients, state.raw) + latency_failures


def _stop_sampler(state: RunState, t0: float) -> list[queues.QueueSample]:
    """The queues' samples of the traffic window, written to ``raw/queues.csv``."""
    samples = state.sampler.stop()
    if state.sampler.error:
        log(f"  queue sampling stopped early: {state.sampler.error}")
    state.manifest["timing"]["queue_sampler_cpu_s"] = state.sampler.cpu_s
    state.sampler = None
    queues.write_csv(state.raw / "queues.csv", samples, t0)
    state.mark("queues_stop")
    return samples


def _check_rates(
    state: RunState, net: Network, samples: list[queues.QueueSample], report: fidelity.FidelityReport
) -> None:
    """Each bottleneck's rate from its queue during the traffic (a UDP probe only where it cannot tell)."""
    checks = probes.rate_checks(
        net,
        state.topology,
        state.netspec,
        state.connections,
        state.raw,
        samples,
        probed=state.lease.carried.setdefault("probed", {}),
        run=f"{state.directory.parent.name} {state.directory.name}",  # not state.raw's: a staging folder
    )
    _log_checks(checks)
    report.checks += checks
    state.mark("rate_checks")


def _release_and_wait(state: RunState, traffic: Traffic) -> dict[str, float]:
    """Continue each held client at its start time (less its set-up lead) and wait for all to end.

    A late client still runs its whole duration, so its own deadline moves; how late its data started
    is a fidelity check (from the captures, in the collection). Returns each client's release lag."""
    connections, lead, t0 = state.connections, traffic.lead, traffic.t0
    pending = sorted(connections, key=lambda c: c.start_s - lead[c.id])
    deadline = t0 + max(c.stop_s for c in connections) + traffic.grace_s
    release_lag: dict[str, float] = {}
    last_progress = 0.0
    while True:
        now = time.monotonic()
        while pending and now >= t0 + pending[0].start_s - lead[pending[0].id]:
            c = pending.pop(0)
            traffic.clients[c.id].send_signal(signal.SIGCONT)
            started = time.monotonic()
            release_lag[c.id] = round(started - (t0 + c.start_s - lead[c.id]), 3)
            deadline = max(deadline, started + c.duration_s + traffic.grace_s)
            now = time.monotonic()
        running = [c.id for c in connections if c.id in release_lag and traffic.clients[c.id].poll() is None]
        if not pending and not running:
            return release_lag
        if now > deadline:
            raise RunFailed(
                f"connections {', '.join(running)} still running {traffic.grace_s:g} s after "
                f"their planned stop (counted from their actual start); iperf3 hung or the guest is too slow"
            )
        if now >= t0 and now - last_progress >= TRAFFIC_PROGRESS_S:
            tick = progress.TrafficTick(t_s=now - t0, duration_s=state.spec.scenario.duration_s, active=len(running))
            log(progress.format_line(tick))
            last_progress = now
        # wake for the next release on time (a fixed 50 ms nap made clients up to 50 ms late), else poll
        until_next = t0 + pending[0].start_s - lead[pending[0].id] - time.monotonic() if pending else 0.05
        time.sleep(min(0.05, max(0.0, until_next)))


def _collect_captures(state: RunState, traffic: Traffic, report: fidelity.FidelityReport) -> None:
    """Servers ended, traces and tcpdumps stopped with their loss counts, data start times read."""
    manifest, raw = state.manifest, state.raw
    with ThreadPoolExecutor(max_workers=1) as pool:
        # the traces are read out while the servers send their results (1-3 s over a lossy GEO path):
        # every client has ended, so its connection's events are in
        tracing = pool.submit(_stop_traces, state)
        for proc in traffic.servers.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        state.mark("servers_exit")
        manifest["capture"] = tracing.result()
    if manifest["capture"]["tcp_probe"]["lost"]:
        report.checks.append(
            fidelity.Check(
                "tcp_probe events", False, manifest["capture"]["tcp_probe"]["lost"], 0, "ring buffer lost events"
            )
        )
    state.mark("traces_stop")
    for proc in state.dumps:
        capture.stop_tcpdump(proc)
    state.mark("tcpdump_stop")
    manifest["capture"]["pcap"] = {
        node: capture.tcpdump_stats((raw / f"tcpdump-{node}.log").read_text(errors="replace"))
        for node in state.capture_nodes
    }
    for node, stats in manifest["capture"]["pcap"].items():
        report.checks.append(fidelity.capture_check(node, stats))
    start_lag, unread = clients.data_starts(state.connections, raw, traffic.t0_unix)
    manifest["timing"]["data_start_lag_s"] = start_lag
    waited = {}
    if state.netspec.has_configured_loss:
        # a set-up segment the emulated loss took costs a retransmission timeout (1.4 s at 600 ms of RTT)
        late = {
            c.id: start_lag[c.id]
            for c in state.connections
            if start_lag.get(c.id, 0.0) > fidelity.start_lag_tolerance_s(c.duration_s)
        }
        waited = clients.setup_waits(state.connections, raw, traffic.t0_unix, late) if late else {}
        manifest["timing"]["data_start_setup_retransmission_s"] = waited
    report.checks.append(fidelity.start_lag_check(state.connections, start_lag, unread, waited))
    state.mark("data_starts")


def _stop_traces(state: RunState) -> dict:
    """tcp_probe (and the module's trace) stopped; their loss counts, for the manifest's ``capture``."""
    stopped = {"tcp_probe": state.trace.stop()}
    state.trace = None
    if state.module_trace is not None:
        stopped["westwood_tb"] = state.module_trace.stop()
        state.module_trace = None
    return stopped


def _finish(state: RunState) -> None:
    """Whatever happened: traces, queue sampling and captures stopped, scratch removed, the manifest
    written with the sha256 of every file."""
    if state.sampler is not None:
        state.sampler.stop()
    if state.latency is not None:
        state.latency.stop()
    for leftover_trace in (state.trace, state.module_trace):
        if leftover_trace is not None:
            try:
                leftover_trace.stop()
            except Exception:  # noqa: BLE001 - the run's own error is what gets reported
                for base in (capture.INSTANCE, capture.MODULE_INSTANCE):
                    capture.remove_instance(capture.own_instance(base))
    for proc in state.dumps:
        capture.stop_tcpdump(proc)
    if state.scratch is not None:
        shutil.rmtree(state.scratch, ignore_errors=True)
    if state.staging is not None:  # the raw files home, now that the clock no longer matters
        shutil.copytree(state.staging, state.directory / "raw", symlinks=True, dirs_exist_ok=True)
        shutil.rmtree(state.staging, ignore_errors=True)
    state.manifest["ended_utc"] = rundir.utc_iso()
    # the run's wall time to the millisecond (the UTC stamps have whole seconds), for `testbed bench`
    state.manifest.setdefault("timing", {})["run_wall_s"] = round(time.monotonic() - state.t_start, 3)
    state.manifest["files"] = rundir.file_hashes(state.directory)
    write_manifest(state.directory, state.manifest)
