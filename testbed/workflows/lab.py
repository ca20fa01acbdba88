"""``testbed lab``: list the course labs, start one in a folder of its own, grade a student's work.

``check`` grades with the tasks and bands of the lab as installed in ``labs/`` (a student's copy of
``lab.yaml`` or ``expected.yaml`` is not trusted), runs the instructor's hidden variants first when the
lab has a ``hidden.yaml`` (other seeds or points of the student's own scenario file, into the same
results folder; the bands must hold for them too, on their own runs), and writes ``grade/junit.xml``
and ``grade/results.json`` (Gradescope) beside the terminal report.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from testbed.scenario.load import load_scenario
from testbed.scenario.points import ScenarioFile
from testbed.workflows import grading, labkit, labresults

#: run_session(scenario, results_root) -> the runs that did not complete (testbed.host.session)
SessionRunner = Callable[[ScenarioFile, Path], list]


@dataclass
class LabCheck:
    grade: grading.Grade
    junit: Path
    gradescope: Path


def describe(root: Path = labkit.LABS) -> str:
    """The labs, one line each: name, title, time here and on a laptop with KVM."""
    lines = []
    for name in labkit.lab_names(root):
        lab = labkit.load_lab(root / name)
        lines.append(f"{name:12} {lab.title} ({lab.minutes.tcg:g} min here under TCG, ~{lab.minutes.kvm:g} min "
                     f"with KVM; papers: {lab.papers})")  # fmt: skip
    return "\n".join(lines) or f"no labs in {root}"


def hidden_scenarios(work: Path, lab: labkit.Lab, hidden: labkit.Hidden) -> list[tuple[str, ScenarioFile]]:
    """Each hidden variant as the part of the student's scenario file it runs: the points its ``only``
    selects (all without), with its own seeds (the file's without)."""
    if lab.scenario is None:
        raise labkit.LabError("the lab has no scenario file of its own: hidden variants need one")
    scenario = load_scenario(work / lab.scenario)
    variants = []
    for variant in hidden.variants:
        chosen = scenario.select(variant.only)
        if variant.seeds:
            seeded = {"seeds": variant.seeds}
            chosen = replace(chosen, points=[replace(p, scenario=p.scenario.model_copy(update=seeded))
                                             for p in chosen.points])  # fmt: skip
        variants.append((variant.name, chosen))
    return variants


def check(master: Path, work: Path, results: Path, run: SessionRunner | None = None) -> LabCheck:
    """Grade the student's folder ``work`` (their scenario file, answers and figures) on ``results``
    with the lab ``master`` as installed: its tasks, bands and hidden variants (``run`` runs those;
    None skips them). The hidden variants' checks belong to the lab's first task that runs points: a
    scenario file that only works for the seeds it was tried with fails the task that asked for it."""
    lab = labkit.load_lab(master)
    expected = labkit.load_expected(master, lab) if (master / "expected.yaml").is_file() else None
    ran = []
    if run is not None and (master / "hidden.yaml").is_file():
        ran = _run_hidden(work, lab, labkit.load_hidden(master / "hidden.yaml"), results, run)
    found = labresults.load_results(work, lab, results)
    graded = grading.grade(work, lab, expected, found)
    if ran:
        task = next((t for t in graded.tasks if t.task.runs), graded.tasks[0])
        task.checks += _hidden_checks(ran, expected, found)
    out = work / "grade"
    out.mkdir(exist_ok=True)
    grading.junit_xml(graded, out / "junit.xml")
    (out / "results.json").write_text(json.dumps(grading.gradescope(graded), indent=2) + "\n")
    return LabCheck(graded, out / "junit.xml", out / "results.json")


@dataclass
class HiddenRun:
    name: str
    scenario: ScenarioFile | None  # None: the student's file cannot run the variant
    problem: str | None  # why it did not run or complete


def _run_hidden(work: Path, lab: labkit.Lab, hidden: labkit.Hidden, results: Path,
                run: SessionRunner) -> list[HiddenRun]:  # fmt: skip
    from testbed.scenario.errors import ScenarioError

    try:
        variants = hidden_scenarios(work, lab, hidden)
    except ScenarioError as err:
        return [HiddenRun("hidden variants", None, f"the scenario file cannot run them: {err}")]
    ran = []
    for name, scenario in variants:
        failed = run(scenario, results)
        ran.append(HiddenRun(name, scenario, f"not complete: {len(failed)} run(s)" if failed else None))
    return ran


def _hidden_checks(ran: list[HiddenRun], expected: labkit.Expected | None,
                   found: labresults.Results) -> list[grading.Check]:  # fmt: skip
    """Each hidden variant: its runs complete, and the bands of its points hold on its own runs (the
    student's runs are graded apart from them)."""
    checks = []
    for variant in ran:
        if variant.scenario is None or variant.problem:
            checks.append(grading.Check(f"hidden variant {variant.name}", False, variant.problem or ""))
            continue
        runs = variant.scenario.runs()
        checks.append(grading.Check(f"hidden variant {variant.name}", True, f"{len(runs)} run(s) complete"))
        seeds: dict[str, list[int]] = {}
        for r in runs:
            seeds.setdefault(r.point_id, []).append(r.seed)
        for band in (b for b in (expected.bands if expected else []) if b.point in seeds):
            band_check = grading.band_check(band, found, seeds[band.point])
            checks.append(replace(band_check, name=f"hidden variant {variant.name}: {band_check.name}"))
    return checks


def shared_runs(folders: list[Path]) -> dict[str, list[Path]]:
    """Runs found in more than one of the submissions ``folders`` (an instructor's check across a class):
    fingerprint -> the run folders that have it, when they belong to two submissions or more. A run is
    found by its manifest; its fingerprint (labresults.run_fingerprint) is its captures' sha256s, which
    no two real runs share."""
    seen: dict[str, list[tuple[int, Path]]] = {}
    for index, folder in enumerate(folders):
        for manifest in sorted(folder.rglob("manifest.json")):
            fingerprint = labresults.run_fingerprint(manifest.parent)
            if fingerprint is not None:
                seen.setdefault(fingerprint, []).append((index, manifest.parent))
    return {f: [run for _, run in found] for f, found in seen.items() if len({i for i, _ in found}) > 1}


def open_notebook(folder: Path) -> int:
    """JupyterLab on the lab folder's analysis.ipynb (replaces this process; Ctrl-C in it stops it)."""
    notebook = folder / "analysis.ipynb"
    if not notebook.is_file():
        raise labkit.LabError(f"{folder} has no analysis.ipynb")
    # the virtualenv's own, even when its bin/ is not on PATH (.venv/bin/testbed run directly)
    jupyter = shutil.which("jupyter-lab", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if jupyter is None:
        raise labkit.LabError("JupyterLab is not installed in the project's virtualenv: run 'make setup' "
                              "(it installs requirements-labs.lock)")  # fmt: skip
    os.chdir(folder)
    # the testbed runs as root (namespaces, qdiscs), and JupyterLab refuses root without being told
    os.execv(jupyter, [jupyter, notebook.name, *(["--allow-root"] if os.geteuid() == 0 else [])])
