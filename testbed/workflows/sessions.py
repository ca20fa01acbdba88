"""What ``testbed run``, ``suite``, ``explain`` and ``check`` do: a session run, its report, the catalog.

A session runs where :class:`Where` says (testbed/host/session.py chooses and resumes), its runs are
analysed while it runs (testbed/report/live/ahead.py), then its report is written and printed, and the
results folder's catalog is brought up to date. ``suite --decide`` adds seeds where they decide
claims (testbed/workflows/decide.py); ``explain`` judges the session's ablations. The CLI only parses
its options into these calls.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed import PROJECT
from testbed.host import kernelbuild, kernels, kernelsource
from testbed.host import session as host_session
from testbed.host.clusterspec import host_count
from testbed.host.session import SessionResult, log
from testbed.plan import estimate, progress
from testbed.results import rundir
from testbed.scenario.points import ScenarioFile


@dataclass(frozen=True)
class Where:
    """Where a command's runs execute and land, and how a session starts (the options every command
    that runs things shares)."""

    backend: str = "auto"
    kernel: str | None = None
    cpus: int | None = None
    cluster: str | None = None
    results: Path = PROJECT / "results"
    force: bool = False  # a new results folder instead of resuming
    yes: bool = False  # start what is estimated beyond a day
    fresh_networks: bool = False
    queue_hz: float = 10.0
    clock: str = "auto"  # a guest's: real, virtual (QEMU's icount) or auto (testbed.host.timebase)
    guests: int = 1  # virtual-time guests at once, one per core (testbed.host.packing)
    #: runs at once in one guest or on the local kernel, a slot each (testbed.guest.sidebyside); 0: auto
    side_by_side: int = 1
    allow_dirty: bool = False  # a tree:PATH kernel with uncommitted changes: its diff built as a patch


def refuse_runaway(
    runs: list, where: Where, kernel_names: Sequence[str] = (), builds_at_most: int | None = None
) -> None:
    """Work estimated beyond a day starts only with ``where.yes`` (testbed.plan.estimate.runaway): a session,
    or a comparison with the kernels it builds here first counted in (``kernel_names``; at most
    ``builds_at_most`` of them, a bisection building only those it reaches)."""
    sources = [k for k in kernel_names if kernelsource.is_source(k)]
    builds = kernelbuild.unbuilt(sources, kernels.cache_root()) if sources else []
    count = len(builds) if builds_at_most is None else min(len(builds), builds_at_most)
    extra_s = count * kernelbuild.build_estimate_s()
    if count:
        log(
            f"builds: {count} kernel(s) to build here first, about {extra_s / 60:.0f} min "
            f"({kernelbuild.estimate_text(None)})"
        )
    if note := estimate.check_runaway(runs, host_count(where.cluster), where.yes, extra_s):
        log(note)


def update_catalog(results_root: Path) -> None:
    """Bring the results folder's catalog up to date after runs (analysis/runs/catalog.py), saying what did not
    go in."""
    from analysis.runs.catalog import update

    for line in update(results_root):
        print(line, file=sys.stderr)


def write_report(session: Path, ahead=None) -> Path:
    """The session's report written and its summary printed (after the analysis ahead, if any, ended)."""
    from testbed.report.pages.sessionpage import write_session_report

    if ahead is not None:
        ahead.finish()  # its runs are then in the report's cache
    result = write_session_report(session)
    print(result.summary_text)
    print(f"report: {result.html_path}")
    return result.html_path


def run_scenario(
    scenario: ScenarioFile,
    where: Where,
    report: bool = True,
    done_file: Path | None = None,
    budget_s: float | None = None,
) -> int:
    """``testbed run`` and ``testbed suite``: the session, more seeds where they decide claims (with
    ``budget_s``), the report, ``done_file`` for scripts and the catalog. Exit status 1 when a run did not
    complete."""
    refuse_runaway(scenario.runs(), where)
    with _ahead(report) as ahead:

        def run(suite: ScenarioFile, force: bool = False) -> SessionResult:
            return _session(suite, where, force, ahead)

        result = run(scenario, where.force)
        if budget_s is not None:  # more seeds where they decide claims; the same folder grows
            from testbed.workflows.decide import decide

            result = decide(scenario, result.directory, budget_s, run) or result
        written = write_report(result.directory, ahead) if report else None
    if done_file:
        done = progress.SessionDone(
            session=str(result.directory),
            report=str(written) if written else None,
            complete=len(result.runs) - len(result.failed),
            total=len(result.runs),
        )
        rundir.write_json_atomic(done_file, done.model_dump(mode="json"))
    return _finish(result, where)


def explain_claim(claim_id: str, seeds: int, factors: list[str], where: Where) -> int:
    """``testbed explain``: the claim's deciding condition with each factor set as the paper had it, run as
    one session, then judged (testbed/workflows/explain.py)."""
    from testbed.report.pages.sessionpage import write_session_report
    from testbed.workflows import explain

    claim = explain.find_claim(claim_id)
    scenario = explain.plan(claim, seeds, factors)
    refuse_runaway(scenario.runs(), where)
    with _ahead(True) as ahead:
        result = _session(scenario, where, where.force, ahead)
        ahead.finish()
    explain.plan_design(result.directory)  # its looks, before the report judges the first
    report = write_session_report(result.directory)
    found = explain.explain_session(claim, result.directory, report.runs)
    print("\n".join(found.lines()))
    print(f"explanation: {result.directory / 'explanation.md'}")
    print(f"report: {report.html_path}")
    return _finish(result, where)


def _session(scenario: ScenarioFile, where: Where, force: bool, ahead) -> SessionResult:
    # through the module: a test replaces host_session.run_session whenever this module was imported
    return host_session.run_session(
        scenario,
        backend=where.backend,
        kernel_version=where.kernel,
        results_root=where.results,
        vcpus=where.cpus,
        force=force,
        keep_networks=not where.fresh_networks,
        queue_hz=where.queue_hz,
        observers=[ahead.observer] if ahead else [],
        cluster=where.cluster,
        clock=where.clock,
        guests=where.guests,
        side_by_side=where.side_by_side,
    )


def _ahead(wanted: bool) -> contextlib.AbstractContextManager:
    """The runs analysed while the session runs (testbed/report/live/ahead.py), for the report after it."""
    if not wanted:
        return contextlib.nullcontext(None)
    from testbed.report.live.ahead import AheadAnalysis

    return AheadAnalysis()


def _finish(result: SessionResult, where: Where) -> int:
    """The catalog updated and the runs that did not complete named: exit 1 when any."""
    update_catalog(where.results)
    for run in result.failed:
        print(f"not complete: {run}: {_reason(run)}", file=sys.stderr)
    return 1 if result.failed else 0


def _reason(run_dir: Path) -> str:
    try:
        return rundir.read_json(run_dir / rundir.MANIFEST).get("reason") or "no reason recorded"
    except (OSError, ValueError):
        return "no manifest"


def check_scenarios(names: list[str], profile: str | None, only=(), seeds=()) -> int:
    """``testbed check``: each scenario file validated, its points listed and its runs' time estimated
    (of the part ``only`` and ``seeds`` select); a warning when the whole is beyond a day."""
    from testbed.scenario.load import find_scenario, load_scenario

    total_s = 0.0
    for name in names:
        scenario = load_scenario(find_scenario(name, PROJECT / "scenarios"), profile=profile).select(only, seeds)
        runs = scenario.runs()
        seconds = sum(estimate.estimate_s(r) for r in runs)
        total_s += seconds
        print(
            f"{scenario.path}: ok ({scenario.profile or 'no'} profile): {len(scenario.points)} points, "
            f"{len(runs)} runs, about {seconds / 60:.1f} min"
        )
        for point in scenario.points:
            print(f"  {point.point_id}")
    if len(names) > 1:
        print(f"total: about {total_s / 60:.1f} min of runs (plus a guest boot per scenario)")
    if total_s > estimate.RUNAWAY_S:
        print(
            f"warning: about {total_s / 3600:.1f} h of runs, over a day: testbed run will ask for --yes; "
            "cut the sweep (--only, --seed) or spread it (--cluster)",
            file=sys.stderr,
        )
    return 0
