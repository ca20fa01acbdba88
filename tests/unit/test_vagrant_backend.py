"""The lab VM backend's pieces that need no VM."""

from __future__ import annotations

from testbed.host import vagrant


def test_no_lab_vm_without_vagrant_state(tmp_path, monkeypatch):
    monkeypatch.setenv("VAGRANT_DOTFILE_PATH", str(tmp_path / "nothing-here"))
    assert vagrant.vm_running() is False


def test_lab_vm_state_without_vagrant_is_not_running(tmp_path, monkeypatch):
    machine = tmp_path / "dot" / "machines" / "default" / "libvirt"
    machine.mkdir(parents=True)
    (machine / "id").write_text("5c3f")
    monkeypatch.setenv("VAGRANT_DOTFILE_PATH", str(tmp_path / "dot"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no vagrant on PATH
    assert vagrant.vm_running() is False
