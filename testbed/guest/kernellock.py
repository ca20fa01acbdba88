"""One session at a time on a kernel: the runner and ``testbed shell`` hold this lock while they build
networks on it; a second one waits, saying for whom, and starts when the first ends.

Why a lock and not per-run ownership of leftovers: a run takes more of a kernel than the processes
and interfaces it could label as its own. The host-wide sysctls its flows need (SACK, RACK, TLP,
ECN, delayed ACKs on the hosts' namespaces are per netns, but the tracing instances, the tcp_probe
tracepoint and the CPU are the kernel's), and its fidelity checks assume the CPU is the run's: two
sessions at once on one kernel would leave each other's runs untrustworthy even if neither killed
the other's processes. Waiting keeps both sessions' runs sound; the message names the other
session, its pid and since when, so a student or an instructor knows whom they wait for.

The lock is ``flock`` on a file in a tmpfs of this kernel, named after its boot id (a guest's tmpfs
is its own; the name keeps two kernels apart even where a folder is shared), so the kernel drops it
when its holder dies, however it dies (SIGKILL included): nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from testbed.guest.launch import tmpfs_base
from testbed.results import rundir


def lock_path(what: str = "kernel") -> Path:
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return tmpfs_base() / f"cc-testbed-{what}-{boot_id}.lock"


def holder(path: Path | None = None) -> str:
    """Who holds the lock, as its holder wrote it: what it runs, its pid, since when."""
    try:
        data = json.loads((path or lock_path()).read_text() or "{}")
    except (OSError, ValueError):
        return "another session (it did not say which)"
    return f"{data.get('what', 'another session')}, pid {data.get('pid', '?')}, since {data.get('since', '?')}"


@contextlib.contextmanager
def one_session(what: str, log=print) -> Iterator[None]:
    """Hold the kernel's session lock while the body runs; wait for it (saying for whom) when taken."""
    path = lock_path()
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(
                f"waiting: another session runs on this kernel ({holder(path)}); sessions on one kernel take "
                f"turns (their networks and their timing would harm each other), this one starts when it ends"
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
            log("the other session on this kernel ended: starting")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"what": what, "pid": os.getpid(), "since": rundir.utc_iso()}))
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def busy() -> str | None:
    """Who holds the kernel's session lock now (``holder``), or None when no session runs here."""
    path = lock_path()
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder(path)
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


@contextlib.contextmanager
def loading_modules() -> Iterator[None]:
    """One process at a time loading modules into this kernel: runs side by side (testbed.guest.sidebyside)
    hold the session lock through their parent, and two slots' first runs once inserted our module at
    once: the second ``insmod`` failed with "File exists" while the first one's was still going in."""
    with open(lock_path("modules"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
