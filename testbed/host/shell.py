"""``testbed shell SCENARIO``: one point of a scenario built on a real kernel, and Mininet's CLI on it.

The backend is chosen as ``testbed run`` chooses it (:func:`testbed.host.choice.choose_backend`): the
running kernel in this process when it has what the scenario needs, else the lab VM when it is up,
else a virtme-ng guest. What the network needs is built here as for a run (the project's modules, the
BPF loss programs), and a plan of one run is written to a folder of its own; the guest or the lab VM
then runs :mod:`testbed.guest.shell` on it with this terminal attached (a guest's console is the
terminal: qemu passes the keys through, Ctrl-C included). Leaving the CLI tears the network down;
the guest powers off, and a guardian stops it if this process is killed.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from testbed import PROJECT
from testbed.guest import start
from testbed.host import backends, guardian, vagrant, virtme
from testbed.host.choice import choose_backend
from testbed.plan import estimate
from testbed.plan.plan import PLAN, Plan, PlanContext, PlanRun
from testbed.results import provenance
from testbed.scenario.points import RunSpec, ScenarioFile

#: where the lab VM finds a shell's plan (pushed with the checkout by ``vagrant rsync``)
VM_PLANS = "/var/tmp/cc-testbed-shell"
#: how long a guest may take from its start to its shell's login before it is booted once more
SHELL_BOOT_S = virtme.BOOT_TIMEOUT_S


def chosen_run(scenario: ScenarioFile, log=print) -> RunSpec:
    """The run the shell builds: the first point's first seed (saying which, and how to pick another)."""
    runs = scenario.runs()
    points = list(dict.fromkeys(r.point_id for r in runs))
    run = runs[0]
    if len(points) > 1:
        others = ", ".join(points[1:4]) + (", ..." if len(points) > 4 else "")
        log(
            f"{scenario.name} has {len(points)} points; this shell builds {run.point_id} "
            f"(--only KEY=VALUE picks another: {others})"
        )
    return run


def open_shell(
    scenario: ScenarioFile,
    backend: str = "auto",
    kernel_version: str | None = None,
    vcpus: int | None = None,
    log=print,
    page=None,
) -> int:
    """Build the scenario's first run's network on the chosen backend and attach this terminal to its CLI;
    ``page(folder)``, a context manager: the live page served on the plan's folder while the shell is open
    (its ``live`` command prints the URL; not in the lab VM, whose folder this host cannot read)."""
    run = chosen_run(scenario, log)
    if backend == "auto":
        backend, why = choose_backend([run], kernel_version)
        log(f"backend: {backend} ({why})")
    virtme.stop_orphans(log=log)
    chosen = backends.create(backend, kernel_version, vcpus, log=log)
    folder = Path(tempfile.mkdtemp(prefix="cc-testbed-shell-"))
    try:
        release = chosen.prepare()
        artefacts = chosen.build([run], release)
        context = PlanContext(
            git=provenance.git_state(PROJECT),
            backend=chosen.record(),
            project_modules=artefacts.project_modules,
            bpf_objects=artefacts.bpf_objects,
            hold_library=artefacts.hold_library,
        )
        plan = Plan(context=context, runs=[_plan_run(run)])
        plan.write(folder / PLAN)
        shared = page is not None and not isinstance(chosen, backends.LabVMBackend)
        with page(folder) if shared else contextlib.nullcontext():
            return _attach(chosen, plan, folder)
    finally:
        chosen.close()
        shutil.rmtree(folder, ignore_errors=True)


def _plan_run(run: RunSpec) -> PlanRun:
    return PlanRun(
        scenario_name=run.scenario_name,
        point_id=run.point_id,
        params=run.params,
        seed=run.seed,
        profile=run.profile,
        scenario=run.scenario.model_dump(mode="json"),
        run_dir="shell",
        estimate_s=estimate.estimate_s(run),
    )


def _attach(chosen: backends.Backend, plan: Plan, folder: Path) -> int:
    if isinstance(chosen, backends.LocalBackend):
        from testbed.guest.shell import open_shell as open_here

        open_here(plan, folder)
        return 0
    if isinstance(chosen, backends.GuestBackend):
        return _in_guest(chosen, folder / PLAN)
    return _in_lab_vm(folder)


def _in_guest(guest: backends.GuestBackend, plan_path: Path) -> int:
    """vng with this terminal as the guest's console and our shell as root's login shell there; booted
    once more when the first guest does not reach that login in time (under TCG a boot can hang with
    not a line printed, as ``secondboot.run_with_second_boot`` boots a run's guest again)."""
    started = plan_path.with_name("login-started")
    login = plan_path.with_name("login.sh")
    login.write_text(
        f"#!/bin/sh\ntouch {started}\ncd {PROJECT} && PATH=/usr/sbin:/usr/bin:/sbin:/bin "
        f"{start.runner_command_line(sys.executable, str(plan_path), module='testbed.guest.shell')}\n"
    )
    login.chmod(0o755)
    argv = virtme.vng_argv(guest.kernel, guest.config, [plan_path.parent], shell=login)
    return attached_booting_twice(argv, started)


def attached_booting_twice(argv: list[str], started: Path, timeout_s: float = SHELL_BOOT_S) -> int:
    """The attached guest's exit status, booted a second time if the first did not log in in time."""
    for boot in (1, 2):
        started.unlink(missing_ok=True)
        code = attached_until_login(argv, started, timeout_s)
        if code is not None:
            return code
        print(
            f"\r\n[testbed] the guest did not reach its shell in {timeout_s:.0f} s (boot {boot} of 2)"
            + ("; booting it once more" if boot == 1 else ""),
            file=sys.stderr,
            flush=True,
        )
    raise virtme.GuestBootError(
        f"the guest did not reach its shell twice, {timeout_s:.0f} s each: its kernel hung or panicked "
        "while booting (its console was this terminal). Try again, or another kernel (--kernel VERSION; "
        "testbed kernels lists them), or --backend local where the host kernel has what the scenario needs"
    )


def attached_until_login(argv: list[str], started: Path, timeout_s: float) -> int | None:
    """Run the attached guest ``argv`` to its end and return its exit status; or, when ``started`` has
    not appeared within ``timeout_s`` (the login script's first act), stop it and return None. The
    terminal's modes are put back either way: qemu sets them raw, and a stopped qemu may not restore them."""
    modes = termios.tcgetattr(sys.stdin) if sys.stdin.isatty() else None
    proc, guard = virtme.start_attached(argv)
    try:
        deadline = time.monotonic() + timeout_s
        while not started.exists() and proc.poll() is None:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)
        return proc.wait()
    finally:
        virtme.stop_session(proc)
        guard.release()
        if modes is not None:
            termios.tcsetattr(sys.stdin, termios.TCSADRAIN, modes)


def _in_lab_vm(folder: Path) -> int:
    """The plan copied into the VM, the shell run there over ``ssh -t`` (a terminal of its own there)."""
    with vagrant.LabVM() as vm:
        remote = f"{VM_PLANS}/{folder.name}"
        vm.copy_in(folder, remote)
        command = (
            f"cd {vagrant.VM_PROJECT} && sudo {vagrant.VM_PROJECT}/.venv/bin/python -m testbed.guest.shell "
            f"{remote}/{PLAN}; sudo rm -rf {remote}"
        )
        argv = vm.argv(command)
        # a session of its own, as a guest's vng: the guardian stops its group (ssh puts the terminal in raw mode)
        proc = subprocess.Popen([*argv[:-2], "-t", *argv[-2:]], start_new_session=True)
        guard = guardian.Guard(proc.pid, vm.argv(f"sudo pkill -TERM -f '[t]estbed.guest.shell {remote}/'"))
        try:
            return proc.wait()
        finally:
            guard.release()
