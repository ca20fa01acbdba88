"""A session: every run of one scenario file, on one kernel and backend, in one results folder.

``testbed run`` lands here: expand the scenario into runs, decide where they run
(:func:`testbed.host.choice.choose_backend`: in-process on a kernel that has what they need, else the
lab VM when it is up, else a virtme-ng guest), resume an unfinished session of the same runs, and
execute the rest on that :class:`~testbed.host.backends.Backend`. Whatever the backend, a failure it
names or Ctrl-C marks the runs it did not finish. The decision and the guest's accelerator are
recorded in ``session.json`` and every run's manifest; the report is written from the run folders
afterwards (:mod:`testbed.report.pages.sessionpage`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed import PROJECT
from testbed.host import backends, virtme
from testbed.host.backends import Backend
from testbed.host.choice import choose_backend
from testbed.host.remote import Observer
from testbed.plan import costs, estimate, progress, resume
from testbed.plan.plan import PLAN, Plan, PlanContext, PlanRun
from testbed.results import folderlock, provenance, rundir
from testbed.results.manifest import Manifest, read_manifest, run_status, write_manifest
from testbed.scenario.points import RunSpec, ScenarioFile

_logger = logging.getLogger(__name__)


def log(message: str) -> None:
    """A status line (``[testbed] ...`` on stdout once the CLI configured logging); also what the runner's
    lines from a guest or the lab VM are passed on with."""
    _logger.info(message)


@dataclass
class SessionResult:
    directory: Path
    runs: list[Path]
    statuses: dict[str, str]
    backend: dict

    @property
    def failed(self) -> list[Path]:
        return [r for r in self.runs if self.statuses[str(r)] != "complete"]


def run_session(
    scenario: ScenarioFile,
    backend: str = "auto",
    kernel_version: str | None = None,
    results_root: Path = PROJECT / "results",
    vcpus: int | None = None,
    force: bool = False,
    observers: Sequence[Observer] = (),
    keep_networks: bool = True,
    queue_hz: float = 10.0,
    cluster: str | None = None,
    placement_seed: int | None = None,
    clock: str = "auto",
    guests: int = 1,
    side_by_side: int = 1,
) -> SessionResult:
    """Run every run of a scenario; without ``force``, resume the newest unfinished session of the same runs.

    ``backend`` is ``auto`` (:func:`choose_backend`) or a name in :data:`backends.NAMES`. ``observers``
    follow the runner's lines where the plan runs elsewhere (:data:`remote.Observer`: the report's analysis
    ahead); the local backend runs it in this process and has none to give them. ``keep_networks``: a run
    may use the network of the run before it when it would build the same one (testbed.guest.keeper).
    ``queue_hz``: the bottleneck queues' sampling rate. ``cluster``: the runs go to this Dask cluster's
    workers (:mod:`testbed.host.cluster`), each on its host's ``backend``; ``placement_seed`` draws each
    run's host from its point and seed.
    ``clock``: a guest's, ``real``, ``virtual`` or ``auto`` (testbed.host.timebase); resumed only on it.
    ``guests``: in virtual time, that many guests at once, one per core (testbed.host.packing).
    ``side_by_side``: runs at once in one real-time guest or on the local kernel (testbed.host.packing); 0
    (AUTO_SLOTS): decided from what was shown equivalent (testbed.host.slotchoice)."""
    runs = scenario.runs()
    # absolute: a guest shares the folder by its path and starts in the project's folder, not this one
    # (`--results results` from a lab's folder made every run fail: "cannot access results/... on the host")
    results_root = Path(results_root).resolve()
    git = provenance.git_state(PROJECT)
    virtme.stop_orphans(log=log)  # a guest whose controller was killed must not compete with the next
    chosen = _open_backend(backend, runs, kernel_version, vcpus, cluster, placement_seed, clock, guests, side_by_side)
    chosen.observers = tuple(observers)
    with contextlib.closing(chosen):
        # Everything that can refuse (kernel, accelerator, the lab VM) is settled before the results folder exists.
        release = chosen.prepare()
        backend_info = chosen.record()
        previous, runs_to_do = _resumable(scenario, runs, results_root, release, git, backend_info, force)
        if previous is not None and not runs_to_do:
            return _result(previous, runs, backend_info)
        artefacts = chosen.build(runs_to_do, release)
        found = costs.measured_for(results_root, backend_info, runs_to_do)
        packed, builds = _builds(chosen, runs_to_do, keep_networks)
        budget_s = _priced(chosen, scenario, runs_to_do, found, builds, packed)
        session = previous or rundir.session_dir(results_root, scenario.name, git["sha"])
        with folderlock.acquire(session) as lock:
            _make_room(session, lock, runs_to_do)
            context = PlanContext(
                git=git, backend=backend_info, **artefacts._asdict(), keep_networks=keep_networks, queue_hz=queue_hz
            )
            entries = [_plan_entry(r, scenario, session, found, b) for r, b in zip(runs_to_do, builds, strict=True)]
            plan = Plan(context=context, runs=entries)
            _write_session_info(session, scenario, runs, backend_info, git, resumed=previous is not None)
            started = _execute(chosen, plan, session, budget_s)
    return _said(_result(session, runs, backend_info), started)


def _said(result: SessionResult, started: float) -> SessionResult:
    """The result, once said: how long the runs took, how many completed, and how many of those their
    fidelity checks judged untrustworthy (their manifests say why)."""
    complete = [Path(r) for r, status in result.statuses.items() if status == "complete"]
    judged = [read_manifest(run).fidelity for run in complete]
    count = sum(1 for f in judged if f is not None and f.trustworthy is False)
    untrustworthy = f", {count} untrustworthy (their checks failed: manifest.json fidelity)" if count else ""
    minutes = (time.monotonic() - started) / 60
    log(f"runs finished in {minutes:.1f} min: {len(complete)}/{len(result.runs)} complete{untrustworthy}")
    return result


def _make_room(session: Path, lock, runs_to_do: list[RunSpec]) -> None:
    """The locked session folder made ready: a dead writer's lock taken over (said), and whatever an earlier
    attempt left of the runs to do set aside (testbed.plan.resume)."""
    if lock.took_over:
        why = f"its last writer ended without releasing it ({folderlock.holder_text(lock.took_over)})"
        log(f"took over {session}: {why}")
    for r in runs_to_do:
        resume.set_aside(rundir.run_dir(session, r.point_id, r.seed), session)


def _open_backend(
    choice: str,
    runs: list[RunSpec],
    kernel_version: str | None,
    vcpus: int | None,
    cluster: str | None = None,
    placement_seed: int | None = None,
    clock: str = "auto",
    guests: int = 1,
    side_by_side: int = 1,
) -> Backend:
    """The backend ``--backend`` names; for ``auto``, the one :func:`choose_backend` picks (logged with why),
    a guest when virtual time is asked for; with ``cluster``, the cluster's, whose workers each decide
    ``auto`` on their own host."""
    experiments = frozenset(r.scenario_name for r in runs)
    if cluster:
        # imported here: Dask takes a second to import, and only a cluster session needs it
        missing = [name for name in ("dask", "distributed") if importlib.util.find_spec(name) is None]
        if missing:
            raise ValueError(
                f"--cluster needs Dask ({', '.join(missing)} not installed: 'make setup-experiment' "
                "leaves it out): run 'make setup', or .venv/bin/pip install -e '.[cluster]'"
            )
        if guests > 1 or side_by_side > 1:
            option = f"--guests {guests}" if guests > 1 else f"--side-by-side {side_by_side}"
            raise ValueError(
                f"{option} with --cluster: a cluster packs its own way (local:N, one guest per worker "
                "and core): give one of them"
            )
        from testbed.host import cluster as dask_cluster
        from testbed.host import clusterspec

        return dask_cluster.ClusterBackend(
            clusterspec.parse(cluster),
            choice,
            runs,
            kernel_version,
            vcpus,
            log=log,
            placement_seed=placement_seed,
            clock=clock,
        )
    if choice == "auto" and clock == "virtual":
        choice, why = "guest", "--clock virtual runs in a guest (QEMU's icount)"
        log(f"backend: {choice} ({why})")
    elif choice == "auto":
        choice, why = choose_backend(runs, kernel_version)
        log(f"backend: {choice} ({why})")
    return backends.create(
        choice,
        kernel_version,
        vcpus,
        log=log,
        clock=clock,
        experiments=experiments,
        guests=guests,
        side_by_side=side_by_side,
    )


def _resumable(
    scenario: ScenarioFile,
    runs: list[RunSpec],
    results_root: Path,
    release: str,
    git: dict,
    backend_info: dict,
    force: bool,
) -> tuple[Path | None, list[RunSpec]]:
    """The session to resume (same runs, kernel and clock; none with ``force``) and the runs left to do."""
    clock = backend_info.get("clock", "real")
    previous = None if force else resume.find_resumable(results_root, scenario.name, runs, release, clock)
    return previous, runs if previous is None else _runs_to_resume(scenario, runs, previous, release, git, clock)


def _runs_to_resume(
    scenario: ScenarioFile, runs: list[RunSpec], previous: Path, release: str, git: dict, clock: str = "real"
) -> list[RunSpec]:
    """The runs of ``previous`` (a session of the same runs) not yet complete on ``release``; says so."""
    done = [r for r in runs if resume.is_done(rundir.run_dir(previous, r.point_id, r.seed), r, release, clock)]
    resume.note_older_code(previous, done, git, log)
    if len(done) == len(runs):
        log(
            f"{scenario.name}: all {len(runs)} runs are already complete on {release} in {previous} "
            f"(--force runs them again in a new folder)"
        )
        return []
    log(
        f"resuming {previous}: {len(done)} of {len(runs)} runs complete on {release}, running the other "
        f"{len(runs) - len(done)} (--force starts anew)"
    )
    return [r for r in runs if r not in done]


def _builds(chosen: Backend, runs: list[RunSpec], keep_networks: bool) -> tuple[bool, list[bool]]:
    """Whether the session splits its runs (packed guests, or side by side on one kernel), and which runs will
    build their network: in one plan, as its order says (testbed.plan.costs.builds_network); split, none is
    marked, and each part's first run is priced with its boot and its network (:func:`_priced`)."""
    packed = chosen.at_once > 1
    return packed, [False] * len(runs) if packed else costs.builds_network(runs, keep_networks)


def _priced(
    chosen: Backend,
    scenario: ScenarioFile,
    runs: list[RunSpec],
    found: costs.Costs,
    builds: list[bool],
    packed: bool = False,
) -> float:
    """The session's estimate logged (the model scaled by what earlier runs took: testbed.plan.costs, said too;
    ``builds``: which runs build their network; ``packed``: each guest's first run builds one), and its
    deadline's basis: the model's, never what earlier runs happened to take."""
    log(found.describe())
    estimates = [estimate.estimate_s(r) for r in runs]
    expected = [found.expected_s(r.scenario_name, e, b) for r, e, b in zip(runs, estimates, builds, strict=True)]
    per_guest_s = found.boot_s
    if packed and runs:  # a guest's boot (measured, else the model's) and its first run's network
        name, first_s = runs[0].scenario_name, estimates[0]
        network_s = found.expected_s(name, first_s, builds=True) - found.expected_s(name, first_s)
        per_guest_s = (estimate.GUEST_BOOT_S if found.boot_s is None else found.boot_s) + network_s
    experiments = [r.scenario_name for r in runs]
    wall_s = chosen.wall_s(expected, per_guest_s, experiments)
    planned = progress.SessionPlanned(name=scenario.name, profile=scenario.profile, runs=len(runs), estimate_s=wall_s)
    log(progress.format_line(planned))
    return chosen.wall_s(estimates, experiments=experiments)


def _plan_entry(
    r: RunSpec, scenario: ScenarioFile, session: Path, found: costs.Costs | None = None, builds: bool = False
) -> PlanRun:
    estimate_s = estimate.estimate_s(r)
    return PlanRun(
        scenario_name=r.scenario_name,
        point_id=r.point_id,
        params=r.params,
        seed=r.seed,
        profile=r.profile or scenario.profile,  # a suite entry's own, else the session's
        scenario=r.scenario.model_dump(mode="json"),
        run_dir=str(rundir.run_dir(session, r.point_id, r.seed).relative_to(session)),
        estimate_s=estimate_s,
        cost_s=found.cost_s(r.scenario_name, estimate_s, builds) if found else None,
        busy_pct=found.busy_pct.get(r.scenario_name) if found else None,
    )


def _write_session_info(
    session: Path, scenario: ScenarioFile, runs: list[RunSpec], backend_info: dict, git: dict, resumed: bool
) -> None:
    info = {
        "scenario": scenario.name,
        "scenario_file": str(scenario.path),
        "profile": scenario.profile,
        "description": scenario.description,
        "backend": backend_info,
        "git": git,
        "started_utc": rundir.utc_iso(),
        "runs": resume.run_dirs(session, runs),
    }
    if resumed:
        earlier = rundir.read_json(session / rundir.SESSION)
        info["started_utc"] = earlier.get("started_utc", info["started_utc"])
        info["resumed_utc"] = [*earlier.get("resumed_utc", []), rundir.utc_iso()]
        # a part of the sweep (--only, --seed) run into the folder adds to its runs, a whole sweep after a part grows it
        kept = earlier.get("runs", [])
        info["runs"] = [*kept, *(r for r in info["runs"] if r not in kept)]
    rundir.write_json_atomic(session / rundir.SESSION, info)


def _execute(backend: Backend, plan: Plan, session: Path, total_s: float) -> float:
    """Write the plan, run it on the backend and record its timings in ``session.json``; returns when it
    started. Whatever the backend, a failure it names (:attr:`Backend.failures`) or Ctrl-C while it runs
    the plan elsewhere marks the runs it did not finish (raw files stay)."""
    plan_path = session / PLAN
    plan.write(plan_path)
    started = time.monotonic()
    timing: dict = {}
    try:
        timing = backend.execute(plan, plan_path, session, total_s)
    except backend.failures as err:
        log(f"{backend.label} failed: {err}")
        _mark_unfinished(plan, session, str(err))
    except KeyboardInterrupt:
        if not backend.runs_here:  # the runner in this process marks its own runs
            _mark_unfinished(plan, session, f"interrupted (Ctrl-C) while the {backend.label} ran it; raw files kept")
        raise
    timing["runs_wall_s"] = round(time.monotonic() - started, 2)
    session_info = rundir.read_json(session / rundir.SESSION)
    session_info.update({"ended_utc": rundir.utc_iso(), "timing": timing})
    rundir.write_json_atomic(session / rundir.SESSION, session_info)
    return started


def _result(session: Path, runs: list[RunSpec], backend_info: dict) -> SessionResult:
    run_dirs = [session / d for d in resume.run_dirs(session, runs)]
    return SessionResult(session, run_dirs, {str(d): run_status(d) for d in run_dirs}, backend_info)


def _mark_unfinished(plan: Plan, session: Path, reason: str) -> None:
    """Give every run the guest did not finish a manifest that says why (raw files stay)."""
    for run in plan.runs:
        directory = session / run.run_dir
        started = (directory / rundir.MANIFEST).exists()
        manifest = (
            read_manifest(directory)
            if started
            else Manifest(
                scenario=run.scenario_name,
                point_id=run.point_id,
                params=run.params,
                seed=run.seed,
                resolved=run.scenario,
            )
        )
        if manifest.status in ("complete", "failed"):
            continue
        status = "incomplete" if started else "failed"
        write_manifest(directory, manifest.model_copy(update={"status": status, "reason": reason}))
