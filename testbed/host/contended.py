"""Runs the host took the CPU from, run once more: the host's failure is not the run's.

A real-time run whose host-contention check failed (testbed.guest.fidelity.host_check: others than the
guest used the host's CPUs, another guest ran, or the host's own hypervisor stole CPU time from this
machine) measured the host, not the kernel; the analysis leaves it out, and a comparison at a few seeds
then loses a twin (a regress control at 3 repetitions fell below detection that way). So, as LKP and
KernelCI run a test again after an infrastructure failure, a session runs such a run once more, in a
guest of its own after the others (its first attempt set aside under ``.attempts/``, its manifest's
backend saying ``run_again``). Once only: a host that stays contended leaves the run out, as before.

Running it again does not look at what the run measured: the check reads the host, from outside the
guest, so the choice of which runs to repeat cannot lean towards an answer, and the verdict tests what
it would have tested had the host been quiet. A run in virtual time is never contended this way (its
clock is its own: the check is not judged there), and a run that failed other checks as well runs
again too, since a contended host also makes a run send late or measure its link wrong.
"""

from __future__ import annotations

from pathlib import Path

from testbed.host import packing
from testbed.plan import resume
from testbed.plan.plan import Plan
from testbed.results.manifest import read_manifest, run_status

#: the fidelity check whose failure is the host's (testbed.guest.fidelity.host_check)
HOST_CHECK = "host contention"
#: what the runs of a second attempt record in their manifests' backend
#: the suffix of what a failed second attempt left, set aside beside the first
FAILED_AGAIN = "-again-failed"
RUN_AGAIN = {"run_again": {"why": "the host contention check failed on its first attempt (kept under .attempts/)"}}


def contended(session: Path, plan: Plan, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """The plan's complete runs (but ``skip``'s, run twice already) whose host-contention check failed,
    each with the check's words."""
    found = {}
    for run in plan.runs:
        folder = session / run.run_dir
        if run.run_dir in skip or run_status(folder) != "complete":
            continue
        fidelity = read_manifest(folder).fidelity
        failed = [c for c in (fidelity.checks if fidelity else []) if c.get("name") == HOST_CHECK and not c.get("ok")]
        if failed:
            found[run.run_dir] = failed[0].get("detail") or HOST_CHECK
    return found


def run_again(
    plan: Plan, session: Path, boot_one: packing.BootOne, log, skip: frozenset[str] = frozenset()
) -> dict | None:
    """Run once more, in one guest, the runs :func:`contended` finds; what ran again and why (None: none).
    When that guest fails, the first attempts of the runs it did not finish stand, as they were."""
    reasons = contended(session, plan, skip)
    if not reasons:
        return None
    try:
        timing = packing.rerun_alone(
            plan, session, reasons, boot_one, log, HOST_CHECK, RUN_AGAIN, name="again", said=True
        )
    except Exception as err:  # any failure of the second chance (its guest's, its kernel's): the first one stands
        why = f"{type(err).__name__}: {err}"
        log(f"{HOST_CHECK}: the guest that ran them again failed ({why}); their first attempts stand")
        for run_dir in reasons:
            if run_status(session / run_dir) != "complete":
                _put_back(session, run_dir)
        return {"runs": reasons, "error": why}
    return {"runs": reasons, "timing": timing}


def twice(side_by_side: dict) -> frozenset[str]:
    """The runs of a side-by-side session's record (testbed.host.packing.run_side_by_side) that ran in a slot
    and then alone: their second attempt is behind them (a run not admitted beside others ran only once)."""
    in_slots = {run for slot in side_by_side.get("slots", []) for run in slot["runs"]}
    return frozenset(side_by_side.get("rerun_alone", {})) & in_slots


def _put_back(session: Path, run_dir: str) -> None:
    """The run's first attempt (the newest set aside) back in its folder; what the failed guest left of the
    second beside it, under ``.attempts/`` (``...-again-failed``)."""
    folder = session / run_dir
    aside = session / resume.ATTEMPTS / Path(run_dir).parent
    firsts = sorted(p for p in aside.glob(f"{folder.name}-*") if not p.name.endswith(FAILED_AGAIN))
    if not firsts:
        return
    if folder.exists():
        folder.rename(firsts[-1].with_name(firsts[-1].name + FAILED_AGAIN))
    firsts[-1].rename(folder)
