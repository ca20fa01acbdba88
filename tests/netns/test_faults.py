"""Faults on the host kernel: an iperf3 that dies, Ctrl-C, SIGKILL. Completed runs stay intact and
nothing is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from testbed.guest.network import MARKER, _marked_pids
from testbed.host.session import run_session
from testbed.results import rundir
from testbed.results.manifest import run_status
from tests.conftest import PROJECT, leftovers
from tests.netns.test_dumbbell_host import host_scenario


def _iperf3_clients() -> list[int]:
    pids = []
    for pid in _marked_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline[:2] == [b"iperf3", b"-c"] and b"--cport" in cmdline:  # data, not the UDP probe
            pids.append(pid)
    return pids


def _wait_for(predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def test_iperf3_dying_fails_its_run_and_the_sweep_goes_on(tmp_path, clean_kernel):
    scenario = host_scenario(["reno", "cubic"], duration_s=6, name="faults")
    killed = []

    def kill_first_client():
        pid = _wait_for(_iperf3_clients)[0]
        time.sleep(1.5)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_first_client)
    killer.start()
    result = run_session(scenario, backend="local", results_root=tmp_path)
    killer.join()
    assert killed
    first, second = (rundir.read_json(r / "manifest.json") for r in result.runs)
    assert first["status"] == "failed"
    assert "connection c0 (reno l0->r0) failed: iperf3 exit -9" in first["reason"]
    assert (result.runs[0] / "raw" / "rl.pcap").stat().st_size > 0, "raw files are kept"
    assert (result.runs[0] / "raw" / "tcp_probe.txt").exists()
    assert second["status"] == "complete", "the sweep went on after the failed run"


def _start_cli(tmp_path: Path, duration_s: int) -> subprocess.Popen:
    scenario = tmp_path / "interrupted.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
                "flows": [{"cc": "reno", "rtt_ms": 0}],
                "duration_s": duration_s,
            }
        )
    )
    # output to a file, not a pipe: after a SIGKILL the run's children still hold a pipe open
    with open(tmp_path / "cli.log", "wb") as log:
        return subprocess.Popen(
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
            preexec_fn=_default_sigint,
        )


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and Python then keeps ignoring it:
    # give the CLI the SIGINT a user's Ctrl-C would reach, however the test suite was started.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_dir(tmp_path: Path) -> Path:
    manifests = list((tmp_path / "results").glob("*/*/*/seed=*/manifest.json"))
    return manifests[0].parent if manifests else None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_marks_the_run_incomplete_and_tears_down(tmp_path, clean_kernel, sig):
    proc = _start_cli(tmp_path, duration_s=30)
    _wait_for(_iperf3_clients)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    out = (tmp_path / "cli.log").read_text()
    assert proc.returncode == 130, out
    assert "interrupted" in out
    manifest = rundir.read_json(_run_dir(tmp_path) / "manifest.json")
    assert manifest["status"] == "incomplete"
    assert "interrupted" in manifest["reason"]
    assert (_run_dir(tmp_path) / "raw" / "rl.pcap").exists()


def test_sigkill_leftovers_are_cleaned_by_the_next_start(tmp_path, clean_kernel):
    proc = _start_cli(tmp_path, duration_s=30)
    _wait_for(_iperf3_clients)
    proc.kill()
    proc.wait(timeout=30)
    assert leftovers(), "a SIGKILLed run leaves processes and namespaces (this is what cleanup is for)"
    assert run_status(_run_dir(tmp_path)) == "incomplete"
    out = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "cleanup"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != MARKER},
    )
    assert out.returncode == 0, out.stderr
    assert "leftover" in out.stdout
    _wait_for(lambda: leftovers() == [], timeout_s=15)


def test_a_sweep_run_again_resumes_keeps_complete_runs_and_redoes_the_others(tmp_path, clean_kernel):
    scenario = host_scenario(["reno", "cubic"], duration_s=3, name="resume")
    first = run_session(scenario, backend="local", results_root=tmp_path)
    assert set(first.statuses.values()) == {"complete"}
    reno, cubic = (first.directory / "cc=reno" / "seed=1", first.directory / "cc=cubic" / "seed=1")
    reno_manifest = (reno / "manifest.json").read_bytes()
    broken = rundir.read_json(cubic / "manifest.json")
    broken.update(status="failed", reason="made to fail by the test")
    rundir.write_json_atomic(cubic / "manifest.json", broken)

    second = run_session(scenario, backend="local", results_root=tmp_path)
    assert second.directory == first.directory
    assert set(second.statuses.values()) == {"complete"}
    assert (reno / "manifest.json").read_bytes() == reno_manifest  # not run again
    assert rundir.read_json(cubic / "manifest.json")["started_utc"] != broken["started_utc"]
    # (a first run the host took the CPU from would be among them too: testbed.host.contended)
    attempts = (first.directory / ".attempts" / "cc=cubic").iterdir()
    assert "made to fail by the test" in [rundir.read_json(a / "manifest.json").get("reason") for a in attempts]

    third = run_session(scenario, backend="local", results_root=tmp_path)  # nothing left to do
    assert third.directory == first.directory and (reno / "manifest.json").read_bytes() == reno_manifest
    assert len(list((tmp_path / "resume").iterdir())) == 1


def test_a_second_writer_of_a_results_folder_is_refused_and_moves_nothing(tmp_path, clean_kernel):
    first = _start_cli(tmp_path, duration_s=20)
    _wait_for(_iperf3_clients)
    running = _run_dir(tmp_path)
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(tmp_path / "interrupted.yaml"),
            "--backend",
            "local",
            "--no-report",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"is being written by testbed pid {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    assert _run_dir(tmp_path) == running and not (running.parent.parent / ".attempts").exists()
    assert rundir.read_json(running / "manifest.json")["status"] == "running"  # the first writer's, untouched
    first.send_signal(signal.SIGINT)
    first.wait(timeout=60)
    assert run_status(running) == "incomplete"


def test_two_sessions_on_one_kernel_take_turns_and_cleanup_leaves_a_live_one_alone(tmp_path, clean_kernel):
    """Two `testbed run --backend local` on different folders at once: the second waits, naming the first
    session and its pid, and starts when it ends; both complete. `testbed cleanup` meanwhile removes
    nothing of the live session."""
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir(), second_dir.mkdir()
    first = _start_cli(first_dir, duration_s=15)
    _wait_for(_iperf3_clients)
    second = _start_cli(second_dir, duration_s=3)
    _wait_for(lambda: "waiting: another session" in (second_dir / "cli.log").read_text(), timeout_s=60)
    cleanup = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "cleanup"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != MARKER},
    )
    assert cleanup.returncode == 0 and "a session runs on this kernel (session " in cleanup.stdout, cleanup.stdout
    first.wait(timeout=120)
    second.wait(timeout=120)
    said = (second_dir / "cli.log").read_text()
    assert first.returncode == 0 and second.returncode == 0, said
    assert "waiting: another session runs on this kernel (session " in said and f"pid {first.pid}," in said
    ran = [rundir.read_json(_run_dir(d) / "manifest.json") for d in (first_dir, second_dir)]
    assert [m["status"] for m in ran] == ["complete", "complete"]
    assert ran[1]["started_utc"] >= ran[0]["ended_utc"]  # one after the other (to the second)
    _wait_for(lambda: leftovers() == [], timeout_s=15)
