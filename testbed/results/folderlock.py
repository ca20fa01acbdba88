"""One writer per results folder: a session holds an OS file lock on its folder for its whole life.

The lock is ``flock`` on ``<session>/.lock``, so the kernel releases it when its holder ends, however
it ends (SIGKILL included): a lock is never stale. The file also says who holds it (pid, host,
start time, command), for the message a second writer gets, and is emptied on an orderly release;
a lock found free with a holder still written in it was left by a process that died, and taking it
over says so.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from testbed.results import rundir

LOCK_NAME = ".lock"


class FolderBusy(Exception):
    """Another live process writes this results folder."""


class FolderLock:
    """Held from :func:`acquire` until :meth:`release` (or this process's end)."""

    def __init__(self, folder: Path, file, took_over: dict | None) -> None:
        self.folder = folder
        self._file = file
        #: the holder written in the file by a process that died holding it, if any
        self.took_over = took_over

    def release(self) -> None:
        if self._file is None:
            return
        self._file.seek(0)
        self._file.truncate()
        self._file.flush()
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(text: str) -> dict | None:
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def holder_pid(text: str) -> int | None:
    """The pid a lock file's text names (the lab VM's copy of it, for its leftover runners), if any."""
    pid = (_holder(text) or {}).get("pid")
    return pid if isinstance(pid, int) else None


def holder_text(holder: dict | None) -> str:
    if not holder:
        return "another process (it wrote no details)"
    return (
        f"testbed pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started_utc')} "
        f"({holder.get('command', '')[:120]})"
    )


def acquire(folder: Path) -> FolderLock:
    """Lock ``folder`` for this process or raise :class:`FolderBusy` naming the holder."""
    folder.mkdir(parents=True, exist_ok=True)
    lock_file = open(folder / LOCK_NAME, "a+")  # noqa: SIM115 - held open for the session's life
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.seek(0)
        holder = _holder(lock_file.read())
        lock_file.close()
        raise FolderBusy(
            f"the results folder {folder} is being written by {holder_text(holder)}: one writer per folder. "
            f"Wait for it to end, stop it, or run with --force to start a new folder"
        ) from None
    lock_file.seek(0)
    previous = _holder(lock_file.read())
    lock_file.seek(0)
    lock_file.truncate()
    json.dump(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_utc": rundir.utc_iso(),
            "command": " ".join(sys.argv),
        },
        lock_file,
    )
    lock_file.flush()
    return FolderLock(folder, lock_file, previous)
