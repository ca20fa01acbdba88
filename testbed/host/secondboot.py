"""A guest booted a second time for the runs it did not finish, when it never reached the runner or fell
silent (:func:`run_with_second_boot`): each guest boot of the guest backend (testbed.host.backends), alone,
packed or side by side, goes through it, with the host's contention watched as the runner's lines come."""

from __future__ import annotations

import functools
from pathlib import Path

from testbed import PROJECT
from testbed.host import guardian, hostload, timebase
from testbed.host.remote import Observer, with_observers
from testbed.plan import estimate, resume
from testbed.results import rundir
from testbed.results.manifest import run_status


def run_with_second_boot(
    guest,
    kernel,
    config,
    plan_path: Path,
    session: Path,
    total_s: float,
    log=print,
    observers: tuple[Observer, ...] = (),
    console: Path | None = None,
) -> dict:
    """The plan in a guest (``guest``: :mod:`testbed.host.virtme`), booted a second time for the runs
    not finished when the first guest never reached the runner or stopped responding. Run folders are
    relative to ``session``; ``console``: the guest's console log (``session/guest-console.log``).

    Under TCG a kernel can panic at random during boot (6.12.117+deb12 once hit an int3 oops in
    sched_clock_cpu while the kernel patched its own code, and booted on the next try), and a guest
    can stop altogether (once in CI: 6.1.0-56 fell silent in the middle of a run's traffic, with not
    even the runner's watchdog printing). The first console log is kept beside it, as ``guest-console-boot1.log``;
    the run that was going on is set aside under ``.attempts/`` and runs again; runs already complete
    or failed are kept. A second failure is reported."""
    console = console or session / "guest-console.log"
    boot = functools.partial(_boot, guest, kernel, config, session, console, log, observers)
    try:
        return boot(plan_path, total_s)
    except (guest.GuestBootError, guest.GuestHungError) as err:
        first = console.with_name(f"{console.stem}-boot1.log")
        if console.exists():
            console.replace(first)
        what = "did not boot" if isinstance(err, guest.GuestBootError) else "stopped responding"
        reason = err.args[0].split(";")[0]
    # read as it is on disk, not as a Plan: the second plan is the first one's file with fewer runs, nothing else
    plan = rundir.read_json(plan_path)
    remaining = [r for r in plan["runs"] if run_status(session / r["run_dir"]) not in ("complete", "failed")]
    if not remaining:  # it fell silent after its last run: nothing is left to boot it for
        log(f"the guest {what} after its last run ({reason}); every run is done, so it is not booted again")
        return {}
    for run in remaining:
        resume.set_aside(session / run["run_dir"], session)
    retry = plan_path.with_name("plan-second-boot.json")
    rundir.write_json_atomic(retry, {**plan, "runs": remaining})
    log(
        f"the guest {what} ({reason}); booting it once more for the {len(remaining)} runs not finished "
        f"(its first console: {first})"
    )
    return boot(retry, sum(r["estimate_s"] for r in remaining) + estimate.GUEST_BOOT_S)


def _boot(
    guest,
    kernel,
    config,
    session: Path,
    console: Path,
    log,
    observers: tuple[Observer, ...],
    plan: Path,
    estimate_s: float,
) -> dict:
    """One guest for one plan, with the host's contention watched by the processes this checkout marked."""

    run_dirs = [run["run_dir"] for run in rundir.read_json(plan)["runs"]]
    ours = guardian.marker_value(str(PROJECT))
    clock = getattr(config, "clock", "real")
    # a guest pinned to some cores (a local:N worker's) is judged on them alone
    watch = hostload.HostWatch(
        run_dirs,
        lambda: hostload.marked_processes(ours),
        session=session,
        cores=hostload.host_cores(),
        clock=clock,
        log=log,
    )
    # in virtual time a busy guest's run takes longer than its traffic in wall time (timebase.SLOWDOWN_ALLOWANCE)
    factor = 3 * (timebase.SLOWDOWN_ALLOWANCE if clock == "virtual" else 1)
    return guest.run_in_guest(
        kernel,
        config,
        plan,
        [session],
        console,
        timeout_s=estimate_s * factor + guest.BOOT_TIMEOUT_S,
        echo=log,
        on_line=with_observers(watch.on_line, observers, session, run_dirs),
        # a packed guest's plan lies in a folder of its own (testbed.host.packing)
        **({} if plan.parent == session else {"session": session}),
    )
