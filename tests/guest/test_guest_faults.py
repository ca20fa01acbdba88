"""Guest control faults: a kernel that does not boot, a kernel version that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys

from testbed.results import rundir
from tests.conftest import PROJECT, leftovers


def test_a_guest_that_does_not_boot_fails_its_runs_with_the_console_log(tmp_path):
    root = tmp_path / "bogus"
    (root / "boot").mkdir(parents=True)
    (root / "lib" / "modules" / "9.9.9-bogus").mkdir(parents=True)
    # not a kernel, and refused by qemu at once: its setup size (byte 0x1f1) is larger than the file. Random
    # bytes were refused only mostly: about 1 in 36 passed as an old zImage and hung in the BIOS until timeouts.
    bogus = bytearray(4096)
    bogus[0x1F1] = 0xFF
    (root / "boot" / "vmlinuz-9.9.9-bogus").write_bytes(bytes(bogus))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            "default",
            "--backend",
            "guest",
            "--no-report",
            "--kernel",
            str(root / "boot" / "vmlinuz-9.9.9-bogus"),
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, CC_TESTBED_ACCEL="tcg"),
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "guest failed" in out.stdout
    assert "console log:" in out.stdout
    assert "booting it once more" in out.stdout  # a boot can fail at random under TCG: a second try first
    assert len(list((tmp_path / "results").glob("default/*/guest-console-boot1.log"))) == 1
    manifests = list((tmp_path / "results").glob("default/*/*/seed=*/manifest.json"))
    assert len(manifests) == 10
    for path in manifests:
        manifest = rundir.read_json(path)
        assert manifest["status"] == "failed"
        assert "console log" in manifest["reason"]
    assert leftovers() == []
    assert subprocess.run(["pgrep", "-f", "qemu-system"], capture_output=True).returncode == 1


def test_an_unknown_kernel_version_lists_what_can_be_had(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            "default",
            "--backend",
            "guest",
            "--kernel",
            "9.9.9-99",
            "--results",
            str(tmp_path),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "linux-image-9.9.9-99-amd64" in out.stderr
    assert "Versions that can be had:" in out.stderr
    assert "6.1.0-" in out.stderr
