"""A guest in virtual time (QEMU's icount): the option reaches QEMU, the manifest records the clock, and
the host's contention is measured without being judged. Its speed and its equivalence to real time are
measured by `testbed equivalence` (docs/results.md, "Virtual time"), never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys

from testbed.results import rundir
from tests.conftest import PROJECT, leftovers


def test_a_run_in_virtual_time_records_its_clock_and_is_judged_by_the_guests_checks(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            "mobile-bernoulli",
            "--only",
            "loss_pct=5",
            "--only",
            "cc=reno",
            "--seed",
            "1",
            "--backend",
            "guest",
            "--clock",
            "virtual",
            "--no-report",
            "--results",
            str(tmp_path),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, CC_TESTBED_ACCEL="tcg"),
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "virtual time (icount shift 0): --clock virtual" in out.stdout + out.stderr
    (path,) = tmp_path.glob("mobile-bernoulli/*/*/seed=1/manifest.json")
    manifest = rundir.read_json(path)
    backend = manifest["backend"]
    assert (backend["clock"], backend["icount_shift"], backend["vcpus"], backend["accel"]) == ("virtual", 0, 1, "tcg")
    console = next(tmp_path.glob("mobile-bernoulli/*/guest-console.log")).read_text(errors="replace")
    assert "--qemu-opts=-icount shift=0,sleep=off" in console.splitlines()[0]
    assert "nohz=off" in console.splitlines()[0] and backend["append"] == "nohz=off"
    assert manifest["host"]["clock"] == "virtual"
    assert manifest["host"]["guest_traffic_s"] == manifest["resolved"]["duration_s"]
    (host_check,) = [c for c in manifest["fidelity"]["checks"] if c["name"] == "host contention"]
    assert host_check["ok"] and host_check["detail"].startswith("virtual time:")
    assert leftovers() == []
