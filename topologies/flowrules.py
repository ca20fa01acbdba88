"""The rules a topology holds its flows to, each written once.

A topology's ``check_flows`` (called by testbed/scenario/schema.py) returns ``(flow index, field path,
message)`` per problem; it composes these rules with its own words, and :func:`by_flow` puts the problems
in the order a reader fixes them: flow by flow, each flow's in the order the rules were given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: (flow index, field path inside the flow, message)
Problem = tuple[int, tuple, str]


def by_flow(*rules: list[Problem]) -> list[Problem]:
    """The rules' problems flow by flow (a stable sort: each flow's problems in the rules' order)."""
    return sorted((problem for rule in rules for problem in rule), key=lambda problem: problem[0])


def no_path(flows: Sequence, message: str) -> list[Problem]:
    """A topology of one path (or one that sprays every flow over all): ``path`` is left out."""
    return [(i, ("path",), message) for i, flow in enumerate(flows) if flow.path is not None]


def path_among(flows: Sequence, paths: Mapping[str, str], topology: str) -> list[Problem]:
    """Each flow names one of the topology's ``paths`` (name -> what it is), the error listing them all."""
    valid = ", ".join(f"{name} ({what})" for name, what in paths.items())
    problems = []
    for i, flow in enumerate(flows):
        if flow.path not in paths:
            shown = "missing" if flow.path is None else f"'{flow.path}' is not a path of {topology}"
            problems.append((i, ("path",), f"{shown}; valid: {valid}"))
    return problems


def rtt_given(flows: Sequence, message: str) -> list[Problem]:
    """Each flow gives its own base RTT (``rtt_ms``)."""
    return [(i, ("rtt_ms",), message) for i, flow in enumerate(flows) if flow.rtt_ms is None]


def rtt_from_links(flows: Sequence, message: str) -> list[Problem]:
    """The topology's links set the RTT: no flow gives ``rtt_ms`` or ``rtt_max_ms``."""
    return [
        (i, ("rtt_ms",), message)
        for i, flow in enumerate(flows)
        if flow.rtt_ms is not None or flow.rtt_max_ms is not None
    ]
