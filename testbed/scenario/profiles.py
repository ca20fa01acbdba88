"""Profiles and ``time_scale``: a file's named partial scenarios, the chosen one deep-merged over the base
(maps merge, lists and scalars replace); ``time_scale`` compresses the run's time."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from testbed.scenario.errors import DataPath, Problem, ScenarioError, _did_you_mean, _show, _sorted_unique
from testbed.scenario.yamlfile import _line_of

DEFAULT_PROFILE = "quick"


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
        problems.append(
            Problem(
                _line_of(("time_scale",), lines),
                "time_scale",
                f"{_show(scale)} is not valid: a number greater than 0 and at most 1000",
            )
        )
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
