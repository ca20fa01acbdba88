"""The grader checks by running (``testbed lab check --backend guest``): one graded run of each point,
chosen at random when grading starts, is run again from the student's own scenario file with its seed
(and so the student's own rate), into a folder of the grader's own, and the submitted run's goodput per
algorithm is held to the rerun's.

A student controls the machine their runs ran on and can forge a run consistently, captures included
(testbed/labs/labels.py says what that takes); a rerun on the grader's machine is what such a forgery
cannot match. How far two honest runs of one seed differ in real time bounds what this can tell: on this
machine, twelve pairs of same-seed repeats (the wireless lab's reference and student runs, seeds 1-3;
two default-suite sessions, seeds 1-3) differed by 0.1-4 %, and one by 16 % (New Reno, seed 1). So a
rerun beyond :data:`TOLERANCE` does not fail the task: it goes to grading by hand with both numbers,
until the tolerance is measured on more repeats. A rerun that does not complete is not the student's
doing: also by hand. The Gradescope autograder runs nothing (no qemu there), so it has no reruns.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from analysis import run as run_analysis
from testbed.labs.gradereport import Check
from testbed.labs.labkit import Lab
from testbed.labs.labresults import Results, graded_run_ids
from testbed.results import rundir
from testbed.scenario import variants
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario
from testbed.scenario.points import ScenarioFile

#: how far a submitted run's goodput may sit from its rerun's and agree (module doc: not yet measured enough
#: to fail a task on; beyond it the task is graded by hand)
TOLERANCE = 0.20

#: run(scenario, results_root) -> the runs that did not complete (testbed.host.session)
SessionRunner = Callable[[ScenarioFile, Path], list]


def rerun_checks(
    work: Path, lab: Lab, found: Results, run: SessionRunner, chooser: random.Random | None = None
) -> list[Check]:
    """One graded run per point run again and compared (module doc); ``chooser`` picks the runs (a
    system source by default: a student cannot tell which run will be checked)."""
    if lab.scenario is None or found.runs.empty:
        return []
    try:
        scenario = load_scenario(work / lab.scenario)
    except ScenarioError as err:
        return [Check("rerun", False, f"the scenario file cannot be run again: {err}")]
    graded = graded_run_ids(found)
    runs = found.runs[found.runs["run_id"].isin(graded) & (found.runs["status"] == "complete")]
    chooser = chooser or random.SystemRandom()
    checks = []
    for point, group in sorted(runs.groupby("point_id")):
        chosen = group.iloc[chooser.randrange(len(group))]
        checks.append(_rerun_one(scenario, point, int(chosen["seed"]), chosen["run_id"], found, run))
    return checks


def _rerun_one(scenario: ScenarioFile, point: str, seed: int, run_id: str, found: Results, run: SessionRunner) -> Check:
    name = f"rerun of {point} seed {seed}"
    points = [variants.derive(p, [seed]) for p in scenario.points if p.point_id == point]
    if not points:
        return Check(name, True, f"the scenario file has no point {point} to run again: grade by hand", graded=False)
    where = Path(tempfile.mkdtemp(prefix="cc-testbed-rerun-"))  # the grader's own folder, never the student's
    try:
        failed = run(replace(scenario, points=points), where)
        manifests = sorted(where.rglob(rundir.MANIFEST))
        if failed or not manifests:
            return Check(
                name,
                True,
                f"it did not complete on the grader's machine ({len(failed)} run(s)): grade by hand",
                graded=False,
            )
        again = _goodputs(run_analysis.analyze_run(manifests[-1].parent, write=False).flows)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    submitted = _goodputs(found.flows[found.flows["run_id"] == run_id])
    apart = {cc: again[cc] / submitted[cc] - 1 for cc in again if submitted.get(cc)}
    if not apart:
        return Check(name, True, "no goodput to compare with the submitted run: grade by hand", graded=False)
    said = ", ".join(f"{cc} {submitted[cc]:.4g} submitted, {again[cc]:.4g} again ({d:+.1%})" for cc, d in apart.items())
    if all(abs(d) <= TOLERANCE for d in apart.values()):
        return Check(name, True, f"{said}: within {TOLERANCE:.0%}")
    return Check(
        name,
        True,
        f"{said}: beyond {TOLERANCE:.0%} of what the grader's machine gives: grade by hand (look at the run)",
        graded=False,
    )


def _goodputs(flows) -> dict[str, float]:
    """Each algorithm's mean sender goodput over a run's forward flows."""
    if flows.empty:
        return {}
    forward = flows[flows["direction"] == "forward"] if "direction" in flows.columns else flows
    return {str(cc): float(group["goodput_mbit"].mean()) for cc, group in forward.groupby("cc")}
