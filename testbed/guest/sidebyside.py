"""Runs side by side on one kernel: several plans at once, each in a runner process of its own.

A run's hosts already live in network namespaces of their own (Mininet's nodes), with their own devices,
qdiscs, BPF loss channels, sysctls and sockets, so two runs on one kernel need only be kept apart where
the kernel is shared. Each plan gets a *slot* (0, 1, ...) and with it:

* a block of ports of its own (testbed.plan.connections): tcp_probe and our module's events are the
  kernel's, and are told apart by port alone;
* tracing instances of its own (``cc-testbed-s1``: testbed.guest.capture);
* its own leftovers only: a runner's cleanup spares the processes of another live runner's runs
  (testbed.guest.network), so one slot's fresh network never kills the other's.

The kernel's session lock (testbed.guest.kernellock) is taken once, here, for all the slots: another
session still waits for the whole of this one. What the slots share, the CPU above all, is what the
runs' own fidelity checks watch (the guest's CPU headroom, the data start, the rate probe): a run that
failed them is run again alone by the host (testbed.host.packing). Each slot's lines are named ``sK:``,
as packed guests' are named ``gK:``, so that the host can tell its runs apart.

Mininet-HiFi ran many hosts on one kernel the same way, trusting a run only when its monitor said it
ran as it would alone; MPTCP's virtme CI runs its tests in parallel namespaces of one guest.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from testbed.guest import kernellock, parentdeath
from testbed.guest.console import log
from testbed.guest.network import cleanup_leftovers
from testbed.plan import progress
from testbed.plan.connections import MAX_SLOTS
from testbed.plan.plan import PLAN_DONE

#: how long the slots' runners get to mark their runs incomplete after SIGTERM before they are killed
STOP_GRACE_S = 30.0


def execute(plan_paths: list[Path], session: Path) -> int:
    """Every plan at once, plan K in slot K, under one session lock; the number of runs not complete."""
    if not 1 < len(plan_paths) <= MAX_SLOTS:
        raise ValueError(f"{len(plan_paths)} plans side by side: from 2 to {MAX_SLOTS} (one block of ports each)")
    with kernellock.one_session(f"session {session} ({len(plan_paths)} plans side by side)", log):
        cleanup_leftovers()  # before any slot starts: what a killed session left
        children = [_start(k, path, session) for k, path in enumerate(plan_paths)]
        readers = [threading.Thread(target=_forward, args=(k, child), daemon=True) for k, child in enumerate(children)]
        for reader in readers:
            reader.start()
        try:
            for child in children:
                child.wait()
        except KeyboardInterrupt:
            _stop(children)
            raise
        finally:
            for reader, child in zip(readers, children, strict=True):
                reader.join(timeout=5)
                child.stdout.close()
    return sum(_not_complete(path) for path in plan_paths)


def _start(slot: int, plan_path: Path, session: Path) -> subprocess.Popen:
    # started as this runner was (in a guest: without site, through testbed.guest.start: less to import)
    python = [sys.executable, "-S"] if sys.flags.no_site else [sys.executable]
    argv = [*python, "-m", "testbed.guest.start", "--slot", str(slot), "--session", str(session)]
    return subprocess.Popen(
        [*argv, str(plan_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        # SIGTERM when this runner dies, however it dies: the slot's runner then marks its run
        # incomplete and tears its network down, as when stopped
        preexec_fn=parentdeath.die_with_parent,
    )


def _forward(slot: int, child: subprocess.Popen) -> None:
    """The slot's lines, named after it (the host's progress follows each slot's runs by its name)."""
    for line in child.stdout:
        log(progress.slot_line(slot, (progress.message_of(line) or line).rstrip()))


def _stop(children: list[subprocess.Popen]) -> None:
    """SIGTERM to every slot (each marks its run incomplete and tears its network down), then SIGKILL."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _not_complete(plan_path: Path) -> int:
    """The runs of a slot's plan that did not complete, as its runner wrote them (``plan.done``); a slot
    whose runner died before writing it counts as one."""
    try:
        return int((plan_path.parent / PLAN_DONE).read_text().strip())
    except (OSError, ValueError):
        return 1
