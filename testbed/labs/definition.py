"""The course labs of ``labs/``: what a lab is (its tasks, its bands), listing them and starting one.

A lab is a folder ``labs/<name>/``:

* ``lab.yaml``: its title, how long it takes, its scenario file and its tasks (:class:`Lab`);
* ``README.md``: the handout; ``<scenario>.yaml``: the starter experiment, with the knobs the tasks
  set left as ``TODO(task N: ...)`` (testbed/scenario/load.py names them when the file is run);
* ``expected.yaml``: the bands per metric and kernel series that ``testbed lab check`` grades against,
  from reference runs made here (:class:`Expected`; it says how they were made);
* ``solution/``: the instructor's scenario and answers; ``hidden.yaml``: optional hidden variants
  (other seeds or points) that ``check --hidden`` runs too. Neither is copied by ``lab start``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from testbed import PROJECT
from testbed.labs import students

LABS = PROJECT / "labs"
#: what ``lab start`` leaves out of the student's copy
INSTRUCTOR_ONLY = ("solution", "hidden.yaml")
#: a course's own instructor folder (NAME/hidden.yaml, NAME/solution/), kept apart from the public project
INSTRUCTOR_ENV = "CC_TESTBED_INSTRUCTOR"


def hidden_file(master: Path) -> Path:
    """The hidden variants a lab is graded with: the course's own (``$CC_TESTBED_INSTRUCTOR/NAME/hidden.yaml``)
    when the instructor keeps one, else the example the project ships (public, like the whole project:
    docs/labs.md says why a course should keep its own)."""
    own = os.environ.get(INSTRUCTOR_ENV)
    if own and (Path(own) / master.name / "hidden.yaml").is_file():
        return Path(own) / master.name / "hidden.yaml"
    return master / "hidden.yaml"


#: what ``lab start`` writes into the student's folder: which lab, and when
LAB_START = "lab-start.json"
#: the metrics a band can bound: analysis.runs.metrics.group_metric's (per run, the flows of one algorithm)
#: and the latency flows' percentiles (per run, the mean over its ping or requests flows)
FLOW_METRICS = ("goodput", "recv_goodput", "total_goodput", "jain", "retrans_ratio")
LATENCY_METRICS = ("ping_p50_ms", "ping_p99_ms", "request_p50_ms", "request_p99_ms")


class LabError(Exception):
    """A lab that cannot be found, read or started; the message says what would be valid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Minutes(_Strict):
    tcg: float  # measured here: a 2-core machine, the guest under TCG
    kvm: float  # estimated for a laptop with KVM (a guest there runs about 3x faster outside the traffic)


#: the unit of each metric as a student quotes it (a ratio times 100 is in percent)
METRIC_UNITS = {
    "goodput": "Mbit/s",
    "recv_goodput": "Mbit/s",
    "total_goodput": "Mbit/s",
    "jain": "",
    "retrans_ratio": "",
    **{m: "ms" for m in LATENCY_METRICS},
}


def metrics_in(unit: str) -> list[str]:
    """The metrics quoted in ``unit`` (the runs' numbers a prose answer in that unit may state)."""
    return [m for m, u in METRIC_UNITS.items() if u == unit]


class Measured(_Strict):
    """A number a question asks for, as the student's own runs give it: the mean over their runs of
    ``point`` of ``metric`` (of the flows of ``cc``), times ``scale`` (100: a ratio quoted in percent).
    The student gives it in the answer's numbers block as ``key: value`` (testbed/labs/answerfile.py)."""

    #: its field in the numbers block, with its unit: reno_goodput_mbit
    key: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    what: str  # said to the student: "New Reno's mean goodput (Mbit/s)"
    point: str
    cc: str | None = None
    metric: Literal[FLOW_METRICS + LATENCY_METRICS]
    scale: float = 1.0
    #: how far the stated number may be from the runs' value, in percent of it
    tolerance_pct: float = Field(10.0, gt=0, le=100)

    @property
    def unit(self) -> str:
        return "%" if self.scale == 100 else METRIC_UNITS[self.metric]


class Concept(_Strict):
    """One thing a right answer states, in any of its words: ``terms`` are matched at the start of a word,
    case aside ("halv" matches "halves" and "halved")."""

    name: str
    terms: list[str] = Field(min_length=1)
    #: the concept is naturally stated by a negation ("three runs cannot detect it"): a negated term counts
    negative: bool = False


class Question(_Strict):
    """A question of the answers file and what decides it: every number of ``numbers`` stated (within its
    tolerance of the student's runs), and at least ``pass_at`` (default: all) of the rubric's concepts.
    An answer that states some concepts but too few, or a question with neither, is graded by hand."""

    id: str
    numbers: list[Measured] = []
    rubric: list[Concept] = []
    pass_at: int | None = Field(None, ge=1)
    #: the answer states the verdict the student's runs give on the claim the answers name (a claim of
    #: analysis/verdicts/claims.yaml, by its id), in the project's words: reproduced, opposite, not reproduced,
    #: undecided
    verdict: bool = False

    @model_validator(mode="after")
    def _keys_once(self):
        keys = [n.key for n in self.numbers]
        if len(set(keys)) != len(keys):
            raise ValueError(f"numbers: each key once (a field of the answer's numbers block); got {', '.join(keys)}")
        return self

    @model_validator(mode="after")
    def _pass_at_within_rubric(self):
        if self.pass_at is not None and self.pass_at > len(self.rubric):
            raise ValueError(f"pass_at {self.pass_at} is more than the rubric's {len(self.rubric)} concept(s)")
        return self


class Task(_Strict):
    id: str
    title: str
    points: float = Field(1.0, gt=0)
    #: point ids of the lab's scenario whose runs must be complete and trustworthy ("*": every point)
    runs: list[str] = []
    #: files the student must have made, as globs relative to the lab folder
    figures: list[str] = []
    #: the questions of the answers file (``## Q1``) this task grades: a heading alone, graded by hand,
    #: or with the numbers and the rubric that decide it (:class:`Question`)
    questions: list[Question] = []

    @field_validator("questions", mode="before")
    @classmethod
    def _headings(cls, value):
        return [{"id": q} if isinstance(q, str) else q for q in value] if isinstance(value, list) else value


class Variant(_Strict):
    """A knob of the lab's scenario file each student started with ``--student`` gets their own value of
    (testbed/labs/students.py), among ``values``, each with its own bands (``testbed lab bands`` makes
    them from reference runs at every value)."""

    #: its place in the scenario file, dotted: topology.wireless.loss.bad_loss_pct
    knob: str = Field(pattern=r"^[a-z_]+(\.[a-z_]+)+$")
    values: list[float] = Field(min_length=2)
    what: str  # said to the student: "the Bad state's loss (%)"


class Lab(_Strict):
    title: str
    papers: str
    minutes: Minutes
    #: the starter experiment, a file of the lab folder; None: the student runs the project's own
    #: experiments (scenarios/) through ``suite``, or every run of the results folder counts
    scenario: str | None = None
    #: with no scenario: the student's suite file (of the project's experiments), whose points and seeds count
    suite: str | None = None
    #: each point needs runs of at least this many seeds (the verdicts' statistics need them)
    min_seeds: int = Field(1, ge=1)
    #: hold each run's goodput from its capture to iperf3's receiver within this many percent
    #: (testbed/labs/labels.py); only a lab whose runs agree that closely when honest sets it
    receiver_check_pct: float | None = Field(None, gt=0, le=100)
    answers: str = "answers.md"
    tasks: list[Task]
    variant: Variant | None = None

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)


class Band(_Strict):
    task: str
    point: str  # a point id of the lab's scenario
    cc: str | None = None  # the flows of this algorithm (flow metrics); None: every forward flow
    metric: Literal[FLOW_METRICS + LATENCY_METRICS]
    series: str  # a kernel series (6.1): the band grades runs of that series only (6.12 is another)
    variant: float | None = None  # in a lab with a variant: the knob's value this band is for
    #: None until ``testbed lab bands`` made them from reference runs (a band without them grades nothing)
    min: float | None = None
    max: float | None = None
    reference: float | None = None  # what the reference runs gave (their mean)


class Reference(_Strict):
    how: str
    kernel: str
    commit: str
    runs: int  # complete reference runs the bands were made from
    seeds: list[int] = []  # their seeds (a hidden variant's must be among them: its runs are graded by the bands)
    #: the reference runs' fingerprints (studentruns.run_fingerprints): a student's run with one is a copy
    fingerprints: list[str] = []


class Expected(_Strict):
    reference: Reference | None = None  # None until ``testbed lab bands`` made the bands
    bands: list[Band]


class HiddenVariant(_Strict):
    name: str
    only: list[str] = []  # KEY=VALUE selections, as testbed run --only
    seeds: list[int] = []


class Hidden(_Strict):
    variants: list[HiddenVariant]


def kernel_series(release: str) -> str:
    """A kernel release's series: "6.1.0-56-amd64" -> "6.1", "6.12.117+deb12-amd64" -> "6.12"."""
    match = re.match(r"(\d+\.\d+)", release)
    return match.group(1) if match else release


def lab_names(root: Path = LABS) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "lab.yaml").is_file()) if root.is_dir() else []


def lab_dir(name_or_path: str | Path, root: Path = LABS) -> Path:
    """A lab's folder: a name in ``labs/``, or a folder holding a lab.yaml (a student's copy)."""
    given = Path(name_or_path)
    if (given / "lab.yaml").is_file():
        return given
    if (root / str(name_or_path) / "lab.yaml").is_file():
        return root / str(name_or_path)
    raise LabError(
        f"no lab named {str(name_or_path)!r}; the labs: {', '.join(lab_names(root)) or '(none)'} "
        "(or give a folder that holds a lab.yaml)"
    )


def _read(path: Path, model: type[BaseModel]):
    try:
        return model.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError) as err:
        raise LabError(f"{path}: cannot be read: {err}") from None
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise LabError(f"{path}: {problems}") from None


def load_lab(folder: Path) -> Lab:
    lab = _read(folder / "lab.yaml", Lab)
    for file in filter(None, (lab.scenario, lab.suite)):
        if not (folder / file).is_file():
            raise LabError(f"{folder / 'lab.yaml'}: its scenario {file!r} is not in {folder}")
    if lab.variant and lab.scenario and file_knob(folder / lab.scenario, lab.variant.knob) not in lab.variant.values:
        raise LabError(
            f"{folder / 'lab.yaml'}: variant.knob {lab.variant.knob} of {lab.scenario} is not one of "
            f"its values {', '.join(f'{v:g}' for v in lab.variant.values)}"
        )
    return lab


def load_expected(folder: Path, lab: Lab) -> Expected:
    expected = _read(folder / "expected.yaml", Expected)
    unknown = sorted({b.task for b in expected.bands} - {t.id for t in lab.tasks})
    if unknown:
        raise LabError(f"{folder / 'expected.yaml'}: bands for tasks the lab does not have: {', '.join(unknown)}")
    return expected


def load_hidden(path: Path) -> Hidden:
    return _read(path, Hidden)


def start_lab(name: str, destination: Path, root: Path = LABS, student: str | None = None) -> Path:
    """Copy a lab into ``destination`` (new or empty) for a student: everything but the instructor's files,
    and ``lab-start.json`` saying when (the grader counts only runs made after it). With ``student``, their
    own seeds (testbed/labs/students.py) in the scenario file and in ``lab-start.json``, and their own
    value of the lab's variant knob when it has one."""
    source = lab_dir(name, root)
    if destination.exists() and any(destination.iterdir()):
        raise LabError(f"{destination} is not empty: give a new folder (nothing was copied)")
    seeds = student_seeds(source, student) if student is not None else None
    lab = load_lab(source)
    value = student_value(source, student) if student is not None and lab.variant else None
    own = _knob_set(source / experiment_file(lab), lab.variant.knob, value) if value is not None else None
    shutil.copytree(source, destination, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*INSTRUCTOR_ONLY))
    started = {"lab": source.name, "started_utc": datetime.now(UTC).isoformat(timespec="seconds")}
    if own is not None:
        (destination / experiment_file(lab)).write_text(own)
        started |= {"variant": {"knob": lab.variant.knob, "value": value}}
    if seeds is not None:
        _set_seeds(destination / experiment_file(lab), seeds)
        started |= {"student": student, "seeds": seeds}
    (destination / LAB_START).write_text(json.dumps(started, indent=2) + "\n")
    return destination


def experiment_file(lab: Lab) -> str:
    """The file of the lab folder whose runs are graded: its scenario, or the student's suite file."""
    return lab.scenario or lab.suite or "claim.yaml"


def seed_pool(folder: Path, lab: Lab) -> list[int]:
    """The seeds a student's own may be drawn from: those the bands were made from (students.py)."""
    try:
        expected = load_expected(folder, lab) if (folder / "expected.yaml").is_file() else None
    except LabError:
        expected = None
    seeds = expected.reference.seeds if expected is not None and expected.reference is not None else []
    return sorted(seeds) or students.OPEN_POOL


def student_seeds(folder: Path, student: str) -> list[int]:
    """The seeds ``student`` gets in the lab at ``folder`` (as installed): as many as its starter file runs."""
    secret = students.course_secret()
    if secret is None:
        raise LabError(
            f"--student needs the course's secret in {students.SECRET_ENV} (the instructor's, the same "
            "for every student of the course; never in a student's folder)"
        )
    if not student.strip():
        raise LabError("--student needs the student's id (their Gradescope student id or email)")
    lab = load_lab(folder)
    count = len(_seeds_of(folder / experiment_file(lab)))
    try:
        return students.draw(secret, folder.name, student.strip(), seed_pool(folder, lab), count)
    except students.StudentError as err:
        raise LabError(f"lab {folder.name}: {err}") from None


def student_value(folder: Path, student: str) -> float:
    """The value of the lab's variant knob ``student`` gets in the lab at ``folder`` (as installed)."""
    lab = load_lab(folder)
    secret = students.course_secret()
    if lab.variant is None or secret is None:
        raise LabError(
            f"lab {folder.name} gives no value of its own to a student (no variant, or no {students.SECRET_ENV})"
        )
    return students.pick(secret, folder.name, student.strip(), lab.variant.values)


def number_text(value: float | None) -> str:
    """A knob's value as a student reads it: 2, 1.5, 1e-05; "nothing" for None."""
    if value is None:
        return "nothing"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def knob_value(data: object, knob: str) -> float | None:
    """The value at the dotted ``knob`` of a scenario (a file's YAML or a run's resolved scenario), None
    when it has none there."""
    for key in knob.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return float(data) if isinstance(data, int | float) and not isinstance(data, bool) else None


def file_knob(path: Path, knob: str) -> float | None:
    """The knob's value in the scenario file at ``path`` (None: unreadable, or not set there)."""
    try:
        return knob_value(yaml.safe_load(path.read_text()), knob)
    except (OSError, yaml.YAMLError):
        return None


def _knob_set(path: Path, knob: str, value: float) -> str:
    """The text of the file at ``path`` with the knob's line set to ``value`` (its comments and layout
    kept, as the seeds'): the knob's last key must be on one line of the file, and the text must then
    read as set. Made before anything is copied, so a lab that cannot be set leaves nothing behind."""
    key = knob.rsplit(".", 1)[-1]
    line = re.compile(rf"^(\s*{re.escape(key)}:)[^#\n]*(#.*)?$", re.M)
    text = path.read_text()
    if len(line.findall(text)) != 1:
        raise LabError(f"{path}: the variant's knob {knob} needs its key {key!r} on exactly one line")
    text = line.sub(lambda m: f"{m.group(1)} {number_text(value)}  # your own: testbed lab start --student", text)
    if knob_value(yaml.safe_load(text), knob) != value:
        raise LabError(f"{path}: {knob} is not where the lab's variant says (lab.yaml's variant.knob)")
    return text


_SEEDS_LINE = re.compile(r"^seeds:.*$", re.M)


def _seeds_of(path: Path) -> list[int]:
    found = _SEEDS_LINE.search(path.read_text())
    value = yaml.safe_load(found.group(0))["seeds"] if found else None
    if not isinstance(value, list) or not value:
        raise LabError(f"{path}: no top-level 'seeds: [...]' line to give a student their own seeds")
    return value


def _set_seeds(path: Path, seeds: list[int]) -> None:
    """The file's top-level ``seeds:`` line set to ``seeds`` (its comments and layout kept)."""
    _seeds_of(path)
    line = f"seeds: [{', '.join(map(str, seeds))}]  # your own: testbed lab start --student"
    path.write_text(_SEEDS_LINE.sub(line, path.read_text(), count=1))


def lab_start(folder: Path) -> dict:
    """``lab-start.json`` of ``folder`` ({} when ``testbed lab start`` did not make it)."""
    try:
        data = json.loads((folder / LAB_START).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lab_started(folder: Path) -> str | None:
    """When ``testbed lab start`` made ``folder`` (an ISO time), or None when it did not."""
    try:
        return str(json.loads((folder / LAB_START).read_text())["started_utc"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
