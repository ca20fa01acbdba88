"""The labs' autograder (``testbed lab check``): each task passes, fails, or is left to grade by hand.

A task passes when every check of it passes: its runs complete and trustworthy (the latest run of
each seed of each point it names), made from the student's scenario file as it is now and after
``testbed lab start``, each what its captures give (testbed/labs/evidence.py); the figures it asks
for drawn by the student's session from those runs (the sha256 its report recorded); each question
answered with the numbers the student's own runs give and the concepts of the lab's rubric; and its
metrics within the bands of ``expected.yaml`` for the kernel series the runs used. A check nothing
here can decide (no bands for the kernel, an answer the rubric cannot decide) leaves the task to grade
by hand, with no automatic points. The grade and its outputs (the terminal, JUnit XML,
Gradescope's ``results.json``) are testbed/labs/gradereport.py.

The student's runs are read by testbed/labs/studentruns.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from PIL import Image

from testbed.labs import answerfile, definition, evidence, statements, studentruns
from testbed.labs.definition import Band, Concept, Expected, Lab, Measured, Question, Task
from testbed.labs.gradereport import Check, Grade, TaskGrade
from testbed.labs.studentruns import Results, point_values
from testbed.results import rundir

#: an answer shorter than this many words is not one (the starter file's "(your answer)" is 2)
MIN_ANSWER_WORDS = 5
#: an answer whose different words are fewer than this share of its words is filler ("banana banana ...");
#: the solutions' answers have 55-75 % different words
FILLER_DISTINCT = 0.4


def grade(
    work: Path, lab: Lab, expected: Expected | None, results: Results, seed_checks: list[Check] | None = None
) -> Grade:
    """Every task of the lab graded on the student's folder ``work`` and their results; ``seed_checks``
    (whose seeds the runs are: testbed/labs/lab.py) belong to the first task that runs points."""
    kernels = sorted(set(results.runs["kernel_release"].dropna())) if not results.runs.empty else []
    tasks = []
    first_runs = next((t.id for t in lab.tasks if t.runs), None)
    rules = _RunRules(
        copies=set(expected.reference.fingerprints) if expected and expected.reference else set(),
        min_seeds=max(lab.min_seeds, len(definition.lab_start(work).get("seeds") or [])),  # as many as lab start gave
        receiver_pct=lab.receiver_check_pct,
        fingerprints=_fingerprints(results),
    )
    compared = statements.compared_algorithms(lab, results)
    for task in lab.tasks:
        checks = list(seed_checks or []) if task.id == first_runs else []
        checks += _run_checks(task, results, rules) + _figure_checks(task, work, results)
        checks += _answer_checks(task, work / lab.answers, results, _settings(work, lab), compared)
        checks += _band_checks([b for b in (expected.bands if expected else []) if b.task == task.id], results)
        tasks.append(TaskGrade(task, checks))
    return Grade(lab, tasks, kernels[-1] if kernels else None)


def _band_checks(bands: list[Band], results: Results) -> list[Check]:
    """The task's bands for the kernel series its runs used (exactly: 6.1 is not 6.12); a task whose bands
    are all for other series is left to grade by hand, and says so."""
    if not bands:
        return []
    runs = results.runs
    series = sorted({definition.kernel_series(k) for k in runs["kernel_release"].dropna()}) if not runs.empty else []
    if len(series) > 1:
        return [
            Check(
                "kernel",
                False,
                f"the runs used kernels of {len(series)} series ({', '.join(series)}): "
                "run every point on one kernel (testbed run --kernel)",
            )
        ]
    mine = [b for b in bands if b.series in series]
    if series and not mine:
        have = ", ".join(sorted({b.series for b in bands}))
        return [
            Check(
                "bands",
                False,
                f"no bands for this kernel ({series[0]}; the lab has bands for {have}): grade by hand",
                graded=False,
            )
        ]
    mine, missing = variant_bands(mine or bands, results.variant)
    return [missing] if missing else [band_check(band, results) for band in mine]


def variant_bands(bands: list[Band], value: float | None) -> tuple[list[Band], Check | None]:
    """In a lab with a variant, the bands for ``value`` (the student's scenario file's) and those for
    every value; a failed check saying why when the lab has none made for ``value``."""
    values = sorted({b.variant for b in bands if b.variant is not None})
    if not values or value in values:
        return [b for b in bands if b.variant in (None, value)], None
    have = ", ".join(definition.number_text(v) for v in values)
    return [], Check(
        "bands",
        False,
        f"no bands for the value the scenario file sets ({definition.number_text(value)}; "
        f"the lab has bands for {have}): set the one lab start gave",
    )


@dataclass
class _RunRules:
    """What every graded run is held to beyond its own evidence."""

    copies: set[str]  # the reference runs' fingerprints
    min_seeds: int
    receiver_pct: float | None  # the lab's capture-to-receiver goodput agreement (testbed/labs/labels.py)
    fingerprints: dict[str, set[str]]  # each graded run's ("point seed N") fingerprints, hashed once


def _fingerprints(results: Results) -> dict[str, set[str]]:
    graded = studentruns.graded_run_ids(results)
    return {
        f"{r.point_id} seed {r.seed}": studentruns.run_fingerprints(Path(r.path))
        for r in results.runs.itertuples()
        if r.run_id in graded
    }


def _run_checks(task: Task, results: Results, rules: _RunRules) -> list[Check]:
    min_seeds = rules.min_seeds
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
        return [
            Check(
                "seeds",
                False,
                f"the lab asks for at least {min_seeds} seeds a point; the file asks for "
                f"fewer at {named}: set its seeds",
            )
        ]
    return [_point_check(point, results, rules) for point in points]


def _point_check(point: str, results: Results, rules: _RunRules) -> Check:
    """The point's runs: one complete and trustworthy run per seed the scenario file asks for, made
    from the file as it is now, after ``testbed lab start``, none a copy of the reference runs, and each
    what its captures give (testbed/labs/evidence.py). The first rule a run breaks is the check's answer."""
    name = f"runs of {point}"
    wanted = results.seeds.get(point, [])
    if not wanted:
        why = f": {results.problem}" if results.problem else ""
        return Check(name, False, f"the scenario file has no point {point!r}{why}")
    runs = results.runs[results.runs["point_id"] == point] if not results.runs.empty else results.runs
    runs = runs[runs["seed"].isin(wanted)] if not runs.empty else runs
    for rule in (_every_seed_run, _complete_and_trustworthy, _not_copied, _as_captured, _from_the_file_now):
        problem = rule(point, runs, wanted, results, rules)
        if problem:
            return Check(name, False, problem)
    if results.started_utc is None:
        why = "the folder was not made by 'testbed lab start' (no lab-start.json): when its runs were made"
        return Check(name, True, f"{why} cannot be told: grade by hand", graded=False)
    early = [
        f"seed {r.seed} ({r.started_utc})"
        for r in runs.itertuples()
        if r.started_utc and _utc(r.started_utc) < _utc(results.started_utc)
    ]
    if early:
        why = f"made before 'testbed lab start' made this folder ({results.started_utc}): not this lab's run"
        return Check(name, False, f"{', '.join(early)}: {why}")
    why = "complete and trustworthy, of the scenario file as it is, made after 'testbed lab start'"
    return Check(name, True, f"{len(wanted)} run(s) {why}")


def _every_seed_run(point: str, runs, wanted: list[int], results: Results, rules: _RunRules) -> str | None:
    missing = sorted(set(wanted) - set(runs["seed"] if not runs.empty else []))
    return f"no run of seed {', '.join(map(str, missing))}: run the scenario" if missing else None


def _complete_and_trustworthy(point: str, runs, wanted: list[int], results: Results, rules: _RunRules) -> str | None:
    bad = runs[(runs["status"] != "complete") | (runs["trustworthy"] != 1)]
    if bad.empty:
        return None
    why = "; ".join(
        f"seed {r.seed}: {r.status}{'' if r.trustworthy == 1 else ', untrustworthy'}"
        f"{f' ({r.reason})' if r.reason else ''}"
        for r in bad.itertuples()
    )
    return f"{why}: see the run's report.html, then run it again (--force)"


def _not_copied(point: str, runs, wanted: list[int], results: Results, rules: _RunRules) -> str | None:
    """No run is the lab's reference run, nor another run of this folder, byte for byte."""
    fingerprints = {r.seed: rules.fingerprints.get(f"{point} seed {r.seed}", set()) for r in runs.itertuples()}
    copied = [f"seed {seed}" for seed, found in fingerprints.items() if found & rules.copies]
    if copied:
        why = "a copy of the lab's reference runs (the same captures, byte for byte): run the scenario yourself"
        return f"{', '.join(copied)}: {why}"
    others = {run: found for run, found in rules.fingerprints.items() if not run.startswith(f"{point} seed ")}
    twins = _shared(fingerprints, others)
    if twins:
        why = "the same capture as another run, byte for byte (a run copied under another seed or point)"
        return f"{twins}: {why}: run each seed yourself"
    return None


def _as_captured(point: str, runs, wanted: list[int], results: Results, rules: _RunRules) -> str | None:
    disagree = [
        f"seed {r.seed}: {problem}"
        for r in runs.itertuples()
        for problem in evidence.run_problems(Path(r.path), rules.receiver_pct)
    ]
    if not disagree:
        return None
    shown = f"{'; '.join(disagree[:3])}{' ...' if len(disagree) > 3 else ''}"
    return f"{shown}: a run is graded on what its captures give (hand in each run as the testbed left it)"


def _from_the_file_now(point: str, runs, wanted: list[int], results: Results, rules: _RunRules) -> str | None:
    foreign = [
        f"seed {r.seed}"
        for r in runs.itertuples()
        if results.identities and r.identity != results.identities.get((point, r.seed))
    ]
    if not foreign:
        return None
    why = "made with other settings than the scenario file has now (edited after the run, or another file's run)"
    return f"{', '.join(foreign)}: {why}: run again (--force)"


def _shared(mine: dict[int, set[str]], others: dict[str, set[str]]) -> str | None:
    """The first run of ``mine`` that shares a capture with another of ``mine`` or of ``others``, named."""
    runs = {f"seed {seed}": found for seed, found in mine.items()} | others
    names = list(runs)
    for i, first in enumerate(names[: len(mine)]):
        for second in names[i + 1 :]:
            if runs[first] & runs[second]:
                return f"{first} and {second}"
    return None


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
    of the task's graded runs, from the flows.csv each of its runs holds now."""
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
        return (
            f"not the figure its session's report drew ({size[0]}x{size[1]} pixels; {rundir.FIGURES_DRAWN} "
            f"has no such figure or another sha256): draw it with 'testbed report {session.name}'"
        )
    graded = _graded_run_ids(task, results)
    drawn = {f"{session.parent.name}/{session.name}/{run}" for run in record.get("runs", [])}
    if graded and not graded & drawn:
        return f"drawn from other runs than the {len(graded)} graded (the latest of each seed): draw it again"
    data = record.get("data") or {}
    flows = {run: session / run / "flows.csv" for run in record.get("runs", [])}
    changed = sorted(run for run, path in flows.items() if path.is_file() and data.get(run) != rundir.sha256_file(path))
    if changed:
        return (
            f"drawn from other data than {changed[0]}/flows.csv holds now ({rundir.FIGURES_DRAWN} records "
            f"another sha256{'' if data else ': none'}): draw it with 'testbed report {session.name}'"
        )
    return None


def _graded_run_ids(task: Task, results: Results) -> set[str]:
    """The run ids of the task's runs that are graded (all the student's when it names none)."""
    return studentruns.graded_run_ids(results, None if task.runs in ([], ["*"]) else set(task.runs))


#: a setting of a scenario file in each unit prose is held to: its key ends so (rate_mbit: 2, rtt_ms: 250)
SETTING_KEYS = {"Mbit/s": "mbit", "ms": "ms"}


def _settings(work: Path, lab: Lab) -> dict[str, list[float]]:
    """The rates and delays the student's scenario file sets, per unit: prose may quote them."""
    path = work / lab.scenario if lab.scenario else None
    text = path.read_text(errors="replace") if path is not None and path.is_file() else ""
    return {
        unit: [float(n) for n in re.findall(rf"\w*_{key}\w*:\s*\[?\s*(\d+(?:\.\d+)?)", text)]
        for unit, key in SETTING_KEYS.items()
    }


def _answer_checks(
    task: Task,
    path: Path,
    results: Results,
    settings: dict[str, list[float]],
    compared: statements.Compared | None = None,
) -> list[Check]:
    given = answerfile.sections(path)
    checks = [question_check(q, given.get(q.id, ""), path.name, results, settings, compared) for q in task.questions]
    for question, check in zip(task.questions, checks, strict=True):
        if question.verdict and check.ok:
            verdict = verdict_check(given.get(question.id, ""), "\n".join(given.values()), results)
            check.ok, check.graded = verdict.ok, check.graded and verdict.graded
            check.detail = f"{check.detail}; {verdict.detail}"
    return checks


def verdict_check(answer: str, all_answers: str, results: Results) -> Check:
    """The answer states the verdict the student's runs give (analysis/verdicts/claims.py's rule) on the claim the
    answers name by its id."""
    decided = studentruns.decided_claims(results)
    named = [claim_id for claim_id in decided if claim_id in all_answers]
    if not named:
        return Check(
            "verdict",
            False,
            f"the answers name none of the claims your runs decide "
            f"({', '.join(decided) or 'none: run the points of one claim'})",
        )
    verdict = decided[named[0]]
    said = statements.verdicts_stated(answer)
    if len(said) > 1:
        return Check(
            "verdict",
            False,
            f"the answer states {len(said)} verdicts ({', '.join(said)}): state the one your runs give on {named[0]}",
        )
    if verdict.verdict not in said:
        return Check(
            "verdict",
            False,
            f"your runs give {named[0]}: {verdict.verdict}, which the answer does not "
            f"say{f' (it says {said[0]})' if said else ''}",
        )
    if problems := statements.verdict_number_problems(answer, verdict):
        return Check("verdict", False, "; ".join(problems))
    return Check("verdict", True, f"states the verdict your runs give on {named[0]}: {verdict.verdict}")


def question_check(
    question: Question,
    answer: str,
    file: str,
    results: Results,
    settings: dict[str, list[float]] | None = None,
    compared: statements.Compared | None = None,
) -> Check:
    """An answer graded on what it states (testbed/labs/answerfile.py): each number the question asks for in
    its numbers block, within its tolerance of the student's own runs; prose in sentences that claim
    something, whose numbers agree with the runs; and the rubric's concepts, each stated in such a
    sentence. Filler, a list of terms or numbers and a number the runs contradict fail; an answer the
    rubric cannot decide (some of its concepts, not enough), or a question with neither numbers nor
    rubric, is quoted for grading by hand."""
    name = f"answer {question.id}"
    section = answerfile.read_section(answer)
    text = section.prose
    words = re.findall(r"[a-z]+", text.lower())
    if not words:
        return Check(name, False, f"no answer under '## {question.id}' in {file}")
    if len(words) < MIN_ANSWER_WORDS:
        return Check(name, False, f"{len(words)} words: write a few sentences")
    if len(set(words)) < FILLER_DISTINCT * len(words):
        return Check(name, False, f"filler: {len(words)} words, {len(set(words))} different")
    said = answerfile.claims(text)
    if not said:
        return Check(
            name,
            False,
            "no sentence that states something: a list of terms or numbers is not an "
            "answer; say in sentences what your runs show",
        )
    problems = _number_problems(question, section, file, results)
    problems += statements.contradictions(question, text, results, settings or {})
    if compared is not None:  # what the sentences say of the algorithms' difference (testbed/labs/statements.py)
        problems += statements.comparison_problems(said, compared.means)
        problems += statements.significance_problems(said, compared.p_values)
    if problems:
        return Check(name, False, "; ".join(problems))
    stated = [c.name for c in question.rubric if any(_states(sentence, c) for sentence in said)]
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


def _states(sentence: str, concept: Concept) -> bool:
    """The sentence states the concept: one of its terms, not negated ("does not use the estimate")."""
    return any(
        re.search(r"(?<![a-z0-9])" + re.escape(term.lower()), sentence.lower())
        and (concept.negative or not statements.negated(sentence, term))
        for term in concept.terms
    )


def _number_problems(question: Question, section: answerfile.Section, file: str, results: Results) -> list[str]:
    """What is wrong with the question's numbers block: missing, unreadable, a field it does not ask for, a
    field empty or not a number, or a number not within its tolerance of the student's runs."""
    keys = {n.key: n for n in question.numbers}
    if not keys:
        extra = sorted(section.numbers)
        return [f"the numbers block names {', '.join(extra)}: {question.id} asks for no number"] if extra else []
    if not section.has_block:
        return [
            f"no numbers block under '## {question.id}' in {file}: add one (```numbers) with "
            + ", ".join(f"{n.key} ({n.what})" for n in question.numbers)
        ]
    if section.block_error:
        return [section.block_error]
    unknown = sorted(set(section.numbers) - set(keys))
    if unknown:
        return [f"{', '.join(unknown)}: not a number {question.id} asks for; it asks for {', '.join(keys)}"]
    return [m for m in (_number_missing(n, section.numbers.get(n.key), results) for n in question.numbers) if m]


def _number_missing(asked: Measured, given, results: Results) -> str | None:
    """Why the field ``asked.key`` does not give the number (None: it does, within the tolerance)."""
    what = f"{asked.key} ({asked.what})"
    values = point_values(asked.point, asked, results)
    if not values:
        return f"{what}: no complete run of {asked.point} to compare the answer with"
    value = sum(values) / len(values) * asked.scale
    if given is None:
        return f"{what}: left empty; your runs give {value:.3g}"
    number = answerfile.number_of(given)
    if number is None:
        return f"{what}: {given!r} is not a number; give {asked.unit or 'a plain number'}, e.g. {value:.3g}"
    if abs(number - value) > asked.tolerance_pct / 100 * abs(value):
        return f"{what}: {number:g} is not within {asked.tolerance_pct:g} % of what your runs give ({value:.3g})"
    return None


def _quote(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return f'"{flat[:limit]}{"..." if len(flat) > limit else ""}"'


def band_check(band: Band, results: Results, seeds: list[int] | None = None) -> Check:
    """The band's metric over the student's latest complete runs of its point (their mean) against the
    band; ``seeds``: a hidden variant's runs instead of the scenario file's."""
    who = f" of {band.cc}" if band.cc else ""
    name = f"{band.metric}{who} at {band.point}"
    if band.min is None or band.max is None:
        return Check(name, False, "no band values yet (testbed lab bands): grade by hand", graded=False)
    runs = results.runs[results.runs["point_id"] == band.point] if not results.runs.empty else results.runs
    kernels = sorted({definition.kernel_series(k) for k in runs["kernel_release"].dropna()}) if not runs.empty else []
    if kernels and kernels != [band.series]:
        return Check(
            name,
            False,
            f"not graded: the band is for kernel {band.series}, the runs used {', '.join(kernels)}: grade by hand",
            graded=False,
        )
    values = point_values(band.point, band, results, seeds)
    if not values:
        return Check(name, False, f"no value of {band.metric}{who} in the complete runs of {band.point}")
    mean = sum(values) / len(values)
    ok = band.min <= mean <= band.max
    detail = (
        f"{mean:.4g} over {len(values)} run(s); expected {band.min:g} to {band.max:g} "
        f"(the reference runs: {band.reference:g})"
    )
    return Check(name, ok, detail)
