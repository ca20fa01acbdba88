"""Each student's own seeds (testbed/labs/students.py): drawn from the course's secret and the student's
id among the seeds the lab's bands were made from, written by ``lab start --student``, required by
grading; another student's folder or runs, an edited lab-start.json and seeds set back all fail with
why. On the real student's wireless submission (tests/fixtures/lab-wireless-student, seeds 1-3): the
student whose draw is seeds 1-3 is found by trying ids, as any course's draw gives some student them."""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.labs import autograder, grading, lab, labkit, students
from tests.unit.test_labs import LABS, _gradescope_run, _submission

SECRET = "a course's secret, for the tests"


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv(students.SECRET_ENV, SECRET)
    return SECRET.encode()


def _pool() -> list[int]:
    """The wireless lab's pool: the seeds its bands were made from."""
    wireless = LABS / "wireless"
    return labkit.load_expected(wireless, labkit.load_lab(wireless)).reference.seeds


def _student_with(seeds: list[int], secret: bytes, avoid: str | None = None) -> str:
    """The first id ``student-N`` whose draw in the wireless lab is ``seeds`` (none is: ``avoid`` any other)."""
    pool = _pool()
    for n in range(20000):
        student = f"student-{n}"
        drawn = students.draw(secret, "wireless", student, pool, 3)
        if (drawn == seeds) != bool(avoid):
            return student
    raise AssertionError(f"no student draws {seeds}")


def _started_for(work: Path, student: str, seeds: list[int]) -> None:
    start = labkit.lab_start(work)
    (work / labkit.LAB_START).write_text(json.dumps({**start, "student": student, "seeds": seeds}))


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


def test_lab_start_for_a_student_needs_the_secret_and_writes_their_seeds(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(students.SECRET_ENV, raising=False)
    with pytest.raises(labkit.LabError, match=f"--student needs the course's secret in {students.SECRET_ENV}"):
        labkit.start_lab("wireless", tmp_path / "none", student="ada")
    assert not (tmp_path / "none").exists()  # nothing copied
    monkeypatch.setenv(students.SECRET_ENV, SECRET)
    assert main(["lab", "start", "wireless", str(tmp_path / "ada"), "--student", "ada"]) == 0
    seeds = students.draw(SECRET.encode(), "wireless", "ada", _pool(), 3)
    assert f"ada's own seeds: {', '.join(map(str, seeds))}" in capsys.readouterr().out
    started = labkit.lab_start(tmp_path / "ada")
    assert started["seeds"] == seeds and started["student"] == "ada"
    assert f"seeds: [{', '.join(map(str, seeds))}]" in (tmp_path / "ada" / "wireless.yaml").read_text()
    assert "TODO(task 1" in (tmp_path / "ada" / "wireless.yaml").read_text()  # the rest as the starter has it


def test_the_students_own_seeds_pass_and_are_said_so(tmp_path, secret):
    work, results = _submission(tmp_path)
    student = _student_with([1, 2, 3], secret)
    _started_for(work, student, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student=student)
    assert checked.grade.score == 10, grading.text(checked.grade)
    assert f"seeds 1, 2, 3: {student}'s own" in grading.text(checked.grade)


def test_another_students_folder_fails_the_runs_task_with_why(tmp_path, secret):
    work, results = _submission(tmp_path)
    owner = _student_with([1, 2, 3], secret)
    _started_for(work, owner, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student="somebody-else")
    assert [t.score for t in checked.grade.tasks] == [0, 3, 3]
    assert f"the folder was started for {owner}, not somebody-else: another student's work" in grading.text(
        checked.grade)  # fmt: skip


def test_a_lab_start_edited_to_name_another_student_fails(tmp_path, secret):
    work, results = _submission(tmp_path)
    forger = _student_with([1, 2, 3], secret, avoid="theirs")  # whose own seeds are not 1-3
    _started_for(work, forger, [1, 2, 3])
    checked = lab.check(LABS / "wireless", work, results, student=forger)
    assert [t.score for t in checked.grade.tasks] == [0, 3, 3]
    assert f"lab-start.json's seeds are not {forger}'s" in grading.text(checked.grade)


def test_seeds_set_back_in_the_scenario_file_fail(tmp_path, secret):
    work, results = _submission(tmp_path)
    _started_for(work, "ada", [1, 2, 4])  # what lab start gave; the file (and the runs) have 1-3
    checked = lab.check(LABS / "wireless", work, results)
    assert checked.grade.tasks[0].score == 0
    assert "the scenario file runs seeds 1, 2, 3; testbed lab start gave ada seeds 1, 2, 4" in grading.text(
        checked.grade)  # fmt: skip


def test_a_folder_not_started_for_the_student_named_fails(tmp_path, secret):
    work, results = _submission(tmp_path)
    checked = lab.check(LABS / "wireless", work, results, student="ada")
    assert checked.grade.tasks[0].score == 0
    assert "the folder was not started for a student" in grading.text(checked.grade)


def test_a_students_hidden_variants_run_pool_seeds_that_are_not_theirs(tmp_path, secret):
    work = labkit.start_lab("wireless", tmp_path / "w", student="ada")
    (work / "wireless.yaml").write_text((LABS / "wireless" / "solution" / "wireless.yaml").read_text())
    labkit._set_seeds(work / "wireless.yaml", labkit.lab_start(work)["seeds"])
    lab_ = labkit.load_lab(LABS / "wireless")
    hidden = labkit.load_hidden(LABS / "wireless" / "hidden.yaml")
    [(_, scenario)] = lab.hidden_scenarios(work, lab_, hidden, labkit.seed_pool(LABS / "wireless", lab_))
    mine = set(labkit.lab_start(work)["seeds"])
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
