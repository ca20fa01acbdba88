"""The labs' autograder (``testbed lab check``): each task passes or fails on a student's results.

A task passes when every check of it passes: its runs complete and trustworthy (the latest run of
each seed of each point it names), the figures it asks for present, its questions answered in the
answers file, and its metrics within the bands of ``expected.yaml`` for the kernel the runs used. A
band for another kernel series grades nothing and says so. The grade is printed, and written as
JUnit XML (one test suite per task, one case per check) and as Gradescope's ``results.json``.

Results are read through the catalog (analysis/catalog.py): a lab's results folder may hold several
sessions, and the latest run of each point and seed counts.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from analysis import catalog, metrics
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario
from testbed.workflows.labkit import LATENCY_METRICS, Band, Expected, Lab, Task

#: an answer shorter than this many words is not one (the starter file's "(your answer)" is 2)
MIN_ANSWER_WORDS = 5
#: latency metric -> (kind of flow, column of the catalog's latency table)
LATENCY_COLUMNS = {m: ("ping" if m.startswith("ping") else "requests", m.split("_", 1)[1]) for m in LATENCY_METRICS}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    graded: bool = True  # False: nothing to grade it against here (a band for another kernel)


@dataclass
class TaskGrade:
    task: Task
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks if c.graded)

    @property
    def score(self) -> float:
        return self.task.points if self.passed else 0.0


@dataclass
class Grade:
    lab: Lab
    tasks: list[TaskGrade]
    kernel: str | None  # the kernel release of the latest runs

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    @property
    def max_score(self) -> float:
        return sum(t.task.points for t in self.tasks)


@dataclass
class Results:
    """A lab's runs and flows in a results folder: the latest run of each point and seed."""

    runs: pd.DataFrame
    flows: pd.DataFrame
    latency: pd.DataFrame
    seeds: dict[str, list[int]]  # point id -> the seeds the scenario file asks for
    problem: str | None = None  # why the scenario file gave no points (e.g. a knob left TODO)


def load_results(work: Path, lab: Lab, results: Path) -> Results:
    """The lab's runs under ``results`` (its catalog brought up to date first): those of the lab's
    scenario file, or every run when the lab has none (the student runs the project's experiments)."""
    seeds, problem = _planned_seeds(work, lab)
    if not results.is_dir():
        empty = pd.DataFrame()
        return Results(empty, empty, empty, seeds, problem or f"{results}: no results folder (run the lab's scenario)")
    catalog.ingest(results)
    name = Path(lab.scenario).stem if lab.scenario else None
    runs = catalog.runs(results, scenario=name)
    if not runs.empty:
        # a run that never started (its guest did not boot) has no start time: any later attempt replaces it
        runs = runs.sort_values("started_utc", na_position="first")
        runs = runs.drop_duplicates(["scenario", "point_id", "seed"], keep="last")
    if lab.scenario is None:
        seeds = {point: sorted(set(group["seed"])) for point, group in runs.groupby("point_id")} if not runs.empty \
            else {}  # fmt: skip
    kept = set(runs["run_id"]) if not runs.empty else set()
    flows = _kept(catalog.flows(results, scenario=name), kept)
    return Results(runs, flows, _kept(catalog.latency(results, scenario=name), kept), seeds, problem)


def _planned_seeds(work: Path, lab: Lab) -> tuple[dict[str, list[int]], str | None]:
    """Point id -> the seeds the student's scenario file asks for, over the file's profiles (a lab may
    run one profile per task); and why a profile gives none (e.g. a knob left TODO)."""
    if lab.scenario is None:
        return {}, None
    path = work / lab.scenario
    seeds: dict[str, list[int]] = {}
    problems = []
    for profile in [None, *_profiles(path)]:
        try:
            scenario = load_scenario(path, profile=profile)
        except ScenarioError as err:
            problems.append(str(err))
            continue
        seeds.update({p.point_id: list(p.scenario.seeds) for p in scenario.points})
    return seeds, "\n".join(problems) or None


def _profiles(path: Path) -> list[str]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return []
    return sorted(data.get("profiles") or {}) if isinstance(data, dict) else []


def _kept(frame: pd.DataFrame, run_ids: set[str]) -> pd.DataFrame:
    return frame[frame["run_id"].isin(run_ids)] if not frame.empty else frame


def grade(work: Path, lab: Lab, expected: Expected | None, results: Results) -> Grade:
    """Every task of the lab graded on the student's folder ``work`` and their results."""
    kernels = sorted(set(results.runs["kernel_release"].dropna())) if not results.runs.empty else []
    tasks = []
    for task in lab.tasks:
        checks = _run_checks(task, results) + _figure_checks(task, work)
        checks += _answer_checks(task, work / lab.answers)
        bands = [b for b in (expected.bands if expected else []) if b.task == task.id]
        checks += [band_check(band, results) for band in bands]
        tasks.append(TaskGrade(task, checks))
    return Grade(lab, tasks, kernels[-1] if kernels else None)


def _run_checks(task: Task, results: Results) -> list[Check]:
    if not task.runs:
        return []
    if results.problem and not results.seeds:
        return [Check("runs", False, results.problem)]
    if not results.seeds:
        return [Check("runs", False, "no runs in the results folder: run the experiments the handout names")]
    points = list(results.seeds) if task.runs == ["*"] else task.runs
    return [_point_check(point, results) for point in points]


def _point_check(point: str, results: Results) -> Check:
    name = f"runs of {point}"
    runs = results.runs[results.runs["point_id"] == point] if not results.runs.empty else results.runs
    wanted = results.seeds.get(point, [])
    if not wanted:
        why = f": {results.problem}" if results.problem else ""
        return Check(name, False, f"the scenario file has no point {point!r}{why}")
    missing = sorted(set(wanted) - set(runs["seed"] if not runs.empty else []))
    if missing:
        return Check(name, False, f"no run of seed {', '.join(map(str, missing))}: run the scenario")
    bad = runs[(runs["status"] != "complete") | (runs["trustworthy"] != 1)]
    bad = bad[bad["seed"].isin(wanted)]
    if not bad.empty:
        why = "; ".join(f"seed {r.seed}: {r.status}{'' if r.trustworthy == 1 else ', untrustworthy'}"
                        f"{f' ({r.reason})' if r.reason else ''}" for r in bad.itertuples())  # fmt: skip
        return Check(name, False, f"{why}: see the run's report.html, then run it again (--force)")
    return Check(name, True, f"{len(wanted)} run(s) complete and trustworthy")


def _figure_checks(task: Task, work: Path) -> list[Check]:
    checks = []
    for pattern in task.figures:
        found = sorted(work.glob(pattern))
        detail = f"{found[-1].relative_to(work)}" if found else f"no file matches {pattern} in {work}"
        checks.append(Check(f"figure {pattern}", bool(found), detail))
    return checks


def answers(path: Path) -> dict[str, str]:
    """The answers file's sections: heading (``## Q1 ...`` -> ``Q1``) -> the text under it."""
    sections: dict[str, str] = {}
    current = None
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        heading = re.match(r"^#{1,6}\s+(\S+)", line)
        if heading:
            current = heading.group(1).rstrip(":.")
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def _answer_checks(task: Task, path: Path) -> list[Check]:
    if not task.questions:
        return []
    given = answers(path)
    checks = []
    for question in task.questions:
        text = re.sub(r"<!--.*?-->|\(your answer\)", "", given.get(question, ""), flags=re.S)
        words = len(text.split())
        ok = words >= MIN_ANSWER_WORDS
        detail = f"{words} words" if ok else (f"no answer under '## {question}' in {path.name}" if not words
                                              else f"{words} words: write a few sentences")  # fmt: skip
        checks.append(Check(f"answer {question}", ok, detail))
    return checks


def band_check(band: Band, results: Results) -> Check:
    """The band's metric over the latest complete runs of its point (their mean) against the band."""
    who = f" of {band.cc}" if band.cc else ""
    name = f"{band.metric}{who} at {band.point}"
    runs = results.runs[(results.runs["point_id"] == band.point) & (results.runs["status"] == "complete")] \
        if not results.runs.empty else results.runs  # fmt: skip
    if band.min is None or band.max is None:
        return Check(name, True, "not graded: the lab's band has no values yet (testbed lab bands)", graded=False)
    if runs.empty:
        return Check(name, False, f"no complete run of {band.point}")
    kernels = sorted(set(runs["kernel_release"].dropna()))
    if not all(k.startswith(band.series) for k in kernels):
        return Check(name, True, f"not graded: the band is for kernel {band.series}, the runs used "
                                 f"{', '.join(kernels)}", graded=False)  # fmt: skip
    values = [v for v in (run_metric(band, run_id, results) for run_id in runs["run_id"]) if not math.isnan(v)]
    if not values:
        return Check(name, False, f"no value of {band.metric}{who} in the runs of {band.point}")
    mean = sum(values) / len(values)
    ok = band.min <= mean <= band.max
    detail = (f"{mean:.4g} over {len(values)} run(s); expected {band.min:g} to {band.max:g} "
              f"(the reference runs: {band.reference:g})")  # fmt: skip
    return Check(name, ok, detail)


def run_metric(band: Band, run_id: str, results: Results) -> float:
    """One run's value of the band's metric (NaN when it has none)."""
    if band.metric in LATENCY_COLUMNS:
        kind, column = LATENCY_COLUMNS[band.metric]
        rows = results.latency[(results.latency["run_id"] == run_id) & (results.latency["kind"] == kind)] \
            if not results.latency.empty else results.latency  # fmt: skip
        return float(rows[column].mean()) if not rows.empty else math.nan
    flows = results.flows[(results.flows["run_id"] == run_id) & (results.flows["direction"] == "forward")] \
        if not results.flows.empty else results.flows  # fmt: skip
    if band.cc:
        flows = flows[flows["cc"] == band.cc]
    return metrics.group_metric(flows, band.metric) if not flows.empty else math.nan


# ----------------------------------------------------------------------------------------- outputs


def text(grade: Grade) -> str:
    """The terminal report: the score first, then each task and its checks."""
    passed = sum(t.passed for t in grade.tasks)
    lines = [f"{grade.lab.title}: {grade.score:g} / {grade.max_score:g} points "
             f"({passed} of {len(grade.tasks)} tasks pass; kernel {grade.kernel or 'none'})", ""]  # fmt: skip
    for t in grade.tasks:
        lines.append(f"{'PASS' if t.passed else 'FAIL'}  {t.task.id}: {t.task.title} ({t.score:g}/{t.task.points:g})")
        for c in t.checks:
            mark = "ok  " if c.ok and c.graded else ("--  " if not c.graded else "MISS")
            lines.append(f"        {mark} {c.name}: {c.detail}")
    return "\n".join(lines)


def junit_xml(grade: Grade, path: Path) -> None:
    """One test suite per task, one test case per check (a band for another kernel: skipped)."""
    suites = ET.Element("testsuites", name=f"cc-testbed lab: {grade.lab.title}")
    for t in grade.tasks:
        failures = sum(not c.ok for c in t.checks if c.graded)
        skipped = sum(not c.graded for c in t.checks)
        suite = ET.SubElement(suites, "testsuite", name=f"{t.task.id}: {t.task.title}", tests=str(len(t.checks)),
                              failures=str(failures), skipped=str(skipped), errors="0")  # fmt: skip
        for c in t.checks:
            case = ET.SubElement(suite, "testcase", classname=t.task.id, name=c.name)
            if not c.graded:
                ET.SubElement(case, "skipped", message=c.detail)
            elif not c.ok:
                ET.SubElement(case, "failure", message=c.detail).text = c.detail
            else:
                ET.SubElement(case, "system-out").text = c.detail
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def gradescope(grade: Grade) -> dict:
    """Gradescope's autograder ``results.json``: one test per task with its score and what it checked."""
    tests = [{"name": f"{t.task.id}: {t.task.title}", "score": t.score, "max_score": t.task.points,
              "status": "passed" if t.passed else "failed",
              "output": "\n".join(f"{'ok' if c.ok else 'MISSING'}: {c.name}: {c.detail}" for c in t.checks)}
             for t in grade.tasks]  # fmt: skip
    return {"score": grade.score, "tests": tests, "output": text(grade).splitlines()[0]}
