"""A guardian: a small process that stops a guest's process group when its controller ends, however
it ends (SIGKILL included).

``vng`` runs in a process group of its own (so that a timeout can stop qemu and virtiofsd with
it), which also means that nothing stops that group when the ``testbed`` process is killed: the
guest went on with its plan. ``PR_SET_PDEATHSIG`` would reach ``vng`` only, not the qemu and
virtiofsd it starts. So the controller starts this guardian beside the group and keeps the write
end of a pipe whose read end is the guardian's stdin. When the controller ends, the kernel closes
the write end; the guardian reads end-of-file, stops the group (SIGTERM, then SIGKILL after a
grace) and runs an optional command (the lab VM's: stop the runner inside the VM). A controller
that finishes normally writes one byte first: the guardian then exits and touches nothing.

Run as ``python guardian.py PGID [COMMAND ...]``; it imports nothing of the project, so it starts
in a few tens of milliseconds. :class:`Guard` is the controller's half.

If a guardian itself is killed, the next start finds what it guarded: every process of a guest
carries :data:`MARKER` (this checkout and its controller's pid) in its environment, and
:func:`stop_orphans` stops the groups whose controller is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: from SIGTERM to SIGKILL: qemu and virtiofsd end on SIGTERM within a second here
GRACE_S = 5.0
#: environment variable of every guest process: "<checkout>:<controller pid>"
MARKER = "CC_TESTBED_GUEST"


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. A zombie does not: the group's leader is often the
    controller's own child, not yet waited for, and ``killpg(pgid, 0)`` would count it until the grace
    ran out (5 s more for every guest the controller stopped itself)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # after the command's closing parenthesis: state, ppid, pgrp, ...
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # it ended while we read
        if int(group) == pgid and state != "Z":
            return True
    return False


def stop_group(pgid: int, grace_s: float = GRACE_S) -> bool:
    """SIGTERM the group, SIGKILL what is left after ``grace_s``; whether there was a group to stop."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True


class Guard:
    """The controller's half: a guardian for process group ``pgid`` that runs ``command`` after
    stopping it. :meth:`release` when the group ended normally (or was stopped by the controller)."""

    def __init__(self, pgid: int, command: list[str] | None = None) -> None:
        read_end, self._write_end = os.pipe()  # not inheritable: only this process holds the write end
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(pgid), *(command or [])],
            stdin=read_end,
            start_new_session=True,
        )
        os.close(read_end)

    def release(self) -> None:
        if self._write_end is None:
            return
        os.write(self._write_end, b"r")
        os.close(self._write_end)
        self._write_end = None
        self.proc.wait(timeout=10)

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def marker_value(project: str) -> str:
    return f"{project}:{os.getpid()}"


def environ_marker(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    prefix = f"{MARKER}=".encode()
    return next((item[len(prefix) :].decode(errors="replace") for item in environ if item.startswith(prefix)), None)


def controller_alive(pid: int) -> bool:
    """A live ``testbed`` process (not another process that got the pid of a dead one)."""
    try:
        return b"testbed" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def orphans(project: str) -> dict[int, list[str]]:
    """Guest process groups of this checkout whose controller is gone: pgid -> their command lines."""
    found: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        value = environ_marker(int(entry))
        if value is None or value.rpartition(":")[0] != project:
            continue
        controller = int(value.rpartition(":")[2])
        if controller == os.getpid() or controller_alive(controller):
            continue
        try:
            pgid = os.getpgid(int(entry))
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ProcessLookupError):
            continue
        found.setdefault(pgid, []).append(f"{entry} {cmdline.strip()[:80]}")
    return found


def stop_orphans(project: str) -> list[str]:
    """Stop every guest left by a controller of this checkout that is gone; returns what was stopped."""
    stopped = []
    for pgid, processes in sorted(orphans(project).items()):
        if stop_group(pgid):
            stopped.append(
                f"stopped a guest left by a killed controller (process group {pgid}: {'; '.join(processes)})"
            )
    return stopped


def main(argv: list[str]) -> int:
    pgid, command = int(argv[0]), argv[1:]
    # a Ctrl-C or a hang-up meant for the controller's terminal must not end the guardian first
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    released = os.read(0, 1)
    if released:
        return 0
    stop_group(pgid)
    if command:
        subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
