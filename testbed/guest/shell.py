"""``testbed shell``, the part that runs where the kernel is: one run's network built as a run builds it,
and Mininet's CLI (``mininet>``) opened on it, with the project's node names and a few commands of ours.

Invoked as ``python -m testbed.guest.shell PLAN.json`` (a plan of one run, written by
:mod:`testbed.host.shell`) inside the guest or the lab VM, with the terminal attached; or in the
controller's process for the local kernel (:func:`open_shell`). Mininet's own commands work as in any
Mininet (``nodes``, ``net``, ``dump``, ``pingall``, ``h1 ping r1``, ``sh``, ``py``); ours:

- ``flows``: the scenario's connections and how each stands (waiting, running, done and its goodput);
- ``start [ID ...]``: start them (all, or those named) at their offsets from now, as a run would,
  with the two-state loss channels armed; ``stop`` ends them;
- ``tc``: ``tc -s qdisc show`` of every bottleneck interface (the drops, the backlog);
- ``cwnd ID [SECONDS]``: one connection's cwnd, ssthresh, RTT and retransmissions, twice a second,
  from the sender's ``ss -ti`` (Ctrl-C stops it);
- ``live``: the live page of the flows started from then on (:mod:`testbed.guest.shelllive`): it prints
  the page's URL, served by the host.

``exit``, ``quit`` or Ctrl-D leave the CLI; the network is torn down like a run's (its processes, its
namespaces), and a guest then powers off.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed.guest import collect, kernellock, launch, lossbpf, shelllive
from testbed.guest.kernel import ensure_kernel_support
from testbed.guest.network import Network, cleanup_leftovers
from testbed.guest.run import HOST_SYSCTLS
from testbed.plan.connections import Connection, client_argv, plan_connections, server_argv
from testbed.plan.plan import Plan
from testbed.scenario.points import RunSpec
from topologies import TOPOLOGIES

#: seconds between two lines of ``cwnd``
CWND_INTERVAL_S = 0.5
#: what ``cwnd`` reads from ``ss -ti``
SS_FIELDS = re.compile(r"\b(cwnd|ssthresh|rtt|retrans|delivery_rate|bytes_acked):(\S+)")


class ShellNetwork:
    """One run's network with its connections, and the flows the shell started on it."""

    def __init__(
        self, spec: RunSpec, net: Network, connections: list[Connection], scratch: Path, folder: Path | None = None
    ):
        self.spec, self.net, self.connections, self.scratch = spec, net, connections, scratch
        self.recording = shelllive.ShellRecording(folder, spec, net, connections) if folder else None
        self.flows: dict[str, tuple[subprocess.Popen, subprocess.Popen]] = {}
        self.timers: list[threading.Timer] = []
        self.channels: list[lossbpf.Channel] = []

    def connection(self, cid: str) -> Connection:
        for c in self.connections:
            if c.id == cid:
                return c
        raise KeyError(f"no connection {cid!r}: the scenario's are {', '.join(c.id for c in self.connections)}")

    def start(self, ids: list[str]) -> list[str]:
        """Start these connections (all when empty) at their offsets from now; what it did."""
        chosen = [self.connection(i) for i in ids] if ids else self.connections
        busy = [c.id for c in chosen if self.state(c) in ("waiting", "running")]
        if busy:
            return [f"already started: {', '.join(busy)} ('stop' first)"]
        self._arm_loss(max(c.stop_s for c in chosen))
        for c in chosen:
            timer = threading.Timer(c.start_s, self._start_one, args=(c,))
            timer.daemon = True
            self.timers.append(timer)
            self.flows.pop(c.id, None)
            timer.start()
        return [
            f"{c.id}: {c.cc} {c.sender} -> {c.receiver}, from +{c.start_s:g} s for {c.duration_s:g} s" for c in chosen
        ]

    def _arm_loss(self, horizon_s: float) -> None:
        """The two-state loss channels loaded and started with the flows (a run's seed, a run's timeline)."""
        for channel in self.channels:
            channel.clear()
        self.channels = collect.load_loss_channels(self.net, self.spec, horizon_s + 30)
        lossbpf.start(self.channels, time.monotonic_ns())

    def _start_one(self, c: Connection) -> None:
        env = {"TMPDIR": str(self.scratch)}
        server = launch.start(self.net, c.receiver, launch.Command(server_argv(c), env), self._output(c, "server"))
        deadline = time.monotonic() + 5
        while not _listening(server, c.server_port) and time.monotonic() < deadline:
            time.sleep(0.02)
        client = launch.start(self.net, c.sender, launch.Command(client_argv(c), env), self._output(c, "client"))
        self.flows[c.id] = (server, client)

    def _output(self, c: Connection, side: str) -> Path:
        return self.scratch / f"iperf3-{c.id}-{side}.json"

    def state(self, c: Connection) -> str:
        if c.id not in self.flows:
            return "waiting" if any(t.is_alive() and t.args[0] is c for t in self.timers) else "idle"
        return "running" if self.flows[c.id][1].poll() is None else "done"

    def connection_text(self, c: Connection) -> str:
        state = self.state(c)
        if state == "done":
            state = f"done: {_goodput(self._output(c, 'client'))}"
        return (
            f"{c.id:12} {c.cc:12} {c.sender:>5} -> {c.receiver:5} port {c.client_port}  "
            f"+{c.start_s:g} s for {c.duration_s:g} s  {state}"
        )

    def stop(self) -> int:
        """End every flow and pending start; how many were running."""
        for timer in self.timers:
            timer.cancel()
        self.timers = []
        running = sum(client.poll() is None for _, client in self.flows.values())
        for server, client in self.flows.values():
            for proc in (client, server):
                if proc.poll() is None:
                    proc.kill()
        return running

    def live(self) -> str:
        """``live``: the page's URL (recording from now on), or why there is none."""
        if self.recording is None:
            return "no live page: this shell has no plan folder the host reads"
        return self.recording.start()

    def bottleneck_stats(self) -> str:
        lines = []
        for b in self.net.spec.bottlenecks:
            lines.append(f"--- {b.node} {b.intf} (bottleneck)")
            lines.append(self.net.cmd(b.node, f"tc -s qdisc show dev {b.intf}").rstrip())
        return "\n".join(lines) or "this topology names no bottleneck"

    def cwnd_line(self, c: Connection) -> str:
        out = self.net.cmd(c.sender, f"ss -tinH state established '( sport = :{c.client_port} )'")
        fields = dict(SS_FIELDS.findall(out))
        if not fields:
            return f"{c.id}: no established connection on port {c.client_port} ({self.state(c)})"
        return "  ".join(
            f"{key} {fields[key]}" for key in ("cwnd", "ssthresh", "rtt", "retrans", "delivery_rate") if key in fields
        )


def _listening(server: subprocess.Popen, port: int) -> bool:
    from testbed.guest.clients import listening

    return server.poll() is None and listening(server.pid, port)


def _goodput(path: Path) -> str:
    """The client's received rate from iperf3's JSON (what iperf3 itself says, not the run's analysis)."""
    try:
        end = json.loads(path.read_text())["end"]
        return f"{end['sum_received']['bits_per_second'] / 1e6:.3g} Mbit/s received"
    except (OSError, ValueError, KeyError):
        return f"no result (see {path})"


def make_cli(shell: ShellNetwork):
    """Mininet's CLI with our commands; node names in a command stand for their first address."""
    from mininet.cli import CLI
    from mininet.log import output

    addresses = {node: _first_address(shell.net.spec, node) for node in shell.net.spec.nodes}

    class TestbedCLI(CLI):
        prompt = "mininet> "

        def onecmd(self, line: str):
            # a command that fails says so and the shell goes on: the network stays up until exit
            try:
                return super().onecmd(line)
            except Exception as err:  # noqa: BLE001 - shown to the user, who decides what next
                output(f"*** {line.split()[0] if line.split() else line}: {type(err).__name__}: {err}\n")
                return None

        def default(self, line: str) -> None:
            first, *rest = line.split(" ")
            rest = [addresses.get(word) or word for word in rest]
            super().default(" ".join([first, *rest]))

        def do_pingall(self, _line: str) -> None:
            """Ping between every pair of end hosts (the topologies route between hosts, not to every router port)."""
            self.mn.ping(hosts=[self.mn[name] for name in shell.net.spec.hosts])

        def do_flows(self, _line: str) -> None:
            """List the scenario's connections and how each stands."""
            output("".join(shell.connection_text(c) + "\n" for c in shell.connections))

        def do_start(self, line: str) -> None:
            """start [ID ...]: start the scenario's connections (all, or those named) at their offsets."""
            try:
                output("\n".join(shell.start(line.split())) + "\n")
            except KeyError as err:
                output(f"{err.args[0]}\n")

        def do_stop(self, _line: str) -> None:
            """End every running connection."""
            output(f"stopped {shell.stop()} running connection(s)\n")

        def do_tc(self, _line: str) -> None:
            """tc -s qdisc show of every bottleneck interface."""
            output(shell.bottleneck_stats() + "\n")

        def do_live(self, _line: str) -> None:
            """live: the live page (goodput, cwnd, RTT, queues) of the flows started from now on: its URL."""
            output(shell.live() + "\n")

        def do_cwnd(self, line: str) -> None:
            """cwnd ID [SECONDS]: watch one connection's cwnd, ssthresh, RTT (Ctrl-C stops)."""
            try:
                c, seconds = _cwnd_target(shell, line)
            except (KeyError, ValueError) as err:
                output(f"{err.args[0]}: usage: cwnd ID [SECONDS]\n")
                return
            _watch(shell, c, seconds, output)

    return TestbedCLI


def _cwnd_target(shell: ShellNetwork, line: str) -> tuple[Connection, float]:
    """``cwnd``'s connection (the first by default) and seconds (its duration by default)."""
    words = line.split()
    c = shell.connection(words[0] if words else shell.connections[0].id)
    return c, float(words[1]) if len(words) > 1 else c.duration_s


def _watch(shell: ShellNetwork, c: Connection, seconds: float, output) -> None:
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            output(f"{time.monotonic() - started:6.1f} s  {shell.cwnd_line(c)}\n")
            time.sleep(CWND_INTERVAL_S)
    except KeyboardInterrupt:
        output("\n")


def _first_address(spec, node: str) -> str | None:
    for intf in spec.interfaces(node):
        cidrs = _cidrs(spec, node, intf)
        if cidrs:
            return cidrs[0].split("/")[0]
    return None


def _cidrs(spec, node: str, intf: str) -> list[str]:
    cidrs = spec.addresses.get((node, intf)) or []
    return [cidrs] if isinstance(cidrs, str) else list(cidrs)


def label_addresses(net: Network) -> None:
    """Mininet's own record of each interface's address, which ``pingall`` and ``dump`` read: the
    addresses were set over netlink, not through Mininet, which otherwise knows none."""
    for name, node in net.nodes.items():
        for intf in node.intfList():
            cidrs = _cidrs(net.spec, name, intf.name)
            if cidrs:
                address, prefix = cidrs[0].split("/")
                intf.ip, intf.prefixLen = address, int(prefix)


def banner(spec: RunSpec, net: Network, connections: list[Connection]) -> str:
    hosts = sorted({c.sender for c in connections} | {c.receiver for c in connections})
    return (
        f"cc-testbed shell: {spec.scenario_name}, point {spec.point_id}, seed {spec.seed}, on {_release()}\n"
        f"nodes: {' '.join(net.spec.nodes)} (the flows' hosts: {' '.join(hosts)}); "
        f"bottlenecks: {', '.join(f'{b.node}/{b.intf}' for b in net.spec.bottlenecks) or 'none'}\n"
        f"ours: flows, start [ID...], stop, tc, cwnd ID [SECONDS], live; Mininet's: nodes, net, pingall, "
        f"<node> <command>, help\n"
        f"exit or Ctrl-D tears the network down"
    )


def _release() -> str:
    return os.uname().release


def open_shell(plan: Plan, folder: Path | None = None) -> None:
    """Build the plan's one run's network, open the CLI on it, tear it all down when the CLI ends;
    ``folder``: the plan's, where ``live`` records (testbed.guest.shelllive)."""
    spec = plan.runs[0].spec()
    lossbpf.use_objects(plan.context.bpf_objects)
    with kernellock.one_session(f"testbed shell {spec.point_id}", lambda m: print(f"[testbed] {m}", flush=True)):
        _open_shell(plan, spec, folder)


def _open_shell(plan: Plan, spec: RunSpec, folder: Path | None) -> None:
    from mininet.log import setLogLevel

    cleanup_leftovers()  # with the kernel's session lock held: what is left is a dead session's
    scenario = spec.scenario
    topology = TOPOLOGIES[scenario.topology.name].from_scenario(scenario)
    netspec = topology.netspec()
    connections = plan_connections(scenario, topology)
    ensure_kernel_support(scenario, netspec.needs_netem, plan.context.project_modules, netspec.qdisc_modules)
    scratch = launch.make_scratch()
    try:
        with Network(netspec, f"shell-{spec.point_id}-{spec.seed}", HOST_SYSCTLS) as net:
            collect.apply_flow_options(net, collect.flow_options(topology, scenario))
            label_addresses(net)
            shell = ShellNetwork(spec, net, connections, scratch, folder)
            print(banner(spec, net, connections), flush=True)
            setLogLevel("output")
            try:
                make_cli(shell)(net.net)
            finally:
                shell.stop()
                if shell.recording is not None:
                    shell.recording.stop()
                for channel in shell.channels:
                    channel.clear()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("cc-testbed shell: the network is torn down", flush=True)


if __name__ == "__main__":
    # a guest's console comes non-blocking (virtme-ng-init): a read would fail with EAGAIN, not wait
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        if stream.isatty():
            os.set_blocking(stream.fileno(), True)
    open_shell(Plan.read(Path(sys.argv[1])), Path(sys.argv[1]).parent)
