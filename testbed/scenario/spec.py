"""Scenario files: the schema, loading with line-numbered errors, profiles and sweep expansion.

A scenario is one experiment; its file is ``scenarios/<name>.yaml`` and the file name is the
scenario's name. The format is YAML rather than TOML because students annotate their files with
comments, lists and maps read naturally, and PyYAML's composed nodes carry line numbers, so every
error can name its line (TOML's parser gives no positions). Files are composed with PyYAML's
SafeLoader: data only, never ``exec``/``eval``; and bounded first (``MAX_FILE_BYTES``, ``MAX_DEPTH``
and the rest, checked on the raw tokens), so that no file ends in a RecursionError or minutes of work.

Pipeline, in the order :func:`load_scenario` runs it::

    text --compose--> nodes (+ line of every path) --profile deep-merge--> raw dict
         --find sweep axes--> cartesian product --validate each point--> Points --x seeds--> RunSpecs

Sweeps: where the schema expects one value and the file gives a list, that list is a sweep axis.
Axes are found by walking the raw data alongside the models' field annotations (nested models,
``list[Model]`` items, and the topology union by its ``name``). Fields whose type is a list
(``flows``, ``seeds``, ``periods``) are values, never axes. Every point has ``params`` (short axis
name -> value; the short name is the leaf key, or the dotted path such as ``flows[1].cc`` when two
axes share a leaf key) and a filesystem-safe ``point_id`` such as ``cc=westwood,loss_pct=0``
(``default`` when the file has no axes; list indices appear as ``flows.1.cc`` so that a shell never
globs the id).

Errors: every problem of every point is collected, deduplicated and raised together as one
:class:`ScenarioError`, written from pydantic's error ``type``/``ctx`` with the valid range or
options and the closest valid name. Cross-field checks raise a ``scenario_check`` error that carries
the exact sub-location of each problem, so those name their line too.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import itertools
import json
import math
import re
import types
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, Strict, StrictFloat, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from testbed.scenario.algorithms import REGISTRY as CC_REGISTRY
from topologies import TOPOLOGY_PARAMS
from topologies.lossmodel import LOSS_MODEL_NAMES, MAX_STATES, TimedTwoStateLoss, expected_states
from topologies.params import LinkParams, StrictModel

SCENARIO_SUFFIXES = (".yaml", ".yml")
#: a timed loss channel's timeline covers the run plus this long (the runner's grace for late flows)
TIMELINE_SLACK_S = 30.0
DEFAULT_PROFILE = "quick"
#: a sweep this large is almost certainly a typo (a list where one value was meant)
MAX_POINTS = 10_000
#: longest point_id kept verbatim; longer ones are shortened with a hash (file names stop at 255 bytes)
MAX_POINT_ID_CHARS = 200

# Bounds on a scenario or suite file: far above any real one (the shipped files are at most about 2 KiB,
# 54 lines, 263 values and 7 levels deep), low enough that no file exhausts memory, CPU time or Python's
# recursion limit (PyYAML's composer, the line index, deep copies and validation recurse once per level).
MAX_FILE_BYTES = 1 << 20
MAX_FILE_LINES = 10_000
#: lists and mappings inside one another
MAX_DEPTH = 64
#: keys, items and collections, an alias counting as a copy of what it names (or a few lines of
#: aliases of aliases would stand for billions of values)
MAX_VALUES = 50_000
#: values checked in a whole sweep (its points x the file's values): a few seconds of validation
MAX_SWEEP_VALUES = 1_000_000

# One place for how units read in messages; the unit is always the field name's suffix.
_UNIT_BY_SUFFIX = {
    "_pct": "a percentage",
    "_mbit": "in Mbit/s",
    "_ms": "in milliseconds",
    "_s": "in seconds",
    "_pkts": "in packets",
    "_bdp": "in bandwidth-delay products",
}


# --------------------------------------------------------------------------------------------------
# Schema


def _scenario_check(problems: list[tuple[tuple, str]]) -> PydanticCustomError:
    """An error for a custom check; each problem keeps its location relative to the validated object.

    pydantic reports a validator's error at the validator's own level; the file loader uses the
    ``problems`` context to point each one at its exact field and line.
    """
    summary = "; ".join(f"{_display_path(at)}: {message}" if at else message for at, message in problems)
    return PydanticCustomError("scenario_check", "{summary}", {"summary": summary, "problems": tuple(problems)})


#: an ON period [start_s, stop_s]: YAML and JSON give the pair as a list, so the pair is read laxly
#: (a list makes a tuple) while its two numbers stay strict (a bool is never a time)
Period = Annotated[tuple[StrictFloat, StrictFloat], Strict(False)]


class Flow(StrictModel):
    """One flow (or ``count`` identical flows) with its algorithm, direction, base RTT and ON time."""

    cc: str = Field(description="congestion-control algorithm, a kernel name from testbed/scenario/algorithms.py")
    direction: Literal["forward", "reverse"] = Field(
        default="forward",
        description="forward = left to right; reverse = sent from the right (receiver) side",
    )
    rtt_ms: float | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="base RTT of this flow's path (0: no added delay, e.g. on a kernel without netem); "
        "required on the dumbbell, not given where the topology's path sets it (parking_lot)",
    )
    path: str | None = Field(
        default=None,
        description="which of the topology's paths the flow takes (parking_lot: through, hop)",
    )
    rtt_max_ms: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="with count n: flow i (1..n) gets base RTT rtt_ms + (rtt_max_ms - rtt_ms) * i / n",
    )
    count: int = Field(default=1, ge=1, le=500, description="number of identical flows")
    size_mb: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="a fixed-size transfer of this many MB (10^6 bytes) per ON period instead of sending until "
        "its stop; the period's end is its deadline",
    )
    delayed_ack: bool = Field(default=True, description="false: the receiver ACKs every segment (route quickack)")
    sack: bool = Field(default=True, description="false: SACK off on the flow's hosts (net.ipv4.tcp_sack=0)")
    initcwnd_segs: int | None = Field(
        default=None, ge=1, le=1000, description="initial congestion window in segments (route initcwnd)"
    )
    window_kb: int | None = Field(
        default=None, ge=4, le=1_000_000,
        description="socket buffers of this many KiB on both ends (iperf3 -w): the window stays about this "
        "size, so the flow's rate is at most window / RTT",
    )  # fmt: skip
    start_s: float = Field(default=0.0, ge=0, description="start time")
    stop_s: float | None = Field(default=None, gt=0, description="stop time; None = the scenario's duration_s")
    periods: list[Period] | None = Field(
        default=None,
        min_length=1,
        description="ON periods as [start_s, stop_s] pairs instead of start_s/stop_s",
    )

    @field_validator("cc")
    @classmethod
    def _known_cc(cls, cc: str) -> str:
        if cc not in CC_REGISTRY:
            raise PydanticCustomError(
                "unknown_cc",
                "'{cc}' is not a known congestion-control algorithm; valid: {valid}{hint}",
                {"cc": cc, "valid": ", ".join(CC_REGISTRY), "hint": _did_you_mean(cc, CC_REGISTRY)},
            )
        return cc

    @field_validator("periods")
    @classmethod
    def _sorted_disjoint_periods(cls, periods: list[tuple[float, float]] | None):
        problems = []
        for i, (start, stop) in enumerate(periods or []):
            shown = f"period [{_num(start)}, {_num(stop)}]"
            if start < 0:
                problems.append(((i,), f"{shown} starts before 0 s"))
            if start >= stop:
                problems.append(((i,), f"{shown}: start must be before stop"))
            if i > 0 and start < periods[i - 1][1]:
                previous_stop = _num(periods[i - 1][1])
                message = f"{shown} starts before the previous period ends ({previous_stop} s)"
                problems.append(((i,), f"{message}; periods must be sorted and must not overlap"))
        if problems:
            raise _scenario_check(problems)
        return periods

    @model_validator(mode="after")
    def _start_before_stop(self) -> Flow:
        # Compared by value, not by "was it given": a dumped-and-reloaded flow carries the defaults.
        if self.periods is not None and (self.start_s != 0 or self.stop_s is not None):
            raise _scenario_check([(("periods",), "give either periods or start_s/stop_s, not both")])
        if self.rtt_max_ms is not None and self.rtt_ms is not None and self.rtt_max_ms <= self.rtt_ms:
            message = f"rtt_max_ms ({_num(self.rtt_max_ms)}) must be above rtt_ms ({_num(self.rtt_ms)})"
            raise _scenario_check([(("rtt_max_ms",), message)])
        if self.stop_s is not None and self.start_s >= self.stop_s:
            raise _scenario_check(
                [(("stop_s",), f"stop_s ({_num(self.stop_s)}) must be after start_s ({_num(self.start_s)})")]
            )
        return self

    def rtts_ms(self) -> list[float]:
        """The base RTT of each of the ``count`` flows: all ``rtt_ms``, or spread up to ``rtt_max_ms``
        (paper 000 §3.2: M flows with RTTs uniform in [20 + 230/M, 250] ms is rtt_ms 20, rtt_max_ms 250)."""
        if self.rtt_max_ms is None or self.rtt_ms is None:
            return [self.rtt_ms] * self.count
        step = (self.rtt_max_ms - self.rtt_ms) / self.count
        return [round(self.rtt_ms + step * i, 6) for i in range(1, self.count + 1)]

    def on_periods(self, duration_s: float) -> list[tuple[float, float]]:
        """The effective ON periods ``[(start_s, stop_s), ...]`` in a scenario of ``duration_s``."""
        if self.periods is not None:
            return list(self.periods)
        return [(self.start_s, self.stop_s if self.stop_s is not None else duration_s)]


# Built from the registry so that a new topology module needs no change here.
TopologyParams = Annotated[Union[tuple(TOPOLOGY_PARAMS.values())], Field(discriminator="name")]  # noqa: UP007


class Scenario(StrictModel):
    """One resolved experiment: a topology, its flows, how long, and which seeds."""

    description: str = Field(default="", description="free text shown in reports")
    topology: TopologyParams
    flows: list[Flow] = Field(min_length=1)
    duration_s: float = Field(gt=0, le=100_000, description="length of each run")
    seeds: list[int] = Field(default=[1], min_length=1, description="one run per seed")

    @field_validator("seeds")
    @classmethod
    def _valid_seeds(cls, seeds: list[int]) -> list[int]:
        problems = []
        for i, seed in enumerate(seeds):
            if seed < 0:
                problems.append(((i,), f"seed {seed} is out of range: must be at least 0"))
            if seed in seeds[:i]:
                problems.append(((i,), f"seed {seed} is listed twice; seeds must be unique"))
        if problems:
            raise _scenario_check(problems)
        return seeds

    @model_validator(mode="after")
    def _flows_fit(self) -> Scenario:
        problems: list[tuple[tuple, str]] = []
        end = f"the end of the run (duration_s {_num(self.duration_s)})"
        bottleneck = getattr(self.topology, "bottleneck", None)
        for i, flow in enumerate(self.flows):
            if flow.stop_s is not None and flow.stop_s > self.duration_s:
                problems.append((("flows", i, "stop_s"), f"stop_s {_num(flow.stop_s)} is after {end}"))
            if flow.stop_s is None and flow.periods is None and flow.start_s >= self.duration_s:
                problems.append((("flows", i, "start_s"), f"start_s {_num(flow.start_s)} is not before {end}"))
            if flow.periods and flow.periods[-1][1] > self.duration_s:
                last = len(flow.periods) - 1
                message = f"period ends at {_num(flow.periods[-1][1])} s, after {end}"
                problems.append((("flows", i, "periods", last), message))
            if isinstance(bottleneck, LinkParams) and flow.rtt_ms is not None and flow.rtt_ms < 2 * bottleneck.delay_ms:
                minimum = _num(2 * bottleneck.delay_ms)
                message = f"rtt_ms {_num(flow.rtt_ms)} is shorter than the bottleneck's own round trip: "
                problems.append(
                    (("flows", i, "rtt_ms"), f"{message}must be at least 2 x bottleneck delay_ms = {minimum}")
                )
        check_flows = getattr(type(self.topology), "check_flows", None)
        if check_flows is not None:
            problems += [(("flows", i, *at), message) for i, at, message in check_flows(self.topology, self.flows)]
        for name in type(self.topology).model_fields:
            link = getattr(self.topology, name)
            if isinstance(link, LinkParams) and isinstance(link.loss, TimedTwoStateLoss):
                horizon = self.duration_s + TIMELINE_SLACK_S
                states = expected_states(link.loss, horizon)
                if states > MAX_STATES / 2:
                    message = (f"about {states:.0f} channel states in {_num(horizon)} s; at most {MAX_STATES // 2} "
                               f"fit: use longer good_s/bad_s or a shorter duration_s")  # fmt: skip
                    problems.append((("topology", name, "loss"), message))
        if problems:
            raise _scenario_check(problems)
        return self


# --------------------------------------------------------------------------------------------------
# Results of loading


class ScenarioError(Exception):
    """A scenario that cannot run; ``str()`` is the full human text, ``problems`` the parts."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__("\n".join([f"{source}: {count}:", *(f"  {problem}" for problem in problems)]))


@dataclass(frozen=True)
class Problem:
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = ", ".join(part for part in (f"line {self.line}" if self.line else "", self.path) if part)
        return f"{where}: {self.message}" if where else self.message


@dataclass(frozen=True)
class RunSpec:
    """One run: a point of a scenario with one seed."""

    scenario_name: str
    point_id: str
    params: dict[str, object]
    seed: int
    scenario: Scenario
    #: the profile the point was loaded with when not its session's (a suite entry's own profile)
    profile: str | None = None

    def identity(self) -> str:
        """sha256 of what determines the run's result (the caller adds the kernel).

        ``seeds`` and ``description`` are left out: adding a seed or rewording the description
        must not turn finished runs into new ones (an interrupted sweep resumes by identity).
        """
        resolved = self.scenario.model_dump(mode="json", exclude={"seeds", "description"})
        canonical = json.dumps([self.scenario_name, resolved, self.seed], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Point:
    """One combination of sweep values, resolved and validated."""

    scenario_name: str
    point_id: str
    params: dict[str, object]
    scenario: Scenario
    #: the profile the point was loaded with when not its session's (a suite entry's own profile)
    profile: str | None = None

    def runs(self) -> list[RunSpec]:
        return [
            RunSpec(self.scenario_name, self.point_id, self.params, seed, self.scenario, self.profile)
            for seed in self.scenario.seeds
        ]


@dataclass(frozen=True)
class ScenarioFile:
    """A loaded scenario file: every point of its sweep, under one profile."""

    name: str
    path: Path
    profile: str | None
    description: str
    points: list[Point] = field(default_factory=list)
    #: every profile the file defines (to run a file under each of them)
    profiles: tuple[str, ...] = ()
    #: a suite's positive controls for ``testbed regress``: point id -> the candidate's flow options
    controls: dict[str, dict] = field(default_factory=dict)

    def runs(self) -> list[RunSpec]:
        return [run for point in self.points for run in point.runs()]

    def select(self, only: Sequence[str] = (), seeds: Sequence[int] = ()) -> ScenarioFile:
        """The part of the sweep to run: the points whose swept values match every ``KEY=VALUE[,VALUE...]``
        of ``only`` (KEY as in the point ids: ``cc``, ``flows.0.cc``) and, with ``seeds``, only those
        of the file's seeds. For one point of a full profile, or one seed. Runs keep their identity, so
        a later run of the whole sweep resumes around them. Raises :class:`ScenarioError` naming the
        swept parameters, values and seeds that exist."""
        swept: dict[str, list[str]] = {}
        for point in self.points:
            for key, value in point.params.items():
                values = swept.setdefault(_id_key(key), [])
                if _format_value(value) not in values:
                    values.append(_format_value(value))
        problems: list[Problem] = []
        wanted: dict[str, set[str]] = {}
        for condition in only:
            key, sep, values = condition.partition("=")
            key = _id_key(key.strip())
            given = {_canonical(v.strip(), swept.get(key, [])) for v in values.split(",")}
            if not sep or not key or not values.strip():
                message = f"'{condition}': expected KEY=VALUE[,VALUE...], e.g. cc=westwood"
            elif key not in swept:
                names = ", ".join(swept) or "none: the file sweeps nothing"
                message = f"'{key}' is not swept here; swept: {names}{_did_you_mean(key, list(swept))}"
            elif missing := sorted(given - set(swept[key])):
                message = f"{key} has no value {', '.join(missing)}; its values: {', '.join(swept[key])}"
            else:
                wanted.setdefault(key, set()).update(given)
                continue
            problems.append(Problem(None, "--only", message))
        file_seeds = sorted({seed for point in self.points for seed in point.scenario.seeds})
        if extra := sorted(set(seeds) - set(file_seeds)):
            listed = ", ".join(map(str, file_seeds))
            message = f"seed {', '.join(map(str, extra))} is not in this profile; its seeds: {listed}"
            problems.append(Problem(None, "--seed", message))
        if problems:
            raise ScenarioError(str(self.path), problems)
        points = []
        for point in self.points:
            if all(_format_value(v) in wanted.get(_id_key(k), {_format_value(v)}) for k, v in point.params.items()):
                kept = [seed for seed in point.scenario.seeds if not seeds or seed in seeds]
                if kept:
                    scenario = point.scenario.model_copy(update={"seeds": kept})
                    points.append(dataclasses.replace(point, scenario=scenario))
        if not points:
            message = "no point of the sweep has all of these values (and seeds)"
            raise ScenarioError(str(self.path), [Problem(None, "--only", message)])
        return dataclasses.replace(self, points=points)


# --------------------------------------------------------------------------------------------------
# Public entry points


def load_scenario(path: str | Path, profile: str | None = None) -> ScenarioFile:
    """Load, expand and validate a scenario file; raise :class:`ScenarioError` listing every problem."""
    path = Path(path)
    text = read_yaml_text(path)
    return _load_text(text, name=path.stem, source=str(path), path=path, profile=profile)


def load_scenario_text(text: str, name: str = "<string>", profile: str | None = None) -> ScenarioFile:
    """Like :func:`load_scenario`, for YAML text already in memory."""
    return _load_text(text, name=name, source=name, path=Path(name), profile=profile)


def scenario_from_dict(data: dict, name: str = "<python>", profile: str | None = None) -> ScenarioFile:
    """Build a scenario from Python data (the same keys as a file; lists make sweeps)."""
    if not isinstance(data, Mapping):
        raise ScenarioError(name, [Problem(None, "", f"expected a mapping, got {type(data).__name__}")])
    return _expand(
        copy.deepcopy(dict(data)),
        name=name,
        source=name,
        path=Path(name),
        lines={},
        problems=[],
        profile=profile,
    )


def find_scenario(name_or_path: str, search_dir: Path) -> Path:
    """The file of a scenario: ``default`` -> ``<search_dir>/default.yaml`` (or ``.yml``); a path as given."""
    given = Path(name_or_path)
    if given.suffix in SCENARIO_SUFFIXES or len(given.parts) > 1:
        if given.is_file():
            return given
        # a path inside the scenarios folder: regression/dumbbell -> <search_dir>/regression/dumbbell.yaml
        for candidate in [Path(search_dir) / given, *(Path(search_dir) / f"{given}{s}" for s in SCENARIO_SUFFIXES)]:
            if not given.is_absolute() and candidate.is_file():
                return candidate
        raise ScenarioError(name_or_path, [Problem(None, "", "no such file")])
    for suffix in SCENARIO_SUFFIXES:
        candidate = Path(search_dir) / f"{name_or_path}{suffix}"
        if candidate.is_file():
            return candidate
    available = sorted({p.stem for suffix in SCENARIO_SUFFIXES for p in Path(search_dir).glob(f"*{suffix}")})
    message = (
        f"no scenario named '{name_or_path}' in {search_dir}; available: {', '.join(available) or '(none)'}"
        f"{_did_you_mean(name_or_path, available)}"
    )
    raise ScenarioError(name_or_path, [Problem(None, "", message)])


# --------------------------------------------------------------------------------------------------
# YAML: data plus the line of every path

DataPath = tuple  # a location in the data: keys and list indices, e.g. ("flows", 0, "cc")


def _load_text(text: str, *, name: str, source: str, path: Path, profile: str | None) -> ScenarioFile:
    data, lines, problems = compose_yaml(text, source)
    if not isinstance(data, dict):
        found = "the file is empty" if data is None else f"the file holds a {type(data).__name__}"
        raise ScenarioError(
            source, [Problem(1, "", f"{found}; a scenario is a mapping with topology, flows and duration_s")]
        )
    return _expand(data, name=name, source=source, path=path, lines=lines, problems=problems, profile=profile)


def read_yaml_text(path: Path) -> str:
    """The text of a scenario or suite file; reads no further than the size bound (a huge file, or a
    device that never ends, is refused without being read whole)."""
    source = str(path)
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ScenarioError(source, [Problem(None, "", f"cannot read the file: {error.strerror}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(source, [Problem(None, "", _too_large())])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        byte = f"0x{raw[error.start]:02x}"
        raise ScenarioError(
            source, [Problem(line, "", f"byte {byte} is not UTF-8 text; save the file as UTF-8")]
        ) from None


def compose_yaml(text: str, source: str) -> tuple[Any, dict[DataPath, int], list[Problem]]:
    """The data of a YAML file, the line of every path in it, and its duplicate keys.

    Raises :class:`ScenarioError` for text that is not YAML (or not only data) or that is larger,
    longer or deeper than the bounds.
    """
    _check_text_bounds(text, source)
    loader = yaml.SafeLoader(text)
    lines: dict[DataPath, int] = {(): 1}
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_node_bounds(node, source)
            # Before constructing: construction flattens '<<' merges into the node tree.
            _index_lines(node, (), lines, problems, yaml.SafeLoader(""))
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        raise ScenarioError(source, [_yaml_problem(error)]) from None
    except RecursionError:
        # The bounds keep every recursion far below Python's limit; should one still get there
        # (a lower limit, a path the bounds miss), the file is refused as clearly.
        raise ScenarioError(source, [Problem(None, "", _too_deep())]) from None
    finally:
        loader.dispose()
    return data, lines, problems


def _check_text_bounds(text: str, source: str) -> None:
    """Size, lines, depth and values of the raw text: checked before composing, which recurses once
    per level (5,000 nested brackets would end in a RecursionError) and takes seconds per 100,000 values."""
    if len(text) > MAX_FILE_BYTES:
        problem = Problem(None, "", _too_large())
    elif (breaks := text.count("\n")) > MAX_FILE_LINES:
        message = f"the file has {breaks} lines; a scenario or suite file may have at most {MAX_FILE_LINES}"
        problem = Problem(MAX_FILE_LINES + 1, "", message)
    else:
        problem = _scan_problem(text)
    if problem is not None:
        raise ScenarioError(source, [problem])


#: tokens that open and close a list or mapping. A list at its key's indent ('key:' then '- item'
#: lines) has no start token, but it sits in a mapping that has one: the scan sees at least half of
#: the real depth, enough to keep the composer's recursion short; the composed nodes are checked exactly.
_OPENS = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
          yaml.FlowSequenceStartToken)  # fmt: skip
_CLOSES = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
_VALUE_TOKENS = (yaml.ScalarToken, yaml.AliasToken, *_OPENS)
#: libyaml's scanner when PyYAML has it: ten times faster on a file at the size bound
_SCANNER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _scan_problem(text: str) -> Problem | None:
    """Too deep or too many values, found in the token stream (the scanner keeps no stack)."""
    depth = values = 0
    try:
        for token in yaml.scan(text, Loader=_SCANNER):
            depth += isinstance(token, _OPENS) - isinstance(token, _CLOSES)
            values += isinstance(token, _VALUE_TOKENS)
            if depth > MAX_DEPTH or values > MAX_VALUES:
                return Problem(token.start_mark.line + 1, "", _too_deep() if depth > MAX_DEPTH else _too_many())
    except yaml.YAMLError:
        pass  # a syntax error: composing reports it, in PyYAML's words and with its line
    return None


def _check_node_bounds(root: yaml.Node, source: str) -> None:
    """The bounds on the composed document, where every alias stands for a copy of what it names."""
    measured = _measure(root)
    if measured is None:
        message = (
            "an alias (*name) is used inside the list or mapping that its anchor (&name) marks, so the "
            "data would be infinitely deep; an alias may only repeat a value that is complete before it"
        )
    elif measured[0] > MAX_VALUES:
        message = _too_many()
    elif measured[1] > MAX_DEPTH:
        message = _too_deep()
    else:
        return
    raise ScenarioError(source, [Problem(None, "", message)])


def _measure(root: yaml.Node) -> tuple[int, int] | None:
    """Values and depth of the document with every alias expanded; None when a collection holds itself.

    Iterative, and each node is measured once (an alias shares its anchor's node), so the cost is the
    number of nodes written, however deep or however many times aliases multiply them.
    """
    measured: dict[int, tuple[int, int]] = {}
    open_ids: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _child_nodes(node)
        if children_done:
            sizes = [measured[id(child)] for child in children]
            measured[id(node)] = (1 + sum(v for v, _ in sizes), 1 + max((d for _, d in sizes), default=0))
            open_ids.discard(id(node))
        elif id(node) in open_ids:
            return None  # reached again from inside itself: '&a [*a]'
        elif not isinstance(node, yaml.CollectionNode):
            measured[id(node)] = (1, 0)
        elif id(node) not in measured:
            open_ids.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children)
    return measured[id(root)]


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    """The keys and values of a mapping, the items of a list; none for a scalar."""
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _too_large() -> str:
    size = f"{MAX_FILE_BYTES >> 20} MiB"
    return f"the file is larger than {size}; a scenario or suite file may be at most {size} (shipped ones: a few KiB)"


def _too_deep() -> str:
    return (f"lists and mappings are nested more than {MAX_DEPTH} levels deep; a scenario or suite file may nest "
            f"at most {MAX_DEPTH}")  # fmt: skip


def _too_many() -> str:
    return (f"the file holds more than {MAX_VALUES} values (keys, items and collections; an alias counts as a copy "
            f"of what it names); a scenario or suite file may hold at most {MAX_VALUES}")  # fmt: skip


def _yaml_problem(error: yaml.YAMLError) -> Problem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem, context = getattr(error, "problem", None), getattr(error, "context", None)
    detail = f"{problem} ({context})" if problem and context else problem or context or str(error)
    column = f" at column {mark.column + 1}" if mark is not None else ""
    # A constructor error is well-formed YAML we refuse (e.g. a !!python tag), not a syntax error.
    kind = "unsupported YAML" if isinstance(error, yaml.constructor.ConstructorError) else "YAML syntax error"
    return Problem(mark.line + 1 if mark is not None else None, "", f"{kind}{column}: {detail}")


def _index_lines(
    node: yaml.Node,
    path: DataPath,
    lines: dict[DataPath, int],
    problems: list[Problem],
    keys: yaml.SafeLoader,
) -> None:
    """Record the line of every key and list item; report duplicate keys (PyYAML keeps the last silently)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # entries merged in with '<<' fall back to the line of the mapping that holds them
            key_path = (*path, keys.construct_object(key_node))
            line = key_node.start_mark.line + 1
            if key_path in lines:
                where = _display_path(key_path)
                problems.append(Problem(line, where, f"duplicate key (first given on line {lines[key_path]})"))
            lines.setdefault(key_path, line)
            _index_lines(value_node, key_path, lines, problems, keys)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _index_lines(item, (*path, index), lines, problems, keys)


def _line_of(path: DataPath, lines: Mapping[DataPath, int]) -> int | None:
    """The line of ``path``, or of its nearest parent that the file spells out (e.g. for a missing field)."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


# --------------------------------------------------------------------------------------------------
# Profiles, sweep axes, expansion


def _expand(
    data: dict,
    *,
    name: str,
    source: str,
    path: Path,
    lines: dict[DataPath, int],
    problems: list[Problem],
    profile: str | None,
) -> ScenarioFile:
    data, lines, profile, profiles = _apply_profile(data, lines, profile, source, problems)
    _apply_time_scale(data, lines, problems)
    axes, reported = _find_axes(data, lines, problems)

    too_large = _sweep_too_large(axes, data)
    if too_large:
        problems.append(Problem(_line_of(axes[0].path, lines), "", too_large))
        raise ScenarioError(source, _sorted_unique(problems))

    short_names = _short_names([axis.path for axis in axes])
    points: list[Point] = []
    for choice in itertools.product(*(range(len(axis.values)) for axis in axes)):
        point_data = copy.deepcopy(data)
        point_lines = dict(lines)
        params: dict[str, object] = {}
        id_parts = []
        for axis, index, short in zip(axes, choice, short_names, strict=True):
            value = axis.values[index]
            _set_at(point_data, axis.path, value)
            point_lines[axis.path] = axis.lines[index]
            params[short] = value
            id_parts.append(f"{_safe(_id_key(short))}={_safe(_format_value(value))}")
        try:
            scenario = Scenario.model_validate(point_data)
        except ValidationError as error:
            found = validation_problems(error, point_data, point_lines)
            problems.extend(p for p in found if not any(_within(p.path, r) for r in reported))
            continue
        points.append(Point(name, _shorten(",".join(id_parts) or "default"), params, scenario))

    ids = Counter(point.point_id for point in points)
    for point_id in sorted(i for i, count in ids.items() if count > 1):
        message = f"two sweep points get the same id '{point_id}'; make the listed values distinct"
        problems.append(Problem(_line_of(axes[0].path, lines), "", message))
    if problems:
        raise ScenarioError(source, _sorted_unique(problems))
    description = points[0].scenario.description.strip()
    return ScenarioFile(name, path, profile, description, points, profiles)


def _sweep_too_large(axes: list[_Axis], data: dict) -> str | None:
    """Why the sweep is too large to expand, if it is: every point is a copy of the file, validated."""
    combinations = math.prod(len(axis.values) for axis in axes)
    if combinations > MAX_POINTS:
        return (
            f"the sweep has {combinations} points (the product of every list); more than {MAX_POINTS} "
            "is almost certainly a list where one value was meant"
        )
    # a point holds one value of each swept list, not the list
    values = sum(1 for _ in _paths_of(data)) - sum(len(axis.values) for axis in axes)
    if combinations * values > MAX_SWEEP_VALUES:
        return (
            f"the sweep has {combinations} points of {values} values each; at most {MAX_SWEEP_VALUES} values "
            "in all are checked: sweep fewer values, or split the file"
        )
    return None


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith((f"{parent}.", f"{parent}["))


def _sorted_unique(problems: list[Problem]) -> list[Problem]:
    return sorted(set(problems), key=lambda p: (p.line if p.line is not None else 0, p.path, p.message))


def _apply_profile(
    data: dict, lines: dict[DataPath, int], profile: str | None, source: str, problems: list[Problem]
) -> tuple[dict, dict[DataPath, int], str | None, tuple[str, ...]]:
    """Deep-merge the chosen profile over the base (maps merge, lists and scalars replace).

    Returns the merged data, the line of each of its paths (a profile's values keep their own
    lines), the profile used and the names of all the file's profiles.
    """
    profiles = data.pop("profiles", None)
    base_lines = {p: line for p, line in lines.items() if p[:1] != ("profiles",)}

    def fail(line: int | None, path: str, message: str) -> ScenarioError:
        return ScenarioError(source, _sorted_unique([*problems, Problem(line, path, message)]))

    if profiles is None:
        if profile is not None:
            raise fail(None, "", f"profile '{profile}' asked for, but this file defines no profiles")
        return data, base_lines, None, ()
    if not isinstance(profiles, dict) or not all(isinstance(body, dict) for body in profiles.values()):
        raise fail(lines.get(("profiles",)), "profiles", "expected a mapping of profile name -> partial scenario")
    names = tuple(map(str, profiles))
    if profile is None:
        if DEFAULT_PROFILE not in profiles:
            return data, base_lines, None, names
        profile = DEFAULT_PROFILE
    if profile not in profiles:
        hint = _did_you_mean(profile, names)
        message = f"unknown profile '{profile}'; this file's profiles: {', '.join(names)}{hint}"
        raise fail(lines.get(("profiles",)), "profiles", message)
    override = profiles[profile]
    if "profiles" in override:
        raise fail(
            lines.get(("profiles", profile, "profiles")),
            f"profiles.{profile}",
            "a profile cannot hold profiles",
        )
    merged = _deep_merge(data, override)
    present = set(_paths_of(merged))
    override_lines = {p[2:]: line for p, line in lines.items() if p[:2] == ("profiles", profile) and len(p) > 2}
    merged_lines = {p: line for p, line in base_lines.items() if p in present}
    merged_lines.update({p: line for p, line in override_lines.items() if p in present})
    return merged, merged_lines, profile, names


def _deep_merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


#: the fields ``time_scale`` multiplies: the run's length and the flows' schedule (never RTTs or loss states)
_SCALED_FLOW_FIELDS = ("start_s", "stop_s", "periods")


def _apply_time_scale(data: dict, lines: Mapping[DataPath, int], problems: list[Problem]) -> None:
    """``time_scale: f`` (usually in a profile) multiplies duration_s and every flow's start, stop and
    ON periods by f: the same experiment, time-compressed. Link delays and loss states are not scaled."""
    if "time_scale" not in data:
        return
    scale = data.pop("time_scale")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1000:
        problems.append(Problem(_line_of(("time_scale",), lines), "time_scale",
                                f"{_show(scale)} is not valid: a number greater than 0 and at most 1000"))  # fmt: skip
        return

    def scaled(value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return round(value * scale, 9)
        if isinstance(value, list):
            return [scaled(item) for item in value]
        return value

    if "duration_s" in data:
        data["duration_s"] = scaled(data["duration_s"])
    for flow in data.get("flows") or []:
        if isinstance(flow, dict):
            for key in _SCALED_FLOW_FIELDS:
                if key in flow:
                    flow[key] = scaled(flow[key])


def _paths_of(data: Any, path: DataPath = ()) -> Iterator[DataPath]:
    yield path
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths_of(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths_of(value, (*path, index))


@dataclass(frozen=True)
class _Axis:
    path: DataPath
    values: list
    lines: list[int | None]


def _find_axes(data: dict, lines: Mapping[DataPath, int], problems: list[Problem]) -> tuple[list[_Axis], set[str]]:
    """The sweep axes in file order, and the display paths of lists already reported as bad sweeps.

    A bad sweep is pinned to its first value (or removed when empty) so that the rest of the
    file is still validated and every problem is reported at once.
    """
    axes: list[_Axis] = []
    reported: set[str] = set()
    for axis_path in list(_axis_paths(data, Scenario, ())):
        values = _get_at(data, axis_path)
        value_lines = [lines.get((*axis_path, i), _line_of(axis_path, lines)) for i in range(len(values))]
        where = _display_path(axis_path)
        bad = [
            Problem(
                line,
                where,
                f"a list here makes a sweep, and sweep values are single numbers or names; {where} takes one value",
            )
            for value, line in zip(values, value_lines, strict=True)
            if isinstance(value, (dict, list))
        ]
        if not values:
            bad.append(Problem(_line_of(axis_path, lines), where, "empty list: a sweep needs at least one value"))
        if bad:
            problems.extend(bad)
            reported.add(where)
            if values:
                _set_at(data, axis_path, values[0])
            else:
                del _get_at(data, axis_path[:-1])[axis_path[-1]]
            continue
        kept, kept_lines, seen = [], [], set()
        for value, line in zip(values, value_lines, strict=True):
            keys = _sweep_keys(value)
            if keys & seen:
                problems.append(Problem(line, where, f"the sweep lists {_show(value)} twice"))
                continue
            seen |= keys
            kept.append(value)
            kept_lines.append(line)
        axes.append(_Axis(axis_path, kept, kept_lines))
    return axes, reported


def _axis_paths(raw: Any, annotation: Any, path: DataPath) -> Iterator[DataPath]:
    """Paths where the schema wants one value but the data holds a list, in file order."""
    annotation = _strip(annotation)
    if _is_collection(annotation):
        item = _strip(get_args(annotation)[0]) if get_origin(annotation) is list and get_args(annotation) else None
        if isinstance(raw, list) and item is not None and (_is_model(item) or _model_union(item)):
            for index, value in enumerate(raw):
                yield from _axis_paths(value, item, (*path, index))
        return
    if isinstance(raw, list):
        yield path
        return
    model = _pick_model(annotation, raw)
    if model is not None and isinstance(raw, dict):
        for key, value in raw.items():
            if key in model.model_fields:
                yield from _axis_paths(value, model.model_fields[key].annotation, (*path, key))


def _short_names(paths: list[DataPath]) -> list[str]:
    leaves = [next((str(p) for p in reversed(path) if isinstance(p, str)), _display_path(path)) for path in paths]
    return [_display_path(path) if leaves.count(leaf) > 1 else leaf for path, leaf in zip(paths, leaves, strict=True)]


def _get_at(data: Any, path: DataPath) -> Any:
    for key in path:
        data = data[key]
    return data


def _set_at(data: Any, path: DataPath, value: Any) -> None:
    _get_at(data, path[:-1])[path[-1]] = copy.deepcopy(value)


def _sweep_keys(value: Any) -> set:
    """What makes two sweep values one: equal (10 and 10.0) or written alike (.nan and .nan).

    A bool and a number are never one (1 == True in Python): [1, true] lists two values and the
    second is reported as a bool where a number belongs. Sets keep a long list linear to check.
    """
    is_bool = isinstance(value, bool)
    keys = {(is_bool, "text", _format_value(value))}
    try:
        keys.add((is_bool, "value", value))
    except TypeError:
        pass  # an unhashable value (a model object from Python) is compared by its text
    return keys


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _id_key(key: str) -> str:
    """A swept parameter's name as point ids spell it: ``flows[0].cc`` -> ``flows.0.cc``."""
    return key.replace("[", ".").replace("]", "")


def _canonical(text: str, values: list[str]) -> str:
    """``text`` as one of ``values`` when it is the same number (``10`` for ``10.0``), else unchanged."""
    try:
        number = float(text)
    except ValueError:
        return text
    for value in values:
        try:
            if float(value) == number:
                return value
        except ValueError:
            continue
    return text


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


def _shorten(point_id: str) -> str:
    if len(point_id) <= MAX_POINT_ID_CHARS:
        return point_id
    digest = hashlib.sha256(point_id.encode()).hexdigest()[:12]
    return f"{point_id[: MAX_POINT_ID_CHARS - 13]}-{digest}"


# --------------------------------------------------------------------------------------------------
# Walking the schema: annotations, models, the topology union


def _strip(annotation: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X``; ``X | None`` -> ``X``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
            continue
        if origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_collection(annotation: Any) -> bool:
    collections = (list, tuple, set, frozenset, dict)
    return get_origin(annotation) in collections or annotation in collections


def _model_union(annotation: Any) -> list[type[BaseModel]]:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [_strip(arg) for arg in get_args(annotation)]
        if members and all(_is_model(member) for member in members):
            return members
    return []


#: the fields that pick a member of a union: ``topology.name``, ``loss.model``
_TAG_KEYS = ("name", "model")


def _tag_of(model: type[BaseModel]) -> str | None:
    """The ``name`` (or ``model``) a union member answers to (its ``Literal`` value)."""
    for key in _TAG_KEYS:
        tag_field = model.model_fields.get(key)
        if tag_field is not None and get_origin(tag_field.annotation) is Literal:
            return get_args(tag_field.annotation)[0]
    return None


def _pick_model(annotation: Any, raw: Any) -> type[BaseModel] | None:
    if _is_model(annotation):
        return annotation
    members = _model_union(annotation)
    if not members:
        return None
    if isinstance(raw, BaseModel):
        return type(raw)
    tag = next((raw[key] for key in _TAG_KEYS if key in raw), None) if isinstance(raw, dict) else None
    if isinstance(tag, list) and tag:
        tag = tag[0]  # a sweep over the name itself: walk the first member's fields
    return next((member for member in members if _tag_of(member) == tag), None)


def _resolve(loc: tuple, data: Any, root: type[BaseModel] = Scenario) -> tuple[DataPath, Any, FieldInfo | None]:
    """Map a pydantic ``loc`` onto a data path (dropping union tags).

    Also returns the annotation expected at that path and, when the path ends at a model
    field, that field's ``FieldInfo`` (its constraints and description feed the messages).
    """
    path: list = []
    annotation: Any = root
    info: FieldInfo | None = None
    raw = data
    for step in loc:
        annotation = _strip(annotation)
        model = _pick_model(annotation, raw)
        members = _model_union(annotation) or ([annotation] if _is_model(annotation) else [])
        if step in {_tag_of(m) for m in members} and (model is None or step not in model.model_fields):
            continue  # pydantic names the union member it tried (even a one-member union); the file does not
        if model is not None and isinstance(step, str):
            info = model.model_fields.get(step)
            annotation = info.annotation if info is not None else None
        elif isinstance(step, int) and get_origin(annotation) in (list, tuple):
            items = get_args(annotation)
            annotation = items[0] if get_origin(annotation) is list else items[min(step, len(items) - 1)]
            info = None
        else:
            annotation, info = None, None
        path.append(step)
        raw = _child(raw, step)
    return tuple(path), annotation, info


def _model_at(path: DataPath, data: Any, root: type[BaseModel]) -> type[BaseModel] | None:
    """The model that the mapping at ``path`` is validated as."""
    _, annotation, _ = _resolve(path, data, root)
    return _pick_model(_strip(annotation), _get_or_none(data, path))


def _child(raw: Any, step: Any) -> Any:
    if isinstance(raw, dict):
        return raw.get(step)
    if isinstance(raw, list) and isinstance(step, int) and 0 <= step < len(raw):
        return raw[step]
    return None


def _get_or_none(data: Any, path: DataPath) -> Any:
    for step in path:
        data = _child(data, step)
    return data


# --------------------------------------------------------------------------------------------------
# Error messages


def validation_problems(
    error: ValidationError, data: Any, lines: Mapping[DataPath, int], root: type[BaseModel] = Scenario
) -> list[Problem]:
    """The problems of ``root.model_validate(data)``, each with its line: a scenario's, or a suite's."""
    problems = []
    for detail in error.errors(include_url=False):
        path, _, info = _resolve(detail["loc"], data, root)
        kind = detail["type"]
        if kind == "scenario_check":
            for at, message in detail["ctx"]["problems"]:
                full = (*path, *at)
                problems.append(Problem(_line_of(full, lines), _display_path(full), message))
            continue
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            path = (*path, _union_key(detail))
        period = _period_path(path)
        if period is not None and kind in ("missing", "too_long", "too_short", "tuple_type"):
            path, message = (
                period,
                f"a period is a pair [start_s, stop_s], got {_show(_get_or_none(data, period))}",
            )
        else:
            message = _message(kind, detail, path, data, info, root)
        problems.append(Problem(_line_of(path, lines), _display_path(path), message))
    return problems


def _message(kind: str, detail: dict, path: DataPath, data: Any, info: FieldInfo | None, root: type[BaseModel]) -> str:
    ctx = detail.get("ctx", {})
    value = detail.get("input")
    leaf = next((str(p) for p in reversed(path) if isinstance(p, str)), "")
    unit = _unit(leaf)
    if kind == "extra_forbidden":
        model = _model_at(path[:-1], data, root)
        valid = list(model.model_fields) if model is not None else []
        return f"unknown field; valid fields here: {', '.join(valid)}{_did_you_mean(str(path[-1]), valid)}"
    if kind == "missing":
        about = ", ".join(filter(None, [info.description, unit, _range_text(info, {})])) if info else ""
        return f"required field '{leaf}' is missing" + (f": {about}" if about else "")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{_show(value)} is out of range: must be {_range_text(info, ctx)}{f' ({unit})' if unit else ''}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = _union_key(detail)
        what, options = ("topology", list(TOPOLOGY_PARAMS)) if key == "name" else (
            "loss model", list(LOSS_MODEL_NAMES))  # fmt: skip
        if kind == "union_tag_not_found":
            return f"which {what}? add '{key}:' with one of: {', '.join(options)}"
        tag = str(ctx.get("tag"))
        return f"'{tag}' is not a known {what}; valid: {', '.join(options)}{_did_you_mean(tag, options)}"
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        hint = _did_you_mean(str(value), options)
        return f"{_show(value)} is not valid here; valid: {', '.join(options)}{hint}"
    if kind in ("float_parsing", "float_type", "int_parsing", "int_type", "int_from_float"):
        return _number_message(kind, value, leaf)
    if kind in ("string_type", "bool_type", "bool_parsing"):
        return f"expected {'text' if kind == 'string_type' else 'true or false'}, got {_show(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list (e.g. [1, 2] or one '- ' line per item), got {_show(value)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping ('key: value' lines), got {_show(value)}"
    if kind == "too_short":
        return _too_short(ctx)
    if kind == "too_long":
        return f"too many items: at most {ctx.get('max_length')}, got {ctx.get('actual_length')}"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", detail["msg"]))
    return detail["msg"]


def _number_message(kind: str, value: Any, leaf: str) -> str:
    whole = "a whole number" if kind.startswith("int") else "a number"
    unit = _unit(leaf)
    if isinstance(value, bool):
        # YAML's true/false are not 1/0 here (strict models): say so, with the unit the number is in
        in_unit = f" {unit}" if unit.startswith("in ") else f" ({unit})" if unit else ""
        return f"expected {whole}{in_unit}, got the bool {_show(value)}"
    if isinstance(value, str) and _is_number(value):
        return f"expected {whole}, got the text {_show(value)} (write the number without quotes)"
    shown = repr(value) if isinstance(value, float) else _show(value)  # 2.0, not 2, for a whole number
    note = f" (write the number only: {leaf} is {unit})" if unit and isinstance(value, str) else ""
    return f"expected {whole}, got {shown}{note}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _union_key(detail: dict) -> str:
    """The field that picks the union member in a ``union_tag_*`` error (``name`` or ``model``)."""
    return str(detail.get("ctx", {}).get("discriminator", "'name'")).strip("'\"")


def _period_path(path: DataPath) -> DataPath | None:
    """The path of the period that ``path`` is in or at (``flows[0].periods[1]``), if any."""
    for i in range(len(path) - 1):
        if path[i] == "periods" and isinstance(path[i + 1], int):
            return path[: i + 2]
    return None


def _too_short(ctx: dict) -> str:
    minimum = ctx.get("min_length")
    return f"needs at least {minimum} item{'s' if minimum != 1 else ''}, got {ctx.get('actual_length')}"


def _range_text(info: FieldInfo | None, ctx: dict) -> str:
    """The whole valid range of a field ('between 0 and 100'), not only the side that was crossed."""
    bounds: dict[str, Any] = {}
    for constraint in info.metadata if info is not None else []:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(constraint, name, None) is not None:
                bounds[name] = getattr(constraint, name)
    if not bounds:
        bounds = {name: ctx[name] for name in ("gt", "ge", "lt", "le") if name in ctx}
    if "ge" in bounds and "le" in bounds:
        return f"between {_num(bounds['ge'])} and {_num(bounds['le'])}"
    words = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}
    return " and ".join(f"{words[name]} {_num(bounds[name])}" for name in ("gt", "ge", "lt", "le") if name in bounds)


def _unit(leaf: str) -> str:
    return next((unit for suffix, unit in _UNIT_BY_SUFFIX.items() if leaf.endswith(suffix)), "")


def _did_you_mean(word: str, options: Any) -> str:
    match = difflib.get_close_matches(str(word), [str(option) for option in options], n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _display_path(path: DataPath) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def _num(number: Any) -> str:
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return _format_value(value)
