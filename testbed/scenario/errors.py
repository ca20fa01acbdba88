"""Problems in a scenario or suite file: :class:`ScenarioError` listing every :class:`Problem` (line, path,
message), and how data paths and values read in the messages."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any


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


DataPath = tuple  # a location in the data: keys and list indices, e.g. ("flows", 0, "cc")


def _sorted_unique(problems: list[Problem]) -> list[Problem]:
    return sorted(set(problems), key=lambda p: (p.line if p.line is not None else 0, p.path, p.message))


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return str(value)


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
