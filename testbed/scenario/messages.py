"""pydantic's validation errors as the messages a student reads: written from the error's ``type``/``ctx``,
with the valid range or options and the closest valid name, each at its line."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from testbed.scenario.errors import DataPath, Problem, _did_you_mean, _display_path, _num, _show
from testbed.scenario.schema import Scenario
from testbed.scenario.walk import _get_or_none, _model_at, _resolve
from testbed.scenario.yamlfile import _line_of
from topologies import TOPOLOGY_PARAMS
from topologies.lossmodel import LOSS_MODEL_NAMES
from topologies.queues import DISCIPLINES

# One place for how units read in messages; the unit is always the field name's suffix.
_UNIT_BY_SUFFIX = {
    "_pct": "a percentage",
    "_mbit": "in Mbit/s",
    "_ms": "in milliseconds",
    "_s": "in seconds",
    "_pkts": "in packets",
    "_bdp": "in bandwidth-delay products",
}


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
        what, options = {
            "name": ("topology", list(TOPOLOGY_PARAMS)),
            "discipline": ("queue discipline", list(DISCIPLINES)),
        }.get(key, ("loss model", list(LOSS_MODEL_NAMES)))
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
    """The field that picks the union member in a ``union_tag_*`` error (``name``, ``model`` or ``discipline``)."""
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
