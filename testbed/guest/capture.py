"""Captures during a run: the kernel's ``tcp:tcp_probe`` tracepoint and tcpdump headers.

tcp_probe goes to a tracing instance of our own (``instances/cc-testbed``), so the global
trace buffer and other users of ftrace are left alone. The instance uses ``trace_clock=mono``:
its timestamps are CLOCK_MONOTONIC seconds, the clock of Python's ``time.monotonic()``, which
the manifest records as the run's time zero. The event is filtered to the senders' sockets by
their fixed client ports (tcp_probe fires on both ends, and iperf3's control connection shares
the server port). Lost events (ring-buffer overruns) are counted from the per-CPU stats.

An instance is made once per plan and kept from run to run while its events and filter stay the
same (the client ports are fixed): making one allocates its ring buffers and ~1,500 event files,
removing one frees them, about half a second of each run under TCG. A run clears the buffer and
counts its lost events from where the instance's stats stood. :func:`release_instances` removes
them at the plan's end; a start after a killed runner removes what it finds first.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

from testbed.plan.connections import MAX_SLOTS

TRACEFS = Path("/sys/kernel/tracing")
INSTANCE = "cc-testbed"
#: the instance for our module's own events (kernel-patch/: westwood_tb_sample, westwood_tb_cong)
MODULE_INSTANCE = "cc-testbed-module"
#: every name our instances take: runs side by side on one kernel (testbed.guest.sidebyside) each have their
#: own, named after their slot; leftovers are looked for under all of them
INSTANCES = tuple(
    base if slot is None else f"{base}-s{slot}"
    for base in (INSTANCE, MODULE_INSTANCE)
    for slot in (None, *range(MAX_SLOTS))
)
#: per-CPU ring buffer; ~1 event per ACK (400-470/s at 10 Mbit/s) leaves a wide margin (MACHINE.md)
BUFFER_KB = 16384
SNAPLEN = 128


#: the instances this process made and keeps: name -> (events, filter)
_KEPT: dict[str, tuple[tuple[str, ...], str]] = {}
#: this process's slot among runs side by side on one kernel (None: alone): the suffix of its instances' names
_SLOT: int | None = None


def use_slot(slot: int | None) -> None:
    """This process's runs are side by side with others' (``slot``), or alone (None): which instances are its."""
    global _SLOT
    _SLOT = slot


def own_instance(base: str) -> str:
    """The name of this process's instance ``base`` (INSTANCE or MODULE_INSTANCE)."""
    return base if _SLOT is None else f"{base}-s{_SLOT}"


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def mount_tracefs() -> None:
    if not (TRACEFS / "instances").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True, capture_output=True)


def remove_instance(name: str = INSTANCE, events: list[str] | None = None) -> None:
    """Remove a tracing instance, its ``events`` ("system/event") disabled first; without ``events``
    every event of the instance is looked at (a leftover: ~1,500 files, seconds under TCG)."""
    instance = TRACEFS / "instances" / name
    _KEPT.pop(name, None)
    if instance.is_dir():
        try:
            _write(instance / "tracing_on", "0")
            enables = [instance / "events" / e / "enable" for e in events] if events is not None else None
            for enable in enables if enables is not None else (instance / "events").glob("*/*/enable"):
                if enable.read_text().strip() != "0":
                    _write(enable, "0")
        except OSError:
            pass
        instance.rmdir()


class EventTrace:
    """Tracepoints ``events`` ("system/event") of the sockets bound to ``client_ports``, streamed to ``out``."""

    def __init__(self, out: Path, client_ports: list[int], events: list[str], instance: str):
        self.out = out
        self.ports = sorted(client_ports)
        self.events = events
        self.instance = TRACEFS / "instances" / instance
        self._reader: subprocess.Popen | None = None
        self._lost_before = 0
        self._file = None

    @property
    def filter_expr(self) -> str:
        lo, hi = self.ports[0], self.ports[-1]
        return f"sport >= {lo} && sport <= {hi}"

    def start(self) -> None:
        configuration = (tuple(self.events), self.filter_expr)
        if _KEPT.get(self.instance.name) == configuration and self.instance.is_dir():
            _write(self.instance / "trace", "")  # the run before's events, if any were left, cleared
        else:
            self._make(configuration)
        self._lost_before = self._lost()
        self._file = open(self.out, "wb")
        self._reader = subprocess.Popen(["cat", str(self.instance / "trace_pipe")], stdout=self._file)
        _write(self.instance / "tracing_on", "1")

    def _make(self, configuration: tuple[tuple[str, ...], str]) -> None:
        mount_tracefs()
        remove_instance(self.instance.name)
        self.instance.mkdir()
        _write(self.instance / "tracing_on", "0")
        _write(self.instance / "trace_clock", "mono")
        _write(self.instance / "buffer_size_kb", str(BUFFER_KB))
        for name in self.events:
            event = self.instance / "events" / name
            if not event.is_dir():
                remove_instance(self.instance.name)
                raise RuntimeError(f"this kernel has no {name.replace('/', ':')} tracepoint")
            _write(event / "filter", self.filter_expr)
            _write(event / "enable", "1")
        _KEPT[self.instance.name] = configuration

    def _lost(self) -> int:
        """Events lost since the instance was made (overrun + dropped, all CPUs)."""
        lost = 0
        for cpu_stats in (self.instance / "per_cpu").glob("cpu*/stats"):
            text = cpu_stats.read_text()
            for key in ("overrun", "dropped events"):
                match = re.search(rf"^{key}: (\d+)", text, re.M)
                lost += int(match.group(1)) if match else 0
        return lost

    def stop(self) -> dict:
        """Stop tracing; return ``{"events": n, "lost": n}`` (lost = overrun + dropped, all CPUs)."""
        stats = {"events": 0, "lost": None}
        if self._reader is None:
            return stats
        try:
            _write(self.instance / "tracing_on", "0")
            stats["lost"] = self._lost() - self._lost_before
            # let the reader drain what is left in the buffer before it is killed
            for _ in range(50):
                size = self.out.stat().st_size
                time.sleep(0.1)
                if self.out.stat().st_size == size:
                    break
        finally:
            self._reader.kill()
            self._reader.wait()
            self._file.close()
            self._reader = None
        markers = [f" {name.split('/')[1]}:".encode() for name in self.events]
        with open(self.out, "rb") as f:
            stats["events"] = sum(1 for line in f if any(m in line for m in markers))
        return stats


def release_instances() -> None:
    """Remove the instances this process kept (the plan's end, or a run that failed inside one)."""
    for name, (events, _) in list(_KEPT.items()):
        remove_instance(name, list(events))


def tcp_probe_trace(out: Path, client_ports: list[int]) -> EventTrace:
    return EventTrace(out, client_ports, ["tcp/tcp_probe"], own_instance(INSTANCE))


def module_trace(out: Path, client_ports: list[int]) -> EventTrace:
    return EventTrace(
        out,
        client_ports,
        ["westwood_tb/westwood_tb_sample", "westwood_tb/westwood_tb_cong"],
        own_instance(MODULE_INSTANCE),
    )


#: kernel capture buffer (KiB): a TCG guest's tcpdump is scheduled late, the buffer absorbs it
TCPDUMP_BUFFER_KB = 16384


def tcpdump_argv(out: Path, expression: str = "tcp") -> list[str]:
    # Every packet that enters the router, headers only. -i any + -Q in sees each packet once
    # per router, before its queue; LINUX_SLL (v1) keeps the file readable by tcptrace. No -U:
    # a write per packet costs too much CPU in a TCG guest (tcpdump flushes on SIGINT).
    return [
        "tcpdump",
        "-i",
        "any",
        "-Q",
        "in",
        "-y",
        "LINUX_SLL",
        "-s",
        str(SNAPLEN),
        "-B",
        str(TCPDUMP_BUFFER_KB),
        "-n",
        "-w",
        str(out),
        *expression.split(),
    ]


def tcpdump_stats(log_text: str) -> dict:
    """tcpdump's own counts at exit: captured, received by filter, dropped by the kernel."""
    stats = {}
    for key, label in (
        ("captured", "packets captured"),
        ("received", "packets received by filter"),
        ("dropped", "packets dropped by kernel"),
    ):
        match = re.search(rf"(\d+) {label}", log_text)
        stats[key] = int(match.group(1)) if match else None
    return stats


#: how long tcpdump may take to open its capture (a busy TCG guest: well under a second)
TCPDUMP_READY_TIMEOUT_S = 20.0


def wait_tcpdump_listening(
    proc: subprocess.Popen, log_path: Path, timeout_s: float = TCPDUMP_READY_TIMEOUT_S
) -> str | None:
    """Wait until tcpdump says it is listening (its capture file is open by then). None when it is;
    otherwise what went wrong, from its log."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if "listening on" in text:
            return None
        if proc.poll() is not None:
            return f"tcpdump exited ({proc.returncode}) before capturing: {text.strip()[-400:] or 'no output'}"
        if time.monotonic() > deadline:
            return f"tcpdump did not start capturing within {timeout_s:g} s: {text.strip()[-400:] or 'no output'}"
        time.sleep(0.02)


def stop_tcpdump(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
