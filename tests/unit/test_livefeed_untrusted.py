"""The live feed reads run folders the guest writes while it reads them (testbed/report/live/livefeed.py): a
symbolic link is not followed, a FIFO not waited on (either counts as not there yet), and a long trace is
read a bounded piece at a time without losing a record."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from testbed.report.live import livefeed
from tests.unit.test_livefeed import student_session

RUN = "cc=reno/seed=1"


@pytest.fixture
def session(tmp_path) -> Path:
    return student_session(tmp_path)


def _within(seconds: float, call):
    """``call()``'s result, failing the test when it does not return within ``seconds`` (a FIFO read blocks)."""
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    assert not worker.is_alive(), "the feed blocked"
    return result[0]


def _fifo_in_place_of(path: Path) -> None:
    path.unlink(missing_ok=True)  # the fixture's runs predate queues-live.csv
    os.mkfifo(path)


def test_a_manifest_that_links_outside_the_run_is_not_followed(session, tmp_path):
    manifest = session / RUN / "manifest.json"
    outside = tmp_path / "elsewhere.json"
    outside.write_text(manifest.read_text())
    manifest.unlink()
    manifest.symlink_to(outside)
    assert _within(5, livefeed.RunTail(session, RUN).poll) == []  # as if the run had not started
    assert not livefeed.finished(session)


def test_a_fifo_for_a_manifest_or_a_trace_neither_blocks_nor_is_read(session):
    _fifo_in_place_of(session / RUN / "raw" / "tcp_probe.txt")
    _fifo_in_place_of(session / RUN / "raw" / "queues-live.csv")
    _fifo_in_place_of(session / "cc=reno" / "seed=2" / "manifest.json")
    records = _within(10, livefeed.SessionFeed(session).poll)
    assert not [r for r in records if r.get("run") == RUN and r["kind"] in ("flow", "queue")]
    assert [r for r in records if r.get("run") == RUN and r["kind"] == "result"]  # the run's end is still told
    assert not [r for r in records if r.get("run") == "cc=reno/seed=2"]
    assert [r for r in records if r.get("run") == "cc=reno/seed=3" and r["kind"] == "flow"]  # the others are


def test_a_plan_that_is_a_link_is_not_a_session_to_follow(session, tmp_path):
    plan = session / "plan.json"
    outside = tmp_path / "plan-elsewhere.json"
    outside.write_text(plan.read_text())
    plan.unlink()
    plan.symlink_to(outside)
    assert _within(5, livefeed.SessionFeed(session).poll) == []
    assert not livefeed.finished(session)


def test_a_trace_read_a_small_piece_a_poll_gives_every_record(session, monkeypatch):
    """A run's end waits until its traces are read to their end, so a long trace loses nothing."""
    whole = [r for r in livefeed.RunTail(session, RUN).poll() if r["kind"] in ("flow", "queue")]
    monkeypatch.setattr(livefeed, "TAIL_READ_BYTES", 4096)
    tail = livefeed.RunTail(session, RUN)
    pieces, polls = [], 0
    while not tail.done:
        pieces += tail.poll()
        polls += 1
    assert polls > 10 and [r for r in pieces if r["kind"] in ("flow", "queue")] == whole
    assert pieces[-1]["kind"] == "result"


def test_a_line_that_never_ends_is_dropped_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(livefeed, "MAX_LINE_BYTES", 100)
    path = tmp_path / "trace.txt"
    path.write_bytes(b"x" * 500)
    tail = livefeed._Tail(path)
    assert tail.lines() == [] and tail.partial == b""
    with path.open("ab") as out:
        out.write(b"\nwhole line\n")
    assert tail.lines() == ["", "whole line"]
