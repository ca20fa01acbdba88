"""Seeds where they decide something: ``testbed suite NAME --decide [--budget 60m]`` (and
``make reproduce BUDGET=60m``).

After the suite's own runs, the session's claims are judged (analysis/verdicts/claims.py); while some are
undecided and the budget lasts, more seeds are run for the points of the claims that cost least to
decide here (``seedplan.seed_plan``: half way to the runs per side that would decide each, so that the
estimate is made again from the new runs), then the claims are judged again. The new seeds follow the
point's highest; the runs grow the same session folder (resume keeps every run done), so an
interrupted ``--decide`` run again continues where it stopped. It stops when nothing undecided can
be decided within the budget left, or after the design's last look, and says what stayed undecided and why.

Every judgement is a look of one group-sequential design (analysis/verdicts/sequential.py): at most
``sequential.DECIDE_LOOKS`` looks, the suite's own runs the first, each at its share of the 5 %; a claim
decided at a look keeps that verdict and gets no more runs. The design and what each look decided are
written to ``sequential.json`` in the session folder, and the session's report judges each claim at the
level of the look that decided it (the last look's for the others).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path

from analysis.raw.loaders import LoadError, load_session
from analysis.verdicts import claims, seedplan, sequential
from testbed.plan import estimate
from testbed.report.pages.analyses import analyze_runs, session_run_dirs
from testbed.results import rundir
from testbed.scenario import variants
from testbed.scenario.points import ScenarioFile

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$")


def parse_budget(text: str) -> float:
    """'60m', '1.5h', '90s' or '45' (minutes) as seconds; a clear error otherwise."""
    match = _BUDGET.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(
            f"--budget {text!r}: give a positive time such as 60m, 1.5h or 900s (a bare number is minutes)"
        )
    scale = {"s": 1, "h": 3600}.get(match.group(2) or "m", 60)
    return float(match.group(1)) * scale


def default_budget_s(scenario: ScenarioFile) -> float:
    """The suite's own estimated time: deciding may take as long again as the suite did."""
    return sum(estimate.estimate_s(run) for run in scenario.runs())


def grow(scenario: ScenarioFile, more: dict[str, int]) -> ScenarioFile:
    """The suite with ``more[point]`` new seeds on those points, after each point's highest seed (a run's
    identity leaves its seeds out, so the runs already made are kept on resume)."""
    points = []
    for point in scenario.points:
        seeds = list(point.scenario.seeds)
        added = [max(seeds) + i for i in range(1, more.get(point.point_id, 0) + 1)]
        points.append(variants.derive(point, seeds + added) if added else point)
    return dataclasses.replace(scenario, points=points)


def judge_session(session_dir: Path, alpha: float = claims.ALPHA) -> tuple[list[claims.Verdict], list[str]]:
    """The claims' verdicts on the session's runs as they are now (analyses from the report's cache), at
    ``alpha``, and the complete runs judged (as the record names them)."""
    try:
        session = load_session(session_dir)
    except LoadError:
        session = {}
    analyses = analyze_runs(session_dir, session_run_dirs(session_dir, session, []))
    names = [sequential.run_name(session_dir, a.run_dir) for a in analyses if a.status == "complete"]
    return claims.verdicts(analyses, alpha=alpha), names


def planned_record(session_dir: Path, looks: int = sequential.DECIDE_LOOKS) -> sequential.Record:
    """The session's design: its record, or a new ``--decide`` design; a session its report already judged
    at the full 5 % (a plain session's one look) is refused, since a design is planned before its first look."""
    record = sequential.read_record(session_dir)
    if record is None:
        return sequential.Record(sequential.Design(looks))
    if record.design.max_looks == 1:
        raise ValueError(
            f"{session_dir}: its report already judged it at the full 0.05 in one look "
            f"({sequential.RECORD_FILE}); --decide would look again at alpha that is spent. Start "
            "the decision in a session of its own, planned from its first look: --results DIR (another "
            "results folder) or --force (the suite's runs made again)"
        )
    return record


def decide(
    scenario: ScenarioFile,
    session_dir: Path,
    budget_s: float,
    run: Callable[[ScenarioFile], object],
    log: Callable[[str], object] = print,
    judge: Callable = judge_session,
    grow: Callable = grow,
    looks: int = sequential.DECIDE_LOOKS,
) -> object | None:
    """Run more seeds where they move verdicts, within ``budget_s`` of wall time (module doc); ``run`` runs a
    (grown) suite into the same session and returns its ``SessionResult``. Returns the last one (None when
    no round ran). ``judge`` and ``grow`` are this module's; testbed/workflows/decide_check.py passes its
    simulated session's to run this very loop on runs of known truth."""
    spent, rounds, last, complete = 0.0, 0, None, None
    record = planned_record(session_dir, looks)
    log(f"decide: {record.design.summary()}; a claim decided at a look keeps its verdict")
    while record.left():
        alpha = record.alpha_now()
        judged, names = judge(session_dir, alpha)
        verdicts = [v for v in judged if v.claim.id not in record.decided]
        record.look({v.claim.id: v.verdict for v in verdicts}, names)
        rundir.write_json_atomic(Path(session_dir) / sequential.RECORD_FILE, record.to_json())
        log(
            f"decide: look {record.looks} at alpha {alpha:.3g}: "
            + (
                ", ".join(f"{k} {v}" for k, (look, v) in record.decided.items() if look == record.looks)
                or "nothing decided"
            )
        )
        plan = seedplan.seed_plan([v for v in verdicts if v.claim.id not in record.decided], budget_s - spent)
        undecided = [v.claim.id for v in verdicts if v.claim.id not in record.decided]
        if not record.left():
            plan = seedplan.SeedPlan(left=["the design's last look was made"])
        if not plan.more:
            why = "; ".join(plan.left)
            log(
                f"decide: {rounds} round(s), {spent / 60:.1f} of {budget_s / 60:.0f} min spent; "
                f"{len(undecided)} claim(s) stay undecided" + (f": {why}" if why else "")
            )
            return last
        rounds += 1
        log(
            f"decide: round {rounds}: {sum(plan.more.values())} more runs for {', '.join(plan.claims)} "
            f"(about {plan.cost_s / 60:.1f} min; {(budget_s - spent) / 60:.1f} min of the budget left)"
        )
        scenario = grow(scenario, plan.more)
        started = time.monotonic()
        last = run(scenario)
        spent += time.monotonic() - started
        now_complete = len(last.runs) - len(last.failed)
        if complete is not None and now_complete <= complete:
            log(f"decide: stopped: none of round {rounds}'s runs completed (their reports say why)")
            return last
        complete = now_complete
    return last
