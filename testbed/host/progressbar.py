"""A progress bar on the terminal: runs done of the session's runs, the current run and the time left.

It reads the same log lines everyone else sees (a logging handler on the ``testbed`` loggers, the
events parsed by :mod:`testbed.plan.progress`), so a plan run here, in a guest or in the lab VM
drives it alike. The bar is drawn on stderr; the log lines still go to stdout and rich prints them
above the bar. It is shown only when stdout and stderr are both a terminal: stdout piped or
redirected (``| tee``, CI, a log file) would put its lines under the bar's redraws, and plain lines
are what a log file wants anyway. The bar is redrawn when a line arrives (at least every 10 s while
traffic runs), not by a thread of its own: the local backend forks (pyroute2's namespace helpers),
and a fork must not copy a lock that such a thread holds.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from testbed.plan import progress as events


class _TimeLeft(ProgressColumn):
    """The latest estimate of the time left, counted down since it came."""

    def render(self, task: Task) -> Text:
        ends_at = task.fields.get("ends_at")
        if ends_at is None:
            return Text("")
        left_s = max(0.0, ends_at - time.monotonic())
        return Text(f"ETA {left_s / 60:.1f} min")


class ProgressBar(logging.Handler):
    """Moves a rich progress bar on the progress events among the log records it sees: a session's own, or
    those of its slots, packed guests and runs again alone, each named (``s0: run 2/5 ...``) and counting
    its own runs; the bar counts the session's, and its time left is the last of theirs."""

    def __init__(self, bar: Progress):
        super().__init__()
        self.bar = bar
        self.task = bar.add_task("starting", total=None, ends_at=None)
        self.total = 0
        self.done = 0
        self.ends_at: dict[str | None, float] = {}  # by line's name: when its latest estimate says it ends

    def emit(self, record: logging.LogRecord) -> None:
        name, message = events.named_of(record.getMessage())
        self.update(events.parse_line(message), name)

    def update(self, event: events.Event | None, name: str | None = None) -> None:
        if event is None:
            return
        now = time.monotonic()
        if isinstance(event, events.SessionPlanned):
            self.total, self.done, self.ends_at = event.runs, 0, {}
            self.bar.update(
                self.task,
                description=f"{event.name}: {event.runs} runs",
                total=event.runs,
                completed=0,
                ends_at=now + event.estimate_s,
            )
        elif isinstance(event, events.RunStarted):
            # a second guest boot numbers the runs left from 1 again, and a slot counts its own: the
            # session's count goes on
            self.total = max(self.total, event.total)
            self.ends_at[name] = now + event.eta_s
            self.bar.update(
                self.task,
                description=f"{name + ': ' if name else ''}run {event.index}/{event.total}: {event.point_id} "
                f"seed={event.seed}",
                total=self.total,
                ends_at=max(self.ends_at.values()),
            )
        elif isinstance(event, events.RunEnded):
            self.done += 1  # a run again alone counts twice: the bar stops at the session's total
            self.bar.update(self.task, completed=min(self.done, self.total))
        self.bar.refresh()  # also counts the time left down on every other event (traffic ticks)


def wanted() -> bool:
    """Whether to draw the bar: stdout and stderr both a terminal (see the module's docstring)."""
    return sys.stdout.isatty() and sys.stderr.isatty()


@contextlib.contextmanager
def shown(logger: logging.Logger) -> Iterator[ProgressBar]:
    """Draw the bar while the block runs, fed by ``logger``'s records (and its children's)."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _TimeLeft(),
        console=Console(stderr=True),
        auto_refresh=False,
        transient=True,
        redirect_stdout=True,
        redirect_stderr=True,
    )
    handler = ProgressBar(bar)
    logger.addHandler(handler)
    try:
        with bar:
            yield handler
    finally:
        logger.removeHandler(handler)
