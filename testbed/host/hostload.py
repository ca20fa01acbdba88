"""The host is part of the experiment: what it gave the guest's vCPUs during each run's traffic.

An emulated link is only as good as the CPU time its emulator gets. A guest under TCG competing with
a CPU hog, or with a second guest, sends slower and later than asked, and checks inside the guest
cannot see why. So the controller reads, from the host side, at the start and the end of each run's
traffic (the runner logs both: :class:`testbed.plan.progress.TrafficWindow`): the host's CPU time
and steal (``/proc/stat``), the CPU time of the guest's own processes and the run-queue wait of its
vCPU threads (``/proc/<pid>/task/*/schedstat``: how long they were runnable but not running), its
load average, and any qemu process that is not this guest's. What the host's CPUs did for others
than the guest is the contention. A guest pinned to some of the host's cores (a ``local:N`` cluster's
worker) is judged on those cores only: their ticks, their steal, and the other guests that may run on
them; a guest pinned elsewhere is no competitor. On the local backend the "guest" is the run's own
process tree (the runner, its namespaces' shells, iperf3, tcpdump), whose CPU time is read from
``/proc/<pid>/stat`` with what its reaped children used (an iperf3 that ended before the window's end
still counts as the run's). The vCPUs' wait is reported beside the contention but not judged, because a
busy guest's vCPU threads also wait for each other and for qemu's main loop on a 2-core host
(measured here: 18 % on a quiet host, 43 % with a hog). :func:`fidelity.host_check` judges the
summary; the controller adds it to the run's manifest. A guest in virtual time (QEMU's icount) is
measured the same way but not judged: its clock advances by its own instructions, so the host's load
stretches the run's wall time (``wall_per_guest_s``) and leaves what the guest measured as it was.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from testbed.guest import fidelity
from testbed.host import guardian
from testbed.plan import progress
from testbed.results import rundir


@dataclass(frozen=True)
class Snapshot:
    monotonic_s: float
    cpu_ticks: tuple[int, ...]  # /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal
    vcpu_run_ns: int
    vcpu_wait_ns: int
    guest_run_ns: int  # every thread of the guest's processes
    load_1m: float
    other_qemu: tuple[str, ...]
    #: every other process's CPU time (s), by pid with its name: who the others were (:func:`_busiest`)
    others_cpu_s: dict[int, tuple[str, float]] = field(default_factory=dict)


def _cpu_ticks(cores: frozenset[int] | None = None) -> tuple[int, ...]:
    """/proc/stat's ticks of the whole host (its "cpu" line), or summed over the "cpuN" lines of ``cores``."""
    lines = Path("/proc/stat").read_text().splitlines()
    if cores is None:
        return tuple(int(f) for f in lines[0].split()[1:9])
    rows = [line.split() for line in lines[1:] if line.startswith("cpu")]
    picked = [[int(f) for f in row[1:9]] for row in rows if int(row[0][3:]) in cores]
    return tuple(sum(column) for column in zip(*picked, strict=True))


def host_cores() -> frozenset[int] | None:
    """The cores this process may run on when it is pinned to fewer than the host's online CPUs (its guest
    inherits them), or None: the whole host."""
    mine = frozenset(os.sched_getaffinity(0))
    return mine if len(mine) < (os.cpu_count() or len(mine)) else None


def _shares_cores(pid: int, cores: frozenset[int] | None) -> bool:
    if cores is None:
        return True
    try:
        return bool(os.sched_getaffinity(pid) & cores)
    except OSError:
        return False


def tree_cpu_ns(root: int) -> int:
    """CPU time of ``root`` and its descendants, with what their reaped children used (ns, tick resolution).

    Each live process counts its own time plus its waited-for children's, so a child that ended and was
    reaped inside the tree is counted once, by its parent."""
    import psutil

    total_s = 0.0
    for process in _tree(root):
        try:
            t = process.cpu_times()
        except psutil.NoSuchProcess:  # ended since the tree was listed: its parent counts it once reaped
            continue
        total_s += t.user + t.system + t.children_user + t.children_system
    return int(total_s * 1e9)


def _tree(root: int) -> list:
    """``root``'s process and its descendants (psutil processes; none once it has ended)."""
    import psutil

    try:
        top = psutil.Process(root)
        return [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _schedstat(pid: int) -> tuple[int, int, int]:
    """Run time and run-queue wait (ns) of a qemu's vCPU threads, and the run time of all the process's
    threads; zeros once it is gone. qemu names its vCPU threads ("CPU 0/TCG") only with
    ``-name debug-threads=on``, which vng does not pass: then all of qemu's threads count as vCPUs;
    a process that is no qemu (virtiofsd, vng) has none."""
    stats: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        is_qemu = Path(f"/proc/{pid}/comm").read_text().startswith("qemu")
    except OSError:
        return 0, 0, 0
    for tid in tasks:
        try:
            named_vcpu = Path(f"/proc/{pid}/task/{tid}/comm").read_text().startswith("CPU ")
            run, wait = (int(f) for f in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:2])
        except (OSError, ValueError):
            continue
        stats[named_vcpu].append((run, wait))
    vcpus = (stats[True] or stats[False]) if is_qemu else []
    total_run = sum(run for run, _ in stats[True] + stats[False])
    return sum(run for run, _ in vcpus), sum(wait for _, wait in vcpus), total_run


def qemu_pids() -> dict[int, str]:
    """Every live qemu process on the host: pid -> command line (shortened)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
            # a zombie (exited, not yet reaped by whoever inherited it) uses no CPU
            if (comm.startswith("qemu-system") or comm.startswith("qemu-kvm")) and state != "Z":
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found[int(entry)] = cmdline.strip()[:100]
        except OSError:
            continue
    return found


def snapshot(own: set[int], cores: frozenset[int] | None = None, tree: int | None = None) -> Snapshot:
    """The host now (its ``cores``, or all of it); ``own``: the guest's processes (qemu, and virtiofsd
    where there is one), or ``tree``: the root of a local run's processes."""
    run = wait = own_run = 0
    for pid in own:
        vcpu_run, vcpu_wait, total_run = _schedstat(pid)
        run, wait, own_run = run + vcpu_run, wait + vcpu_wait, own_run + total_run
    if tree is not None:
        own_run = tree_cpu_ns(tree)
    others = tuple(
        f"{pid} {cmd}" for pid, cmd in sorted(qemu_pids().items()) if pid not in own and _shares_cores(pid, cores)
    )
    load_1m = float(Path("/proc/loadavg").read_text().split()[0])
    others_cpu = _others_cpu(own, tree, cores)
    return Snapshot(time.monotonic(), _cpu_ticks(cores), run, wait, own_run, load_1m, others, others_cpu)


def _others_cpu(own: set[int], tree: int | None, cores: frozenset[int] | None) -> dict[int, tuple[str, float]]:
    """CPU time (s) of every process but the guest's (or the local run's tree) that may run on ``cores``
    (None: all), with its command line shortened: a contended run then names who took the CPU (a CI
    machine's daily apt job, say), where the host's ticks alone could not."""
    import psutil

    mine = set(own) | ({p.pid for p in _tree(tree)} if tree is not None else set())
    found = {}
    for process in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        info, times = process.info, process.info.get("cpu_times")
        if process.pid in mine or times is None or not _shares_cores(process.pid, cores):
            continue
        label = " ".join(" ".join(info.get("cmdline") or []).split()) or f"[{info.get('name')}]"
        found[process.pid] = (label[:80], times.user + times.system)
    return found


#: at most this many of the others are named, and only those that used this share of the CPUs judged
BUSIEST_NAMED, BUSIEST_MIN_PCT = 3, 2.0


def _busiest(before: Snapshot, after: Snapshot, window_s: float, cpus: int) -> tuple[str, ...]:
    """The other processes that used the most CPU over the window, each with its share of the CPUs judged
    (a process allowed on a pinned guest's cores counts all its time: it may have run beside them)."""
    if window_s <= 0:
        return ()
    used = []
    for pid, (label, cpu_s) in after.others_cpu_s.items():
        share = 100 * (cpu_s - before.others_cpu_s.get(pid, (label, 0.0))[1]) / (window_s * cpus)
        if share >= BUSIEST_MIN_PCT:
            used.append((share, f"{pid} {label}: {share:.0f} %"))
    return tuple(text for _, text in sorted(used, reverse=True)[:BUSIEST_NAMED])


@dataclass(frozen=True)
class HostSummary:
    """The host during one run's traffic; what ``fidelity.host_check`` judges."""

    window_s: float
    cpus: int
    host_busy_pct: float
    host_steal_pct: float
    guest_cpu_s: float  # every thread of the guest's processes
    vcpu_cpu_s: float
    vcpu_wait_s: float
    vcpu_wait_pct: float  # of the time the guest's vCPU threads wanted a CPU, the share they waited for one
    other_busy_pct: float  # host CPU time used by others than the guest, in % of all CPUs
    load_1m: float
    other_guests: list[str]
    #: the cores judged when the guest was pinned to some (None: the whole host)
    cores: list[int] | None = None
    #: the other processes that used the most CPU during traffic, with their shares (hostload._busiest)
    busiest_others: tuple[str, ...] = ()
    #: what "own" CPU time was: the guest's processes, or a local run's process tree
    subject: str = "guest"
    #: the guest's clock: "real", or "virtual" (icount: the host's load cannot reach what the guest measures)
    clock: str = "real"
    #: the traffic's length on the guest's clock, and wall seconds per guest second over it (virtual time)
    guest_traffic_s: float | None = None
    wall_per_guest_s: float | None = None
    #: the host's wall seconds from the run's first line to its last (its guest's boot not counted): what the
    #: run cost this host, which the session's cost model reads back (testbed.plan.costs)
    run_wall_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(
    before: Snapshot,
    after: Snapshot,
    cpus: int | None = None,
    cores: frozenset[int] | None = None,
    subject: str = "guest",
    clock: str = "real",
    guest_traffic_s: float | None = None,
) -> HostSummary:
    cpus = len(cores) if cores else (cpus or os.cpu_count() or 1)
    ticks = [a - b for a, b in zip(after.cpu_ticks, before.cpu_ticks, strict=True)]
    total = sum(ticks) or 1
    idle = ticks[3] + ticks[4]
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    run_s = (after.vcpu_run_ns - before.vcpu_run_ns) / 1e9
    wait_s = (after.vcpu_wait_ns - before.vcpu_wait_ns) / 1e9
    guest_s = (after.guest_run_ns - before.guest_run_ns) / 1e9
    busy_s = (total - idle - ticks[7]) * tick_s
    window_s = after.monotonic_s - before.monotonic_s
    return HostSummary(
        window_s=round(window_s, 2),
        cpus=cpus,
        host_busy_pct=round(100 * (total - idle) / total, 1),
        host_steal_pct=round(100 * ticks[7] / total, 1),
        guest_cpu_s=round(guest_s, 2),
        vcpu_cpu_s=round(run_s, 2),
        vcpu_wait_s=round(wait_s, 2),
        vcpu_wait_pct=round(100 * wait_s / (wait_s + run_s), 1) if wait_s + run_s > 0 else 0.0,
        other_busy_pct=round(max(0.0, 100 * (busy_s - guest_s) / (window_s * cpus)), 1) if window_s > 0 else 0.0,
        load_1m=after.load_1m,
        other_guests=sorted(set(before.other_qemu) | set(after.other_qemu)),
        cores=sorted(cores) if cores else None,
        busiest_others=_busiest(before, after, window_s, cpus),
        subject=subject,
        clock=clock,
        guest_traffic_s=guest_traffic_s,
        wall_per_guest_s=round(window_s / guest_traffic_s, 3) if guest_traffic_s and clock == "virtual" else None,
    )


class HostWatch:
    """Follows the runner's lines (``on_line``) and keeps a :class:`HostSummary` per run of the plan
    (by its ``run_dir``); ``own()`` names this guest's processes. With ``session`` (a folder
    the runner writes into directly), each run's manifest gets its summary as the run ends; otherwise
    :meth:`apply` adds them once the folder is back. ``cores``: the cores the guest is pinned to (judged
    alone); ``tree``: a local run's root process, whose process tree is the "guest"; ``clock``: the
    guest's (virtual time is measured, not judged); ``log``: told each run the check failed, and why (the
    guest's own lines cannot say it: the host judges after the run)."""

    def __init__(
        self,
        run_dirs: list[str],
        own: Callable[[], set[int]],
        session: Path | None = None,
        cores: frozenset[int] | None = None,
        tree: int | None = None,
        clock: str = "real",
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.run_dirs = run_dirs
        self.log = log
        self.own = own
        self.session = session
        self.cores, self.tree, self.clock = cores, tree, clock
        self.traffic_s: float | None = None  # the current run's traffic length on the guest's clock
        self.current: int | None = None
        self.run_started = 0.0  # when the current run's first line came, on the host's clock
        self.before: Snapshot | None = None
        self.summaries: dict[str, HostSummary] = {}

    def on_line(self, text: str, now: float) -> None:
        event = progress.parse_line(text)
        if isinstance(event, progress.RunStarted):
            self.current, self.before, self.traffic_s, self.run_started = event.index - 1, None, None, now
        elif isinstance(event, progress.TrafficTick):
            self.traffic_s = event.duration_s
        elif isinstance(event, progress.RunEnded) and self.current is not None:
            self._ended(now)
        elif isinstance(event, progress.TrafficWindow) and event.edge == "begins":
            self.before = snapshot(self.own(), self.cores, self.tree)
        elif isinstance(event, progress.TrafficWindow) and self.before is not None and self._run_dir():
            after = snapshot(self.own(), self.cores, self.tree)
            subject = "guest" if self.tree is None else "run"
            self.summaries[self._run_dir()] = summarize(
                self.before, after, cores=self.cores, subject=subject, clock=self.clock, guest_traffic_s=self.traffic_s
            )
            self.before = None

    def _ended(self, now: float) -> None:
        """The run's wall time on the host added to its summary (a run without a traffic window has none),
        and the summary to its manifest when the runner writes into the session folder directly."""
        run_dir = self._run_dir()
        if run_dir in self.summaries:
            self.summaries[run_dir] = replace(self.summaries[run_dir], run_wall_s=round(now - self.run_started, 2))
        if self.session is not None:
            self.apply(self.session, run_dir)

    def _run_dir(self) -> str | None:
        in_plan = self.current is not None and 0 <= self.current < len(self.run_dirs)
        return self.run_dirs[self.current] if in_plan else None

    def apply(self, session: Path, run_dir: str | None = None) -> None:
        """Add the host's figures and check to the manifests of runs summarized so far (or one)."""
        for directory in [run_dir] if run_dir else list(self.summaries):
            summary = self.summaries.get(directory)
            check = amend_manifest(session / directory, summary) if summary is not None else None
            if check is not None and not check.ok and self.log is not None:
                self.log(f"{directory}: {check.name}: failed: {check.detail}")


def marked_processes(marker: str) -> set[int]:
    """The processes whose guardian marker (``guardian.MARKER``) is ``marker``: one guest's vng, qemu and
    virtiofsd."""
    return {int(e) for e in os.listdir("/proc") if e.isdigit() and guardian.environ_marker(int(e)) == marker}


def amend_manifest(directory: Path, summary: HostSummary) -> fidelity.Check | None:
    """The host's figures added to the run's manifest, and its check to its fidelity report: the check
    (None: no manifest to amend, one amended already, or no fidelity report to add it to)."""
    path = directory / rundir.MANIFEST
    try:
        manifest = rundir.read_json(path)
    except (OSError, ValueError):
        return None
    if "host" in manifest:
        return None
    manifest["host"] = summary.to_dict()
    report = manifest.get("fidelity")
    check = None
    if report is not None:
        check = fidelity.host_check(summary.to_dict())
        report["checks"].append(asdict(check))
        if not check.ok:
            report["trustworthy"] = False
            report["problems"].append(f"{check.name}: {check.detail}")
    rundir.write_json_atomic(path, manifest)
    return check
