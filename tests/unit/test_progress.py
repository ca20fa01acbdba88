"""Progress lines: what the runner writes is what the host reads (testbed.plan.progress), through the
logging format, a child process's output and remote.follow, into RunnerProgress, HostWatch and the bar."""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testbed.host import hostload, remote
from testbed.plan import progress
from tests.conftest import PROJECT

#: one of every event with a line, with awkward values: a scenario name with spaces, a point id with '=' and
#: ',', a reason with ': ', a traffic duration written in exponent form
EVENTS = [
    progress.SessionPlanned(name="two words", profile="quick", runs=3, estimate_s=90.0),
    progress.SessionPlanned(name="x", profile=None, runs=1, estimate_s=6.0),
    progress.RunStarted(index=1, total=3, scenario="a b", point_id="cc=westwood,loss_pct=0.5", seed=7, eta_s=90.0),
    progress.TrafficWindow(edge="begins"),
    progress.TrafficTick(t_s=10.0, duration_s=1e6, active=2),
    progress.TrafficWindow(edge="ends"),
    progress.RunEnded(index=1, total=3, status="complete"),
    progress.RunEnded(index=2, total=3, status="failed", reason="connection c0 failed: iperf3 exit 1: boom"),
]


@pytest.fixture
def logged():
    """The CLI's and the runner's logging setup (tests/conftest.py sets it up for every test too)."""
    return progress.configure_logging()


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_line_written_reads_back_as_its_event(event):
    line = progress.format_line(event)
    assert "\n" not in line
    assert progress.parse_line(line) == event
    assert progress.parse_line(line + "\r") == event  # a serial console's line end


def test_a_reason_of_several_lines_is_written_on_one():
    event = progress.RunEnded(index=1, total=1, status="failed", reason="CalledProcessError: tc failed\n  RTNETLINK\n")
    assert progress.format_line(event) == "run 1/1 failed: CalledProcessError: tc failed / RTNETLINK"
    assert progress.parse_line(progress.format_line(event)).reason == "CalledProcessError: tc failed / RTNETLINK"


def test_other_lines_are_no_event():
    for text in [
        "  collected: servers_exit in 0.1 s",
        "run 1/2",
        "backend: guest (not root)",
        "",
        "  fidelity: base RTT pair 0: ok: 20.1 ms",
    ]:
        assert progress.parse_line(text) is None


def test_the_tag_is_found_after_whatever_the_console_put_before_it():
    assert progress.message_of("[    3.141] [testbed] run 1/2 complete") == "run 1/2 complete"
    assert progress.message_of("[testbed] run 1/2 complete") == "run 1/2 complete"
    assert progress.message_of("[    3.141] virtio_net: link up") is None


def test_the_runner_and_the_session_log_tagged_lines_on_stdout(logged, capsys):
    from testbed.guest import runner
    from testbed.host import session

    runner.log(progress.format_line(EVENTS[2]))
    session.log("backend: guest (not root)")
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "[testbed] run 1/3: a b cc=westwood,loss_pct=0.5 seed=7 (ETA 1.5 min)",
        "[testbed] backend: guest (not root)",
    ]
    assert err == ""
    assert progress.configure_logging() is logged  # configured once, however often it is called


#: a stand-in for the runner in a guest: the kernel's lines, the runner's, through the runner's own log()
PRODUCER = textwrap.dedent("""
    import sys
    from testbed.guest import runner
    from testbed.plan import progress
    progress.configure_logging()
    print("[    0.5] Linux version 6.1.0", flush=True)
    for line in sys.argv[1:]:
        runner.log(line)
""")


def test_lines_from_a_runner_process_drive_the_hang_watch_and_the_host_watch(tmp_path, monkeypatch):
    run_lines = [
        progress.format_line(e)
        for e in [
            progress.RunStarted(index=1, total=2, scenario="s", point_id="p", seed=1, eta_s=120.0),
            progress.TrafficWindow(edge="begins"),
            progress.TrafficTick(t_s=5.0, duration_s=10.0, active=1),
            progress.TrafficWindow(edge="ends"),
            progress.RunEnded(index=1, total=2, status="complete"),
            progress.RunStarted(index=2, total=2, scenario="s", point_id="p", seed=2, eta_s=60.0),
        ]
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, *run_lines], cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    snapshots = iter(
        [hostload.Snapshot(0.0, (0,) * 8, 0, 0, 0, 0.0, ()), hostload.Snapshot(10.0, (10,) * 8, 0, 0, 0, 0.0, ())]
    )
    monkeypatch.setattr(hostload, "snapshot", lambda own, cores=None, tree=None: next(snapshots))
    watch = hostload.HostWatch(["p/seed1", "p/seed2"], own=set)
    hang = remote.RunnerProgress([100.0, 50.0], started=0.0, start_timeout_s=60)
    seen = []
    with proc, open(tmp_path / "console.log", "wb") as console:
        ready_s = remote.follow(
            proc,
            console,
            hang,
            label="test",
            start_timeout_s=60,
            timeout_s=60,
            on_line=lambda text, now: (seen.append(text), watch.on_line(text, now)),
        )
    assert ready_s is not None and proc.returncode == 0, (tmp_path / "console.log").read_text()
    assert seen == run_lines
    assert hang.current == 1 and "run 2/2" in hang.status_text(1)
    assert list(watch.summaries) == ["p/seed1"] and watch.summaries["p/seed1"].window_s == 10.0
    assert "Linux version" in (tmp_path / "console.log").read_text()


def test_the_bar_counts_runs_done_across_a_second_boot():
    from rich.console import Console
    from rich.progress import Progress

    from testbed.host.progressbar import ProgressBar

    bar = ProgressBar(Progress(console=Console(file=io.StringIO(), force_terminal=True), auto_refresh=False))
    logger = logging.getLogger("testbed.test_progress_bar")
    logger.addHandler(bar)
    logger.setLevel(logging.INFO)
    try:
        for event in [
            progress.SessionPlanned(name="s", profile=None, runs=3, estimate_s=600.0),
            progress.RunStarted(index=1, total=3, scenario="s", point_id="p", seed=1, eta_s=600.0),
            progress.RunEnded(index=1, total=3, status="complete"),
            progress.RunStarted(index=2, total=3, scenario="s", point_id="p", seed=2, eta_s=400.0),
        ]:
            logger.info(progress.format_line(event))
        logger.info("the guest stopped responding; booting it once more for the 2 runs not finished")
        # the second boot's plan numbers the 2 runs left from 1
        logger.info(
            progress.format_line(progress.RunStarted(index=1, total=2, scenario="s", point_id="p", seed=2, eta_s=400.0))
        )
    finally:
        logger.removeHandler(bar)
    task = bar.bar.tasks[0]
    assert (task.completed, task.total) == (1, 3)
    assert task.description == "run 1/2: p seed=2"
    assert 390 < task.fields["ends_at"] - time.monotonic() <= 402  # the line says 6.7 min


def test_the_bar_counts_the_runs_of_slots_side_by_side_and_ends_when_the_last_slot_does():
    from rich.console import Console
    from rich.progress import Progress

    from testbed.host.progressbar import ProgressBar

    bar = ProgressBar(Progress(console=Console(file=io.StringIO(), force_terminal=True), auto_refresh=False))
    lines = [
        progress.format_line(progress.SessionPlanned(name="s", profile=None, runs=4, estimate_s=600.0)),
        progress.slot_line(
            0,
            progress.format_line(
                progress.RunStarted(index=1, total=2, scenario="s", point_id="p", seed=1, eta_s=300.0)
            ),
        ),
        progress.slot_line(
            1,
            progress.format_line(
                progress.RunStarted(index=1, total=2, scenario="s", point_id="p", seed=2, eta_s=100.0)
            ),
        ),
        progress.slot_line(1, progress.format_line(progress.RunEnded(index=1, total=2, status="complete"))),
        progress.slot_line(
            1,
            progress.format_line(progress.RunStarted(index=2, total=2, scenario="s", point_id="p", seed=4, eta_s=50.0)),
        ),
        "g0: a packed guest's line that is no event",
    ]
    for line in lines:
        bar.emit(logging.makeLogRecord({"msg": line}))
    task = bar.bar.tasks[0]
    assert (task.completed, task.total) == (1, 4)
    assert task.description == "s1: run 2/2: p seed=4"
    assert 290 < task.fields["ends_at"] - time.monotonic() <= 302  # slot 0's, the last to end
    assert progress.named_of("alone: run 1/1 complete") == ("alone", "run 1/1 complete")
    assert progress.named_of("guest: 6.1.0-57-amd64 under TCG") == (None, "guest: 6.1.0-57-amd64 under TCG")


def test_run_writes_the_session_folder_and_report_for_scripts(tmp_path, monkeypatch, capsys):
    from testbed.cli import main
    from testbed.host import session
    from testbed.report.pages import sessionpage as session_report

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "topology: {name: dumbbell, bottleneck: {rate_mbit: 10}}\nflows: [{cc: reno, rtt_ms: 10}]\nduration_s: 5\n"
    )
    folder = tmp_path / "results" / "s" / "one"
    run = folder / "p" / "seed1"
    monkeypatch.setattr(
        session,
        "run_session",
        lambda *a, **k: session.SessionResult(folder, [run], {str(run): "complete"}, {"kind": "local"}),
    )
    monkeypatch.setattr(
        session_report,
        "write_session_report",
        lambda directory: type("R", (), {"summary_text": "1 run", "html_path": directory / "report.html"})(),
    )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM,)}
    try:
        done = tmp_path / "done.json"
        assert main(["run", str(scenario), "--results", str(tmp_path / "results"), "--done-file", str(done)]) == 0
        assert json.loads(done.read_text()) == {
            "schema_version": progress.SCHEMA,
            "session": str(folder),
            "report": str(folder / "report.html"),
            "complete": 1,
            "total": 1,
        }
        assert f"report: {folder / 'report.html'}" in capsys.readouterr().out  # still printed for people
        assert (
            main(
                ["run", str(scenario), "--results", str(tmp_path / "results"), "--no-report", "--done-file", str(done)]
            )
            == 0
        )
        assert progress.SessionDone.model_validate_json(done.read_text()).report is None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for handler in logging.getLogger("testbed").handlers[:]:
            logging.getLogger("testbed").removeHandler(handler)
