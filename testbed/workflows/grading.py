"""The labs' autograder (``testbed lab check``): each task passes, fails, or is left to grade by hand.

A task passes when every check of it passes: its runs complete and trustworthy (the latest run of
each seed of each point it names), made from the student's scenario file as it is now and after
``testbed lab start``; the figures it asks for drawn by the student's session from those runs (the
sha256 its report recorded); each question answered with the numbers the student's own runs give
and the concepts of the lab's rubric; and its metrics within the bands of ``expected.yaml`` for the
kernel series the runs used. A check nothing here can decide (no bands for the kernel, an answer the
rubric cannot decide) leaves the task to grade by hand, with no automatic points. The grade is
printed, and written as JUnit XML (one test suite per task, one case per check) and as Gradescope's
``results.json``.

The student's runs are read by testbed/workflows/labresults.py.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from PIL import Image

from analysis import claims
from testbed.results import rundir
from testbed.workflows import labkit, labresults
from testbed.workflows.labkit import Band, Concept, Expected, Lab, Measured, Question, Task
from testbed.workflows.labresults import Results, point_values

#: an answer shorter than this many words is not one (the starter file's "(your answer)" is 2)
MIN_ANSWER_WORDS = 5
#: an answer whose different words are fewer than this share of its words is filler ("banana banana ...");
#: the solutions' answers have 55-75 % different words
FILLER_DISTINCT = 0.4


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    graded: bool = True  # False: nothing to grade it against here (a band for another kernel)


@dataclass
class TaskGrade:
    """A task's checks. It passes when every check passes; it fails when one it could decide fails;
    otherwise (a check nothing here can decide: no bands for the kernel, an answer the rubric cannot
    decide) it is left to grade by hand, and gives no automatic points."""

    task: Task
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(not c.ok for c in self.checks if c.graded)

    @property
    def by_hand(self) -> bool:
        return not self.failed and any(not c.graded for c in self.checks)

    @property
    def passed(self) -> bool:
        return not self.failed and not self.by_hand

    @property
    def status(self) -> str:
        return "PASS" if self.passed else ("HAND" if self.by_hand else "FAIL")

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


def grade(work: Path, lab: Lab, expected: Expected | None, results: Results) -> Grade:
    """Every task of the lab graded on the student's folder ``work`` and their results."""
    kernels = sorted(set(results.runs["kernel_release"].dropna())) if not results.runs.empty else []
    tasks = []
    for task in lab.tasks:
        copies = set(expected.reference.fingerprints) if expected and expected.reference else set()
        checks = _run_checks(task, results, copies, lab.min_seeds) + _figure_checks(task, work, results)
        checks += _answer_checks(task, work / lab.answers, results)
        checks += _band_checks([b for b in (expected.bands if expected else []) if b.task == task.id], results)
        tasks.append(TaskGrade(task, checks))
    return Grade(lab, tasks, kernels[-1] if kernels else None)


def _band_checks(bands: list[Band], results: Results) -> list[Check]:
    """The task's bands for the kernel series its runs used (exactly: 6.1 is not 6.12); a task whose bands
    are all for other series is left to grade by hand, and says so."""
    if not bands:
        return []
    runs = results.runs
    series = sorted({labkit.kernel_series(k) for k in runs["kernel_release"].dropna()}) if not runs.empty else []
    if len(series) > 1:
        return [Check("kernel", False, f"the runs used kernels of {len(series)} series ({', '.join(series)}): "
                                       "run every point on one kernel (testbed run --kernel)")]  # fmt: skip
    mine = [b for b in bands if b.series in series]
    if series and not mine:
        have = ", ".join(sorted({b.series for b in bands}))
        return [Check("bands", False, f"no bands for this kernel ({series[0]}; the lab has bands for {have}): "
                                      "grade by hand", graded=False)]  # fmt: skip
    return [band_check(band, results) for band in (mine or bands)]


def _run_checks(task: Task, results: Results, copies: set[str], min_seeds: int) -> list[Check]:
    if not task.runs:
        return []
    if results.problem and not results.seeds:
        return [Check("runs", False, results.problem)]
    if not results.seeds:
        return [Check("runs", False, "no runs in the results folder: run the experiments the handout names")]
    points = list(results.seeds) if task.runs == ["*"] else task.runs
    few = {p: len(results.seeds.get(p, [])) for p in points if 0 < len(results.seeds.get(p, [])) < min_seeds}
    if few:
        named = ", ".join(f"{p} ({n})" for p, n in few.items())
        return [Check("seeds", False, f"the lab asks for at least {min_seeds} seeds a point; the file asks for "
                                      f"fewer at {named}: set its seeds")]  # fmt: skip
    return [_point_check(point, results, copies) for point in points]


def _point_check(point: str, results: Results, copies: set[str]) -> Check:
    """The point's runs: one complete and trustworthy run per seed the scenario file asks for, made
    from the file as it is now, after ``testbed lab start``, and none a copy of the reference runs."""
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
    runs = runs[runs["seed"].isin(wanted)]
    copied = [f"seed {r.seed}" for r in runs.itertuples() if labresults.run_fingerprint(Path(r.path)) in copies]
    if copied:
        return Check(name, False, f"{', '.join(copied)}: a copy of the lab's reference runs (the same captures, "
                                  "byte for byte): run the scenario yourself")  # fmt: skip
    foreign = [f"seed {r.seed}" for r in runs.itertuples()
               if results.identities and r.identity != results.identities.get((point, r.seed))]  # fmt: skip
    if foreign:
        return Check(name, False, f"{', '.join(foreign)}: made with other settings than the scenario file has now "
                                  "(edited after the run, or another file's run): run again (--force)")  # fmt: skip
    if results.started_utc is None:
        why = "the folder was not made by 'testbed lab start' (no lab-start.json): when its runs were made"
        return Check(name, True, f"{why} cannot be told: grade by hand", graded=False)
    early = [f"seed {r.seed} ({r.started_utc})" for r in runs.itertuples()
             if r.started_utc and _utc(r.started_utc) < _utc(results.started_utc)]  # fmt: skip
    if early:
        return Check(name, False, f"{', '.join(early)}: made before 'testbed lab start' made this folder "
                                  f"({results.started_utc}): not this lab's run")  # fmt: skip
    return Check(name, True, f"{len(wanted)} run(s) complete and trustworthy, of the scenario file as it is, "
                             "made after 'testbed lab start'")  # fmt: skip


def _utc(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def _figure_checks(task: Task, work: Path, results: Results) -> list[Check]:
    checks = []
    for pattern in task.figures:
        found = sorted(work.glob(pattern), reverse=True)  # the latest session's first
        problems = [figure_problem(figure, task, results) for figure in found]
        if not found:
            checks.append(Check(f"figure {pattern}", False, f"no file matches {pattern} in {work}"))
        elif None in problems:
            checks.append(Check(f"figure {pattern}", True, f"{found[problems.index(None)].relative_to(work)}"))
        else:
            checks.append(Check(f"figure {pattern}", False, f"{found[0].relative_to(work)}: {problems[0]}"))
    return checks


def figure_problem(figure: Path, task: Task, results: Results) -> str | None:
    """Why ``figure`` is not one the student's session drew from the runs graded (None: it is): a PNG
    image, with the sha256 its session's report recorded (figures/drawn.json), drawn from at least one
    of the task's graded runs."""
    try:
        with Image.open(figure) as image:
            image.verify()
            size = image.size
    except (OSError, SyntaxError, ValueError) as err:  # Pillow's errors for a file that is not an image
        return f"not a PNG image ({err})"
    session = figure.parent.parent
    record_path = session / rundir.FIGURES_DRAWN
    record = rundir.read_json(record_path) if record_path.is_file() else {}
    if record.get("figures", {}).get(figure.name) != rundir.sha256_file(figure):
        return (f"not the figure its session's report drew ({size[0]}x{size[1]} pixels; {rundir.FIGURES_DRAWN} "
                f"has no such figure or another sha256): draw it with 'testbed report {session.name}'")  # fmt: skip
    graded = _graded_run_ids(task, results)
    drawn = {f"{session.parent.name}/{session.name}/{run}" for run in record.get("runs", [])}
    if graded and not graded & drawn:
        return f"drawn from other runs than the {len(graded)} graded (the latest of each seed): draw it again"
    return None


def _graded_run_ids(task: Task, results: Results) -> set[str]:
    """The run ids of the task's runs that are graded (all the student's when it names none)."""
    return labresults.graded_run_ids(results, None if task.runs in ([], ["*"]) else set(task.runs))


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


def _answer_checks(task: Task, path: Path, results: Results) -> list[Check]:
    given = answers(path)
    checks = [question_check(q, given.get(q.id, ""), path.name, results) for q in task.questions]
    for question, check in zip(task.questions, checks, strict=True):
        if question.verdict and check.ok:
            verdict = verdict_check(given.get(question.id, ""), "\n".join(given.values()), results)
            check.ok, check.graded = verdict.ok, check.graded and verdict.graded
            check.detail = f"{check.detail}; {verdict.detail}"
    return checks


def verdict_check(answer: str, all_answers: str, results: Results) -> Check:
    """The answer states the verdict the student's runs give (analysis/claims.py's rule) on the claim the
    answers name by its id."""
    decided = labresults.decided_claims(results)
    named = [claim_id for claim_id in decided if claim_id in all_answers]
    if not named:
        return Check("verdict", False, f"the answers name none of the claims your runs decide "
                                       f"({', '.join(decided) or 'none: run the points of one claim'})")  # fmt: skip
    verdict = decided[named[0]]
    said = [v for v in claims.VERDICTS if _says(answer, v)]
    if verdict.verdict not in said:
        return Check("verdict", False, f"your runs give {named[0]}: {verdict.verdict}, which the answer does not "
                                       f"say{f' (it says {said[0]})' if said else ''}")  # fmt: skip
    return Check("verdict", True, f"states the verdict your runs give on {named[0]}: {verdict.verdict}")


def _says(text: str, verdict: str) -> bool:
    """The text says ``verdict`` ("reproduced" not as part of "not reproduced")."""
    pattern = r"(?<!not )\breproduced\b" if verdict == "reproduced" else r"\b" + re.escape(verdict) + r"\b"
    return re.search(pattern, text.lower()) is not None


def question_check(question: Question, answer: str, file: str, results: Results) -> Check:
    """An answer graded on what it states: each number the question asks for, within its tolerance of
    the student's own runs, and the rubric's concepts. Filler fails; an answer the rubric cannot decide
    (some of its concepts, not enough), or a question with neither numbers nor rubric, is quoted for
    grading by hand."""
    name = f"answer {question.id}"
    text = re.sub(r"<!--.*?-->|\(your answer\)", "", answer, flags=re.S).strip()
    words = re.findall(r"[a-z]+", text.lower())
    if not words:
        return Check(name, False, f"no answer under '## {question.id}' in {file}")
    if len(words) < MIN_ANSWER_WORDS:
        return Check(name, False, f"{len(words)} words: write a few sentences")
    if len(set(words)) < FILLER_DISTINCT * len(words):
        return Check(name, False, f"filler: {len(words)} words, {len(set(words))} different")
    missing = [m for m in (_number_missing(n, text, results) for n in question.numbers) if m]
    if missing:
        return Check(name, False, "; ".join(missing))
    stated = [c.name for c in question.rubric if _states(text, c)]
    needed = question.pass_at or len(question.rubric)
    numbers = f"{len(question.numbers)} number(s) as your runs give them" if question.numbers else ""
    if not question.rubric:
        if numbers:
            return Check(name, True, numbers)
        return Check(name, True, f"to grade by hand (the lab gives no rubric): {_quote(text)}", graded=False)
    unstated = [c.name for c in question.rubric if c.name not in stated]
    if len(stated) >= needed:
        return Check(name, True, "; ".join(filter(None, [numbers, f"states {', '.join(stated)}"])))
    if not stated:
        return Check(name, False, f"states none of what the answer needs: {', '.join(unstated)}")
    why = f"states {', '.join(stated)}, not {', '.join(unstated)} ({needed} of {len(question.rubric)} decide it)"
    return Check(name, True, f"to grade by hand: {why}: {_quote(text)}", graded=False)


def _states(text: str, concept: Concept) -> bool:
    return any(re.search(r"(?<![a-z0-9])" + re.escape(term.lower()), text.lower()) for term in concept.terms)


def _quote(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return f'"{flat[:limit]}{"..." if len(flat) > limit else ""}"'


def _number_missing(asked: Measured, text: str, results: Results) -> str | None:
    """Why the answer lacks the number ``asked`` (None: it states it, within the tolerance)."""
    values = point_values(asked.point, asked, results)
    if not values:
        return f"{asked.what}: no complete run of {asked.point} to compare the answer with"
    value = sum(values) / len(values) * asked.scale
    stated = [float(n) for n in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", text.replace(",", ""))]
    if any(abs(n - value) <= asked.tolerance_pct / 100 * abs(value) for n in stated):
        return None
    return (f"{asked.what}: the answer states no number within {asked.tolerance_pct:g} % of what your "
            f"runs give ({value:.3g})")  # fmt: skip


def band_check(band: Band, results: Results, seeds: list[int] | None = None) -> Check:
    """The band's metric over the student's latest complete runs of its point (their mean) against the
    band; ``seeds``: a hidden variant's runs instead of the scenario file's."""
    who = f" of {band.cc}" if band.cc else ""
    name = f"{band.metric}{who} at {band.point}"
    if band.min is None or band.max is None:
        return Check(name, False, "no band values yet (testbed lab bands): grade by hand", graded=False)
    runs = results.runs[results.runs["point_id"] == band.point] if not results.runs.empty else results.runs
    kernels = sorted({labkit.kernel_series(k) for k in runs["kernel_release"].dropna()}) if not runs.empty else []
    if kernels and kernels != [band.series]:
        return Check(name, False, f"not graded: the band is for kernel {band.series}, the runs used "
                                  f"{', '.join(kernels)}: grade by hand", graded=False)  # fmt: skip
    values = point_values(band.point, band, results, seeds)
    if not values:
        return Check(name, False, f"no value of {band.metric}{who} in the complete runs of {band.point}")
    mean = sum(values) / len(values)
    ok = band.min <= mean <= band.max
    detail = (f"{mean:.4g} over {len(values)} run(s); expected {band.min:g} to {band.max:g} "
              f"(the reference runs: {band.reference:g})")  # fmt: skip
    return Check(name, ok, detail)


# ----------------------------------------------------------------------------------------- outputs


def text(grade: Grade) -> str:
    """The terminal report: the score first, then each task and its checks."""
    passed = sum(t.passed for t in grade.tasks)
    hand = sum(t.by_hand for t in grade.tasks)
    to_hand = f", {hand} to grade by hand" if hand else ""
    lines = [f"{grade.lab.title}: {grade.score:g} / {grade.max_score:g} points "
             f"({passed} of {len(grade.tasks)} tasks pass{to_hand}; kernel {grade.kernel or 'none'})", ""]  # fmt: skip
    for t in grade.tasks:
        lines.append(f"{t.status}  {t.task.id}: {t.task.title} ({t.score:g}/{t.task.points:g})")
        for c in t.checks:
            mark = "ok  " if c.ok and c.graded else ("HAND" if not c.graded else "MISS")
            lines.append(f"        {mark} {c.name}: {c.detail}")
    return "\n".join(lines)


def junit_xml(grade: Grade, path: Path) -> None:
    """One test suite per task, one test case per check (one to grade by hand: skipped, with why)."""
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
    """Gradescope's autograder ``results.json``: one test per task with its score and what it checked; a
    task left to grade by hand scores 0 and says so in its name, for the instructor to override."""
    marks = {(True, True): "ok", (False, True): "MISSING", (True, False): "TO GRADE BY HAND",
             (False, False): "TO GRADE BY HAND"}  # fmt: skip
    tests = [{"name": f"{t.task.id}: {t.task.title}{' (to grade by hand)' if t.by_hand else ''}",
              "score": t.score, "max_score": t.task.points, "status": "passed" if t.passed else "failed",
              "output": "\n".join(f"{marks[c.ok, c.graded]}: {c.name}: {c.detail}" for c in t.checks)}
             for t in grade.tasks]  # fmt: skip
    return {"score": grade.score, "tests": tests, "output": text(grade).splitlines()[0]}
