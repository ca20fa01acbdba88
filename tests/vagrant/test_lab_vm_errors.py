"""Bad input around the lab VM: clear messages, non-zero exits, nothing half-made left behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed import cli
from tests.prerequisites import require_root, require_tools

PROJECT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.vagrant


@pytest.fixture(autouse=True)
def _needs_vagrant():
    require_tools(("vagrant",), "the vagrant tier")


def test_a_bad_driver_setting_names_the_valid_ones():
    out = subprocess.run(
        ["vagrant", "status"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        env={**os.environ, "TESTBED_VM_DRIVER": "xen"},
    )
    assert out.returncode != 0
    assert "TESTBED_VM_DRIVER=xen" in out.stderr and "kvm, qemu" in out.stderr


def test_vagrant_backend_without_a_vm_says_how_to_start_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VAGRANT_DOTFILE_PATH", str(tmp_path / "no-vm"))
    status = cli.main(["run", "default", "--backend", "vagrant", "--results", str(tmp_path / "results")])
    assert status == 2
    err = capsys.readouterr().err
    assert "vagrant up" in err
    assert not (tmp_path / "results").exists(), "nothing is written before the VM is there"


def test_a_box_build_that_cannot_reach_the_mirror_fails_cleanly(tmp_path):
    require_root("the box build: loop devices, mount")
    loops_before = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    env = {
        **os.environ,
        "CC_TESTBED_DEBIAN_MIRROR": "http://127.0.0.1:9/debian",
        "CC_TESTBED_BOX_NAME": "cc-testbed-test/unreachable",
        "XDG_CACHE_HOME": str(tmp_path),
    }
    out = subprocess.run(["scripts/build-box.sh"], cwd=PROJECT, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode != 0
    assert "mmdebstrap failed" in out.stderr and "127.0.0.1:9" in out.stderr
    box_dir = tmp_path / "cc-testbed" / "box"
    assert not [p for p in box_dir.iterdir() if p.is_dir()], "the work folder was removed (the log stays)"
    assert (box_dir / "build.log").exists()
    assert not list(box_dir.glob("*.box"))
    assert (
        "cc-testbed-test/unreachable"
        not in subprocess.run(["vagrant", "box", "list"], capture_output=True, text=True).stdout
    )
    assert subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout == loops_before
