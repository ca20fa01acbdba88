"""Guests in virtual time (QEMU's icount), two packed at once (``--guests 2``): the option reaches QEMU,
each manifest records the clock and the guest that ran beside it, each guest runs on a core of its own,
and the host's contention is measured without being judged. Their speed and their equivalence to real
time and to one guest alone are measured by `testbed equivalence` (docs/results.md, "Virtual time"),
never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys

from testbed.results import rundir
from tests.conftest import PROJECT, leftovers


def test_packed_runs_in_virtual_time_record_their_clock_and_neighbour_and_are_judged_by_the_guests_checks(tmp_path):
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
            "cc=reno,westwood",
            "--seed",
            "1",
            "--guests",
            "2",
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
    assert "guests: 2 guests at once, one per core (virtual time)" in out.stdout + out.stderr
    session = next(tmp_path.glob("mobile-bernoulli/*/"))
    packing = rundir.read_json(session / "packing.json")
    assert packing["guests"] == 2 and len(set(packing["cores"])) == 2, packing
    points = sorted(path.parent.parent.name for path in session.glob("*/seed=1/manifest.json"))
    assert len(points) == 2 and all("cc=" in point for point in points), points
    for point, other in zip(points, reversed(points), strict=True):
        path = session / point / "seed=1" / "manifest.json"
        manifest = rundir.read_json(path)
        backend = manifest["backend"]
        assert (backend["clock"], backend["icount_shift"], backend["vcpus"], backend["accel"]) == (
            "virtual",
            0,
            1,
            "tcg",
        )
        packed = backend["packed"]
        assert packed["guests"] == 2 and packed["beside"] == [f"{other}/seed=1"], packed
        assert manifest["host"]["clock"] == "virtual"
        assert manifest["host"]["guest_traffic_s"] == manifest["resolved"]["duration_s"]
        (host_check,) = [c for c in manifest["fidelity"]["checks"] if c["name"] == "host contention"]
        assert host_check["ok"] and host_check["detail"].startswith("virtual time:")
    for k in (0, 1):
        first = (session / f"guest-console-g{k}.log").read_text(errors="replace").splitlines()[0]
        assert "--qemu-opts=-icount shift=0,sleep=off" in first and "nohz=off" in first
        assert f".guests/g{k}/plan.json --session {session}" in first
    assert leftovers() == []
