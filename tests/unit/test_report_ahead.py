"""testbed.report.live.ahead: runs analysed while the session runs, stopped in traffic windows, nothing left behind.

The sessions are copies of the real fixture run (as in test_analysis_report.py); the progress lines are
the runner's own (testbed.plan.progress), fed by hand as a backend would."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from testbed.plan import progress
from testbed.report.cache import entries
from testbed.report.live import ahead
from testbed.report.live.ahead import AheadAnalysis
from testbed.report.pages import analyses
from testbed.report.pages import sessionpage as session_report
from tests.unit.test_analysis_report import add_run, write_session


def line(event: progress.Event) -> str:
    return progress.format_line(event)


def started(index: int, total: int) -> str:
    return line(progress.RunStarted(index=index, total=total, scenario="s", point_id="p", seed=index, eta_s=60))


def ended(index: int, total: int, status: str = "complete") -> str:
    return line(progress.RunEnded(index=index, total=total, status=status, reason="x"))


BEGINS, ENDS = line(progress.TrafficWindow(edge="begins")), line(progress.TrafficWindow(edge="ends"))


def state(pid: int) -> str:
    """The process's state letter (/proc/<pid>/stat): T stopped, R running, S sleeping, Z zombie."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def children() -> set[int]:
    """This process's children (every thread's), as the kernel lists them."""
    found = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found


def fixture_session(root: Path, seeds=(1, 2)) -> tuple[Path, list[str]]:
    session = root / "sess"
    session.mkdir(parents=True)
    runs = [add_run(session, "p", seed) for seed in seeds]
    write_session(session, runs)
    return session, runs


def test_an_ended_run_is_analysed_ahead_and_the_report_finds_it_the_same(tmp_path, monkeypatch):
    session, runs = fixture_session(tmp_path / "ahead")
    cold, _ = fixture_session(tmp_path / "cold")
    with AheadAnalysis() as early:
        follow = early.observer(session, runs)
        for text in [started(1, 2), BEGINS, ENDS, ended(1, 2), started(2, 2), BEGINS, ENDS, ended(2, 2)]:
            follow(text, time.monotonic())
        assert early.submitted == [session / r for r in runs]
        assert early.finish()
    for run in runs:
        assert entries.load(session, session / run) is not None and (session / run / "report.html").exists()
    expected = session_report.write_session_report(cold)

    def no_work(*args):
        raise AssertionError("analysed or drawn again: the cache was missed")

    monkeypatch.setattr(analyses, "_analyze_keyed", no_work)
    monkeypatch.setattr(session_report.plots, "point_bars_png", no_work)  # the experiment's bars: drawn ahead
    report = session_report.write_session_report(session)
    assert report.summary_text == expected.summary_text
    assert report.html_path.read_text() == expected.html_path.read_text()
    for run in runs:
        for name in entries.OUTPUTS:
            assert (session / run / name).read_text() == (cold / run / name).read_text()


def test_the_worker_is_stopped_for_a_traffic_window_and_continued_after(tmp_path):
    session, runs = fixture_session(tmp_path)
    with AheadAnalysis() as early:
        follow, pid = early.observer(session, runs), early.proc.pid
        follow(started(1, 2), 0.0)
        follow(BEGINS, 0.0)
        assert wait_for(lambda: state(pid) == "T")
        follow(ENDS, 0.0)
        assert wait_for(lambda: state(pid) != "T")
        follow(BEGINS, 0.0)  # a run that failed in its window never says "ends": its end line continues the worker
        assert wait_for(lambda: state(pid) == "T")
        follow(ended(1, 2, status="failed"), 0.0)
        assert wait_for(lambda: state(pid) != "T")
        follow(BEGINS, 0.0)
        assert wait_for(lambda: state(pid) == "T")
        assert early.finish()  # the session's end continues it: it empties its queue and ends
    assert entries.load(session, session / runs[0]) is not None


def test_runs_not_finished_here_are_left_to_the_report(tmp_path):
    session, runs = fixture_session(tmp_path, seeds=(1, 2, 3))
    manifest = session / runs[1] / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "status": "running"}))
    shutil.rmtree(session / runs[2])  # the lab VM's folders come back only at the session's end
    with AheadAnalysis() as early:
        follow = early.observer(session, runs)
        for index in (1, 2, 3, 4):  # 4: not in this plan
            follow(ended(index, 3), 0.0)
        assert early.submitted == [session / runs[0]]
        assert early.finish()
    assert not (session / runs[1] / "report.html").exists()


def test_leaving_the_block_ends_the_worker_even_stopped_and_on_an_error(tmp_path):
    session, runs = fixture_session(tmp_path)
    with pytest.raises(KeyboardInterrupt), AheadAnalysis() as early:
        follow, pid = early.observer(session, runs), early.proc.pid
        follow(ended(1, 2), 0.0)  # busy with a run
        follow(BEGINS, 0.0)
        assert wait_for(lambda: state(pid) == "T")
        raise KeyboardInterrupt
    assert early.proc.returncode is not None and pid not in children() and not Path(f"/proc/{pid}").exists()


def test_a_worker_past_the_bound_is_ended_and_the_report_does_the_rest(tmp_path):
    session, runs = fixture_session(tmp_path)
    with AheadAnalysis() as early:
        early.observer(session, runs)(ended(1, 2), 0.0)
        assert not early.finish(timeout_s=0.0)  # importing the analysis alone takes longer
        assert early.proc.returncode is not None and early.proc.pid not in children()
    report = session_report.write_session_report(session)
    assert [a.status for a in report.runs] == ["complete", "complete"]


def test_the_worker_is_niced_and_idle_until_given_a_run(tmp_path):
    with AheadAnalysis() as early:
        pid = early.proc.pid
        assert wait_for(lambda: os.getpriority(os.PRIO_PROCESS, pid) == ahead.NICENESS)
        assert wait_for(lambda: state(pid) == "S")  # waiting for a run on its stdin
        assert early.finish()
    assert early.proc.returncode == 0


def test_the_worker_reads_its_jobs_knowing_whether_another_one_waits():
    read, write = os.pipe()
    os.write(write, b'{"run": 1}\n{"run": 2}\n{"run"')
    jobs = ahead._jobs(read)
    assert next(jobs) == ({"run": 1}, True)
    assert next(jobs) == ({"run": 2}, False)  # the third is not whole yet
    os.write(write, b": 3}\n")
    os.close(write)
    assert list(jobs) == [({"run": 3}, False)]
    os.close(read)
