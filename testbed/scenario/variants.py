"""A variant of a point: the one way every workflow derives a point from another.

A comparison runs a suite's points with a repetition's seeds (regress, series, bisect), more seeds
(``suite --decide``), a harm given to every flow (positive controls, ``--inject``), a factor set as a
paper had it (``explain``) or an instructor's hidden seeds (the labs). Each is the same step: the
point's resolved scenario as data, changed, validated again as a scenario file would be, so a variant
is refused with the same messages as a file and its runs' identities are those a file with the same
values would give (a run already made is found again on resume). Validating a point's own data gives
the point back unchanged (every point of the reproduce suite checked).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from testbed.scenario.load import scenario_from_dict
from testbed.scenario.points import Point


def derive(
    point: Point,
    seeds: list[int] | None = None,
    flow_options: dict | None = None,
    edit: Callable[[dict], None] | None = None,
) -> Point:
    """``point`` with ``seeds`` instead of its own (when given), ``flow_options`` set on every flow and
    ``edit`` applied to its scenario's data (a dict as in a scenario file, changed in place)."""
    data = point.scenario.model_dump(mode="json", exclude_none=True)
    if seeds is not None:
        data["seeds"] = list(seeds)
    for flow in data["flows"]:
        flow.update(flow_options or {})
    if edit is not None:
        edit(data)
    (changed,) = scenario_from_dict(data, name=point.scenario_name).points
    return replace(point, scenario=changed.scenario)
