"""The runs analysed while the session still runs, so that its report afterwards finds them in the cache.

Cold, a session's report takes 7-9 s after the last run of ``make experiment``, nearly all of it in
analysing the runs (:func:`testbed.report.pages.analyses.analyze_runs`). A guest writes the run folders
straight into the host's session folder, so a run's folder is complete when the runner says it ended
(after the host's watch added its figures to the manifest). :class:`AheadAnalysis` follows the runner's
lines (its :meth:`~AheadAnalysis.observer` is a :data:`testbed.host.remote.Observer`, handed down to the
backend because the host does not import the report) and gives each run that ended complete or failed to
one worker process, which analyses the runs one at a time exactly as the report would
(:func:`~testbed.report.pages.analyses.analyze_into_cache`: flows.csv, series.csv, report.html and the cache
entry). When its queue is empty it also draws the session's figures over the runs it has
(:func:`~testbed.report.pages.sessionpage.draw_figures_ahead`): those of an experiment whose runs have all ended
are the report's. The report then finds runs and figures in the cache; a run changed afterwards is a
miss and is analysed again, and a figure is stored under the hash of what it shows, so the report is
the one it would be without this.

The host's own load during a run's traffic is part of the experiment (:mod:`testbed.host.hostload`
judges it), so the worker is niced and stopped (SIGSTOP) from each "traffic window begins" line to the
"ends" line (SIGCONT). A run folder that is not finished here (the lab VM's come back only at the
session's end) is left to the report. Before the report, :meth:`AheadAnalysis.finish` lets the worker
empty its queue within a bound; leaving the ``with`` block ends it however the session ended. The
worker imports the analysis only at its first run: one that gets none (the local backend runs the plan
in this process, with no lines to follow) costs nothing.

``python -m testbed.report.live.ahead PARENT_PID`` is the worker: one JSON line per run on stdin.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from testbed import PROJECT
from testbed.guest import parentdeath
from testbed.plan import progress
from testbed.results.manifest import run_status

#: how long the report waits for the worker's queue; past it the report analyses what is left itself
FINISH_TIMEOUT_S = 30.0
#: the worker's niceness: the guest, its emulator and the runner come first
NICENESS = 19
#: a run's status after which nothing changes its folder (an incomplete one may be set aside and run again)
FINISHED = ("complete", "failed")


class AheadAnalysis:
    """One worker process analysing ended runs while the session goes on (module doc); a context manager
    that ends the worker on leaving."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.submitted: list[Path] = []

    def __enter__(self) -> AheadAnalysis:
        # this checkout's code, whatever the current folder; a session of its own: Ctrl-C is the parent's to handle
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def observer(self, session: Path, run_dirs: list[str]) -> Callable[[str, float], None]:
        """The ``on_line`` for the runner's lines of a plan writing ``run_dirs`` into ``session``."""
        return functools.partial(self.on_line, Path(session), run_dirs)

    def on_line(self, session: Path, run_dirs: list[str], text: str, now: float) -> None:
        event = progress.parse_line(text)
        if isinstance(event, progress.TrafficWindow):
            self.pause() if event.edge == "begins" else self.resume()
        elif isinstance(event, (progress.RunStarted, progress.RunEnded)):
            self.resume()  # no traffic between runs; a run that failed in its window never said "ends"
        if isinstance(event, progress.RunEnded) and 0 < event.index <= len(run_dirs):
            self.submit(session, session / run_dirs[event.index - 1])

    def submit(self, session: Path, run_dir: Path) -> None:
        """Queue a run for the worker, if its folder is here and finished (else the report analyses it)."""
        if self.proc is None or self.proc.poll() is not None or run_status(run_dir) not in FINISHED:
            return
        try:
            self.proc.stdin.write(json.dumps({"session": str(session), "run": str(run_dir)}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the worker is gone or its queue closed: the report does it
            return
        self.submitted.append(run_dir)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False

    def _signal(self, signum: int) -> None:
        # the whole process group (the worker leads its own session): a process it starts is stopped too
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> bool:
        """Let the worker (continued if stopped) analyse what it was given and end, for ``timeout_s`` at
        most; whether it did. Past the bound it is ended: the report analyses the rest itself."""
        if self.proc is None:
            return True
        self.resume()
        self._close_queue()  # end of input: the worker ends after its last run
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            return False
        return self.proc.returncode == 0

    def close(self) -> None:
        """End the worker now, stopped or not (SIGKILL ends a stopped process too), and reap it. Its files
        are written atomically, and a run it did not store in the cache is analysed by the report."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close_queue()
        self.paused = False

    def _close_queue(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.close()


def main(argv: list[str]) -> int:
    """The worker: analyse each run named on stdin (``{"session": ..., "run": ...}``), one at a time, and
    the session's figures over the runs so far whenever no further run is waiting."""
    _end_with(int(argv[0]))
    os.nice(NICENESS)
    ended: dict[Path, list[Path]] = {}
    for job, more in _jobs(sys.stdin.fileno()):
        session, run_dir = Path(job["session"]), Path(job["run"])
        ended.setdefault(session, []).append(run_dir)
        _ahead_of_report("analyze_into_cache", session, run_dir)
        if not more:
            _ahead_of_report("draw_figures_ahead", session, ended[session])
    return 0


def _jobs(fd: int) -> Iterator[tuple[dict, bool]]:
    """Each job line on ``fd`` and whether another one is already there (read unbuffered: a buffered
    reader would hide the lines it read ahead), until the end of input."""
    pending, eof = b"", False
    while True:
        while b"\n" not in pending and not eof:
            chunk = os.read(fd, 65536)
            pending, eof = pending + chunk, not chunk
        if b"\n" not in pending:
            return
        line, _, pending = pending.partition(b"\n")
        if not eof and select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            pending, eof = pending + chunk, not chunk
        yield json.loads(line), b"\n" in pending


def _end_with(parent: int) -> None:
    """The kernel kills this worker when its parent dies, even by SIGKILL and even while it is stopped
    (a stopped orphan would stay forever). The parent's thread that started it counts: the main thread."""
    parentdeath.die_with_parent(signal.SIGKILL, parent)


def _ahead_of_report(step: str, session: Path, what) -> None:
    """One of the report's steps done ahead (``step``: ``analyze_into_cache`` of :mod:`testbed.report.pages.analyses`
    or ``draw_figures_ahead`` of :mod:`testbed.report.pages.sessionpage`)."""
    # imported at the first run (pandas, matplotlib, numba: seconds): a worker given no run costs nothing
    from testbed.report.pages import analyses
    from testbed.report.pages import sessionpage as session_report

    try:
        getattr(analyses if step == "analyze_into_cache" else session_report, step)(session, what)
    except Exception as exc:  # the report does it itself
        print(f"analysis ahead of the report: {step} {what}: {type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
