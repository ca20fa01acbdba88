"""The lab VM as a backend: run a session's plan inside the project's Vagrant VM, over ssh.

The VM (``Vagrantfile``, provisioned by ``playbooks/site.yml``) runs a Debian kernel with netem,
Westwood+ and the project's module, so its own kernel executes the runs. The host pushes the
checkout (``vagrant rsync``), copies the session folder in, runs ``python -m testbed.runner``
there as root, streams its progress lines, and copies the folder back: the report is written
on the host from the same raw files. Run directories in a plan are relative to its folder, so
the plan runs unchanged wherever the folder is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
#: inside the VM: the synced checkout (Vagrantfile) and where session folders are run
VM_PROJECT = "/vagrant"
VM_SESSIONS = "/var/tmp/cc-testbed-sessions"


class VagrantError(Exception):
    """The lab VM could not run the plan; the message says why and what to do."""


def _dotfile_dir() -> Path:
    return Path(os.environ.get("VAGRANT_DOTFILE_PATH", PROJECT / ".vagrant"))


def vm_running() -> bool:
    """Whether this checkout's lab VM is up (a cheap file check first: ``vagrant status`` takes seconds)."""
    if not list((_dotfile_dir() / "machines").glob("*/*/id")):
        return False
    try:
        out = subprocess.run(["vagrant", "status", "--machine-readable"], cwd=PROJECT, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.split(",")[2:4] == ["state", "running"] for line in out.stdout.splitlines() if line.count(",") >= 3)


class LabVM:
    """ssh access to the running lab VM (``vagrant ssh-config``, then plain ssh: binary-safe pipes)."""

    def __init__(self) -> None:
        if not shutil.which("vagrant"):
            raise VagrantError("vagrant is not installed: run 'make setup' (apt: vagrant vagrant-libvirt), "
                               "then 'vagrant up'")  # fmt: skip
        out = subprocess.run(["vagrant", "ssh-config"], cwd=PROJECT, capture_output=True, text=True)
        if out.returncode != 0 or "HostName" not in out.stdout:
            raise VagrantError(
                f"the lab VM does not answer 'vagrant ssh-config' ({out.stderr.strip()[-300:] or 'no output'}): "
                "start it with 'vagrant up', or run with --backend guest"
            )
        self.host = out.stdout.split()[1]  # "Host default"
        self._config = tempfile.NamedTemporaryFile("w", prefix="cc-testbed-ssh-", suffix=".conf", delete=False)
        self._config.write(out.stdout)
        self._config.close()

    def close(self) -> None:
        Path(self._config.name).unlink(missing_ok=True)

    def __enter__(self) -> LabVM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def argv(self, command: str) -> list[str]:
        return ["ssh", "-F", self._config.name, "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", self.host, command]

    def run(self, command: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(command), capture_output=True, text=True, **kwargs)

    def kernel_release(self) -> str:
        return self.run("uname -r").stdout.strip()

    def copy_in(self, local_dir: Path, remote_dir: str) -> None:
        tar = subprocess.Popen(["tar", "-C", str(local_dir), "-cf", "-", "."], stdout=subprocess.PIPE)
        ssh = subprocess.run(self.argv(f"sudo rm -rf {remote_dir} && sudo mkdir -p {remote_dir} && "
                                       f"sudo tar -C {remote_dir} -xf -"),
                             stdin=tar.stdout, capture_output=True, text=True)  # fmt: skip
        tar.stdout.close()
        tar.wait()
        if ssh.returncode != 0 or tar.returncode != 0:
            raise VagrantError(f"copying {local_dir} into the lab VM failed: {ssh.stderr.strip()[-300:]}")

    def copy_out(self, remote_dir: str, local_dir: Path) -> None:
        ssh = subprocess.Popen(self.argv(f"sudo tar -C {remote_dir} -cf - ."), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
        tar = subprocess.run(["tar", "-C", str(local_dir), "-xf", "-"], stdin=ssh.stdout, capture_output=True,
                             text=True)  # fmt: skip
        ssh.stdout.close()
        err = ssh.stderr.read().decode(errors="replace")
        ssh.stderr.close()
        ssh.wait()
        if ssh.returncode != 0 or tar.returncode != 0:
            raise VagrantError(f"copying the results out of the lab VM failed: {(err or tar.stderr).strip()[-300:]}")


def sync_checkout() -> None:
    """Push this checkout into the VM (``vagrant rsync``), so it runs the code the manifest's git sha names."""
    out = subprocess.run(["vagrant", "rsync"], cwd=PROJECT, capture_output=True, text=True)
    if out.returncode != 0:
        raise VagrantError(f"'vagrant rsync' failed: {(out.stderr or out.stdout).strip()[-300:]}")


def run_plan(vm: LabVM, session: Path, timeout_s: float, echo=print) -> dict:
    """Run ``session/plan.json`` in the VM and bring the session folder back; returns timings."""
    remote = f"{VM_SESSIONS}/{session.name}"
    started = time.monotonic()
    vm.copy_in(session, remote)
    command = (f"cd {VM_PROJECT} && sudo {VM_PROJECT}/.venv/bin/python -m testbed.runner "
               f"{remote}/plan.json")  # fmt: skip
    proc = subprocess.Popen(vm.argv(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log_path = session / "vm-console.log"
    timing = {"ready_s": None}
    try:
        with open(log_path, "w") as log_file:
            for line in proc.stdout:
                log_file.write(line)
                log_file.flush()
                if "[testbed]" in line:
                    if timing["ready_s"] is None:
                        timing["ready_s"] = round(time.monotonic() - started, 2)
                    echo(line.rstrip("\n")[line.index("[testbed]") + 10 :])
                if time.monotonic() - started > timeout_s:
                    raise VagrantError(f"the lab VM did not finish within {timeout_s:.0f} s; its output: {log_path}")
        proc.wait()
    except BaseException:
        # the runner turns SIGTERM into an orderly stop (run marked incomplete, topology torn down)
        vm.run(f"sudo pkill -TERM -f 'testbed.runner {remote}/plan.json'", timeout=60)
        proc.kill()
        proc.wait()
        _bring_back(vm, remote, session)
        raise
    finally:
        proc.stdout.close()
    _bring_back(vm, remote, session)
    if not (session / "plan.done").exists():
        raise VagrantError(
            f"the runner in the lab VM stopped without finishing the plan (exit {proc.returncode}); "
            f"its output: {log_path}"
        )
    timing["wall_s"] = round(time.monotonic() - started, 2)
    timing["not_complete"] = int((session / "plan.done").read_text().strip() or 0)
    return timing


def _bring_back(vm: LabVM, remote: str, session: Path) -> None:
    vm.copy_out(remote, session)
    vm.run(f"sudo rm -rf {remote}", timeout=60)
