"""The course labs (labs/, testbed/labs/): every lab reads, its
starter names each knob left to the student, ``lab start`` copies what a student gets, and the
autograder grades a real student's submission (tests/fixtures/lab-wireless-student: runs, figure and
answers of a wireless lab done start to finish) to 10 / 10, and each cheat of a corpus (filler, made-up
numbers, a 4-byte PNG, another figure, another kernel series, an edited scenario, runs before
``lab start``, the reference runs copied in, a goodput edited in flows.csv, raw files left at home or
edited, a manifest edited to say trustworthy, ...) to exactly the points it should lose, with why;
``lab pack``'s zip, JUnit XML, Gradescope's results.json and the Gradescope autograder's zip run as
Gradescope runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from analysis.figures import plots
from analysis.runs import analyze as run_analysis
from analysis.verdicts import claims
from testbed import PROJECT
from testbed.cli import main
from testbed.labs import answerfile, autograder, definition, gradereport, grading, lab, studentruns, submission
from testbed.results import rundir
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario
from testbed.scenario.suite import load_suite
from tests.prerequisites import require_module

LABS = PROJECT / "labs"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lab-wireless"
STUDENT = FIXTURE.with_name("lab-wireless-student")


def _starter_and_solution(name: str) -> tuple[Path, Path]:
    lab_ = definition.load_lab(LABS / name)
    file = lab_.scenario or "claim.yaml"
    return LABS / name / file, LABS / name / "solution" / file


def _load(path: Path, profile: str | None = None):
    if path.name == "claim.yaml":
        return load_suite(path, PROJECT / "scenarios")
    return load_scenario(path, profile=profile)


@pytest.mark.parametrize("name", ["cwnd", "wireless", "fairness", "bufferbloat", "reproduce"])
def test_every_lab_reads_and_its_starter_names_each_knob_and_the_task_that_sets_it(name):
    lab_ = definition.load_lab(LABS / name)
    assert lab_.tasks and lab_.minutes.tcg > 0 and (LABS / name / "README.md").is_file()
    if (LABS / name / "expected.yaml").is_file():
        definition.load_expected(LABS / name, lab_)
    starter, solution = _starter_and_solution(name)
    with pytest.raises(ScenarioError) as err:
        _load(starter)
    assert "left for you to set: task" in str(err.value) and "line " in str(err.value)
    assert _load(solution).points


def test_a_knob_left_in_a_profile_is_named_only_when_that_profile_runs():
    starter = LABS / "bufferbloat" / "bufferbloat.yaml"
    with pytest.raises(ScenarioError) as default:
        load_scenario(starter)
    with pytest.raises(ScenarioError) as drop_tail:
        load_scenario(starter, profile="drop-tail")
    assert "discipline: left for you to set: task 2" in str(default.value) and "limit_bdp" not in str(default.value)
    assert "limit_bdp: left for you to set: task 1" in str(drop_tail.value)


def test_lab_start_copies_the_students_part_and_never_into_a_folder_in_use(tmp_path):
    copied = definition.start_lab("wireless", tmp_path / "w")
    assert (copied / "README.md").is_file() and (copied / "wireless.yaml").is_file()
    assert not (copied / "solution").exists() and not (copied / "hidden.yaml").exists()
    with pytest.raises(definition.LabError, match="not empty"):
        definition.start_lab("wireless", copied)
    with pytest.raises(definition.LabError, match="no lab named 'wirless'.*wireless"):
        definition.lab_dir("wirless")


def _submission(tmp_path: Path, answered: bool = True) -> tuple[Path, Path]:
    """A student's wireless folder as handed in (tests/fixtures/lab-wireless-student: made by ``testbed lab
    start``, its knobs set, run in a guest, answered from its own report; the runs trimmed to what the
    grader reads, the session's figure and its record kept)."""
    work = tmp_path / "work"
    shutil.copytree(STUDENT, work)
    if not answered:
        shutil.copy(LABS / "wireless" / "answers.md", work / "answers.md")
    _analysed(work / "results")
    return work, work / "results"


def _analysed(results: Path) -> None:
    for flows in results.rglob("flows.csv"):  # newer than its manifest, as the analysis leaves it
        os.utime(flows, (flows.stat().st_mtime + 10, flows.stat().st_mtime + 10))


def _draw_goodput_bars(session: Path, scale: float = 1.0) -> Path:
    """The figure the task asks for, of the session's runs, as its report draws it (goodput bars: mean, min
    and max over the seeds per algorithm, by the report's plotting function from their flows.csv; the
    trimmed runs keep no raw files for the report to analyse again), and the report's record of it."""
    flows = pd.concat([pd.read_csv(f) for f in sorted(session.rglob("flows.csv"))], ignore_index=True)
    bars = flows.groupby("cc")["goodput_mbit"].agg(["mean", "min", "max"]).reset_index()
    bars.columns = ["cc", "goodput_mbit", "goodput_mbit_min", "goodput_mbit_max"]
    bars[["goodput_mbit", "goodput_mbit_min", "goodput_mbit_max"]] *= scale
    png = plots.point_bars_png(
        bars.assign(label=bars["cc"]),
        "goodput_mbit",
        "goodput_mbit_min",
        "goodput_mbit_max",
        plots.SENDER_GOODPUT_LABEL,
        "wireless: sender goodput",
    )
    figure = session / "figures" / "wireless-goodput-bars.png"
    figure.parent.mkdir(exist_ok=True)
    started = time.time()
    figure.write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    rundir.record_figures(session, sorted(p.parent for p in session.rglob("manifest.json")), started)
    return figure


def test_a_complete_submission_passes_every_task_and_writes_junit_and_gradescope(tmp_path):
    work, results = _submission(tmp_path)
    checked = lab.check(LABS / "wireless", work, results)
    assert all(t.passed for t in checked.grade.tasks), gradereport.text(checked.grade)
    assert checked.grade.score == checked.grade.max_score == 10
    suites = ET.parse(checked.junit).getroot()
    assert [s.get("name").split(":")[0] for s in suites] == ["t1", "t2", "t3"]
    assert all(s.get("failures") == "0" and s.get("skipped") == "0" for s in suites)
    graded = json.loads(checked.gradescope.read_text())
    assert graded["score"] == 10 and {t["status"] for t in graded["tests"]} == {"passed"}
    assert sum(t["max_score"] for t in graded["tests"]) == 10
    report = gradereport.text(checked.grade)
    assert "2 number(s) as your runs give them" in report and "states the window halved" in report


def test_a_failing_submission_says_what_is_missing_per_task(tmp_path):
    work, results = _submission(tmp_path, answered=False)
    # one run out of its band: its flows.csv says New Reno got ten times its goodput (over the 2 Mbit/s link)
    flows = next(results.rglob("cc=reno/seed=1/flows.csv"))
    text = flows.read_text().splitlines()
    header = text[0].split(",")
    row = text[1].split(",")
    row[header.index("goodput_mbit")] = str(float(row[header.index("goodput_mbit")]) * 10)
    flows.write_text("\n".join([text[0], ",".join(row), *text[2:]]) + "\n")
    os.utime(flows, (flows.stat().st_mtime + 20, flows.stat().st_mtime + 20))
    checked = lab.check(LABS / "wireless", work, results)
    by_id = {t.task.id: t for t in checked.grade.tasks}
    assert not by_id["t1"].passed and not by_id["t2"].passed and not by_id["t3"].passed
    report = gradereport.text(checked.grade)
    assert "MISS goodput of reno at cc=reno" in report and "expected" in report
    assert "no answer under '## Q1'" in report
    graded = json.loads(checked.gradescope.read_text())
    assert graded["score"] == 0 and {t["status"] for t in graded["tests"]} == {"failed"}


def _answer(work: Path, question: str, text: str) -> None:
    given = answerfile.sections(work / "answers.md")
    given[question] = text
    (work / "answers.md").write_text("".join(f"## {q}\n{a.strip()}\n\n" for q, a in given.items()))


def _filler(work: Path, results: Path) -> None:
    for question in ("Q1", "Q2", "Q3"):
        _answer(work, question, "banana " * 40)


def _vague(work: Path, results: Path) -> None:
    # a real sentence on the topic that states nothing the questions ask for
    for question in ("Q1", "Q2", "Q3"):
        _answer(work, question, "The two algorithms behave in their own ways on this wireless path, as expected.")


def _wrong_numbers(work: Path, results: Path) -> None:
    _answer(
        work,
        "Q1",
        "Westwood+ did better than New Reno over the seeds, as the paper says it would.\n\n"
        "```numbers\nreno_goodput_mbit: 2.5\nwestwood_goodput_mbit: 3.1\n```\n",
    )


def _prose_against_the_runs(work: Path, results: Path) -> None:
    # the right numbers in the block, but the prose says what the runs do not
    _answer(
        work,
        "Q1",
        "New Reno got 2.5 Mbit/s and Westwood+ got 3.1 Mbit/s, more than the link gives.\n\n"
        "```numbers\nreno_goodput_mbit: 1.04\nwestwood_goodput_mbit: 1.02\n```\n",
    )


def _number_spray(work: Path, results: Path) -> None:
    # the spray: every goodput a run might have had, in the hope one is right
    _answer(
        work,
        "Q1",
        "Goodputs: 0.5 0.6 0.7 0.8 0.9 1.0 1.1 1.2 1.3 1.4 1.5 1.6 Mbit/s\n\n"
        "```numbers\nreno_goodput_mbit: 1.04\nwestwood_goodput_mbit: 1.02\n```\n",
    )


def _number_spray_in_a_sentence(work: Path, results: Path) -> None:
    _answer(
        work,
        "Q1",
        "The two of them got 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5 and 1.6 Mbit/s "
        "in my runs.\n\n```numbers\nreno_goodput_mbit: 1.04\nwestwood_goodput_mbit: 1.02\n"
        "```\n",
    )


def _term_list(work: Path, results: Path) -> None:
    # the term lists: every rubric word, no sentence
    _answer(work, "Q2", "Difference spread seeds test detect runs noise interval significant three seeds cannot tell.")
    _answer(
        work, "Q3", "Window halved halves loss bandwidth estimate ssthresh RTTmin Linux SACK RACK PRR recovery keeps."
    )


def _q1_block_edited(work: Path, old: str, new: str) -> None:
    _answer(work, "Q1", answerfile.sections(work / "answers.md")["Q1"].replace(old, new))


def _a_bool_for_a_number(work: Path, results: Path) -> None:
    _q1_block_edited(work, "reno_goodput_mbit: 1.04", "reno_goodput_mbit: true")


def _a_misspelled_field(work: Path, results: Path) -> None:
    _q1_block_edited(work, "reno_goodput_mbit:", "reno_goodput:")


def _half_a_rubric(work: Path, results: Path) -> None:
    _answer(
        work,
        "Q3",
        "New Reno halves its window at each Bad period and regrows slowly afterwards, "
        "so it spends most of the time below what the link could carry.",
    )


def _four_byte_png(work: Path, results: Path) -> None:
    next(results.rglob("wireless-goodput-bars.png")).write_bytes(b"\x89PNG")


def _another_figure(work: Path, results: Path) -> None:
    # a real figure of these runs' kind, but not the one the session drew: its bars doubled
    figure = next(results.rglob("wireless-goodput-bars.png"))
    record = (figure.parent / "drawn.json").read_text()
    _draw_goodput_bars(figure.parent.parent, scale=2.0)
    (figure.parent / "drawn.json").write_text(record)


def _another_kernel_series(work: Path, results: Path) -> None:
    for path in results.rglob("manifest.json"):
        manifest = json.loads(path.read_text())
        manifest["kernel"]["release"] = "6.12.117+deb12-amd64"  # starts with "6.1", another series
        path.write_text(json.dumps(manifest))
        os.utime(path.with_name("flows.csv"), (time.time() + 10, time.time() + 10))


def _reference_runs_copied(work: Path, results: Path) -> None:
    # everything copied: the lab's reference runs (with their session's figure, drawn as its report
    # would) and the solution's answers, into a folder the student started before those runs
    shutil.rmtree(results)
    shutil.copytree(FIXTURE / "results", results)
    _analysed(results)
    _draw_goodput_bars(next((results / "wireless").iterdir()))
    shutil.copy(LABS / "wireless" / "solution" / "answers.md", work / "answers.md")
    (work / definition.LAB_START).write_text(
        json.dumps({"lab": "wireless", "started_utc": "2026-11-27T06:00:00+00:00"})
    )


def _scaled(flows: Path, column: str, factor: float) -> None:
    table = pd.read_csv(flows)
    table[column] *= factor
    table.to_csv(flows, index=False, float_format="%.10g")


def _flows_edited(work: Path, results: Path) -> None:
    # the edit: one run's goodput x1.15 in its flows.csv, which stays inside the band
    _scaled(next(results.rglob("cc=westwood/seed=1/flows.csv")), "goodput_mbit", 1.15)


def _raw_left_home(work: Path, results: Path) -> None:
    for raw in list(results.rglob("raw")):
        shutil.rmtree(raw)


def _capture_edited(work: Path, results: Path) -> None:
    with next(results.rglob("cc=reno/seed=2/raw/ra.pcap")).open("ab") as capture:
        capture.write(b"\0" * 64)


def _manifest_says_trustworthy(work: Path, results: Path) -> None:
    # a run whose capture dropped packets (its tcpdump log says so, with the sha256 the guest recorded:
    # the guest judged the run untrustworthy), its manifest edited back to say the check passed
    run = next(results.rglob("cc=reno/seed=2"))
    log = run / "raw" / "tcpdump-ra.log"
    log.write_text(re.sub(r"\d+ packets dropped by kernel", "212 packets dropped by kernel", log.read_text()))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"]["raw/tcpdump-ra.log"] = rundir.sha256_file(log)
    (run / "manifest.json").write_text(json.dumps(manifest))


def _trustworthy_flag_flipped(work: Path, results: Path) -> None:
    # a check the guest failed, and the run's verdict edited to "trustworthy" over it
    path = next(results.rglob("cc=westwood/seed=3/manifest.json"))
    manifest = json.loads(path.read_text())
    check = next(c for c in manifest["fidelity"]["checks"] if c["name"] == "capture ra")
    check["ok"] = False
    path.write_text(json.dumps(manifest))


def _a_seed_missing(work: Path, results: Path) -> None:
    shutil.rmtree(next(results.rglob("cc=westwood/seed=3")))


def _edited_after_the_runs(work: Path, results: Path) -> None:
    scenario = work / "wireless.yaml"
    scenario.write_text(scenario.read_text().replace("bad_loss_pct: 10", "bad_loss_pct: 1"))


def _runs_before_lab_start(work: Path, results: Path) -> None:
    (work / definition.LAB_START).write_text(
        json.dumps({"lab": "wireless", "started_utc": "2099-01-01T00:00:00+00:00"})
    )


def _not_made_by_lab_start(work: Path, results: Path) -> None:
    (work / definition.LAB_START).unlink()


#: cheat -> (the points each task keeps, what the grade says about it)
CHEATS = {
    _filler: ({"t1": 4, "t2": 0, "t3": 0}, "filler: 40 words, 1 different"),
    _vague: ({"t1": 4, "t2": 0, "t3": 0}, "states none of what the answer needs"),
    _wrong_numbers: ({"t1": 4, "t2": 0, "t3": 3}, "2.5 is not within 10 % of what your runs give (1.04)"),
    _prose_against_the_runs: ({"t1": 4, "t2": 0, "t3": 3}, "the answer says 2.5 Mbit/s, which neither your runs"),
    _number_spray: ({"t1": 4, "t2": 0, "t3": 3}, "3 words: write a few sentences"),
    _number_spray_in_a_sentence: ({"t1": 4, "t2": 0, "t3": 3}, "the answer says 0.5 Mbit/s, which neither"),
    _term_list: ({"t1": 4, "t2": 0, "t3": 0}, "no sentence that states something"),
    _a_bool_for_a_number: ({"t1": 4, "t2": 0, "t3": 3}, "True is not a number; give Mbit/s, e.g. 1.04"),
    _a_misspelled_field: (
        {"t1": 4, "t2": 0, "t3": 3},
        "reno_goodput: not a number Q1 asks for; it asks for reno_goodput_mbit, westwood_goodput_mbit",
    ),
    _half_a_rubric: ({"t1": 4, "t2": 3, "t3": 0}, "to grade by hand: states the window halved at a loss, not"),
    _four_byte_png: ({"t1": 0, "t2": 3, "t3": 3}, "not a PNG image"),
    _another_figure: ({"t1": 0, "t2": 3, "t3": 3}, "not the figure its session's report drew"),
    _another_kernel_series: ({"t1": 0, "t2": 3, "t3": 3}, "no bands for this kernel (6.12; the lab has bands for 6.1)"),
    # Q2's "less than 1 % lower" was written from the three seeds: two give -4.3 %, so t2 goes too
    _a_seed_missing: ({"t1": 0, "t2": 0, "t3": 3}, "no run of seed 3"),
    _flows_edited: (
        {"t1": 0, "t2": 3, "t3": 3},
        "seed 1: flows.csv: goodput_mbit of c0 is 1.01392; the run's captures give 0.881667",
    ),
    _raw_left_home: ({"t1": 0, "t2": 3, "t3": 3}, "raw/ is missing: hand in each run with its raw/ folder"),
    _capture_edited: ({"t1": 0, "t2": 3, "t3": 3}, "raw/ra.pcap is not the file the run wrote"),
    _manifest_says_trustworthy: (
        {"t1": 0, "t2": 3, "t3": 3},
        "manifest.json says 'capture ra' passed; judged again from raw/tcpdump-ra.log, it fails",
    ),
    _trustworthy_flag_flipped: (
        {"t1": 0, "t2": 3, "t3": 3},
        "manifest.json's check(s) capture ra failed (while it says trustworthy)",
    ),
    _reference_runs_copied: ({"t1": 0, "t2": 3, "t3": 3}, "a copy of the lab's reference runs"),
    _edited_after_the_runs: ({"t1": 0, "t2": 3, "t3": 3}, "made with other settings than the scenario file has now"),
    _runs_before_lab_start: ({"t1": 0, "t2": 3, "t3": 3}, "made before 'testbed lab start' made this folder"),
    _not_made_by_lab_start: ({"t1": 0, "t2": 3, "t3": 3}, "the folder was not made by 'testbed lab start'"),
}


@pytest.mark.parametrize("cheat", list(CHEATS), ids=[c.__name__.strip("_") for c in CHEATS])
def test_each_cheat_loses_exactly_its_points_and_says_why(cheat, tmp_path):
    assert_cheat_graded(cheat, CHEATS[cheat], tmp_path)


def assert_cheat_graded(cheat, expected: tuple[dict, str], tmp_path: Path) -> None:
    """The real student's submission with ``cheat`` applied keeps exactly ``expected``'s points per task,
    and the grade says its message."""
    work, results = _submission(tmp_path)
    cheat(work, results)
    checked = lab.check(LABS / "wireless", work, results)
    points, message = expected
    report = gradereport.text(checked.grade)
    assert {t.task.id: t.score for t in checked.grade.tasks} == points, report
    assert message in report, report


def test_an_answer_the_rubric_cannot_decide_is_quoted_for_grading_by_hand(tmp_path):
    work, results = _submission(tmp_path)
    _half_a_rubric(work, results)
    checked = lab.check(LABS / "wireless", work, results)
    t3 = checked.grade.tasks[2]
    assert t3.by_hand and not t3.failed and t3.score == 0
    assert '"New Reno halves its window at each Bad period' in t3.checks[0].detail
    graded = json.loads(checked.gradescope.read_text())
    assert graded["tests"][2]["name"].endswith("(to grade by hand)") and graded["tests"][2]["score"] == 0
    assert "TO GRADE BY HAND: answer Q3" in graded["tests"][2]["output"]
    assert "1 to grade by hand" in gradereport.text(checked.grade).splitlines()[0]


def test_a_knob_left_todo_fails_the_runs_task_with_the_files_own_message(tmp_path):
    work, results = _submission(tmp_path)
    shutil.copy(LABS / "wireless" / "wireless.yaml", work / "wireless.yaml")
    checked = lab.check(LABS / "wireless", work, results)
    t1 = checked.grade.tasks[0]
    assert not t1.passed and "left for you to set: task 1" in t1.checks[0].detail


def test_a_band_for_another_kernel_series_grades_nothing_and_says_so(tmp_path):
    work, results = _submission(tmp_path)
    found = studentruns.load_results(work, definition.load_lab(LABS / "wireless"), results)
    band = definition.Band(
        task="t1", point="cc=reno", cc="reno", metric="goodput", series="6.12", min=0, max=1, reference=0.5
    )
    check = grading.band_check(band, found)
    assert not check.graded and "for kernel 6.12" in check.detail and "grade by hand" in check.detail
    assert definition.kernel_series("6.12.117+deb12-amd64") == "6.12" != definition.kernel_series("6.1.0-56-amd64")


def test_hidden_variants_run_on_the_students_file_with_their_own_seeds_and_are_graded_apart(tmp_path):
    work, results = _submission(tmp_path)
    asked = []
    session = next((results / "wireless").iterdir())

    def runner(scenario, where):  # the session runner's part: the variant's runs, here copies of seeds 1 and 2
        asked.append(([r.seed for r in scenario.runs()], where))
        for point in ("cc=reno", "cc=westwood"):
            for old, new in ((1, 4), (2, 5)):
                shutil.copytree(session / point / f"seed={old}", session / point / f"seed={new}")
                manifest = json.loads((session / point / f"seed={new}" / "manifest.json").read_text())
                manifest["seed"] = new
                (session / point / f"seed={new}" / "manifest.json").write_text(json.dumps(manifest))
                flows = session / point / f"seed={new}" / "flows.csv"  # newer than its manifest
                os.utime(flows, (time.time() + 10, time.time() + 10))
        return []

    checked = lab.check(LABS / "wireless", work, results, runner)
    assert len(asked) == 1 and asked[0][1] == results
    assert sorted(asked[0][0]) == [4, 4, 5, 5]  # both points, the variant's two seeds
    t1 = checked.grade.tasks[0]
    hidden = [c for c in t1.checks if c.name.startswith("hidden variant")]
    assert t1.passed and checked.grade.max_score == 10, gradereport.text(checked.grade)
    assert len(hidden) == 1 + 4 and all("over 2 run(s)" in c.detail for c in hidden[1:])
    # the student's own bands still over their three seeds, not the variant's
    assert all("over 3 run(s)" in c.detail for c in t1.checks if c.name.startswith("goodput"))


def test_a_hidden_variant_that_does_not_complete_fails_the_runs_task(tmp_path):
    work, results = _submission(tmp_path)
    checked = lab.check(LABS / "wireless", work, results, lambda scenario, where: ["a run"] * 2)
    t1 = checked.grade.tasks[0]
    assert t1.failed and t1.score == 0 and checked.grade.score == 6
    assert "hidden variant two other seeds: not complete: 2 run(s)" in gradereport.text(checked.grade)


def test_testbed_lab_check_exits_0_on_a_passing_folder_and_1_on_a_failing_one(tmp_path, monkeypatch, capsys):
    work, _ = _submission(tmp_path)
    monkeypatch.chdir(work)
    assert main(["lab", "check", "wireless", "--no-hidden"]) == 0
    assert "10 / 10 points" in capsys.readouterr().out
    (work / "answers.md").write_text("## Q1\nshort\n")
    assert main(["lab", "check", "wireless", "--no-hidden"]) == 1
    assert main(["lab", "list"]) == 0 and "wireless" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:  # argparse: each action's own arguments, named
        main(["lab", "start"])
    assert stopped.value.code == 2 and "the following arguments are required: NAME" in capsys.readouterr().err


#: the figures each lab's notebook draws into figures/
NOTEBOOK_FIGURES = {
    "wireless": ["wireless-goodput.png"],
    "cwnd": ["cwnd-goodput.png", "cwnd-lossy.png"],
    "fairness": ["fairness-goodput-vs-rtt.png"],
    "bufferbloat": ["bufferbloat-delay-vs-goodput.png"],
    "reproduce": ["claim-goodput.png"],
}


@pytest.mark.parametrize("name", list(NOTEBOOK_FIGURES))
def test_a_labs_notebook_runs_on_its_fixture_results_and_draws_its_figures(name, tmp_path, monkeypatch):
    """The notebook as a student runs it, executed by nbclient on committed runs of the lab's solution
    (tests/fixtures/lab-NAME: the wireless lab's reference runs, the others' first seed from the guest
    test tests/guest/test_guest_labs.py)."""
    nbclient = require_module("nbclient", "running a lab's notebook")
    import nbformat

    results = tmp_path / "results"
    shutil.copytree(FIXTURE.with_name(f"lab-{name}") / "results", results)
    for table in [*results.rglob("*.csv")]:  # newer than its manifest, as the analysis leaves it
        os.utime(table, (table.stat().st_mtime + 10, table.stat().st_mtime + 10))
    monkeypatch.setenv("LAB_RESULTS", str(results))
    notebook = nbformat.read(LABS / name / "analysis.ipynb", as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert sorted(p.name for p in (tmp_path / "figures").glob("*.png")) == NOTEBOOK_FIGURES[name]


def test_a_run_that_never_started_is_replaced_by_a_later_attempt(tmp_path):
    """A guest that did not boot leaves failed runs without a start time; the student's next session
    runs them again, and that attempt is what counts."""
    work, results = _submission(tmp_path)
    session = next((results / "wireless").iterdir())
    failed = results / "wireless" / "20200101T000000Z-0000000" / "cc=reno" / "seed=1"
    failed.parent.mkdir(parents=True)
    shutil.copytree(session / "cc=reno" / "seed=1", failed)
    manifest = json.loads((failed / "manifest.json").read_text())
    manifest.update(status="failed", reason="the guest did not boot", started_utc=None)
    (failed / "manifest.json").write_text(json.dumps(manifest))
    (failed / "flows.csv").unlink()
    checked = lab.check(LABS / "wireless", work, results)
    assert checked.grade.tasks[0].passed, gradereport.text(checked.grade)


def test_lab_pack_zips_what_grading_reads_and_the_zip_grades_as_the_folder(tmp_path, capsys):
    work, _ = _submission(tmp_path)
    run = next(work.rglob("cc=reno/seed=1"))
    (run / "report.html").write_text("<html></html>")  # what grading never reads stays home
    (run / "series.csv").write_text("conn,metric,t_s,value\n")
    assert main(["lab", "pack", "wireless", str(tmp_path / "out"), "--work", str(work)]) == 0
    zipped = tmp_path / "out" / "wireless-submission.zip"
    assert f"{zipped}: 6 run(s)" in capsys.readouterr().out
    with zipfile.ZipFile(zipped) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "unpacked")
    raw = {f"work/{p.relative_to(work)}" for p in work.rglob("raw/*")}
    assert raw and raw <= names and "work/answers.md" in names and "work/lab-start.json" in names
    assert not [n for n in names if n.endswith(("report.html", "series.csv"))]
    unpacked = tmp_path / "unpacked" / "work"
    checked = lab.check(LABS / "wireless", unpacked, unpacked / "results")
    assert checked.grade.score == 10, gradereport.text(checked.grade)
    assert main(["lab", "pack", "wireless", str(tmp_path / "out"), "--work", str(tmp_path)]) == 2
    assert "not a lab folder (no lab.yaml)" in capsys.readouterr().err


def _gradescope_run(root: Path, upload: Path | None) -> dict:
    """``run_autograder`` as Gradescope runs it: the upload (the folder as ``testbed lab pack`` zips it) in
    ``submission/``, the grade read back from ``results/results.json`` (AUTOGRADER_ROOT for /autograder;
    the project's Python for the image's venv, which setup.sh would make)."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    if upload is not None:  # the zip, as Gradescope unpacks it: the folder one level down
        zipped = submission.pack(upload, root / "upload.zip")
        with zipfile.ZipFile(zipped.path) as archive:
            archive.extractall(root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_the_gradescope_autograder_grades_an_upload_laid_out_as_gradescope_lays_it_out(tmp_path):
    zipped = autograder.build("wireless", tmp_path, student_check=False)  # without the course's secret
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        archive.extractall(root / "source")
    assert {
        "setup.sh",
        "run_autograder",
        "cc-testbed/labs/wireless/lab.yaml",
        "cc-testbed/testbed/cli/__init__.py",
        "cc-testbed/requirements.lock",
    } <= set(names)
    assert not [n for n in names if "/solution/" in n or n.endswith("hidden.yaml") or "__pycache__" in n]
    assert subprocess.run(["bash", "-n", str(root / "source" / "setup.sh")]).returncode == 0
    work, _ = _submission(tmp_path / "student")
    passing = _gradescope_run(root, work)
    assert passing["score"] == 10 and {t["status"] for t in passing["tests"]} == {"passed"}, passing
    _filler(work, work / "results")
    failing = _gradescope_run(root, work)
    assert failing["score"] == 4 and "filler" in json.dumps(failing), failing
    nothing = _gradescope_run(root, None)
    assert nothing["score"] == 0 and "no answers.md in the submission" in nothing["output"]


def test_lab_duplicates_names_a_run_two_submissions_share_and_passes_independent_ones(tmp_path, capsys):
    alice, _ = _submission(tmp_path / "alice")
    bob = tmp_path / "bob"
    shutil.copytree(FIXTURE, bob)  # other real runs of the same lab (the reference runs)
    assert lab.shared_runs([alice, bob]) == {}
    assert main(["lab", "duplicates", str(alice), str(bob)]) == 0
    copied = next(alice.rglob("cc=westwood/seed=2"))
    shutil.copytree(copied, bob / "results" / "wireless" / "copied" / "cc=westwood" / "seed=2")
    shared = lab.shared_runs([alice, bob])
    assert len(shared) == 1 and sorted(r.name for r in next(iter(shared.values()))) == ["seed=2", "seed=2"]
    assert main(["lab", "duplicates", str(alice), str(bob), str(tmp_path / "carol")]) == 2  # not a folder
    assert main(["lab", "duplicates", str(alice), str(bob)]) == 1
    out = capsys.readouterr().out
    assert "the same run in" in out and "1 run(s) found in two submissions or more, of 2 submissions" in out


REPRODUCE = FIXTURE.with_name("lab-reproduce-student")


def _reproduce(tmp_path: Path) -> Path:
    work = tmp_path / "reproduce"
    shutil.copytree(REPRODUCE, work)
    _analysed(work / "results")
    return work


def _grade_reproduce(work: Path) -> gradereport.Grade:
    return lab.check(LABS / "reproduce", work, work / "results").grade


def test_a_students_reproduce_lab_passes_with_the_verdict_its_runs_give(tmp_path):
    graded = _grade_reproduce(_reproduce(tmp_path))
    assert graded.score == graded.max_score == 10, gradereport.text(graded)
    assert "the verdict your runs give on mobile-westwood-beats-reno-bernoulli: reproduced" in gradereport.text(graded)


def test_the_grader_judges_a_claim_as_the_students_report_does(tmp_path):
    """The grader's verdict on the graded runs is the report's: the same effect, interval and p, the
    claim's goodput after its warm-up (a whole-run judgement gave +20.8 % where the report gives +44 %)."""
    work = _reproduce(tmp_path)
    grader = studentruns.decided_claims(
        studentruns.load_results(work, definition.load_lab(LABS / "reproduce"), work / "results")
    )
    runs = sorted(p.parent for p in (work / "results").rglob(rundir.MANIFEST))
    report = {v.claim.id: v for v in claims.verdicts([run_analysis.analyze_run(r, write=False) for r in runs])}
    claim = "mobile-westwood-beats-reno-bernoulli"
    assert next(c for c in claims.load_claims() if c.id == claim).warmup_s, "the check needs a claim with a warm-up"
    ours, theirs = grader[claim].conditions[0], report[claim].conditions[0]
    assert ours.difference == pytest.approx(theirs.difference) and round(100 * ours.difference) == 44
    assert ours.interval() == pytest.approx(theirs.interval())
    assert ours.p_values == pytest.approx(theirs.p_values)


def test_the_reproduce_lab_asks_for_three_seeds_a_point(tmp_path):
    work = _reproduce(tmp_path)
    (work / "claim.yaml").write_text((work / "claim.yaml").read_text().replace("seeds: [1, 2, 3]", "seeds: [1, 2]"))
    graded = _grade_reproduce(work)
    # the runs task fails; the verdict is judged on the runs graded (seeds 1 and 2), which decide it here,
    # so the interval the answer quotes from three seeds (+25 % to +66 %) is not theirs (+40 % on two)
    assert [t.score for t in graded.tasks] == [0, 0, 3], gradereport.text(graded)
    assert "the lab asks for at least 3 seeds a point; the file asks for fewer at" in gradereport.text(graded)
    assert "+66 % is not what your runs give on mobile-westwood-beats-reno-bernoulli" in gradereport.text(graded)


def test_an_answer_with_another_verdict_than_the_runs_give_fails(tmp_path):
    work = _reproduce(tmp_path)
    _answer(work, "Q2", answerfile.sections(work / "answers.md")["Q2"].replace("Reproduced:", "Undecided:"))
    graded = _grade_reproduce(work)
    assert [t.score for t in graded.tasks] == [4, 0, 3], gradereport.text(graded)
    assert (
        "your runs give mobile-westwood-beats-reno-bernoulli: reproduced, which the answer does not say "
        "(it says undecided)"
    ) in gradereport.text(graded)


def test_a_verdict_answer_is_held_to_the_effect_and_p_its_runs_give(tmp_path):
    """The right verdict word with another session's numbers fails: "+44 %" and "p = 0.0053" are what the
    student's runs give; "+84 %" or "p = 0.4" are not (statements.verdict_number_problems)."""
    work = _reproduce(tmp_path)
    answer = answerfile.sections(work / "answers.md")["Q2"].replace("than the paper's", "than claimed")
    _answer(work, "Q2", answer)
    assert _grade_reproduce(work).tasks[1].score == 3, gradereport.text(_grade_reproduce(work))
    for wrong, said in (("+44 %", "+84 % is not what your runs give"), ("p = 0.0053", "p = 0.4 is not your runs")):
        _answer(work, "Q2", answer.replace(wrong, "+84 %" if wrong.startswith("+") else "p = 0.4"))
        graded = _grade_reproduce(work)
        assert graded.tasks[1].score == 0 and said in gradereport.text(graded), gradereport.text(graded)


def test_answers_that_name_no_claim_the_runs_decide_fail_the_verdict(tmp_path):
    work = _reproduce(tmp_path)
    text = (work / "answers.md").read_text().replace("mobile-westwood-beats-reno-bernoulli", "the claim I chose")
    (work / "answers.md").write_text(text)
    graded = _grade_reproduce(work)
    assert graded.tasks[1].score == 0
    assert (
        "the answers name none of the claims your runs decide (mobile-westwood-beats-reno-bernoulli"
        in gradereport.text(graded)
    )


@pytest.mark.parametrize("name", ["wireless", "bufferbloat", "cwnd", "fairness"])
def test_a_labs_hidden_variants_run_seeds_its_bands_were_made_from(name, tmp_path):
    """A hidden variant is graded by the lab's bands on its own runs: the reference runs those bands came
    from must include its seeds, or a correct solution fails there (the wireless lab's seeds 4-5 did)."""
    work = definition.start_lab(name, tmp_path / name)
    shutil.copy(LABS / name / "solution" / f"{name}.yaml", work / f"{name}.yaml")
    lab_ = definition.load_lab(LABS / name)
    expected = definition.load_expected(LABS / name, lab_)
    variants = lab.hidden_scenarios(work, lab_, definition.load_hidden(LABS / name / "hidden.yaml"))
    asked = {(r.point_id, r.seed) for _, scenario in variants for r in scenario.runs()}
    assert asked, "the variants run nothing"
    assert {seed for _, seed in asked} <= set(expected.reference.seeds), expected.reference.how
    assert {point for point, _ in asked} <= {b.point for b in expected.bands}
