"""Loading a scenario: the public entry points, and the pipeline from a file's text to its validated points
(described in testbed/scenario/__init__.py)."""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from testbed.scenario.errors import (
    DataPath,
    Problem,
    ScenarioError,
    _did_you_mean,
    _display_path,
    _format_value,
    _sorted_unique,
)
from testbed.scenario.messages import validation_problems
from testbed.scenario.points import Point, ScenarioFile
from testbed.scenario.profiles import _apply_profile, _apply_time_scale
from testbed.scenario.schema import Scenario
from testbed.scenario.sweep import _find_axes, _id_key, _safe, _set_at, _short_names, _shorten, _sweep_too_large
from testbed.scenario.yamlfile import _line_of, compose_yaml, read_yaml_text

SCENARIO_SUFFIXES = (".yaml", ".yml")


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


def _load_text(text: str, *, name: str, source: str, path: Path, profile: str | None) -> ScenarioFile:
    data, lines, problems = compose_yaml(text, source)
    if not isinstance(data, dict):
        found = "the file is empty" if data is None else f"the file holds a {type(data).__name__}"
        raise ScenarioError(
            source, [Problem(1, "", f"{found}; a scenario is a mapping with topology, flows and duration_s")]
        )
    return _expand(data, name=name, source=source, path=path, lines=lines, problems=problems, profile=profile)


#: a course lab's starter file leaves a knob to the student as ``TODO(task N: what to set)`` (labs/)
KNOB_MARK = "TODO"
KNOB_LEFT = "left for you to set"


def knobs_left(data, path: DataPath, lines: dict[DataPath, int]) -> list[Problem]:
    """Every value of the file still ``TODO(...)``: a knob a lab's task asks the student to set."""
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in knobs_left(value, (*path, key), lines)]
    if isinstance(data, list):
        return [p for index, value in enumerate(data) for p in knobs_left(value, (*path, index), lines)]
    if isinstance(data, str) and data.strip().startswith(KNOB_MARK):
        what = data.strip()[len(KNOB_MARK) :].strip(" :()") or "see the lab's handout"
        message = f"{KNOB_LEFT}: {what}; write your value in place of {KNOB_MARK}(...) and run again"
        return [Problem(_line_of(path, lines), _display_path(path), message)]
    return []


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
    # after the profile: a knob left TODO in the file stands unless the profile run sets it
    if knobs := knobs_left(data, (), lines):
        raise ScenarioError(source, _sorted_unique(problems + knobs))
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


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith((f"{parent}.", f"{parent}["))
