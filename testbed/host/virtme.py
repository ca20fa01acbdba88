"""Guest control from the host: boot a kernel with virtme-ng over the host's root filesystem and
run the runner inside it.

KVM is used where it works and TCG otherwise. ``/dev/kvm`` existing is not enough (nested
virtualization can hang at "Booting from ROM", MACHINE.md), so :func:`kvm_usable` boots the
kernel once with KVM and a short timeout and caches the answer until the host reboots. Under
TCG a multi-vCPU guest marks the TSC unstable and falls back to hpet, which makes the emulated
links slower and erratic (MACHINE.md): TCG guests get ``tsc=reliable``.

A guest can also run in virtual time (``clock="virtual"``, :mod:`testbed.host.timebase` decides when):
QEMU's icount makes the guest's clock advance by the instructions it executes (2**shift ns each) and,
with ``sleep=off``, jump to the next timer while the vCPU is idle. A run then takes the wall time its
CPU work needs, not its traffic's length, and the host's load slows it without changing what the guest
measures. icount needs TCG and one vCPU (with two, under ``sleep=off``, the guest hung at SMP
bring-up here), and the guest keeps its periodic tick (``nohz=off``, :data:`VIRTUAL_APPEND`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed import PROJECT
from testbed.guest import start
from testbed.host import guardian, remote
from testbed.host.kernels import Kernel
from testbed.host.remote import console_tail
from testbed.plan.plan import PLAN_DONE

#: from `vng` to the guest's first line, measured ~15-20 s under TCG here; a guest silent this long did not boot
BOOT_TIMEOUT_S = 180
#: from the runner's plan.done to vng's exit (a guest powers off in a few seconds)
SHUTDOWN_TIMEOUT_S = 60


class GuestError(Exception):
    """The guest could not be started or did not finish; the message says where its console log is."""


class GuestBootError(GuestError):
    """The guest never started the runner: its kernel did not boot (panicked, hung, or is no kernel)."""


class GuestHungError(GuestError):
    """The runner started but then the guest fell silent far past the current run's watchdog budget."""


#: a guest instruction counts 2**shift ns of virtual time: shift 0 is a 1 GHz, one-instruction-per-cycle CPU,
#: the fastest icount has (the only shift measured here: docs/results.md, "Virtual time")
ICOUNT_SHIFT = 0

#: a virtual-time guest keeps its periodic tick while idle. With ``sleep=off`` an idle vCPU jumps the
#: clock to the next timer, and a tickless guest waiting on the host (a program read through virtiofs,
#: files copied home) can have its next timer seconds away: the tour's mobile-bernoulli runs jumped
#: past their watchdog that way (docs/results.md, "Virtual time"). With the tick a jump is one tick
#: (4 ms at the Debian kernel's HZ=250), however long the host takes.
VIRTUAL_APPEND = "nohz=off"


@dataclass(frozen=True)
class GuestConfig:
    accel: str  # "kvm" or "tcg"
    vcpus: int
    memory: str
    append: str
    clock: str = "real"  # "real", or "virtual": QEMU's icount (TCG, one vCPU)
    icount_shift: int | None = None  # virtual time only: 2**shift ns per instruction

    def to_dict(self) -> dict:
        return asdict(self)


def kvm_usable(kernel: Kernel, log=print) -> bool:
    """Whether qemu can run this kernel with KVM: ``scripts/kvm-probe.sh`` boots it once with KVM
    and a short timeout and caches the answer until the host reboots (the Vagrantfile asks the
    same script). ``CC_TESTBED_ACCEL=kvm|tcg`` decides without probing."""
    out = subprocess.run(
        [str(PROJECT / "scripts" / "kvm-probe.sh"), str(kernel.vmlinuz)], capture_output=True, text=True
    )
    for line in out.stderr.splitlines():
        log(line.removeprefix("kvm-probe: "))
    return out.stdout.strip() == "usable"


def guest_config(
    kernel: Kernel, vcpus: int | None = None, memory: str = "2G", log=print, clock: str = "real"
) -> GuestConfig:
    """KVM with 2 vCPUs where it works; TCG otherwise, with 2 vCPUs and ``tsc=reliable`` on a host
    with two cores or more (measured here at 10 Mbit/s: guest CPU 75 % busy with one vCPU, 27 %
    with two, the same rate and RTT fidelity), one vCPU on a single-core host. In virtual time: TCG
    with icount and one vCPU, whatever the host has."""
    if clock == "virtual":
        if vcpus not in (None, 1):
            raise GuestError(
                f"--cpus {vcpus} cannot run in virtual time: QEMU's icount runs one vCPU (with two "
                "the guest hung at SMP bring-up); give --cpus 1 or --clock real"
            )
        return virtual_config(memory)
    if kvm_usable(kernel, log):
        return GuestConfig("kvm", vcpus or 2, memory, "")
    vcpus = vcpus or min(2, os.cpu_count() or 1)
    # without tsc=reliable a multi-vCPU TCG guest marks the TSC unstable and falls back to hpet
    return GuestConfig("tcg", vcpus, memory, "tsc=reliable" if vcpus > 1 else "")


def vng_argv(
    kernel: Kernel, config: GuestConfig, rwdirs: list[Path], command: str | None = None, shell: Path | None = None
) -> list[str]:
    """vng booting ``kernel``: it runs ``command`` with the console's output on stdout (the runner), or
    ``shell`` as root's login shell on a console that is this terminal (``testbed shell``: without
    udevd on the host, as here, vng's command mode has no way in for the keyboard)."""
    argv = [
        "vng",
        *([] if shell else ["-v"]),
        "--run",
        str(kernel.vmlinuz),
        "--cpus",
        str(config.vcpus),
        "--memory",
        config.memory,
    ]
    if config.accel == "tcg":
        argv.append("--disable-kvm")
    if config.clock == "virtual":
        argv.append(f"--qemu-opts={icount_option(config.icount_shift)}")
    if config.append:
        argv += ["--append", config.append]
    for directory in rwdirs:
        argv.append(f"--rwdir={directory}")
    if shell is not None:
        # no qemu monitor on the console: Ctrl-A and Ctrl-C reach the guest
        return argv + ["--disable-monitor", "--shell", str(shell)]
    return argv + ["--exec", command]


def virtual_config(memory: str = "2G") -> GuestConfig:
    """How a guest boots in virtual time: TCG, one vCPU, the tick kept, icount at :func:`icount_shift`."""
    return GuestConfig("tcg", 1, memory, VIRTUAL_APPEND, "virtual", icount_shift())


def icount_shift() -> int:
    """The shift virtual time runs at: :data:`ICOUNT_SHIFT`, or ``CC_TESTBED_ICOUNT_SHIFT`` (0-10) for
    measuring another (a slower guest CPU per virtual second: docs/results.md, "Virtual time")."""
    given = os.environ.get("CC_TESTBED_ICOUNT_SHIFT", "").strip()
    if not given:
        return ICOUNT_SHIFT
    if not given.isdigit() or int(given) > 10:
        raise GuestError(
            f"CC_TESTBED_ICOUNT_SHIFT={given!r}: give a whole number from 0 to 10 (2**shift ns of virtual time "
            "per guest instruction), or unset it for the default 0"
        )
    return int(given)


def icount_option(shift: int | None) -> str:
    """QEMU's option for virtual time: the clock advances 2**shift ns per instruction and jumps over idle time."""
    return f"-icount shift={ICOUNT_SHIFT if shift is None else shift},sleep=off"


def run_in_guest(
    kernel: Kernel,
    config: GuestConfig,
    plan_path: Path,
    rwdirs: list[Path],
    console_log: Path,
    timeout_s: float,
    echo=print,
    on_line=None,
    session: Path | None = None,
    slot_plans: list[Path] | None = None,
) -> dict:
    """Boot, run the runner on ``plan_path`` inside (:mod:`testbed.guest.start`), stream its progress lines.

    The guest ends with this process, however it ends (:mod:`testbed.host.guardian`). Returns timings
    (``ready_s``: command to the runner's first line, ``wall_s``) and the number of runs not complete
    as written to ``plan.done``; raises GuestError when the guest did not boot or did not finish in time.
    ``on_line(text, now)`` sees every runner line too (the host's contention watch). ``session``: the
    folder the plan's run folders are relative to, when it is not the plan's own. ``slot_plans``: the runner
    runs these plans side by side instead (testbed.guest.sidebyside), and writes ``plan.done`` beside
    ``plan_path``, the whole plan (their common folder's).
    """
    venv_bin = Path(sys.executable).parent
    if not shutil.which("vng", path=str(venv_bin)) and not shutil.which("vng"):
        raise GuestError("virtme-ng (vng) is not installed: run 'make setup'")
    done = plan_path.parent / PLAN_DONE
    done.unlink(missing_ok=True)
    argv = vng_argv(kernel, config, rwdirs, _runner_command(slot_plans or [plan_path], session))
    started = time.monotonic()
    label = f"the guest ({kernel.release}, {config.accel})"
    with open(console_log, "wb") as log_file:
        log_file.write(("$ " + " ".join(argv) + "\n").encode())
        log_file.flush()
        proc, guard = _start_guest(argv)
        try:
            ready_s = remote.follow_plan(
                proc,
                log_file,
                plan_path,
                started,
                label=label,
                start_timeout_s=BOOT_TIMEOUT_S,
                timeout_s=timeout_s,
                echo=echo,
                on_line=on_line,
                finished=done.exists,
                shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
                slot_plans=slot_plans or (),
            )
            if proc.poll() is None:
                echo(
                    f"{label} finished the plan but did not power off within {SHUTDOWN_TIMEOUT_S} s: "
                    f"stopping it (console log: {console_log})"
                )
        except remote.RemoteRunnerError as err:
            raise _GUEST_ERRORS.get(type(err), GuestError)(str(err)) from None
        finally:
            stop_session(proc)
            guard.release()
            proc.stdout.close()
    # vng's own exit status is 255 even on success on hosts without udevd: read the runner's.
    if not done.exists():
        error = GuestError if ready_s is not None else GuestBootError
        raise error(
            f"{label} exited without finishing the plan (vng exit {proc.returncode}); "
            f"console log: {console_log}{console_tail(console_log)}"
        )
    return remote.plan_timing(ready_s, started, done)


#: how the follower's errors read for a guest (the session boots a guest again after the first two)
_GUEST_ERRORS = {remote.RunnerNotStarted: GuestBootError, remote.RunnerSilent: GuestHungError}


def _runner_command(plan_paths: list[Path], session: Path | None = None) -> str:
    runner = start.runner_command_line(sys.executable, " ".join(shlex.quote(str(path)) for path in plan_paths))
    if session is not None:
        runner += f" --session {shlex.quote(str(session))}"
    return f"cd {PROJECT} && PATH=/usr/sbin:/usr/bin:/sbin:/bin {runner}"


def _guest_env() -> dict[str, str]:
    """vng's environment: the venv's tools first, and the guardian's marker (inherited by qemu and
    virtiofsd), by which a later start finds a guest whose controller was killed."""
    venv_bin = Path(sys.executable).parent
    return dict(
        os.environ,
        PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        **{guardian.MARKER: guardian.marker_value(str(PROJECT))},
    )


def _start_guest(argv: list[str], **popen) -> tuple[subprocess.Popen, guardian.Guard]:
    """vng in a session of its own (so that stopping its group stops qemu and virtiofsd too), and a
    guardian that stops that group when this process ends, however it ends."""
    popen = popen or {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    proc = subprocess.Popen(argv, env=_guest_env(), start_new_session=True, cwd=PROJECT, **popen)
    return proc, guardian.Guard(proc.pid)


def start_attached(argv: list[str]) -> tuple[subprocess.Popen, guardian.Guard]:
    """vng with this process's terminal as the guest's console (``testbed shell``); qemu puts the
    terminal in raw mode, so every key, Ctrl-C and Ctrl-D included, reaches the guest."""
    return _start_guest(argv, stdin=None, stdout=None, stderr=None)


def stop_orphans(log=print) -> list[str]:
    """Stop guests of this checkout whose controller is gone (killed before its guardian could act)."""
    stopped = guardian.stop_orphans(str(PROJECT))
    for line in stopped:
        log(line)
    return stopped


def stop_session(proc: subprocess.Popen) -> None:
    """Stop vng and everything it started (qemu, virtiofsd): they share the session vng leads."""
    if proc.poll() is None:
        guardian.stop_group(proc.pid)
    proc.wait()


def run_script(kernel: Kernel, config: GuestConfig, script: str, workdir: Path, timeout_s: float = 300) -> str:
    """Run a shell script as root in a guest and return what it printed (for checks and tests).

    The script's output goes to ``workdir`` (shared read-write with the guest): vng's own exit
    status says nothing on hosts without udevd.
    """
    (workdir / "script.sh").write_text(script)
    out = workdir / "script.out"
    out.unlink(missing_ok=True)
    command = f"bash {workdir / 'script.sh'} > {out} 2>&1"
    with open(workdir / "console.log", "wb") as console:
        proc, guard = _start_guest(
            vng_argv(kernel, config, [workdir], command), stdout=console, stderr=subprocess.STDOUT
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise GuestError(
                f"the guest script did not finish in {timeout_s:.0f} s; console log: {console.name}"
                f"{console_tail(Path(console.name))}"
            ) from err
        finally:
            stop_session(proc)
            guard.release()
    if not out.exists():
        raise GuestError(
            f"the guest did not run the script; console log: {workdir / 'console.log'}"
            f"{console_tail(workdir / 'console.log')}"
        )
    return out.read_text(errors="replace")
