"""Guest control from the host: boot a kernel with virtme-ng over the host's root filesystem and
run the runner inside it.

KVM is used where it works and TCG otherwise. ``/dev/kvm`` existing is not enough (nested
virtualization can hang at "Booting from ROM", MACHINE.md), so :func:`kvm_usable` boots the
kernel once with KVM and a short timeout and caches the answer until the host reboots. Under
TCG a multi-vCPU guest marks the TSC unstable and falls back to hpet, which makes the emulated
links slower and erratic (MACHINE.md): TCG guests get ``tsc=reliable``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.kernels import Kernel

PROJECT = Path(__file__).resolve().parent.parent
#: from `vng` to the guest's first line, measured ~15-20 s under TCG here; a guest silent this long did not boot
BOOT_TIMEOUT_S = 180
#: from the runner's plan.done to vng's exit (a guest powers off in a few seconds)
SHUTDOWN_TIMEOUT_S = 60
#: how long past a run's watchdog budget (or after a run ended) the runner may stay silent before the
#: guest is declared hung: the runner's own watchdog reports a stuck run within its budget, so only a
#: guest that stopped altogether (seen once in CI under TCG: no output for 30 min, not even the
#: watchdog's stack dump) stays silent this long
HANG_MARGIN_S = 120
#: the runner's progress lines: "run 3/15: ..." starts a run, "run 3/15 complete" (or failed: ...) ends it
RUN_LINE = re.compile(r"^run (\d+)/(\d+)(:| )")


class GuestError(Exception):
    """The guest could not be started or did not finish; the message says where its console log is."""


class GuestBootError(GuestError):
    """The guest never started the runner: its kernel did not boot (panicked, hung, or is no kernel)."""


class GuestHungError(GuestError):
    """The runner started but then the guest fell silent far past the current run's watchdog budget."""


class RunnerProgress:
    """Follows the runner's progress lines and says by when the next one must come.

    A run must end within its watchdog budget (``runner.run_budget_s`` of its estimate), which the
    runner enforces itself; between runs the next one starts at once. Beyond either, plus
    HANG_MARGIN_S, the guest is hung."""

    def __init__(self, estimates_s: list[float], started: float):
        from testbed.runner import run_budget_s

        self.budgets_s = [run_budget_s(e) for e in estimates_s]
        self.current: int | None = None
        self.expect_by = started + BOOT_TIMEOUT_S + HANG_MARGIN_S

    def line(self, text: str, now: float) -> None:
        match = RUN_LINE.match(text)
        if not match:
            return
        index = int(match.group(1)) - 1
        if match.group(3) == ":" and 0 <= index < len(self.budgets_s):
            self.current = index
            self.expect_by = now + self.budgets_s[index] + HANG_MARGIN_S
        else:
            self.current = None
            self.expect_by = now + HANG_MARGIN_S

    def overdue(self, now: float) -> bool:
        return now > self.expect_by

    def describe(self, silent_s: float) -> str:
        where = (f"run {self.current + 1}/{len(self.budgets_s)} (watchdog budget {self.budgets_s[self.current]:.0f} s)"
                 if self.current is not None else "between runs")  # fmt: skip
        return f"the guest stopped responding in {where}: nothing from it for {silent_s:.0f} s"


@dataclass(frozen=True)
class GuestConfig:
    accel: str  # "kvm" or "tcg"
    vcpus: int
    memory: str
    append: str

    def to_dict(self) -> dict:
        return asdict(self)


def kvm_usable(kernel: Kernel, log=print) -> bool:
    """Whether qemu can run this kernel with KVM: ``scripts/kvm-probe.sh`` boots it once with KVM
    and a short timeout and caches the answer until the host reboots (the Vagrantfile asks the
    same script). ``CC_TESTBED_ACCEL=kvm|tcg`` decides without probing."""
    out = subprocess.run([str(PROJECT / "scripts" / "kvm-probe.sh"), str(kernel.vmlinuz)],
                         capture_output=True, text=True)  # fmt: skip
    for line in out.stderr.splitlines():
        log(line.removeprefix("kvm-probe: "))
    return out.stdout.strip() == "usable"


def guest_config(kernel: Kernel, vcpus: int | None = None, memory: str = "2G", log=print) -> GuestConfig:
    """KVM with 2 vCPUs where it works; TCG otherwise, with 2 vCPUs and ``tsc=reliable`` on a host
    with two cores or more (measured here at 10 Mbit/s: guest CPU 75 % busy with one vCPU, 27 %
    with two, the same rate and RTT fidelity), one vCPU on a single-core host."""
    if kvm_usable(kernel, log):
        return GuestConfig("kvm", vcpus or 2, memory, "")
    vcpus = vcpus or min(2, os.cpu_count() or 1)
    # without tsc=reliable a multi-vCPU TCG guest marks the TSC unstable and falls back to hpet
    return GuestConfig("tcg", vcpus, memory, "tsc=reliable" if vcpus > 1 else "")


def vng_argv(kernel: Kernel, config: GuestConfig, rwdirs: list[Path], command: str) -> list[str]:
    argv = [
        "vng", "-v", "--run", str(kernel.vmlinuz), "--cpus", str(config.vcpus), "--memory", config.memory,
    ]  # fmt: skip
    if config.accel == "tcg":
        argv.append("--disable-kvm")
    if config.append:
        argv += ["--append", config.append]
    for directory in rwdirs:
        argv.append(f"--rwdir={directory}")
    return argv + ["--exec", command]


def run_in_guest(
    kernel: Kernel,
    config: GuestConfig,
    plan_path: Path,
    rwdirs: list[Path],
    console_log: Path,
    timeout_s: float,
    echo=print,
) -> dict:
    """Boot, run ``python -m testbed.runner plan_path`` inside, stream its progress lines.

    Returns timings (``ready_s``: command to the runner's first line, ``wall_s``) and the number
    of runs not complete as written to ``plan.done``; raises GuestError when the guest did not
    boot or did not finish in time.
    """
    venv_bin = Path(sys.executable).parent
    if not shutil.which("vng", path=str(venv_bin)) and not shutil.which("vng"):
        raise GuestError("virtme-ng (vng) is not installed: run 'make setup'")
    done = plan_path.parent / "plan.done"
    done.unlink(missing_ok=True)
    command = (
        f"cd {PROJECT} && PYTHONDONTWRITEBYTECODE=1 PATH=/usr/sbin:/usr/bin:/sbin:/bin "
        f"{sys.executable} -m testbed.runner {plan_path}"
    )
    env = dict(os.environ, PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    argv = vng_argv(kernel, config, rwdirs, command)
    started = time.monotonic()
    progress = RunnerProgress([run["estimate_s"] for run in json.loads(plan_path.read_text())["runs"]], started)
    last_output = started
    saw_runner = False
    done_seen = None
    timing = {"ready_s": None}
    with open(console_log, "wb") as log_file:
        log_file.write(("$ " + " ".join(argv) + "\n").encode())
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=PROJECT,
        )
        os.set_blocking(proc.stdout.fileno(), False)
        buffer = b""
        try:
            while True:
                chunk = proc.stdout.read()
                now = time.monotonic()
                if chunk:
                    last_output = now
                    log_file.write(chunk)
                    log_file.flush()
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        text = line.decode(errors="replace")
                        if "[testbed]" in text:
                            if not saw_runner:
                                timing["ready_s"] = round(time.monotonic() - started, 2)
                            saw_runner = True
                            message = text[text.index("[testbed]") + 10 :]
                            progress.line(message, now)
                            echo(message)
                if proc.poll() is not None and not chunk:
                    break
                elapsed = time.monotonic() - started
                if not saw_runner and elapsed > BOOT_TIMEOUT_S:
                    raise GuestBootError(
                        f"the guest ({kernel.release}, {config.accel}) did not start the runner within "
                        f"{BOOT_TIMEOUT_S} s; console log: {console_log}{console_tail(console_log)}"
                    )
                if done.exists() and done_seen is None:
                    done_seen = elapsed
                if saw_runner and done_seen is None and progress.overdue(now):
                    raise GuestHungError(
                        f"{progress.describe(now - last_output)}; stopped it after {elapsed:.0f} s; "
                        f"console log: {console_log}{console_tail(console_log)}"
                    )
                if done_seen is not None and elapsed - done_seen > SHUTDOWN_TIMEOUT_S and proc.poll() is None:
                    # the plan is finished and its results are written: a guest that hangs on its
                    # way down (not seen so far) must not hold the session until the timeout
                    echo(f"the guest finished the plan but did not power off within {SHUTDOWN_TIMEOUT_S} s: "
                         f"stopping it (console log: {console_log})")  # fmt: skip
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                    break
                if elapsed > timeout_s:
                    raise GuestError(
                        f"the guest did not finish within {timeout_s:.0f} s (runs planned for less); "
                        f"console log: {console_log}{console_tail(console_log)}"
                    )
                if not chunk:
                    time.sleep(0.1)
        except BaseException:
            _stop_session(proc)
            raise
        finally:
            proc.stdout.close()
    # vng's own exit status is 255 even on success on hosts without udevd: read the runner's.
    if not done.exists():
        error = GuestError if saw_runner else GuestBootError
        raise error(
            f"the guest ({kernel.release}, {config.accel}) exited without finishing the plan "
            f"(vng exit {proc.returncode}); console log: {console_log}{console_tail(console_log)}"
        )
    timing["wall_s"] = round(time.monotonic() - started, 2)
    timing["not_complete"] = int(done.read_text().strip() or 0)
    return timing


def console_tail(path: Path, lines: int = 25) -> str:
    """The end of a console log, indented, for an error message (the log may be gone when it is read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    tail = text.splitlines()[-lines:]
    return "\n  last console lines:\n" + "\n".join(f"    {line}" for line in tail) if tail else ""


def _stop_session(proc: subprocess.Popen) -> None:
    """Stop vng and everything it started (qemu, virtiofsd): they share the session vng leads."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_script(kernel: Kernel, config: GuestConfig, script: str, workdir: Path, timeout_s: float = 300) -> str:
    """Run a shell script as root in a guest and return what it printed (for checks and tests).

    The script's output goes to ``workdir`` (shared read-write with the guest): vng's own exit
    status says nothing on hosts without udevd.
    """
    venv_bin = Path(sys.executable).parent
    (workdir / "script.sh").write_text(script)
    out = workdir / "script.out"
    out.unlink(missing_ok=True)
    command = f"bash {workdir / 'script.sh'} > {out} 2>&1"
    env = dict(os.environ, PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    with open(workdir / "console.log", "wb") as console:
        # its own session, so that a timeout stops qemu too and not only vng (which leaves qemu running)
        proc = subprocess.Popen(vng_argv(kernel, config, [workdir], command), stdout=console,
                                stderr=subprocess.STDOUT, env=env, cwd=PROJECT, start_new_session=True)  # fmt: skip
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            _stop_session(proc)
            raise GuestError(
                f"the guest script did not finish in {timeout_s:.0f} s; console log: {console.name}"
                f"{console_tail(Path(console.name))}"
            ) from err
    if not out.exists():
        raise GuestError(
            f"the guest did not run the script; console log: {workdir / 'console.log'}"
            f"{console_tail(workdir / 'console.log')}"
        )
    return out.read_text(errors="replace")
