"""A killed controller takes its guest with it, and the next start resumes; a CPU hog on the host
marks the run made beside it untrustworthy, naming the host, and that run runs once more once the host is
quiet (testbed.host.contended). One scenario of two short runs, three boots: the first is SIGKILLed in run
1's traffic, the second resumes with a hog during run 2's, the third runs run 2 again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from testbed.host import hostload
from testbed.plan.progress import TRAFFIC_BEGINS, TRAFFIC_ENDS
from testbed.results import rundir
from testbed.results.manifest import run_status
from tests import machinefault
from tests.conftest import PROJECT, guest_processes

SCENARIO = {
    "description": "two seeds of one short flow",
    "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
    "flows": [{"cc": "cubic", "rtt_ms": 20}],
    "duration_s": 4,
    "seeds": [1, 2],
}
#: a busy loop on the host; twice as many as it has cores
HOG = ["sh", "-c", "while :; do :; done"]


def _start(tmp_path: Path, log_name: str) -> subprocess.Popen:
    scenario = tmp_path / "reliability.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    # output to a file, not a pipe: the test reads it while the controller runs and after it is killed
    with open(tmp_path / log_name, "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.cli",
                "run",
                str(scenario),
                "--backend",
                "guest",
                "--no-report",
                "--results",
                str(tmp_path / "results"),
            ],
            cwd=PROJECT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _wait_for_line(path: Path, text: str, after: str = "", timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = path.read_text(errors="replace") if path.exists() else ""
        if text in out[out.find(after) if after in out else len(out) :]:
            return
        time.sleep(0.2)
    raise AssertionError(f"no '{text}' after '{after}' within {timeout_s:.0f} s:\n{out[-3000:]}")


def test_a_killed_controller_leaves_no_guest_and_a_contended_run_is_untrustworthy_and_runs_again(tmp_path):
    first = _start(tmp_path, "first.log")
    _wait_for_line(tmp_path / "first.log", TRAFFIC_BEGINS, after="run 1/2:")
    first.kill()
    first.wait()
    killed_at = time.monotonic()
    while guest_processes() and time.monotonic() - killed_at < 10:
        time.sleep(0.2)
    assert guest_processes() == [], "the guest outlived its SIGKILLed controller by 10 s"
    assert hostload.qemu_pids() == {}

    second = _start(tmp_path, "second.log")
    hog = threading.Thread(target=_hog_during_run_2, args=(tmp_path / "second.log",))
    hog.start()
    second.wait(timeout=900)
    hog.join()
    out = (tmp_path / "second.log").read_text()
    assert "resuming" in out and "0 of 2 runs complete" in out, out[-3000:]
    (session,) = (tmp_path / "results" / "reliability").iterdir()
    # both first attempts kept (run 1's twice, had the hypervisor's steal also hit it: it ran again too)
    attempts = sorted((session / ".attempts" / "default").iterdir())
    (killed,) = [a for a in attempts if a.name.startswith("seed=1-") and run_status(a) == "incomplete"]
    assert (killed / "raw").is_dir()
    (contended,) = [a for a in attempts if a.name.startswith("seed=2-")]
    assert "host contention: " in out and " run(s) alone" in out, out[-3000:]
    quiet, hogged, again = (
        rundir.read_json(path / rundir.MANIFEST)
        for path in (session / "default" / "seed=1", contended, session / "default" / "seed=2")
    )
    assert "run_again" in again["backend"] and again["status"] == "complete", again.get("reason")
    assert quiet["status"] == "complete", quiet.get("reason")
    hogged_check = _host_check(hogged)
    assert not hogged_check["ok"] and "the host was contended" in hogged_check["detail"], hogged["host"]
    assert hogged["fidelity"]["trustworthy"] is False
    assert hogged["host"]["other_busy_pct"] > quiet["host"]["other_busy_pct"]
    print("host, quiet run:", quiet["host"], "\nhost, hogged run:", hogged["host"])
    quiet_check = _host_check(quiet)
    if not quiet_check["ok"] and (why := machinefault.machines_fault(quiet)):  # the machine's fault, not the testbed's
        pytest.skip(f"the quiet run could not be quiet on this machine now: {why}")
    assert quiet_check["ok"], quiet_check["detail"]
    again_check = _host_check(again)  # the hog had stopped: the run again was quiet, unless the hypervisor stole
    assert again_check["ok"] or machinefault.machines_fault(again), again_check["detail"]


def _hog_during_run_2(log: Path) -> None:
    _wait_for_line(log, TRAFFIC_BEGINS, after="run 2/2:", timeout_s=600)
    hogs = [subprocess.Popen(HOG) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        _wait_for_line(log, TRAFFIC_ENDS, after="run 2/2:", timeout_s=300)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _host_check(manifest: dict) -> dict:
    (check,) = [c for c in manifest["fidelity"]["checks"] if c["name"] == "host contention"]
    return check
