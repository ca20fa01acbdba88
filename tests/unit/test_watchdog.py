"""The runner's per-run watchdog and the guest's console tail in error messages."""

from __future__ import annotations

import signal
import time

import pytest

from testbed import guest, runner


def test_watchdog_fails_a_run_that_blocks_beyond_its_budget():
    started = time.monotonic()
    with pytest.raises(runner.RunTimedOut, match="time budget"), runner._watchdog(0.3):
        time.sleep(5)
    assert time.monotonic() - started < 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_watchdog_leaves_a_run_within_its_budget_alone():
    with runner._watchdog(2.0):
        time.sleep(0.05)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler, None)


def test_console_tail_puts_the_last_lines_in_the_message(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = guest.console_tail(log, lines=3)
    assert "line 97" in tail and "line 99" in tail and "line 96" not in tail
    assert guest.console_tail(tmp_path / "missing.log") == ""
