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

from testbed.labs import definition, gradereport, grading, intake, reruns, studentruns, students
from testbed.results import rundir
from testbed.scenario import variants
from testbed.scenario.load import load_scenario
from testbed.scenario.points import ScenarioFile

#: run_session(scenario, results_root) -> the runs that did not complete (testbed.host.session)
SessionRunner = Callable[[ScenarioFile, Path], list]


@dataclass
class LabCheck:
    grade: gradereport.Grade
    junit: Path
    gradescope: Path


def lab_list(root: Path = definition.LABS) -> str:
    """The labs, one line each: name, title, time here and on a laptop with KVM."""
    lines = []
    for name in definition.lab_names(root):
        lab = definition.load_lab(root / name)
        lines.append(
            f"{name:12} {lab.title} ({lab.minutes.tcg:g} min here under TCG, ~{lab.minutes.kvm:g} min "
            f"with KVM; papers: {lab.papers})"
        )
    return "\n".join(lines) or f"no labs in {root}"


def hidden_scenarios(
    work: Path, lab: definition.Lab, hidden: definition.Hidden, pool: list[int] | None = None
) -> list[tuple[str, ScenarioFile]]:
    """Each hidden variant as the part of the student's scenario file it runs: the points its ``only``
    selects (all without), with its own seeds (the file's without). In a folder started with the
    student's own seeds, a variant's seeds are as many of ``pool`` (the lab's seed pool) the student did
    not get (testbed/labs/students.py): never one of theirs."""
    if lab.scenario is None:
        raise definition.LabError("the lab has no scenario file of its own: hidden variants need one")
    scenario = load_scenario(work / lab.scenario)
    mine = definition.lab_start(work).get("seeds")
    found = []
    for variant in hidden.variants:
        chosen = scenario.select(variant.only)
        seeds = students.others(pool, mine, len(variant.seeds)) if mine and pool and variant.seeds else variant.seeds
        if seeds:
            chosen = replace(chosen, points=[variants.derive(p, seeds) for p in chosen.points])
        found.append((variant.name, chosen))
    return found


def check(
    master: Path,
    work: Path,
    results: Path,
    run: SessionRunner | None = None,
    student: str | None = None,
    rerun: reruns.SessionRunner | None = None,
) -> LabCheck:
    """Grade the student's folder ``work`` (their scenario file, answers and figures) on ``results``
    with the lab ``master`` as installed: its tasks, bands and hidden variants (``run`` runs those;
    None skips them). The hidden variants' checks belong to the lab's first task that runs points: a
    scenario file that only works for the seeds it was tried with fails the task that asked for it.
    ``student``: whose work this is (their own seeds are then required: testbed/labs/students.py);
    ``rerun``: run one graded run per point again and hold the submitted ones to it (testbed/labs/reruns.py)."""
    intake.refuse_unsafe(work, results)  # before anything in them is read or written
    lab = definition.load_lab(master)
    expected = definition.load_expected(master, lab) if (master / "expected.yaml").is_file() else None
    ran = []
    if run is not None and definition.hidden_file(master).is_file():
        hidden = definition.load_hidden(definition.hidden_file(master))
        ran = _run_hidden(work, lab, hidden, results, run, definition.seed_pool(master, lab))
    found = studentruns.load_results(work, lab, results)
    own = _student_checks(master, work, found, student)
    if all(c.ok for c in own):
        own += _variant_checks(master, lab, work, found, student)
    graded = grading.grade(work, lab, expected, found, own)
    task = next((t for t in graded.tasks if t.task.runs), graded.tasks[0])
    if ran:
        task.checks += _hidden_checks(ran, expected, found)
    if rerun is not None:
        task.checks += reruns.rerun_checks(work, lab, found, rerun)
    # a folder made afresh for the grade, put in place of grade/ (a link there removed, never followed)
    out = intake.write_fresh(
        work / "grade", {"results.json": (json.dumps(gradereport.gradescope(graded), indent=2) + "\n").encode()}
    )
    gradereport.junit_xml(graded, out / "junit.xml")
    return LabCheck(graded, out / "junit.xml", out / "results.json")


@dataclass
class HiddenRun:
    name: str
    scenario: ScenarioFile | None  # None: the student's file cannot run the variant
    problem: str | None  # why it did not run or complete


def _run_hidden(
    work: Path, lab: definition.Lab, hidden: definition.Hidden, results: Path, run: SessionRunner, pool: list[int]
) -> list[HiddenRun]:
    from testbed.scenario.errors import ScenarioError

    try:
        chosen = hidden_scenarios(work, lab, hidden, pool)
    except ScenarioError as err:
        return [HiddenRun("hidden variants", None, f"the scenario file cannot run them: {err}")]
    ran = []
    for name, scenario in chosen:
        failed = run(scenario, results)
        ran.append(HiddenRun(name, scenario, f"not complete: {len(failed)} run(s)" if failed else None))
    return ran


def _hidden_checks(
    ran: list[HiddenRun], expected: definition.Expected | None, found: studentruns.Results
) -> list[gradereport.Check]:
    """Each hidden variant: its runs complete, and the bands of its points hold on its own runs (the
    student's runs are graded apart from them)."""
    checks = []
    for variant in ran:
        if variant.scenario is None or variant.problem:
            checks.append(gradereport.Check(f"hidden variant {variant.name}", False, variant.problem or ""))
            continue
        runs = variant.scenario.runs()
        checks.append(gradereport.Check(f"hidden variant {variant.name}", True, f"{len(runs)} run(s) complete"))
        seeds: dict[str, list[int]] = {}
        for r in runs:
            seeds.setdefault(r.point_id, []).append(r.seed)
        bands, missing = grading.variant_bands(expected.bands if expected else [], found.variant)
        checks += [replace(missing, name=f"hidden variant {variant.name}: bands")] if missing else []
        for band in (b for b in bands if b.point in seeds):
            band_check = grading.band_check(band, found, seeds[band.point])
            checks.append(replace(band_check, name=f"hidden variant {variant.name}: {band_check.name}"))
    return checks


def _student_checks(
    master: Path, work: Path, found: studentruns.Results, student: str | None
) -> list[gradereport.Check]:
    """Whose seeds the runs are: the folder started for ``student`` (when named), its scenario file running
    the seeds ``testbed lab start --student`` gave, and those seeds the student's by the course's secret
    (testbed/labs/students.py). Nothing to check in a folder started without a student, unless one is named."""
    start = definition.lab_start(work)
    mine, started_for = start.get("seeds"), start.get("student")
    if student is None and mine is None:
        return []
    return [gradereport.Check("the student's own seeds", *_whose_seeds(master, found, student, mine, started_for))]


def _whose_seeds(
    master: Path, found: studentruns.Results, student: str | None, mine: list[int] | None, started_for: str | None
) -> tuple[bool, str, bool]:
    """:func:`_student_checks`' answer: (passed, why, graded), the first rule the folder breaks."""
    if student is not None and started_for is None:
        why = f"testbed lab start {master.name} DIR --student {student}, then run its seeds"
        return False, f"the folder was not started for a student: {why}", True
    if student is not None and started_for != student:
        return False, f"the folder was started for {started_for}, not {student}: another student's work", True
    ran = sorted({seed for seeds in found.seeds.values() for seed in seeds})
    given = ", ".join(map(str, mine or []))
    if ran != sorted(mine or []):
        shown = ", ".join(map(str, ran)) or "none"
        why = f"testbed lab start gave {started_for} seeds {given}: set those and run them"
        return False, f"the scenario file runs seeds {shown}; {why}", True
    if student is None:
        return True, f"seeds {given}, as lab start gave {started_for} (whose they are is checked with --student)", True
    if students.course_secret() is None:
        why = f"whether they are {student}'s cannot be told without {students.SECRET_ENV}: grade by hand"
        return True, f"seeds {given}: {why}", False
    if definition.student_seeds(master, student) != sorted(mine or []):
        why = "(edited, or another student's): start the lab again with --student"
        return False, f"lab-start.json's seeds are not {student}'s {why}", True
    return True, f"seeds {given}: {student}'s own", True


def _variant_checks(
    master: Path, lab: definition.Lab, work: Path, found: studentruns.Results, student: str | None
) -> list[gradereport.Check]:
    """Whose value of the lab's variant knob the runs are: the one ``testbed lab start --student`` gave,
    set in the scenario file and run by every graded run (their manifests), and the student's by the
    course's secret (as their seeds). A folder started for a student must say its value."""
    start = definition.lab_start(work)
    if lab.variant is None or (student is None and "variant" not in start and "student" not in start):
        return []
    name, what, knob = f"the student's own {lab.variant.what}", lab.variant.what, lab.variant.knob
    given = start.get("variant")
    mine = given.get("value") if isinstance(given, dict) else None
    if not isinstance(mine, int | float) or isinstance(mine, bool):
        return [gradereport.Check(name, False, f"lab-start.json gives no {what}: start the lab again with --student")]
    shown = definition.number_text(mine)
    if found.variant != mine:
        return [
            gradereport.Check(
                name,
                False,
                f"the scenario file sets {knob} to {definition.number_text(found.variant)}; "
                f"testbed lab start gave {shown}: set it back and run again",
            )
        ]
    graded = studentruns.graded_run_ids(found)
    ran = [
        f"seed {r.seed} of {r.point_id} ran {definition.number_text(v)}"
        for r in found.runs.itertuples()
        if r.run_id in graded and (v := studentruns.run_knob(Path(r.path), knob)) != mine
    ]
    if ran:
        return [gradereport.Check(name, False, f"{'; '.join(ran[:3])}: testbed lab start gave {shown}: run again")]
    if student is not None and students.course_secret() is None:
        return [
            gradereport.Check(
                name,
                True,
                f"{shown}: whether it is {student}'s cannot be told without {students.SECRET_ENV}: grade by hand",
                graded=False,
            )
        ]
    if student is not None and definition.student_value(master, student) != mine:
        return [
            gradereport.Check(
                name,
                False,
                f"lab-start.json's {what} is not {student}'s (edited, or another "
                "student's): start the lab again with --student",
            )
        ]
    return [gradereport.Check(name, True, f"{shown}, as lab start gave it")]


def shared_runs(folders: list[Path]) -> dict[str, list[Path]]:
    """Runs that share a capture across the submissions ``folders`` (an instructor's check across a class):
    a fingerprint -> the run folders that have it, when they belong to two submissions or more. A run is
    found by its manifest (links not followed: testbed/labs/intake.py); its fingerprints
    (studentruns.run_fingerprints) are its captures' sha256s, which no two real runs share."""
    seen: dict[str, list[tuple[int, Path]]] = {}
    for index, folder in enumerate(folders):
        for manifest in intake.files_named(folder, rundir.MANIFEST):
            for fingerprint in studentruns.run_fingerprints(manifest.parent):
                seen.setdefault(fingerprint, []).append((index, manifest.parent))
    shared: dict[tuple[Path, ...], str] = {}
    for fingerprint, found in sorted(seen.items()):
        if len({i for i, _ in found}) > 1:
            shared.setdefault(tuple(run for _, run in found), fingerprint)
    return {fingerprint: list(runs) for runs, fingerprint in shared.items()}


def open_notebook(folder: Path) -> int:
    """JupyterLab on the lab folder's analysis.ipynb (replaces this process; Ctrl-C in it stops it)."""
    notebook = folder / "analysis.ipynb"
    if not notebook.is_file():
        raise definition.LabError(f"{folder} has no analysis.ipynb")
    # the virtualenv's own, even when its bin/ is not on PATH (.venv/bin/testbed run directly)
    jupyter = shutil.which("jupyter-lab", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if jupyter is None:
        raise definition.LabError(
            "JupyterLab is not installed in the project's virtualenv: run 'make setup' "
            "(it installs requirements-labs.lock)"
        )
    os.chdir(folder)
    # the testbed runs as root (namespaces, qdiscs), and JupyterLab refuses root without being told
    os.execv(jupyter, [jupyter, notebook.name, *(["--allow-root"] if os.geteuid() == 0 else [])])


def run_action(
    action: str,
    name: str | None,
    folder: Path | None = None,
    more: list[str] | None = None,
    work: Path | None = None,
    how: str | None = None,
    hidden_runner: SessionRunner | None = None,
    student: str | None = None,
    student_check: bool = True,
    rerun_runner: reruns.SessionRunner | None = None,
) -> int:
    """``testbed lab ACTION``: list, start, check, pack, bands, autograder, notebook or duplicates (docs/labs.md);
    returns the exit status. ``hidden_runner`` runs the hidden variants for ``check`` (None: not run)."""
    if action == "list":
        print(lab_list())
        return 0
    if action == "duplicates":
        given = ([name] if name else []) + ([str(folder)] if folder else []) + (more or [])
        return _duplicates([Path(f) for f in given])
    if not name:
        raise definition.LabError(f"lab {action} needs the lab's name: one of {', '.join(definition.lab_names())}")
    master = definition.lab_dir(name)
    if action == "start":
        destination = definition.start_lab(name, folder or Path(master.name), student=student)
        print(
            f"lab {master.name} copied to {destination}: read {destination / 'README.md'}, then run its "
            f"scenario ({definition.load_lab(master).scenario}) from there"
        )
        if student:
            started = definition.lab_start(destination)
            print(f"{student}'s own seeds: {', '.join(map(str, started['seeds']))}")
            if "variant" in started:
                variant = definition.load_lab(master).variant
                print(
                    f"{student}'s own {variant.what}: {started['variant']['value']:g} ({variant.knob} in the "
                    "scenario file)"
                )
        return 0
    if action == "bands":
        return _bands(master, folder, how)
    if action == "autograder":
        from testbed.labs import autograder

        path = autograder.build(name, folder or Path.cwd(), student_check)
        print(
            f"{path}: upload it to Gradescope as the assignment's autograder (Ubuntu 24.04 base image); it "
            f"grades an uploaded {master.name} folder without running experiments (docs/labs.md)"
        )
        return 0
    if action == "pack":
        return _pack(master, work or Path.cwd(), folder or Path.cwd())
    if action == "notebook":
        return open_notebook(Path.cwd() if (Path.cwd() / "analysis.ipynb").is_file() else master)
    work = work or (Path.cwd() if (Path.cwd() / "lab.yaml").is_file() else master)
    checked = check(master, work, folder or work / "results", hidden_runner, student, rerun_runner)
    print(gradereport.text(checked.grade))
    print(f"junit: {checked.junit}\ngradescope: {checked.gradescope}")
    return 0 if all(t.passed for t in checked.grade.tasks) else 1


def _pack(master: Path, work: Path, where: Path) -> int:
    """``lab pack NAME [DIR]``: the student's folder zipped for handing in, its size printed."""
    from testbed.labs import submission

    packed = submission.pack(work, where / f"{master.name}-submission.zip")
    print(
        f"{packed.path}: {packed.runs} run(s), {packed.files} files, {packed.bytes / 1e6:.1f} MB "
        f"({packed.raw_bytes / 1e6:.1f} MB of raw files before compression): hand it in (Gradescope: upload "
        "the zip)"
    )
    return 0


def _duplicates(folders: list[Path]) -> int:
    """``lab duplicates FOLDER...``: runs that two submissions share (exit 1 when any)."""
    missing = [str(f) for f in folders if not f.is_dir()]
    if len(folders) < 2 or missing:
        problem = f"; not folders: {', '.join(missing)}" if missing else ""
        raise definition.LabError(f"lab duplicates needs two submission folders or more{problem}")
    shared = shared_runs(folders)
    for runs in shared.values():
        print("the same run in " + " and ".join(str(r) for r in runs))
    print(f"{len(shared)} run(s) found in two submissions or more, of {len(folders)} submissions")
    return 1 if shared else 0


def _bands(master: Path, results: Path | None, how: str | None) -> int:
    from testbed import PROJECT
    from testbed.labs import referencebands
    from testbed.results import provenance

    if not results or not how:
        raise definition.LabError("lab bands needs the reference runs' results folder and --how (how they were made)")
    expected = referencebands.make_bands(master, results, how, provenance.git_state(PROJECT).get("sha") or "unknown")
    referencebands.write_expected(master / "expected.yaml", expected)
    print(f"{master / 'expected.yaml'}: {len(expected.bands)} bands from {expected.reference.runs} reference runs")
    return 0
