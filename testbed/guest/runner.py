"""The runner: executes runs on this kernel, as root (inside the guest, or on a host that can).

A plan is a list of runs; each runs under a watchdog (:mod:`testbed.guest.run`: one run as phases).
A failing run keeps its raw files and its reason, and the next run of the plan goes on; Ctrl-C /
SIGTERM mark the run ``incomplete`` and stop the plan; the topology is always torn down.

Invoked as ``python -m testbed.guest.runner PLAN.json`` (what the guest executes) or through
:func:`execute_plan` from the CLI when the local kernel can run the plan itself. In the lab VM the
host copies the session folder in, runs the same command over ssh and copies it back.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import sys
import time
from pathlib import Path

from testbed.guest import capture, kernellock, launch, lossbpf, sidebyside
from testbed.guest.console import log
from testbed.guest.errors import RunFailed
from testbed.guest.keeper import NetworkKeeper
from testbed.guest.network import MARKER, cleanup_leftovers
from testbed.guest.run import run_one
from testbed.plan import progress
from testbed.plan.plan import PLAN_DONE, Plan
from testbed.results import rundir
from testbed.results.manifest import read_manifest, write_manifest

#: a run may take this many times its estimate (plus RUN_WATCHDOG_SLACK_S) before the watchdog fails it
RUN_WATCHDOG_FACTOR = 2.0
RUN_WATCHDOG_SLACK_S = 120.0
#: how long the teardown after a plan's last run (its kept network, its tracing instances) may take: the host
#: calls a guest silent for remote.HANG_MARGIN_S after its last run hung, and boots it again for runs all done
TEARDOWN_BUDGET_S = 60.0


class RunTimedOut(RunFailed):
    """The run watchdog fired: something in the run blocked far beyond its time budget."""


def _fail_manifest(directory: Path, reason: str) -> dict:
    manifest = read_manifest(directory).model_copy(
        update={"status": "failed", "reason": reason, "ended_utc": rundir.utc_iso()}
    )
    write_manifest(directory, manifest)
    return manifest.to_data()


def execute_plan(plan: Plan, session_dir: Path, slot: int | None = None) -> int:
    """Run every run of a plan (see :mod:`testbed.host.session`); returns the number of runs not complete.

    Run directories in the plan are relative to ``session_dir`` (the plan's folder), so a plan
    runs wherever its session folder is: here, in a virtme-ng guest, or copied into the lab VM.
    ``slot``: the plan runs side by side with others, in this slot (testbed.guest.sidebyside, which holds the
    kernel's session lock for them all); None: alone, under the lock it takes here.
    """
    if slot is not None:
        plan = plan.model_copy(update={"context": plan.context.model_copy(update={"slot": slot})})
    capture.use_slot(slot)
    runs = plan.runs
    lossbpf.use_objects(plan.context.bpf_objects)
    launch.use_hold_library(plan.context.hold_library)
    not_complete = 0
    started = time.monotonic()
    done_s = 0.0
    total_s = sum(r.expected_s for r in runs)
    keeper = NetworkKeeper(enabled=plan.context.keep_networks)
    # one session at a time on this kernel; its processes read the time zone from memory (launch.local_zone)
    lock = kernellock.one_session(f"session {session_dir}", log) if slot is None else contextlib.nullcontext()
    with lock, launch.local_zone():
        try:
            for i, run in enumerate(runs, 1):
                manifest = _run_with_watchdog(run, i, runs, session_dir, plan, keeper, (started, done_s, total_s))
                done_s += run.expected_s
                if manifest["status"] != "complete":
                    not_complete += 1
        finally:
            _tear_down(keeper)
    return not_complete


def _tear_down(keeper: NetworkKeeper) -> None:
    """The kept network and the tracing instances removed within TEARDOWN_BUDGET_S. One that blocks (a device
    the kernel does not let go) is said, with the runner's stacks in the console, and left to the guest's
    power-off (on this host, to `testbed cleanup`): the plan's runs are done and its end is still written."""
    try:
        with _watchdog(TEARDOWN_BUDGET_S):
            keeper.close()
            capture.release_instances()
    except RunTimedOut:
        log(
            f"the teardown after the last run took over {TEARDOWN_BUDGET_S:.0f} s (the runner's stacks are in "
            "the console log): left to the guest's power-off, or on this host to `testbed cleanup`"
        )


def _run_with_watchdog(
    run, i: int, runs: list, session_dir: Path, plan: Plan, keeper: NetworkKeeper, clock: tuple[float, float, float]
) -> dict:
    """One run of the plan under its watchdog, between its progress lines; its manifest."""
    started, done_s, total_s = clock
    spec = run.spec()
    eta = time_left_s(total_s, done_s, time.monotonic() - started, plan.context.backend.get("clock", "real"))
    log(
        progress.format_line(
            progress.RunStarted(
                index=i, total=len(runs), scenario=spec.scenario_name, point_id=spec.point_id, seed=spec.seed, eta_s=eta
            )
        )
    )
    try:
        with _watchdog(run_budget_s(run.estimate_s)):
            manifest = run_one(spec, session_dir / run.run_dir, plan.context, keeper)
    except RunTimedOut as err:
        # fired during run_one's own cleanup: record it and clean up here (the kept network too)
        manifest = _fail_manifest(session_dir / run.run_dir, str(err))
        keeper.close()
        os.environ.pop(MARKER, None)
        cleanup_leftovers()
    log(
        progress.format_line(
            progress.RunEnded(index=i, total=len(runs), status=manifest["status"], reason=manifest.get("reason"))
        )
    )
    return manifest


def time_left_s(total_s: float, done_s: float, elapsed_s: float, clock: str) -> float:
    """The plan's time left on the host's clock. In real time the runs' expected times, scaled by how this
    runner's pace compared with them so far; in virtual time as expected (measured on the host where
    earlier runs were: testbed.plan.costs), because the guest's own clock cannot see the host's pace."""
    if clock == "virtual" or not done_s:
        return total_s - done_s
    return (total_s - done_s) * (elapsed_s / done_s)


def run_budget_s(estimate_s: float) -> float:
    """How long a run may take before the watchdog fails it (the host's hang detection counts on it)."""
    return estimate_s * RUN_WATCHDOG_FACTOR + RUN_WATCHDOG_SLACK_S


_MAIN_PID = os.getpid()


@contextlib.contextmanager
def _watchdog(budget_s: float):
    """Fail the current run when it takes longer than ``budget_s``.

    Two parts: SIGALRM raises :class:`RunTimedOut` in the runner (a wait on a process or a pipe
    that never ends), and faulthandler prints every thread's stack to stderr (the guest console)
    a little earlier, which also works when the runner is stuck inside a system call that no
    signal interrupts.
    """
    previous = signal.signal(signal.SIGALRM, _timed_out)
    faulthandler.dump_traceback_later(max(1.0, budget_s - 5), exit=False)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


def _timed_out(signum, frame) -> None:
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signum)
    raise RunTimedOut(
        "the run exceeded its time budget (watchdog); the stacks of the runner at that moment are in the "
        "guest console log (or stderr)"
    )


def _interrupt(signum, frame) -> None:
    # pyroute2's netns helpers are forks of this process and inherit the handler: only the
    # runner itself turns SIGTERM into an orderly stop
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.guest.runner", description=__doc__.splitlines()[0])
    parser.add_argument(
        "plans",
        type=Path,
        nargs="+",
        metavar="plan",
        help="plan JSON written by `testbed run`; several: they run side by side, each in a slot of its own "
        "(testbed/guest/sidebyside.py)",
    )
    parser.add_argument(
        "--session",
        type=Path,
        help="the folder the plan's run folders are relative to (default: the plan's own folder; a packed "
        "guest's plan lies in a folder of its own, testbed/host/packing.py)",
    )
    parser.add_argument(
        "--slot",
        type=int,
        help="run the plan in this slot beside others (what testbed/guest/sidebyside.py starts; it holds the "
        "kernel's session lock for them)",
    )
    args = parser.parse_args(argv)
    progress.configure_logging()
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print("testbed.guest.runner: must run as root (network namespaces, qdiscs, tracing)", file=sys.stderr)
        return 2
    if len(args.plans) > 1 and args.slot is not None:
        parser.error("--slot runs one plan")
    try:
        if len(args.plans) > 1:
            failed = sidebyside.execute(args.plans, args.session or args.plans[0].parent)
            # where the host waits for it: the slots' common folder (testbed.host.virtme.run_in_guest)
            (Path(os.path.commonpath([path.parent for path in args.plans])) / PLAN_DONE).write_text(f"{failed}\n")
        else:
            (path,) = args.plans
            failed = execute_plan(Plan.read(path), args.session or path.parent, args.slot)
            (path.parent / PLAN_DONE).write_text(f"{failed}\n")
    except KeyboardInterrupt:
        log("interrupted: the current run is marked incomplete; the topology was torn down")
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
