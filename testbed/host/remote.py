"""Following the runner from the host: one implementation for every backend that runs it elsewhere.

A virtme-ng guest (``vng ... --exec``) and the lab VM (``ssh ... python -m testbed.guest.runner``) both
give the host a child process whose output carries the runner's ``[testbed]`` lines
(:mod:`testbed.plan.progress` writes and reads them). :func:`follow` reads that output without
blocking, writes it to a console log, passes each runner line on, and
enforces three deadlines that hold even when nothing arrives: the runner must start, each run must
end within its watchdog budget (plus a margin), and the whole plan within its timeout. Both backends
call it through :func:`follow_plan` (the plan's run estimates set the deadlines) and report what
:func:`plan_timing` returns. Besides the host's own watch, a session may hand its backend
:data:`Observer` s for the runner's lines (:func:`with_observers`).
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from testbed.guest.runner import run_budget_s
from testbed.plan import progress as events

#: how long past a run's watchdog budget (or after a run ended) the runner may stay silent before the
#: remote side is declared hung: the runner's own watchdog reports a stuck run within its budget, so only a
#: guest that stopped altogether (seen once in CI under TCG: no output for 30 min, not even the
#: watchdog's stack dump) stays silent this long
HANG_MARGIN_S = 120

#: what follows a plan's runner lines besides the host's watch (the report's analysis ahead, which the host
#: cannot import, so it comes down as a callable): called with the session folder and the plan's run folders
#: (relative, in plan order: a ``RunEnded`` line's index points into them) when the runner starts, it returns
#: the ``on_line(text, now)`` each line then goes to
Observer = Callable[[Path, list[str]], Callable[[str, float], None]]


class RemoteRunnerError(Exception):
    """The runner did not finish where it ran; the message says why and where its output is."""


class RunnerNotStarted(RemoteRunnerError):
    """The runner never printed its first line (a guest that did not boot)."""


class RunnerSilent(RemoteRunnerError):
    """The runner started but then nothing came far past the current run's watchdog budget."""


class RunnerProgress:
    """Follows the runner's progress lines and says by when the next one must come.

    A run must end within its watchdog budget (``runner.run_budget_s`` of its estimate), which the
    runner enforces itself; between runs the next one starts at once. Beyond either, plus
    HANG_MARGIN_S, the remote side is hung."""

    def __init__(self, estimates_s: list[float], started: float, start_timeout_s: float):

        self.budgets_s = [run_budget_s(e) for e in estimates_s]
        self.current: int | None = None
        self.expect_by = started + start_timeout_s + HANG_MARGIN_S

    def line(self, text: str, now: float) -> None:
        """Take a runner line (without its tag): a run that starts or ends moves the deadline."""
        event = events.parse_line(text)
        if isinstance(event, events.RunStarted) and 0 <= event.index - 1 < len(self.budgets_s):
            self.current = event.index - 1
            self.expect_by = now + self.budgets_s[self.current] + HANG_MARGIN_S
        elif isinstance(event, (events.RunStarted, events.RunEnded)):
            self.current = None
            self.expect_by = now + HANG_MARGIN_S

    def overdue(self, now: float) -> bool:
        return now > self.expect_by

    def status_text(self, silent_s: float) -> str:
        where = (
            f"run {self.current + 1}/{len(self.budgets_s)} (watchdog budget {self.budgets_s[self.current]:.0f} s)"
            if self.current is not None
            else "between runs"
        )
        return f"stopped responding in {where}: nothing from it for {silent_s:.0f} s"


class SlotsProgress:
    """:class:`RunnerProgress` for plans side by side on one kernel (testbed.guest.sidebyside): each slot's
    lines (``s1: run 2/5 ...``) move that slot's deadline; the remote side is hung when a slot that has runs
    left is overdue. A slot whose last run ended is done."""

    def __init__(self, estimates_s: list[list[float]], started: float, start_timeout_s: float):
        self.slots = [RunnerProgress(estimates, started, start_timeout_s) for estimates in estimates_s]
        self.done: set[int] = set()

    def line(self, text: str, now: float) -> None:
        named = events.slot_of(text)
        if named is None or not 0 <= named[0] < len(self.slots):
            return
        slot, message = named
        self.slots[slot].line(message, now)
        event = events.parse_line(message)
        if isinstance(event, events.RunEnded) and event.index == event.total:
            self.done.add(slot)

    def overdue(self, now: float) -> bool:
        return any(p.overdue(now) for k, p in enumerate(self.slots) if k not in self.done)

    def status_text(self, silent_s: float) -> str:
        late = [k for k, p in enumerate(self.slots) if k not in self.done and p.overdue(time.monotonic())]
        return "; ".join(f"slot {k} {self.slots[k].status_text(silent_s)}" for k in late or range(len(self.slots)))


def console_tail(path: Path, lines: int = 25) -> str:
    """The end of a console log, indented, for an error message (the log may be gone when it is read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    tail = text.splitlines()[-lines:]
    return "\n  last console lines:\n" + "\n".join(f"    {line}" for line in tail) if tail else ""


def follow(
    proc: subprocess.Popen,
    log_file: BinaryIO,
    progress: RunnerProgress | SlotsProgress,
    *,
    label: str,
    start_timeout_s: float,
    timeout_s: float,
    on_line: Callable[[str, float], None],
    finished: Callable[[], bool] = lambda: False,
    shutdown_timeout_s: float = 60,
) -> float | None:
    """Read ``proc``'s output until it exits; returns seconds until the runner's first line (None if never).

    ``on_line(text, now)`` gets every runner line without its tag. ``finished()`` says the plan is done
    (its results written): a process that then does not exit within ``shutdown_timeout_s`` is
    stopped. Raises :class:`RunnerNotStarted`, :class:`RunnerSilent` or :class:`RemoteRunnerError`
    (``label`` names the remote side in their messages); the caller stops ``proc``."""
    started = last_output = time.monotonic()
    ready_s = done_at = None
    buffer = b""
    console = Path(log_file.name)
    while True:
        readable, _, _ = select.select([proc.stdout], [], [], 0.5)
        chunk = proc.stdout.read1(1 << 16) if readable else b""
        now = time.monotonic()
        if chunk:
            last_output = now
            log_file.write(chunk)
            log_file.flush()
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                message = events.message_of(line.decode(errors="replace"))
                if message is not None:
                    ready_s = ready_s if ready_s is not None else round(now - started, 2)
                    progress.line(message, now)
                    on_line(message, now)
        elif readable or proc.poll() is not None:  # end of file: the process closed its output
            proc.wait()
            return ready_s
        elapsed = now - started
        if ready_s is None and elapsed > start_timeout_s:
            raise RunnerNotStarted(
                f"{label} did not start the runner within {start_timeout_s:.0f} s; "
                f"console log: {console}{console_tail(console)}"
            )
        if done_at is None and finished():
            done_at = now
        if ready_s is not None and done_at is None and progress.overdue(now):
            raise RunnerSilent(
                f"{label} {progress.status_text(now - last_output)}; stopped it after {elapsed:.0f} s; "
                f"console log: {console}{console_tail(console)}"
            )
        if done_at is not None and now - done_at > shutdown_timeout_s:
            # the plan is finished and its results are written: a guest that hangs on its way down
            # must not hold the session until the timeout
            on_line(f"{label} finished the plan but did not exit within {shutdown_timeout_s:.0f} s: stopping it", now)
            return ready_s
        if elapsed > timeout_s:
            raise RemoteRunnerError(
                f"{label} did not finish within {timeout_s:.0f} s (runs planned for less); "
                f"console log: {console}{console_tail(console)}"
            )


def follow_plan(
    proc: subprocess.Popen,
    log_file: BinaryIO,
    plan_path: Path,
    started: float,
    *,
    label: str,
    start_timeout_s: float,
    timeout_s: float,
    echo: Callable[[str], None],
    on_line: Callable[[str, float], None] | None = None,
    finished: Callable[[], bool] = lambda: False,
    shutdown_timeout_s: float = 60,
    slot_plans: Sequence[Path] = (),
) -> float | None:
    """:func:`follow` for a runner executing the plan at ``plan_path``: both remote backends start it their
    own way (``vng --exec``, ssh) and stream it here. The plan's run estimates (from ``started``, when the
    backend began) set the silence deadlines; every runner line is echoed, then passed to ``on_line``.
    ``slot_plans``: the runner runs these plans side by side instead, each slot's lines named after it."""
    estimates = [
        [run["estimate_s"] for run in json.loads(path.read_text())["runs"]] for path in slot_plans or [plan_path]
    ]
    if slot_plans:
        progress: RunnerProgress | SlotsProgress = SlotsProgress(estimates, started, start_timeout_s)
    else:
        progress = RunnerProgress(estimates[0], started, start_timeout_s)

    def line(text: str, now: float) -> None:
        echo(text)
        if on_line is not None:
            on_line(text, now)

    return follow(
        proc,
        log_file,
        progress,
        label=label,
        start_timeout_s=start_timeout_s,
        timeout_s=timeout_s,
        on_line=line,
        finished=finished,
        shutdown_timeout_s=shutdown_timeout_s,
    )


def with_observers(
    on_line: Callable[[str, float], None], observers: Sequence[Observer], session: Path, run_dirs: list[str]
) -> Callable[[str, float], None]:
    """One ``on_line`` for a plan's runner lines: the host's watch (``on_line``) first, so that a run's
    manifest has its host figures when its end line reaches an observer that reads the folder, then each
    observer, bound to ``session`` and the plan's ``run_dirs``."""
    followers = [observer(session, run_dirs) for observer in observers]

    def line(text: str, now: float) -> None:
        on_line(text, now)
        for follower in followers:
            follower(text, now)

    return line


def plan_timing(ready_s: float | None, started: float, done: Path) -> dict:
    """What a remote backend reports of a finished plan: seconds to the runner's first line, the wall time
    since ``started``, and the number of runs not complete as the runner wrote to ``plan.done``."""
    return {
        "ready_s": ready_s,
        "wall_s": round(time.monotonic() - started, 2),
        "not_complete": int(done.read_text().strip() or 0),
    }
