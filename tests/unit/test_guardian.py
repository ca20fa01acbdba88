"""A guest ends with its controller: the guardian stops the guest's process group when the controller
dies (SIGKILL included), and a later start finds groups whose controller is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from testbed.host import guardian

#: a controller as testbed.host.virtme runs one: a "guest" (two sleeps in a session of their own, carrying the
#: marker) and a guardian for it; it prints the group's id and waits to be killed
CONTROLLER = textwrap.dedent("""
    import os, subprocess, sys, time
    sys.path.insert(0, {root!r})
    from testbed.host import guardian
    env = dict(os.environ, **{{guardian.MARKER: guardian.marker_value({project!r})}})
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], env=env, start_new_session=True)
    guard = guardian.Guard(proc.pid, {command!r})
    if {release!r}:
        guardian.stop_group(proc.pid)
        proc.wait()
        guard.release()
    print(proc.pid, flush=True)
    time.sleep(300)
""")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _controller(tmp_path, command=None, release=False, project="/nowhere/cc-testbed"):
    # "testbed" in its command line: orphans() tells a live controller by it
    script = tmp_path / "testbed_controller.py"
    script.write_text(CONTROLLER.format(root=ROOT, project=project, command=command, release=release))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pgid = int(proc.stdout.readline())
    proc.stdout.close()
    return proc, pgid


def _group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_killed_controller_takes_its_guest_with_it(tmp_path):
    stamp = tmp_path / "after-stop"
    proc, pgid = _controller(tmp_path, command=["touch", str(stamp)])
    os.killpg(pgid, 0)  # the "guest" runs
    proc.kill()
    proc.wait()
    assert _group_gone(pgid, timeout_s=10), "the guest outlived its SIGKILLed controller"
    deadline = time.monotonic() + 10
    while not stamp.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stamp.exists(), "the guardian's command (the lab VM's: stop the runner) did not run"


def test_a_released_guardian_leaves_everything_alone(tmp_path):
    stamp = tmp_path / "after-stop"
    proc, _ = _controller(tmp_path, command=["touch", str(stamp)], release=True)
    proc.kill()
    proc.wait()
    time.sleep(1)
    assert not stamp.exists()


def test_orphans_are_the_groups_of_this_checkout_whose_controller_is_gone(tmp_path):
    project = str(tmp_path / "checkout")
    env = dict(os.environ, **{guardian.MARKER: f"{project}:{2**22 + 17}"})  # a pid that does not exist
    orphan = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    other = subprocess.Popen(
        ["sleep", "300"],
        start_new_session=True,
        env=dict(os.environ, **{guardian.MARKER: f"/another/checkout:{2**22 + 17}"}),
    )
    live = subprocess.Popen(
        ["sleep", "300"],
        start_new_session=True,
        env=dict(os.environ, **{guardian.MARKER: guardian.marker_value(project)}),
    )
    try:
        time.sleep(0.2)
        assert set(guardian.orphans(project)) == {orphan.pid}
        stopped = guardian.stop_orphans(project)
        assert len(stopped) == 1 and str(orphan.pid) in stopped[0] and "sleep 300" in stopped[0]
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        assert other.poll() is None and live.poll() is None
    finally:
        for proc in (orphan, other, live):
            proc.kill()
            proc.wait()


def test_a_group_whose_only_process_is_an_unwaited_zombie_has_ended():
    """The controller stops its own child's group: the leader stays a zombie until waited for, and a stop
    that counted it would wait out its whole grace for every guest."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert guardian._group_alive(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(proc.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(proc.pid) == "Z" and not guardian._group_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
