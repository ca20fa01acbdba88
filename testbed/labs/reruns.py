"""The grader checks by running (``testbed lab check --backend guest``): one graded run of each point,
chosen at random when grading starts, is run again from the student's own scenario file with its seed
(and so the student's own rate), into a folder of the grader's own, and the submitted run's goodput per
algorithm is held to the rerun's.

A student controls the machine their runs ran on and can forge a run consistently, captures included
(testbed/labs/labels.py says what that takes); a rerun on the grader's machine is what such a forgery
cannot match. The rerun runs on the clock the submitted run ran on (its manifest's ``backend.clock``):
a real-time run against real time, a virtual-time run against virtual time, whose repeats agree far
more closely, so that :data:`TOLERANCE` is the clock's own. How far two honest runs of one seed differ
bounds what this can tell (docs/labs.md, "Run again by the grader", has the pairs): each tolerance was
set before the pairs that confirm it were run, and a rerun beyond it does not fail the task: it goes to
grading by hand with both numbers (a flag, never a verdict: no number of pairs this machine can run
makes the rate of honest students failed small enough to fail one unseen). A rerun that does not
complete is not the student's doing: also by hand. The Gradescope autograder runs nothing (no qemu
there), so it has no reruns.
"""

from __future__ import annotations

import math
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from analysis.runs import analyze as run_analysis
from testbed.labs.definition import Lab
from testbed.labs.gradereport import Check
from testbed.labs.studentruns import Results, graded_run_ids
from testbed.results import rundir
from testbed.scenario import variants
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario
from testbed.scenario.points import ScenarioFile

#: clock -> how far a submitted run's goodput may sit from its rerun's and agree (module doc), set above the
#: widest of the wireless lab's same-seed pairs on seeds 1-13 (real time: 38 % of 32 pairs; virtual: 16 % of
#: 20), then held to seeds 14-23: 0 and 1 of 20 honest pairs beyond them (docs/labs.md). 20 % and 5 %, set
#: on fewer pairs before, were not confirmed: 3 and 4 honest pairs of 20 fell beyond them
TOLERANCE = {"real": 0.40, "virtual": 0.20}

#: run(scenario, results_root, clock) -> the runs that did not complete (testbed.host.session)
SessionRunner = Callable[[ScenarioFile, Path, str], list]


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
        clock = run_clock(Path(chosen["path"]))
        checks.append(_rerun_one(scenario, point, int(chosen["seed"]), chosen["run_id"], found, run, clock))
    return checks


def run_clock(run_dir: Path) -> str:
    """The clock a run ran on, as its manifest records it ('real' when it records none: the runs made before
    virtual time, and those of the local and lab VM backends)."""
    try:
        backend = rundir.read_json(run_dir / rundir.MANIFEST).get("backend") or {}
    except (rundir.LoadError, AttributeError):
        return "real"
    clock = backend.get("clock") if isinstance(backend, dict) else None
    return clock if clock in TOLERANCE else "real"


def _rerun_one(
    scenario: ScenarioFile, point: str, seed: int, run_id: str, found: Results, run: SessionRunner, clock: str
) -> Check:
    name = f"rerun of {point} seed {seed} ({clock} time)"
    tolerance = TOLERANCE[clock]
    points = [variants.derive(p, [seed]) for p in scenario.points if p.point_id == point]
    if not points:
        return Check(name, True, f"the scenario file has no point {point} to run again: grade by hand", graded=False)
    where = Path(tempfile.mkdtemp(prefix="cc-testbed-rerun-"))  # the grader's own folder, never the student's
    try:
        failed = run(replace(scenario, points=points), where, clock)
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
    if all(spread(d) <= tolerance for d in apart.values()):
        return Check(name, True, f"{said}: within {tolerance:.0%}")
    return Check(
        name,
        True,
        f"{said}: beyond {tolerance:.0%} of what the grader's machine gives in {clock} time: grade by hand "
        "(look at the run)",
        graded=False,
    )


def spread(difference: float) -> float:
    """How far apart a rerun and a run are, symmetric (a run 1.4 times its rerun is as far as a rerun
    1.4 times the run): the larger over the smaller, less one; infinite when one is zero."""
    ratio = 1 + difference
    return max(ratio, 1 / ratio) - 1 if ratio > 0 else math.inf


def _goodputs(flows) -> dict[str, float]:
    """Each algorithm's mean sender goodput over a run's forward flows."""
    if flows.empty:
        return {}
    forward = flows[flows["direction"] == "forward"] if "direction" in flows.columns else flows
    return {str(cc): float(group["goodput_mbit"].mean()) for cc, group in forward.groupby("cc")}
