"""Each student's own seeds (testbed/labs/students.py): drawn from the course's secret and the student's
id among the seeds the lab's bands were made from, written by ``lab start --student``, required by
grading; another student's folder or runs, an edited lab-start.json and seeds set back all fail with
why. On the real student's wireless submission (tests/fixtures/lab-wireless-student, seeds 1-3): the
student whose draw is seeds 1-3 is found by trying ids, as any course's draw gives some student them."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from testbed.cli import main
from testbed.labs import autograder, definition, gradereport, grading, lab, referencebands, studentruns, students
from tests.unit.test_labs import FIXTURE, LABS, _analysed, _gradescope_run, _submission

SECRET = "a course's secret, for the tests"


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv(students.SECRET_ENV, SECRET)
    return SECRET.encode()


def _pool() -> list[int]:
    """The wireless lab's pool: the seeds its bands were made from."""
    wireless = LABS / "wireless"
    return definition.load_expected(wireless, definition.load_lab(wireless)).reference.seeds


VALUES = definition.load_lab(LABS / "wireless").variant.values  # the radio rates a student may get
KNOB = "topology.wireless.rate_mbit"
WHAT = "radio link's rate (Mbit/s)"


def _student_with(seeds: list[int], secret: bytes, avoid: str | None = None, rate: float = 2) -> str:
    """The first id ``student-N`` whose draw in the wireless lab is ``seeds`` and radio rate ``rate`` (the
    submission's runs have 2 Mbit/s; none is: ``avoid`` any other seeds)."""
    pool = _pool()
    for n in range(20000):
        student = f"student-{n}"
        drawn = students.draw(secret, "wireless", student, pool, 3)
        if (drawn == seeds) != bool(avoid) and students.pick(secret, "wireless", student, VALUES) == rate:
            return student
    raise AssertionError(f"no student draws {seeds} and {rate}")


def _started_for(work: Path, student: str, seeds: list[int], rate: float = 2) -> None:
    start = definition.lab_start(work)
    variant = {"knob": KNOB, "value": rate}
    (work / definition.LAB_START).write_text(
        json.dumps({**start, "student": student, "seeds": seeds, "variant": variant})
    )


def test_a_draw_is_the_secrets_and_the_students_and_reaches_every_set(secret):
    pool = [1, 2, 3, 4, 5]
    assert students.draw(secret, "wireless", "ada", pool, 3) == students.draw(secret, "wireless", "ada", pool, 3)
    sets = Counter(tuple(students.draw(secret, "wireless", f"s{n}", pool, 3)) for n in range(2000))
    assert len(sets) == 10  # every 3 of 5, each about as often (a tenth each, within a wide margin)
    assert all(120 < n < 280 for n in sets.values()), sets
    # without the secret a student cannot tell another's: another course's draws are others
    ours = [students.draw(secret, "wireless", f"s{n}", pool, 3) for n in range(50)]
    assert [students.draw(b"another course", "wireless", f"s{n}", pool, 3) for n in range(50)] != ours
    with pytest.raises(students.StudentError, match="asks for 4 seeds a point and its pool has 3"):
        students.draw(secret, "cwnd", "ada", [1, 2, 3], 4)


def test_a_students_value_of_the_variant_is_the_secrets_and_reaches_every_value(secret):
    picks = Counter(students.pick(secret, "wireless", f"s{n}", VALUES) for n in range(3000))
    assert set(picks) == set(VALUES) and all(800 < n < 1200 for n in picks.values()), picks
    assert students.pick(secret, "wireless", "ada", VALUES) == students.pick(secret, "wireless", "ada", VALUES)
    ours = [students.pick(secret, "wireless", f"s{n}", VALUES) for n in range(50)]
    assert [students.pick(b"another course", "wireless", f"s{n}", VALUES) for n in range(50)] != ours


def test_lab_start_for_a_student_needs_the_secret_and_writes_their_seeds(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(students.SECRET_ENV, raising=False)
    with pytest.raises(definition.LabError, match=f"--student needs the course's secret in {students.SECRET_ENV}"):
        definition.start_lab("wireless", tmp_path / "none", student="ada")
    assert not (tmp_path / "none").exists()  # nothing copied
    monkeypatch.setenv(students.SECRET_ENV, SECRET)
    assert main(["lab", "start", "wireless", str(tmp_path / "ada"), "--student", "ada"]) == 0
    seeds = students.draw(SECRET.encode(), "wireless", "ada", _pool(), 3)
    rate = students.pick(SECRET.encode(), "wireless", "ada", VALUES)
    out = capsys.readouterr().out
    assert f"ada's own seeds: {', '.join(map(str, seeds))}" in out
    assert f"ada's own {WHAT}: {rate:g} ({KNOB} in the scenario file)" in out
    started = definition.lab_start(tmp_path / "ada")
    assert started["seeds"] == seeds and started["student"] == "ada" and started["variant"]["value"] == rate
    text = (tmp_path / "ada" / "wireless.yaml").read_text()
    assert f"seeds: [{', '.join(map(str, seeds))}]" in text
    assert f"rate_mbit: {rate:g}  # your own" in text
    assert definition.file_knob(tmp_path / "ada" / "wireless.yaml", KNOB) == rate
    assert "TODO(task 1" in text  # the rest as the starter has it


def test_the_students_own_seeds_pass_and_are_said_so(tmp_path, secret):
    work, results = _submission(tmp_path)
    student = _student_with([1, 2, 3], secret)
    _started_for(work, student, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student=student)
    assert checked.grade.score == 10, gradereport.text(checked.grade)
    assert f"seeds 1, 2, 3: {student}'s own" in gradereport.text(checked.grade)


def test_another_students_folder_fails_the_runs_task_with_why(tmp_path, secret):
    work, results = _submission(tmp_path)
    owner = _student_with([1, 2, 3], secret)
    _started_for(work, owner, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student="somebody-else")
    assert [t.score for t in checked.grade.tasks] == [0, 3, 3]
    assert f"the folder was started for {owner}, not somebody-else: another student's work" in gradereport.text(
        checked.grade
    )


def test_a_lab_start_edited_to_name_another_student_fails(tmp_path, secret):
    work, results = _submission(tmp_path)
    forger = _student_with([1, 2, 3], secret, avoid="theirs")  # whose own seeds are not 1-3
    _started_for(work, forger, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student=forger)
    assert [t.score for t in checked.grade.tasks] == [0, 3, 3]
    assert f"lab-start.json's seeds are not {forger}'s" in gradereport.text(checked.grade)


def test_seeds_set_back_in_the_scenario_file_fail(tmp_path, secret):
    work, results = _submission(tmp_path)
    _started_for(work, "ada", [1, 2, 4])  # what lab start gave; the file (and the runs) have 1-3
    checked = lab.check(LABS / "wireless", work, results)
    assert checked.grade.tasks[0].score == 0
    assert "the scenario file runs seeds 1, 2, 3; testbed lab start gave ada seeds 1, 2, 4" in gradereport.text(
        checked.grade
    )


def test_a_folder_not_started_for_the_student_named_fails(tmp_path, secret):
    work, results = _submission(tmp_path)
    checked = lab.check(LABS / "wireless", work, results, student="ada")
    assert checked.grade.tasks[0].score == 0
    assert "the folder was not started for a student" in gradereport.text(checked.grade)


def test_a_students_hidden_variants_run_pool_seeds_that_are_not_theirs(tmp_path, secret):
    work = definition.start_lab("wireless", tmp_path / "w", student="ada")
    (work / "wireless.yaml").write_text((LABS / "wireless" / "solution" / "wireless.yaml").read_text())
    definition._set_seeds(work / "wireless.yaml", definition.lab_start(work)["seeds"])
    lab_ = definition.load_lab(LABS / "wireless")
    hidden = definition.load_hidden(LABS / "wireless" / "hidden.yaml")
    [(_, scenario)] = lab.hidden_scenarios(work, lab_, hidden, definition.seed_pool(LABS / "wireless", lab_))
    mine = set(definition.lab_start(work)["seeds"])
    hidden_seeds = {r.seed for r in scenario.runs()}
    assert len(hidden_seeds) == 2 and hidden_seeds <= set(_pool()) - mine  # the pool's, never the student's


def test_the_gradescope_autograder_requires_the_submitters_own_seeds(tmp_path, secret):
    zipped = autograder.build("wireless", tmp_path)
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zipped) as archive:
        assert archive.read("cc-testbed/course-secret") == secret
        archive.extractall(root / "source")
    work, _ = _submission(tmp_path / "student")
    owner = _student_with([1, 2, 3], secret)
    _started_for(work, owner, [1, 2, 3])
    metadata = root / "submission_metadata.json"
    metadata.write_text(json.dumps({"users": [{"email": f"{owner}@example.edu", "sid": owner}]}))
    assert _gradescope_run(root, work)["score"] == 10
    metadata.write_text(json.dumps({"users": [{"email": "other@example.edu", "sid": "other"}]}))
    graded = _gradescope_run(root, work)
    assert graded["score"] == 6 and "started for" in json.dumps(graded)


def test_the_variant_set_back_or_lab_start_edited_to_it_fails_with_why(tmp_path, secret):
    work, results = _submission(tmp_path)  # its file and runs at 2 Mbit/s
    student = _student_with([1, 2, 3], secret, rate=4)
    _started_for(work, student, [1, 2, 3], rate=4)
    checked = lab.check(LABS / "wireless", work, results, student=student)
    assert [t.score for t in checked.grade.tasks] == [0, 3, 3]
    assert f"the scenario file sets {KNOB} to 2; testbed lab start gave 4: set it back" in gradereport.text(
        checked.grade
    )
    _started_for(work, student, [1, 2, 3], rate=2)  # lab-start.json edited to the runs' rate
    checked = lab.check(LABS / "wireless", work, results, student=student)
    assert checked.grade.tasks[0].score == 0
    assert f"lab-start.json's {WHAT} is not {student}'s" in gradereport.text(checked.grade)
    own = _student_with([1, 2, 3], secret)
    _started_for(work, own, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student=own)
    assert checked.grade.score == 10 and f"own {WHAT}: 2, as lab start gave it" in gradereport.text(checked.grade)
    manifest = next(results.rglob("cc=reno/seed=2/manifest.json"))  # a run that ran another rate
    data = json.loads(manifest.read_text())
    data["resolved"]["topology"]["wireless"]["rate_mbit"] = 4.0
    manifest.write_text(json.dumps(data))
    checked = lab.check(LABS / "wireless", work, results, student=own)
    assert "seed 2 of cc=reno ran 4: testbed lab start gave 2: run again" in gradereport.text(checked.grade)


def test_a_students_runs_are_held_to_the_bands_of_their_own_value(tmp_path):
    work, results = _submission(tmp_path)
    found = studentruns.load_results(work, definition.load_lab(LABS / "wireless"), results)
    bands = definition.load_expected(LABS / "wireless", definition.load_lab(LABS / "wireless")).bands
    assert {b.variant for b in bands} == set(VALUES)  # every value has its bands
    checks = grading._band_checks([b for b in bands if b.task == "t1"], found)
    assert len(checks) == 4 and all(c.ok for c in checks)  # goodput and retransmissions of each, at 2 Mbit/s
    for rate in VALUES:  # each rate's runs held to the bands made from the reference runs at that rate
        found.variant = rate
        made = {b.reference for b in bands if b.task == "t1" and b.variant == rate}
        quoted = {
            float(re.search(r"the reference runs: ([\d.]+)", c.detail).group(1))
            for c in grading._band_checks([b for b in bands if b.task == "t1"], found)
        }
        assert sorted(quoted) == pytest.approx(sorted(made), rel=1e-3) and len(made) == 4, rate
    found.variant = 3
    (check,) = grading._band_checks([b for b in bands if b.task == "t1"], found)
    assert "no bands for the value the scenario file sets (3" in check.detail


def test_bands_are_made_for_each_value_from_the_reference_runs_at_it(tmp_path):
    """The committed 2 Mbit/s reference runs, and copies of them said to be at 1 and 4 Mbit/s (their
    goodput scaled): each value's bands come from its own runs; a value without runs is named."""
    results = tmp_path / "results"
    (session,) = (FIXTURE / "results" / "wireless").iterdir()
    shutil.copytree(session, results / "wireless" / session.name)
    _analysed(results)  # a clone's checkout may leave flows.csv older than its manifest: stale to the catalog
    with pytest.raises(
        definition.LabError,
        match=r"no reference value of goodput at cc=reno with 1 \(the lab's "
        r"variant\): its runs are missing",
    ):
        referencebands.make_bands(LABS / "wireless", results, "how", "commit")
    for rate, scale, stamp in ((1, 0.5, "20261129T070000Z"), (4, 2.0, "20261129T080000Z")):
        copy = shutil.copytree(session, results / "wireless" / f"{stamp}-{session.name.split('-')[1]}")
        for manifest in copy.rglob("manifest.json"):
            data = json.loads(manifest.read_text())
            data["resolved"]["topology"]["wireless"]["rate_mbit"] = rate
            manifest.write_text(json.dumps(data))
            flows = pd.read_csv(manifest.with_name("flows.csv"))
            flows["goodput_mbit"] *= scale
            flows.to_csv(manifest.with_name("flows.csv"), index=False)
    _analysed(results)
    made = referencebands.make_bands(LABS / "wireless", results, "how", "commit")
    goodput = {(b.variant, b.cc): b.reference for b in made.bands if b.metric == "goodput"}
    for cc in ("reno", "westwood"):
        assert goodput[1, cc] == pytest.approx(0.5 * goodput[2, cc], rel=1e-3)
        assert goodput[4, cc] == pytest.approx(2.0 * goodput[2, cc], rel=1e-3)
    assert made.reference.runs == 60 and made.reference.seeds == list(range(1, 11))


@pytest.mark.parametrize("variant", [None, {"knob": KNOB, "value": "2"}, {"knob": KNOB, "value": True}, "2"])
def test_a_students_lab_start_without_a_value_fails_and_never_crashes(tmp_path, secret, variant):
    work, results = _submission(tmp_path)
    own = _student_with([1, 2, 3], secret)
    _started_for(work, own, [1, 2, 3])
    start = definition.lab_start(work)
    start.pop("variant") if variant is None else start.update(variant=variant)
    (work / definition.LAB_START).write_text(json.dumps(start))
    for student in (own, None):  # named, or graded without --student (Gradescope without metadata)
        checked = lab.check(LABS / "wireless", work, results, student=student)
        assert checked.grade.tasks[0].score == 0
        assert f"lab-start.json gives no {WHAT}: start the lab again with --student" in gradereport.text(checked.grade)
