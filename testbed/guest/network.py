"""Build a :class:`~topologies.netspec.NetSpec` on the running kernel: Mininet nodes, pyroute2 links.

Mininet gives each node a network namespace and a shell (``node.cmd``) and makes the veth pairs;
everything else (addresses, routes, qdiscs) goes through netlink with pyroute2 inside the node's
namespace (``/proc/<pid>/ns/net``), never through formatted ``tc`` strings, and a run's processes
are forked inside that namespace (:meth:`Network.popen`).

Cleanup survives SIGKILL: every process we start (node shells and what runs in them) inherits
the environment variable :data:`MARKER`; :func:`cleanup_leftovers` kills any process carrying
it, and with them go their namespaces and veth pairs. The next start calls it first.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.guest.netnsutil import entered
from testbed.guest.shaping import apply as apply_egress
from topologies.netspec import NetSpec

#: environment variable inherited by every process of a run; its value is the run's id
MARKER = "CC_TESTBED_RUN"
#: interface names our topologies create (also used to sweep leftovers from the root namespace)
INTF_PATTERN = re.compile(r"^[a-z]+\d*-eth\d+$")
#: node shells started at once
NODE_START_THREADS = 8


def _marked_pids() -> list[int]:
    mine = {os.getpid(), os.getppid()}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"{MARKER}=".encode() in environ:
            pids.append(int(entry.name))
    return pids


def cleanup_leftovers(verbose: bool = True) -> list[str]:
    """Kill processes and remove interfaces left by an earlier run that was killed. Returns what it did."""
    done: list[str] = []
    own_run = os.environ.get(MARKER)
    for pid in _marked_pids():
        try:
            run_id = _run_of(Path(f"/proc/{pid}/environ").read_bytes())
            if run_id == own_run or _other_live_runner(run_id):
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            os.kill(pid, signal.SIGKILL)
            done.append(f"killed leftover process {pid} ({cmdline.strip()[:60]})")
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    from testbed.guest import launch

    for scratch in launch.stale_scratch_dirs():
        if not Path(f"/proc/{launch.scratch_owner(scratch)}").exists():
            shutil.rmtree(scratch, ignore_errors=True)
            done.append(f"removed leftover directory {scratch}")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if INTF_PATTERN.match(name):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
            done.append(f"removed leftover interface {name}")
    if verbose:
        for line in done:
            print(f"[testbed] cleanup: {line}", flush=True)
    return done


def _run_of(environ: bytes) -> str | None:
    """The run id a process's environment carries (MARKER), if any."""
    for entry in environ.split(b"\0"):
        if entry.startswith(f"{MARKER}=".encode()):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def _other_live_runner(run_id: str | None) -> bool:
    """Whether ``run_id`` is a run of another runner still alive on this kernel: a run side by side with ours
    (testbed.guest.sidebyside), whose processes are its own. A run id is ``<runner pid>-<ns since boot when
    made>`` (:func:`run_id`); a pid reused since is told apart by its process's start, later than the run."""
    owner, _, made_ns = (run_id or "").partition("-")
    if not (owner.isdigit() and made_ns.isdigit()) or int(owner) == os.getpid():
        return False
    try:
        started_ticks = int(Path(f"/proc/{owner}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return False  # the runner is gone: what its runs left is leftover
    return started_ticks / os.sysconf("SC_CLK_TCK") <= int(made_ns) / 1e9


def run_id() -> str:
    """A new run id of this runner (MARKER's value): its pid and the time, which :func:`_other_live_runner` reads."""
    return f"{os.getpid()}-{time.clock_gettime_ns(time.CLOCK_BOOTTIME)}"  # the clock of /proc/PID/stat's start


class Network:
    """A NetSpec instantiated on this kernel. Use as a context manager: it always tears down."""

    def __init__(self, spec: NetSpec, run_id: str, host_sysctls: dict[str, str] | None = None):
        self.spec = spec
        self.run_id = run_id
        self.host_sysctls = host_sysctls or {}
        self.net = None
        self.nodes: dict = {}
        self._popens: list[subprocess.Popen] = []
        self._files: list = []

    def __enter__(self) -> Network:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        from mininet.link import Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet

        os.environ[MARKER] = self.run_id
        setLogLevel("error")
        from pyroute2.iproute.linux import IPRoute  # its own module: see testbed.guest.start

        with IPRoute() as root:
            link_class = _netlink_link_class(Link, root)
            self.net = Mininet(controller=None, link=link_class, build=False, autoSetMacs=False, waitConnected=False)
            # Each node is a shell that Mininet starts and then waits for; started from a few threads,
            # the shells come up side by side (the waiting releases the GIL).
            with ThreadPoolExecutor(max_workers=NODE_START_THREADS) as pool:
                started = list(pool.map(lambda name: self.net.addHost(name, ip=None), self.spec.nodes))
            self.nodes.update(zip(self.spec.nodes, started, strict=True))
            for link in self.spec.links:
                node1, node2 = self.nodes[link.node1], self.nodes[link.node2]
                self.net.addLink(node1, node2, intfName1=link.intf1, intfName2=link.intf2)
        # No net.build(): all it would add is `ifconfig lo up` per node through its shell; the
        # loopback, addresses and routes come up over netlink in _configure_node.
        for name in self.spec.nodes:
            self.nodes[name].sendCmd(self._shell_setup(name))
        # the nodes' netlink work and qdisc/BPF processes side by side: each thread enters one node's
        # namespace and makes its own socket there (netnsutil), and mostly waits on the kernel
        with ThreadPoolExecutor(max_workers=NODE_START_THREADS) as pool:
            list(pool.map(self._configure_node, self.spec.nodes))
        for name in self.spec.nodes:
            self.nodes[name].waitOutput()

    def _shell_setup(self, name: str) -> str:
        """What a node's shell runs at setup: offloads off, forwarding or the hosts' sysctls.

        Sent to every node's shell first and collected after the netlink setup: the shells work
        in parallel with it (one round trip costs ~0.1 s in a TCG guest)."""
        intfs = self.spec.interfaces(name)
        # Offloads off: with TSO/GSO/GRO the queue limits would count super-packets (MACHINE.md).
        commands = [f"ethtool -K {intf} tso off gso off gro off 2>/dev/null" for intf in intfs]
        if name in self.spec.routers:
            commands.append("sysctl -qw net.ipv4.ip_forward=1")
        else:
            commands += [f"sysctl -qw {key}='{value}'" for key, value in self.host_sysctls.items()]
        return "; ".join(commands)

    def cmd_all(self, command: str, nodes: list[str] | None = None) -> dict[str, str]:
        """Run ``command`` in the shells of ``nodes`` (default: all) at once; their outputs by node."""
        return self.cmd_each({name: command for name in (self.spec.nodes if nodes is None else nodes)})

    def cmd_each(self, commands: dict[str, str]) -> dict[str, str]:
        """Run each node's command in its shell, all nodes at once; their outputs by node."""
        for name, command in commands.items():
            self.nodes[name].sendCmd(command)
        return {name: self.nodes[name].waitOutput() for name in commands}

    def _configure_node(self, name: str) -> None:
        from testbed.guest.netnsutil import iproute

        intfs = self.spec.interfaces(name)
        with iproute(self.netns_path(name)) as ns:
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
            for intf in intfs:
                index = ns.link_lookup(ifname=intf)[0]
                cidrs = self.spec.addresses.get((name, intf)) or []
                for cidr in [cidrs] if isinstance(cidrs, str) else cidrs:
                    address, prefix = cidr.split("/")
                    ns.addr("add", index=index, address=address, prefixlen=int(prefix))
                ns.link("set", index=index, state="up")
            for dst, gateway in self.spec.routes.get(name, []):
                ns.route("add", dst="0.0.0.0/0" if dst == "default" else dst, gateway=gateway)
        for intf in intfs:
            plan = self.spec.egress.get((name, intf))
            if plan is not None and not plan.is_empty:
                apply_egress(self.netns_path(name), intf, plan)

    def netns_path(self, name: str) -> str:
        return f"/proc/{self.nodes[name].pid}/ns/net"

    def popen(self, node: str, argv: list[str], output: Path | None = None, **kwargs) -> subprocess.Popen:
        """Start a process inside a node; it is killed at teardown if still running.

        ``output``: a file that receives its stdout and stderr. Without it, and without an explicit
        ``stdout``, output is discarded: Mininet's default is an unread pipe that can fill and
        block the process.
        """
        if output is not None:
            handle = open(output, "wb")
            self._files.append(handle)
            kwargs.setdefault("stdout", handle)
            kwargs.setdefault("stderr", subprocess.STDOUT)
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        kwargs.setdefault("stderr", subprocess.DEVNULL)
        # Mininet's node.popen execs `mnexec -da <shell pid>`, which enters the namespace and execs the
        # command: one exec more per process, 34 ms under TCG (a run of 30 connections starts 60). This
        # thread enters the namespace itself and the child, forked here, is born in it. The nodes share
        # the runner's mount namespace (no private directories), which mnexec would also have joined.
        with entered(self.netns_path(node)):
            proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self._popens.append(proc)
        return proc

    def cmd(self, node: str, command: str) -> str:
        return self.nodes[node].cmd(command)

    def end_run(self) -> int:
        """End what a run started in the network (its processes, its output files, the TCP sockets they
        left) and keep the nodes, links and qdiscs for the next run (testbed.guest.keeper); returns how
        many sockets were left."""
        self._end_processes()
        self._popens, self._files = [], []
        return self._destroy_sockets()

    def _destroy_sockets(self) -> int:
        """Destroy every TCP socket left in the hosts (``ss -K``, the kernel's SOCK_DESTROY): a socket closed
        by a killed process lingers while its peer does not answer (FIN-WAIT-1 with data unsent, or its
        FIN or RST lost on a lossy link), and it holds its connection's fixed client port, so the next run's
        client would fail to bind it ("Address already in use": tests/netns/test_dumbbell_host.py).
        The run's processes are gone by then, so every socket left is such an orphan."""
        left = self.cmd_all("ss -tanHK 2>/dev/null", self.spec.hosts)
        return sum(1 for out in left.values() for line in out.splitlines() if line.strip())

    def stop(self) -> None:
        self._end_processes()
        if self.net is not None:
            for node in self.net.hosts:
                node.terminate()
                for pipe in (node.stdin, node.stdout, getattr(node.shell, "stderr", None)):
                    if pipe is not None and not pipe.closed:
                        pipe.close()
            self.net = None
        deadline = time.monotonic() + 5
        while _marked_pids_of(self.run_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in _marked_pids_of(self.run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.environ.pop(MARKER, None)

    def _end_processes(self) -> None:
        for proc in self._popens:
            if proc.poll() is None:
                proc.kill()
        for proc in self._popens:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for proc in self._popens:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        for handle in self._files:
            handle.close()


def _netlink_link_class(base, root):
    """A Mininet ``Link`` subclass that makes its veth pair over netlink and leaves the ends alone.

    Mininet runs ``ip link add`` and two ``ifconfig up`` per link through the nodes' shells: three
    round trips of ~0.1 s each in a TCG guest, a third of a 60-node topology's setup. Here the pair
    is created with both ends already in their nodes' namespaces (one request on ``root``, an
    ``IPRoute`` of the root namespace), and the ends are brought up with their addresses in ``Network._configure_node``.
    """
    from mininet.link import Intf

    class NetlinkIntf(Intf):
        def config(self, **_params) -> dict:
            return {}

    class NetlinkLink(base):
        def __init__(self, node1, node2, **params):
            super().__init__(node1, node2, **{**params, "intf": NetlinkIntf})

        @classmethod
        def makeIntfPair(cls, intfname1, intfname2, _addr1, _addr2, node1, node2, **_options):
            fds = [os.open(f"/proc/{node.pid}/ns/net", os.O_RDONLY) for node in (node1, node2)]
            try:
                peer = {"ifname": intfname2, "net_ns_fd": fds[1]}
                root.link("add", ifname=intfname1, kind="veth", net_ns_fd=fds[0], peer=peer)
            finally:
                for fd in fds:
                    os.close(fd)

    return NetlinkLink


def _marked_pids_of(run_id: str) -> list[int]:
    needle = f"{MARKER}={run_id}\0".encode()
    found = []
    for pid in _marked_pids():
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes() + b"\0":
                found.append(pid)
        except OSError:
            continue
    return found
