"""Packed guests: a session's runs split over several virtual-time guests at once, one per core.

In virtual time (QEMU's icount) a guest's clock advances with its own instructions, so the host's load
slows a run without changing what it measures (docs/results.md): two guests on two cores give the runs
each would give alone, in about half the wall time. In real time they would not (two TCG guests ruin
each other's timing), so packing is for the virtual clock only (:func:`guests_for`).

A packed session splits its plan into one shard per guest (:func:`shards`: the longest runs first, each
to the guest with the least work, as :func:`makespan_s` counts it and the cluster spreads runs), writes each shard's
plan into a folder of its own (``.guests/gK/``, where its runner writes ``plan.done``), and boots the
guests at once from threads pinned to one core each: a guest inherits its thread's core, and the host's
contention watch judges it on that core alone. Every run's manifest records the packing (``backend.packed``:
how many guests, which one, its core, and the runs of the other guests, which ran beside it). A run that
did not complete, or failed its fidelity checks, runs again alone afterwards (one guest, nothing beside
it; its first attempt set aside under ``.attempts/``), as Mininet-HiFi trusts a run only when its monitor
says it ran as it would alone. ``packing.json`` in the session folder says what ran where and what ran
again.

Runs side by side on one kernel (:func:`run_side_by_side`, testbed.guest.sidebyside) are split the same
way, into slots (``.slots/sK/``) that one kernel runs at once; they are recorded (``backend.side_by_side``)
and run again alone the same way. They suit a kernel that can give every run its CPU at once, in real time:
runs are admitted by the CPU their experiment's runs alone measured (:func:`admitted`), and the runs' own
checks (the CPU headroom above all) say whether it sufficed.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable
from pathlib import Path

from testbed.host.remote import Observer
from testbed.plan import progress, resume
from testbed.plan.plan import PLAN, PLAN_DONE, Plan, PlanRun
from testbed.results import rundir
from testbed.results.manifest import Manifest, read_manifest, run_status
from testbed.scenario.suite import is_control

#: the session's record of the packing
PACKING_JSON = "packing.json"
#: where each guest's plan (and its runner's ``plan.done``) lies, under the session folder
GUESTS_DIR = ".guests"
#: where each slot's plan lies when runs go side by side on one kernel (testbed.guest.sidebyside)
SLOTS_DIR = ".slots"
#: runs go side by side only while their guest's CPU, busy as each kept it alone (testbed.plan.costs), sums
#: to at most this: its cpu headroom check fails a run at 90 %, and a TCG guest's timers and packets need idle
#: CPU to be served on time (a choice, not yet measured against runs alone)
ADMIT_BUSY_PCT = 50.0
#: the most guests packed at once (one core each; more than this host has is refused anyway)
MAX_GUESTS = 16

#: one guest for one plan: (plan file, its console log, its time budget in s, the name its lines are shown
#: with) -> the guest's timing
BootOne = Callable[[Path, Path, float, str], dict]
#: the slots' plans run at once on one kernel -> the timing
ExecuteSlots = Callable[[list[Path]], dict]


def guests_for(requested: int, clock: str, cores: int) -> tuple[int, str]:
    """How many guests a session packs, and why: ``requested`` (``--guests``) on the virtual clock, at most
    one per core this process may use; one in real time, where guests side by side distort each other."""
    if requested <= 1:
        return 1, "one guest"
    if clock != "virtual":
        return 1, (
            f"--guests {requested} packs guests only in virtual time (in real time two TCG guests distort each "
            "other's timing): this session runs in real time, in one guest"
        )
    if requested > cores:
        raise ValueError(
            f"--guests {requested}: each packed guest is pinned to a core of its own, and this process may use "
            f"{cores} core(s): give --guests {cores} or fewer"
        )
    return requested, f"{requested} guests at once, one per core (virtual time)"


def makespan_s(estimates: list[float], guests: int) -> float:
    """The wall time of runs of these estimates split over ``guests`` as :func:`shards` splits them."""
    loads = [0.0] * max(guests, 1)
    for cost in sorted(estimates, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads, default=0.0)


def shards(runs: list[PlanRun], guests: int) -> list[list[PlanRun]]:
    """The runs split over ``guests``: the longest first (as measured where earlier runs were measured:
    testbed.plan.costs), each to the guest with the least work so far; each shard keeps the plan's order
    (a kept network serves the next run of the same scenario). A positive control's runs
    (testbed.scenario.suite.is_control) come after all the others, in the split and in their shard: a
    comparison's candidate runs them and its baseline may not, and the runs both sides have are then placed
    alike on both, after the same runs on the same guest (a run's course can follow what ran before it on
    its guest: docs/regression.md), whatever the controls weigh."""
    loads = [0.0] * guests
    chosen: dict[int, int] = {}
    for i in sorted(range(len(runs)), key=lambda i: (is_control(runs[i].point_id), -runs[i].expected_s)):
        k = loads.index(min(loads))
        loads[k] += runs[i].expected_s
        chosen[i] = k
    in_order = sorted(range(len(runs)), key=lambda i: is_control(runs[i].point_id))  # stable: the plan's order
    return [[runs[i] for i in in_order if chosen[i] == k] for k in range(guests)]


def shard_plans(plan: Plan, session: Path, guests: int, cores: list[int]) -> list[tuple[Path, Plan]]:
    """Each guest's plan, written into its own folder; its runs' manifests will name the other guests' runs
    as those that ran beside them."""
    split = [shard for shard in shards(plan.runs, guests) if shard]

    def packed(k: int, beside: list[str]) -> dict:
        return {"packed": {"guests": len(split), "guest": k, "core": cores[k], "beside": beside}}

    return _write_shards(plan, session, split, GUESTS_DIR + "/g", packed)


def side_by_side_plans(plan: Plan, session: Path, count: int) -> list[tuple[Path, Plan]]:
    """Each slot's plan, for ``count`` runs at once on one kernel (testbed.guest.sidebyside), split as guests
    are; its runs' manifests will name the other slots' runs as those that ran beside them."""
    split = [shard for shard in shards(plan.runs, count) if shard]

    def slot(k: int, beside: list[str]) -> dict:
        return {"side_by_side": {"runs_at_once": len(split), "slot": k, "beside": beside}}

    return _write_shards(plan, session, split, SLOTS_DIR + "/s", slot)


def _write_shards(
    plan: Plan, session: Path, split: list[list[PlanRun]], folder: str, record: Callable[[int, list[str]], dict]
) -> list[tuple[Path, Plan]]:
    """Shard K's plan written to ``<folder>K/plan.json``, its backend record updated by ``record(K, beside)``."""
    written = []
    for k, shard in enumerate(split):
        beside = sorted(run.run_dir for other in split if other is not shard for run in other)
        context = plan.context.model_copy(update={"backend": {**plan.context.backend, **record(k, beside)}})
        path = session / f"{folder}{k}" / PLAN
        path.parent.mkdir(parents=True, exist_ok=True)
        # a resumed session's earlier done marker would count a slot whose runner died before writing its
        # own as complete (testbed.guest.sidebyside reads each slot's): a new plan has none yet
        (path.parent / PLAN_DONE).unlink(missing_ok=True)
        shard_plan = plan.model_copy(update={"context": context, "runs": shard})
        shard_plan.write(path)
        written.append((path, shard_plan))
    return written


def run_packed(plan: Plan, session: Path, guests: int, boot_one: BootOne, log=print) -> dict:
    """The plan over ``guests`` guests at once, each pinned to a core, then the runs that need it again
    alone; the timings, also written to ``packing.json``."""
    cores = sorted(os.sched_getaffinity(0))[:guests]
    written = shard_plans(plan, session, guests, cores)
    log(f"packed: {len(plan.runs)} runs over {len(written)} guests at once, on cores {cores} (virtual time)")

    def one(k: int) -> dict:
        os.sched_setaffinity(0, {cores[k]})  # this thread's core: the guest it starts inherits it
        path, shard = written[k]
        budget = sum(run.estimate_s for run in shard.runs)
        return boot_one(path, session / f"guest-console-g{k}.log", budget, f"g{k}")

    timings, errors = _run_all(one, len(written))
    again = rerun_reasons(session, plan.runs)
    record = {"guests": len(written), "cores": cores, "shards": [], "rerun_alone": again}
    for k, (_, shard) in enumerate(written):
        entry = {"guest": k, "core": cores[k], "runs": [run.run_dir for run in shard.runs]}
        record["shards"].append({**entry, "timing": timings.get(k), "error": errors.get(k)})
    if again:
        record["alone"] = rerun_alone(plan, session, again, boot_one, log)
    rundir.write_json_atomic(session / PACKING_JSON, record)
    return record


def admitted(
    runs: list[PlanRun], count: int, alone_experiments: dict[str, str] | None = None
) -> tuple[list[PlanRun], dict[str, str]]:
    """The runs that may go side by side, ``count`` at once, and why each other one runs alone: its
    experiment is one of ``alone_experiments`` (not shown equivalent side by side: testbed.host.slotchoice),
    or kept its guest's CPU so busy alone (``busy_pct``, measured: testbed.plan.costs) that ``count`` of it
    would need more than ADMIT_BUSY_PCT. A run never measured is admitted: its own checks judge it, and it
    runs again alone when they fail."""
    alone = {}
    for run in runs:
        if run.scenario_name in (alone_experiments or {}):
            alone[run.run_dir] = f"{run.scenario_name} {alone_experiments[run.scenario_name]}"
        elif run.busy_pct is not None and run.busy_pct * count > ADMIT_BUSY_PCT:
            alone[run.run_dir] = (
                f"{run.scenario_name} kept its guest's CPU {run.busy_pct:.0f} % busy alone; {count} at once would "
                f"need {run.busy_pct * count:.0f} % (admitted up to {ADMIT_BUSY_PCT:.0f} %)"
            )
    return [run for run in runs if run.run_dir not in alone], alone


def run_side_by_side(
    plan: Plan,
    session: Path,
    count: int,
    execute_slots: ExecuteSlots,
    run_alone: BootOne,
    alone_experiments: dict[str, str] | None = None,
    log=print,
) -> dict:
    """The plan ``count`` runs at a time on one kernel, a slot each (testbed.guest.sidebyside), then the runs
    not admitted (:func:`admitted`) and those whose checks failed beside others, alone (``run_alone``); the
    record, also written to ``packing.json``."""
    runs, not_admitted = admitted(plan.runs, count, alone_experiments)
    written = side_by_side_plans(plan.with_runs(runs), session, count) if len(runs) > 1 else []
    log(f"side by side: {len(runs)} of {len(plan.runs)} runs, {len(written)} at a time on one kernel, one slot each")
    timing, error = None, None
    try:
        timing = execute_slots([path for path, _ in written]) if written else None
    except Exception as err:  # as a packed guest's: the slots' runs run again alone
        error = f"{type(err).__name__}: {err}"
    name_overlaps(session, [[run.run_dir for run in shard.runs] for _, shard in written])
    if written:
        again = rerun_reasons(session, runs, how="side by side")
    else:  # one run admitted: nothing to run beside it
        again = {run.run_dir: "nothing admitted beside it" for run in runs}
    record = {"side_by_side": len(written), "timing": timing, "error": error, "not_admitted": not_admitted}
    record["rerun_alone"] = again
    record["slots"] = [{"slot": k, "runs": [run.run_dir for run in shard.runs]} for k, (_, shard) in enumerate(written)]
    if not_admitted or again:
        record["alone"] = rerun_alone(plan, session, {**not_admitted, **again}, run_alone, log, how="side by side")
    rundir.write_json_atomic(session / PACKING_JSON, record)
    return record


def name_overlaps(session: Path, slots: list[list[str]]) -> None:
    """Each slot's runs' manifests amended with the other slots' runs that were going on at the same time, by
    their start and end on the kernel's one clock (``backend.side_by_side.overlapped``): the neighbours a run
    had, where ``beside`` lists every run of the other slots. A run without both times is left as it is."""
    spans = {}
    for k, run_dirs in enumerate(slots):
        for run_dir in run_dirs:
            try:
                manifest = rundir.read_json(session / run_dir / rundir.MANIFEST)
                spans[run_dir] = (k, manifest["started_utc"], manifest["ended_utc"], manifest)
            except (OSError, ValueError, KeyError):
                continue
    for run_dir, (k, start, end, manifest) in spans.items():
        if not (start and end and isinstance(manifest.get("backend", {}).get("side_by_side"), dict)):
            continue
        manifest["backend"]["side_by_side"]["overlapped"] = sorted(
            other
            for other, (j, other_start, other_end, _) in spans.items()
            if j != k and other_start and other_end and other_start < end and start < other_end
        )
        rundir.write_json_atomic(session / run_dir / rundir.MANIFEST, manifest)


def serialized(observers: tuple[Observer, ...]) -> tuple[Observer, ...]:
    """The session's observers as packed guests' threads may call them: one line at a time."""
    lock = threading.Lock()

    def one_at_a_time(observer: Observer) -> Observer:
        def bound(session: Path, run_dirs: list[str]) -> Callable[[str, float], None]:
            follower = observer(session, run_dirs)

            def line(text: str, now: float) -> None:
                with lock:
                    follower(text, now)

            return line

        return bound

    return tuple(one_at_a_time(observer) for observer in observers)


def by_slot(on_lines: list[Callable[[str, float], None]]) -> Callable[[str, float], None]:
    """One follower of lines side by side on one kernel (``s1: ...``: testbed.plan.progress.slot_line) that
    hands each slot's lines, unnamed, to that slot's follower, one line at a time; other lines go nowhere."""
    lock = threading.Lock()

    def on_line(text: str, now: float) -> None:
        slot = progress.slot_of(text)
        if slot is not None and slot[0] < len(on_lines):
            with lock:
                on_lines[slot[0]](slot[1], now)

    return on_line


def _run_all(one: Callable[[int], dict], count: int) -> tuple[dict[int, dict], dict[int, str]]:
    """Every guest at once; a guest that failed is an error for its runs, which then run again alone."""
    timings, errors = {}, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        futures = {pool.submit(one, k): k for k in range(count)}
        for future in concurrent.futures.as_completed(futures):
            k = futures[future]
            try:
                timings[k] = future.result()
            except Exception as err:  # the guest's failure is its runs' (rerun alone), not the session's
                errors[k] = f"{type(err).__name__}: {err}"
    return timings, errors


def rerun_reasons(session: Path, runs: list[PlanRun], how: str = "packed") -> dict[str, str]:
    """The runs that ran packed (or side by side: ``how``) and must run again alone, each with why: not
    complete, or a fidelity check failed (a run beside another is trusted only when it ran as it would alone)."""
    reasons = {}
    for run in runs:
        folder = session / run.run_dir
        status = run_status(folder)
        if status != "complete":
            reasons[run.run_dir] = f"{status} when {how}"
            continue
        failed = _failed_checks(read_manifest(folder))
        if failed:
            reasons[run.run_dir] = f"fidelity checks failed when {how}: " + ", ".join(failed)
    return reasons


def _failed_checks(manifest: Manifest) -> list[str]:
    fidelity = manifest.fidelity
    if fidelity is None or fidelity.trustworthy is not False:
        return []
    return fidelity.problems or ["trustworthy: false"]


def rerun_alone(
    plan: Plan,
    session: Path,
    reasons: dict[str, str],
    boot_one: BootOne,
    log,
    how: str = "packed",
    backend: dict | None = None,
    name: str = "alone",
    said: bool = False,
) -> dict:
    """The runs of ``reasons`` again, in one guest (or kernel) with nothing beside it; their first attempts
    (``how``: packed, side by side, or the host's contention: testbed.host.contended) set aside. ``backend``:
    what each manifest's backend record says of it (default: how they ran first); ``name``: the guest's
    folder under ``.guests/`` and its lines' prefix; ``said``: each reason was printed as its run was judged
    (the host's check), so the line names the runs only."""
    runs = [run for run in plan.runs if run.run_dir in reasons]
    for run in runs:
        resume.set_aside(session / run.run_dir, session)
    why = ", ".join(reasons) + " (why: above)" if said else "; ".join(f"{d} ({w})" for d, w in reasons.items())
    log(f"{how}: {len(runs)} run(s) alone: {why}")
    if backend is None:
        backend = (
            {"packed": {"guests": 1, "alone_after": "packed"}}
            if how == "packed"
            else {"side_by_side": {"runs_at_once": 1, "alone_in": how}}  # packing.json says why each ran alone
        )
    context = plan.context.model_copy(update={"backend": {**plan.context.backend, **backend}})
    path = session / GUESTS_DIR / name / PLAN
    path.parent.mkdir(parents=True, exist_ok=True)
    plan.model_copy(update={"context": context, "runs": runs}).write(path)
    return boot_one(path, session / f"guest-console-{name}.log", sum(run.estimate_s for run in runs), name)
