"""One writer per results folder: a second one is refused with the holder's name, a dead holder's
lock is taken over and said so."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from testbed.results import folderlock

HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from testbed.results import folderlock
    lock = folderlock.acquire(__import__("pathlib").Path({folder!r}))
    print("locked", flush=True)
    time.sleep(300)
""")


def _holder(tmp_path, folder):
    from tests.conftest import PROJECT

    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(root=str(PROJECT), folder=str(folder))], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    proc.stdout.close()
    return proc


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    folder = tmp_path / "session"
    holder = _holder(tmp_path, folder)
    try:
        with pytest.raises(folderlock.FolderBusy) as refused:
            folderlock.acquire(folder)
        message = str(refused.value)
        assert f"testbed pid {holder.pid}" in message and str(folder) in message and "--force" in message
    finally:
        holder.kill()
        holder.wait()
    # the kernel released the dead holder's lock: it is taken over, and the holder it names is kept
    with folderlock.acquire(folder) as lock:
        assert lock.took_over["pid"] == holder.pid
    with folderlock.acquire(folder) as lock:  # released in order: nothing to take over
        assert lock.took_over is None


def test_the_lock_is_one_per_process_not_per_call(tmp_path):
    with folderlock.acquire(tmp_path) as first:
        assert first.took_over is None
        with pytest.raises(folderlock.FolderBusy):  # flock locks are per open file: a second acquire is refused
            folderlock.acquire(tmp_path)
