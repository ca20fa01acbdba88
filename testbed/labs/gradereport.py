"""A lab's grade: each task's checks, whether the task passes, fails or is left to grade by hand, and the
grade written out: for the terminal, as JUnit XML (one test suite per task, one case per check) and as
Gradescope's ``results.json``. The checks themselves are made by testbed/labs/grading.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from testbed.labs.definition import Lab, Task
from testbed.report.pages import junit


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


def text(grade: Grade) -> str:
    """The terminal report: the score first, then each task and its checks."""
    passed = sum(t.passed for t in grade.tasks)
    hand = sum(t.by_hand for t in grade.tasks)
    to_hand = f", {hand} to grade by hand" if hand else ""
    lines = [
        f"{grade.lab.title}: {grade.score:g} / {grade.max_score:g} points "
        f"({passed} of {len(grade.tasks)} tasks pass{to_hand}; kernel {grade.kernel or 'none'})",
        "",
    ]
    for t in grade.tasks:
        lines.append(f"{t.status}  {t.task.id}: {t.task.title} ({t.score:g}/{t.task.points:g})")
        for c in t.checks:
            mark = "ok  " if c.ok and c.graded else ("HAND" if not c.graded else "MISS")
            lines.append(f"        {mark} {c.name}: {c.detail}")
    return "\n".join(lines)


def junit_xml(grade: Grade, path: Path) -> None:
    """One test suite per task, one test case per check (one to grade by hand: skipped, with why)."""

    def case(task_id: str, c) -> junit.Case:
        outcome = "skipped" if not c.graded else ("failure" if not c.ok else "passed")
        return junit.Case(task_id, c.name, outcome, message=c.detail, detail=c.detail)

    junit.write(
        path,
        f"cc-testbed lab: {grade.lab.title}",
        {f"{t.task.id}: {t.task.title}": [case(t.task.id, c) for c in t.checks] for t in grade.tasks},
    )


def gradescope(grade: Grade) -> dict:
    """Gradescope's autograder ``results.json``: one test per task with its score and what it checked; a
    task left to grade by hand scores 0 and says so in its name, for the instructor to override."""
    marks = {
        (True, True): "ok",
        (False, True): "MISSING",
        (True, False): "TO GRADE BY HAND",
        (False, False): "TO GRADE BY HAND",
    }
    tests = [
        {
            "name": f"{t.task.id}: {t.task.title}{' (to grade by hand)' if t.by_hand else ''}",
            "score": t.score,
            "max_score": t.task.points,
            "status": "passed" if t.passed else "failed",
            "output": "\n".join(f"{marks[c.ok, c.graded]}: {c.name}: {c.detail}" for c in t.checks),
        }
        for t in grade.tasks
    ]
    return {"score": grade.score, "tests": tests, "output": text(grade).splitlines()[0]}
