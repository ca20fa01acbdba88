"""The lab VM as a backend: run a session's plan inside the project's Vagrant VM, over ssh.

The VM (``Vagrantfile``, provisioned by ``playbooks/site.yml``) runs a Debian kernel with netem,
Westwood+ and the project's module, so its own kernel executes the runs. The host pushes the
checkout (``vagrant rsync``), copies the session folder in, runs ``python -m testbed.guest.runner``
there as root, streams its progress lines, and copies the folder back: the report is written
on the host from the same raw files. Run directories in a plan are relative to its folder, so
the plan runs unchanged wherever the folder is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from testbed import PROJECT
from testbed.host import guardian, hostload, remote
from testbed.plan.plan import PLAN_DONE
from testbed.results import folderlock

#: inside the VM: the synced checkout (Vagrantfile) and where session folders are run
VM_PROJECT = "/vagrant"
VM_SESSIONS = "/var/tmp/cc-testbed-sessions"
#: ssh gives up on a VM that answers nothing for ALIVE_INTERVAL_S x ALIVE_COUNT (a stopped qemu, a
#: broken network): without keepalives a silent VM held the session for ever
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 6
CONNECT_TIMEOUT_S = 20
#: copying, cleaning up and other short commands in the VM
COMMAND_TIMEOUT_S = 300
#: from the runner's start in the VM to its first line (no boot: the VM is up)
RUNNER_START_TIMEOUT_S = 120


class VagrantError(Exception):
    """The lab VM could not run the plan; the message says why and what to do."""


def _dotfile_dir() -> Path:
    return Path(os.environ.get("VAGRANT_DOTFILE_PATH", PROJECT / ".vagrant"))


def vm_running() -> bool:
    """Whether this checkout's lab VM is up (a cheap file check first: ``vagrant status`` takes seconds)."""
    if not list((_dotfile_dir() / "machines").glob("*/*/id")):
        return False
    try:
        out = subprocess.run(
            ["vagrant", "status", "--machine-readable"], cwd=PROJECT, capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.split(",")[2:4] == ["state", "running"] for line in out.stdout.splitlines() if line.count(",") >= 3)


class LabVM:
    """ssh access to the running lab VM (``vagrant ssh-config``, then plain ssh: binary-safe pipes)."""

    def __init__(self) -> None:
        if not shutil.which("vagrant"):
            raise VagrantError(
                "vagrant is not installed: run 'make setup' (apt: vagrant vagrant-libvirt), then 'vagrant up'"
            )
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
        return [
            "ssh",
            "-F",
            self._config.name,
            "-o",
            "LogLevel=ERROR",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o",
            f"ServerAliveCountMax={ALIVE_COUNT}",
            "-o",
            f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            self.host,
            command,
        ]

    def run(self, command: str, timeout: float = COMMAND_TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self.argv(command), capture_output=True, text=True, timeout=timeout, **kwargs)
        except subprocess.TimeoutExpired:
            raise VagrantError(f"the lab VM did not answer '{command[:80]}' within {timeout:.0f} s") from None

    def stop_orphan_runners(self, log=print) -> list[str]:
        """Stop runners in the VM whose controller on this host is gone (it was killed before its
        guardian could stop them); says what it stopped."""
        # "[t]estbed": the pattern must not match the shell that runs pgrep, whose command line holds it
        listing = self.run(f"pgrep -af '[t]estbed.runner {VM_SESSIONS}/' || true", timeout=60).stdout
        stopped = []
        for line in listing.splitlines():
            pid, _, cmdline = line.partition(" ")
            plan = cmdline.split()[-1]
            holder = self.run(f"cat {plan.rsplit('/', 1)[0]}/.lock 2>/dev/null || true", timeout=60).stdout
            controller = folderlock.holder_pid(holder)
            if controller is not None and guardian.controller_alive(controller):
                continue
            self.run(f"sudo kill -TERM {pid}", timeout=60)
            stopped.append(f"stopped a runner left in the lab VM by a killed controller (pid {pid} in the VM: {plan})")
        for line in stopped:
            log(line)
        return stopped

    def qemu_pids(self) -> set[int]:
        """The VM's qemu process on this host (libvirt starts it with the domain's uuid)."""
        ids = list((_dotfile_dir() / "machines").glob("*/libvirt/id"))
        uuids = {path.read_text().strip() for path in ids}
        found = set()
        for pid in hostload.qemu_pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if any(uuid and uuid in cmdline for uuid in uuids):
                found.add(pid)
        return found

    def kernel_release(self) -> str:
        return self.run("uname -r").stdout.strip()

    def copy_in(self, local_dir: Path, remote_dir: str) -> None:
        tar = subprocess.Popen(["tar", "-C", str(local_dir), "-cf", "-", "."], stdout=subprocess.PIPE)
        ssh = subprocess.run(
            self.argv(f"sudo rm -rf {remote_dir} && sudo mkdir -p {remote_dir} && sudo tar -C {remote_dir} -xf -"),
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        tar.stdout.close()
        tar.wait()
        if ssh.returncode != 0 or tar.returncode != 0:
            raise VagrantError(f"copying {local_dir} into the lab VM failed: {ssh.stderr.strip()[-300:]}")

    def copy_out(self, remote_dir: str, local_dir: Path) -> None:
        # the folder's lock file stays: it is the one this process holds (folderlock), replacing it would free it
        ssh = subprocess.Popen(
            self.argv(f"sudo tar -C {remote_dir} --exclude=./.lock -cf - ."),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            tar = subprocess.run(
                ["tar", "-C", str(local_dir), "-xf", "-"],
                stdin=ssh.stdout,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            ssh.kill()
            ssh.wait()
            raise VagrantError(f"copying the results out of the lab VM took over {COMMAND_TIMEOUT_S} s") from None
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


def run_plan(vm: LabVM, session: Path, timeout_s: float, echo=print, observers: Sequence[remote.Observer] = ()) -> dict:
    """Run ``session/plan.json`` in the VM and bring the session folder back; returns timings.

    The runner's output is followed by :func:`remote.follow_plan` (the same deadlines as a guest's) over
    ssh with keepalives, so a VM that falls silent fails the session within ALIVE_INTERVAL_S x
    ALIVE_COUNT instead of holding it. A guardian stops the runner in the VM if this process is
    killed. A VM that stopped answering is left as it is, for the user to inspect or destroy.
    ``observers`` are told the runner's lines too, but the run folders are here only once the session is
    back: an observer must look at a folder's manifest before it reads it."""
    remote_dir = f"{VM_SESSIONS}/{session.name}"
    started = time.monotonic()
    vm.copy_in(session, remote_dir)
    runner = f"testbed.guest.runner {remote_dir}/plan.json"
    command = f"cd {VM_PROJECT} && sudo {VM_PROJECT}/.venv/bin/python -m {runner}"
    plan_path = session / "plan.json"
    run_dirs = [run["run_dir"] for run in json.loads(plan_path.read_text())["runs"]]
    watch = hostload.HostWatch(run_dirs, vm.qemu_pids, log=echo)
    on_line = remote.with_observers(watch.on_line, observers, session, run_dirs)
    stop_runner = vm.argv(f"sudo pkill -TERM -f '[t]{runner[1:]}'")  # "[t]": not the shell running pkill
    log_path = session / "vm-console.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            vm.argv(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        guard = guardian.Guard(proc.pid, stop_runner)
        try:
            ready_s = remote.follow_plan(
                proc,
                log_file,
                plan_path,
                started,
                label="the lab VM",
                start_timeout_s=RUNNER_START_TIMEOUT_S,
                timeout_s=timeout_s,
                echo=echo,
                on_line=on_line,
            )
        except BaseException as err:
            _stop(vm, proc, stop_runner)
            _bring_back_or_explain(vm, remote_dir, session, err)
            if isinstance(err, remote.RemoteRunnerError):
                raise VagrantError(str(err)) from None
            raise
        finally:
            guard.release()
            proc.stdout.close()
    _bring_back(vm, remote_dir, session, proc.returncode, log_path, watch)
    return remote.plan_timing(ready_s, started, session / PLAN_DONE)


def _bring_back(
    vm: LabVM, remote_dir: str, session: Path, ssh_exit: int, log_path: Path, watch: hostload.HostWatch
) -> None:
    """The session folder back from the VM after its runner's ssh ended (exit ``ssh_exit``), the host's
    figures added to its runs' manifests; a VagrantError when the VM was lost or the runner stopped before
    it finished the plan."""
    lost = None
    if ssh_exit == 255:  # ssh's own failure, not the runner's: the VM stopped answering
        lost = (
            f"ssh lost the lab VM: it answered nothing for {ALIVE_INTERVAL_S * ALIVE_COUNT} s "
            f"({remote.console_tail(log_path, lines=1).strip() or 'no message'})"
        )
    _bring_back_or_explain(vm, remote_dir, session, lost)
    watch.apply(session)
    if not (session / PLAN_DONE).exists():
        raise VagrantError(
            f"the runner in the lab VM stopped without finishing the plan (ssh exit {ssh_exit}"
            f"{': ' + lost if lost else ''}); its output: {log_path}"
            f"{remote.console_tail(log_path, lines=10)}"
        )


def _stop(vm: LabVM, proc: subprocess.Popen, stop_runner: list[str]) -> None:
    """Stop the runner in the VM (it turns SIGTERM into an orderly stop) and the local ssh."""
    try:
        subprocess.run(stop_runner, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        pass
    guardian.stop_group(proc.pid)
    proc.wait()


def _bring_back_or_explain(vm: LabVM, remote_dir: str, session: Path, error: BaseException | str | None) -> None:
    """Copy the session folder back; when the VM does not answer, say so and leave it as it is."""
    try:
        vm.copy_out(remote_dir, session)
        vm.run(f"sudo rm -rf {remote_dir}", timeout=60)
    except VagrantError as err:
        raise VagrantError(
            f"{error or 'the runner in the lab VM ended'}; then the results could not be copied back: {err}. "
            f"The VM is left as it is: look inside with 'vagrant ssh' (the session is in {remote_dir}), "
            f"or remove it with 'vagrant destroy -f'"
        ) from None
