"""``testbed shell`` on the host kernel (--backend local): Mininet's CLI on a dumbbell, through a real
pseudo-terminal; leaving it leaves no process, interface or namespace. A run started beside it waits
for it (one session at a time on a kernel), saying for whom, and completes once the shell is left."""

from __future__ import annotations

import subprocess
import sys
import time

import pexpect
import yaml

from testbed.results import rundir
from tests.conftest import PROJECT, leftovers
from tests.shelldialogue import command, reachability_flow_and_exit, spawned


def test_the_shell_reaches_starts_a_flow_and_ctrl_d_leaves_nothing(tmp_path, clean_kernel):
    # rtt_ms 0: the host kernel has no netem, so only the bottleneck (HTB + pfifo) is emulated
    with spawned(tmp_path, "local", rtt_ms=0, boot_timeout_s=60) as child:
        reachability_flow_and_exit(child, leave="eof")  # Ctrl-D; the guest test types exit
    assert child.exitstatus == 0, (tmp_path / "shell.log").read_text()[-2000:]
    assert leftovers() == []


def test_a_run_beside_the_shell_waits_for_it_then_completes(tmp_path, clean_kernel):
    scenario = tmp_path / "beside.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
                "flows": [{"cc": "reno", "rtt_ms": 0}],
                "duration_s": 2,
            }
        )
    )
    log_path = tmp_path / "run.log"
    with spawned(tmp_path, "local", rtt_ms=0, boot_timeout_s=60) as child:
        with open(log_path, "wb") as log:
            run = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "testbed.cli",
                    "run",
                    str(scenario),
                    "--backend",
                    "local",
                    "--no-report",
                    "--results",
                    str(tmp_path / "results"),
                ],
                cwd=PROJECT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 90
        while "waiting: another session runs on this kernel (testbed shell" not in log_path.read_text():
            assert run.poll() is None and time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.2)
        assert "idle" in command(child, "flows")  # the shell's network untouched by the waiting run
        child.sendeof()
        child.expect_exact("the network is torn down", timeout=60)
        child.expect(pexpect.EOF, timeout=120)
    run.wait(timeout=180)
    assert run.returncode == 0, log_path.read_text()[-2000:]
    [manifest] = [rundir.read_json(p) for p in (tmp_path / "results").rglob("manifest.json")]
    assert manifest["status"] == "complete", manifest.get("reason")
    assert leftovers() == []
