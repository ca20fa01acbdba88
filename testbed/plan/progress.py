"""The progress of a plan as events, and the one line each is on a console: written and read here only.

The runner (:mod:`testbed.guest.runner`) says where it is in a plan with log lines on its console;
the host (:mod:`testbed.host.remote`, :mod:`testbed.host.hostload`, the progress bar) reads them back
from a guest's console, where they sit among the kernel's messages. Every status line of the testbed
starts with :data:`TAG` (``[testbed] run 3/15: ...``): the logging format (:func:`configure_logging`)
puts it there, :func:`message_of` finds it in a console line.

An event's line is plain text, not JSON: people read these consoles and logs (a guest's console log
is what one opens when a run failed), and the text itself is exact enough to be read back: each
event has one line shape, written by its ``line()`` and matched by its ``PATTERN`` beside it, and
unit tests feed every written line back to :func:`parse_line`. What ends a session for scripts
(:class:`SessionDone`) is JSON in a file instead, because nobody reads it on a console.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

#: the version of the event models and their lines; a change to a line's shape changes it
SCHEMA = 1
#: what marks the testbed's lines on a console (the rest is the kernel's messages, ssh's, a shell's)
TAG = "[testbed]"
#: the lines around a run's traffic, for the host's contention check (testbed.host.hostload)
TRAFFIC_BEGINS = "traffic window begins"
TRAFFIC_ENDS = "traffic window ends"
#: a number as Python's formats write it (``5.0``, ``10``, ``1e+03``)
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


class Event(BaseModel):
    """One step of a plan; ``line()`` is its text (without the tag), ``PATTERN`` reads it back."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    PATTERN: ClassVar[re.Pattern[str]]
    schema_version: int = SCHEMA

    def line(self) -> str:
        raise NotImplementedError

    @classmethod
    def from_match(cls, match: re.Match[str]) -> Event:
        return cls(**match.groupdict())


class SessionPlanned(Event):
    """The host's plan for a session: how many runs and how long they should take (guest boot included)."""

    PATTERN: ClassVar = re.compile(
        r"^(?P<name>.+) \((?P<profile>\S+) profile\): (?P<runs>\d+) runs, "
        rf"estimated (?P<estimate_min>{NUMBER}) min$"
    )
    name: str
    profile: str | None
    runs: int
    estimate_s: float

    def line(self) -> str:
        profile = self.profile or "no"
        return f"{self.name} ({profile} profile): {self.runs} runs, estimated {self.estimate_s / 60:.1f} min"

    @classmethod
    def from_match(cls, match: re.Match[str]) -> Event:
        profile = match["profile"]
        return cls(
            name=match["name"],
            profile=None if profile == "no" else profile,
            runs=int(match["runs"]),
            estimate_s=float(match["estimate_min"]) * 60,
        )


class RunStarted(Event):
    """Run ``index`` of ``total`` (from 1) starts; ``eta_s``: the runner's estimate of the plan's time left."""

    PATTERN: ClassVar = re.compile(
        r"^run (?P<index>\d+)/(?P<total>\d+): (?P<scenario>.+) (?P<point_id>\S+) "
        rf"seed=(?P<seed>-?\d+) \(ETA (?P<eta_min>{NUMBER}) min\)$"
    )
    index: int
    total: int
    scenario: str
    point_id: str
    seed: int
    eta_s: float

    def line(self) -> str:
        return (
            f"run {self.index}/{self.total}: {self.scenario} {self.point_id} seed={self.seed} "
            f"(ETA {self.eta_s / 60:.1f} min)"
        )

    @classmethod
    def from_match(cls, match: re.Match[str]) -> Event:
        fields = match.groupdict()
        eta_min = fields.pop("eta_min")
        return cls(**fields, eta_s=float(eta_min) * 60)


class RunEnded(Event):
    """Run ``index`` of ``total`` ended with its manifest's status (and reason, when it is not complete)."""

    PATTERN: ClassVar = re.compile(r"^run (?P<index>\d+)/(?P<total>\d+) (?P<status>\w+)(?:: (?P<reason>.*))?$")
    index: int
    total: int
    status: str
    reason: str | None = None

    def line(self) -> str:
        head = f"run {self.index}/{self.total} {self.status}"
        # one line: the host passes on only the lines with the tag, so a reason's further lines would be lost
        reason = " / ".join(part.strip() for part in str(self.reason).splitlines() if part.strip())
        return head if self.status == "complete" else f"{head}: {reason}"


class TrafficWindow(Event):
    """The current run's traffic begins or ends (the host samples its own load in between)."""

    PATTERN: ClassVar = re.compile(r"^\s*traffic window (?P<edge>begins|ends)$")
    edge: Literal["begins", "ends"]

    def line(self) -> str:
        return f"  {TRAFFIC_BEGINS if self.edge == 'begins' else TRAFFIC_ENDS}"


class TrafficTick(Event):
    """How far the current run's traffic is (every few seconds while it lasts)."""

    PATTERN: ClassVar = re.compile(
        rf"^\s*traffic t=\s*(?P<t_s>{NUMBER}) s of (?P<duration_s>{NUMBER}) s, "
        r"(?P<active>\d+) connections active$"
    )
    t_s: float
    duration_s: float
    active: int

    def line(self) -> str:
        return f"  traffic t={self.t_s:5.1f} s of {self.duration_s:g} s, {self.active} connections active"


class SessionDone(Event):
    """A session ended: its folder and report (None with --no-report); written as JSON for scripts."""

    session: str
    report: str | None
    complete: int
    total: int


#: the events that have a line, in the order they are tried (a start line before the end line's looser shape)
LINE_EVENTS: tuple[type[Event], ...] = (RunStarted, RunEnded, TrafficWindow, TrafficTick, SessionPlanned)


def format_line(event: Event) -> str:
    """The event's line, as logged after the tag."""
    return event.line()


def parse_line(message: str) -> Event | None:
    """The event a line says (a message without its tag), or None for every other line."""
    text = message.rstrip()
    for kind in LINE_EVENTS:
        match = kind.PATTERN.match(text)
        if match:
            return kind.from_match(match)
    return None


#: a line named after where it ran: a slot of several plans side by side on one kernel (``s1: run 2/5 ...``,
#: testbed.guest.sidebyside), a packed guest (``g0:``, testbed.host.packing), a run again alone after them
#: (``alone:``) or a run again because the host took its CPU (``again:``, testbed.host.contended)
NAMED_LINE = re.compile(r"^(?P<name>s\d+|g\d+|alone|again): (?P<message>.*)$")


def slot_line(slot: int, message: str) -> str:
    """A slot's line: its runner's message, named after the slot (each slot counts its own runs)."""
    return f"s{slot}: {message}"


def named_of(message: str) -> tuple[str | None, str]:
    """A line's name and its runner's message (``None`` and the line itself for a line of no name)."""
    match = NAMED_LINE.match(message.rstrip())
    return (match["name"], match["message"]) if match else (None, message)


def slot_of(message: str) -> tuple[int, str] | None:
    """A slot's line read back: (slot, its runner's message); None for a line of no slot."""
    name, text = named_of(message)
    return (int(name[1:]), text) if name and name.startswith("s") else None


def message_of(console_line: str) -> str | None:
    """What follows the tag on a console line (the kernel may print before it), or None if it has none."""
    before, tag, after = console_line.partition(TAG)
    return after.removeprefix(" ") if tag else None


class _Stdout(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is when a line is logged (pytest's capture, the progress bar's)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(level: int = logging.INFO) -> logging.Handler:
    """Log every ``testbed.*`` logger's lines to stdout as ``[testbed] message`` (once per process)."""
    root = logging.getLogger("testbed")
    root.setLevel(level)
    for handler in root.handlers:
        if isinstance(handler, _Stdout):
            return handler
    handler = _Stdout()
    handler.setFormatter(logging.Formatter(f"{TAG} %(message)s"))
    root.addHandler(handler)
    return handler
