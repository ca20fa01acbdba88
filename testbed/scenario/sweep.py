"""Sweeps: where the schema expects one value and the file gives a list, that list is a sweep axis; the bounds
on a sweep's size, and each point's params and filesystem-safe ``point_id`` (``cc=westwood,loss_pct=0``)."""

from __future__ import annotations

import copy
import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from testbed.scenario.errors import DataPath, Problem, _display_path, _format_value, _show
from testbed.scenario.profiles import _paths_of
from testbed.scenario.schema import Scenario
from testbed.scenario.walk import _is_collection, _is_model, _model_union, _pick_model, _strip
from testbed.scenario.yamlfile import _line_of

#: a sweep this large is almost certainly a typo (a list where one value was meant)
MAX_POINTS = 10_000
#: longest point_id kept verbatim; longer ones are shortened with a hash (file names stop at 255 bytes)
MAX_POINT_ID_CHARS = 200
#: values checked in a whole sweep (its points x the file's values): a few seconds of validation
MAX_SWEEP_VALUES = 1_000_000


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
