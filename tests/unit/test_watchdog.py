"""The runner's per-run watchdog and the guest's console tail in error messages."""

from __future__ import annotations

import json
import signal
import time

import pytest

from testbed.guest import runner
from testbed.host import remote
from testbed.host import virtme as guest


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


class Keeper:
    """Stands in for the runner's NetworkKeeper: its close blocks for ``block_s``."""

    def __init__(self, block_s: float) -> None:
        self.block_s, self.closed = block_s, False

    def close(self) -> None:
        time.sleep(self.block_s)
        self.closed = True


def test_a_teardown_that_blocks_after_the_last_run_is_said_and_left_so_the_plan_still_ends(monkeypatch):
    said, released = [], []
    assert runner.TEARDOWN_BUDGET_S < remote.HANG_MARGIN_S  # said before the host would call the guest hung
    monkeypatch.setattr(runner, "TEARDOWN_BUDGET_S", 0.3)
    monkeypatch.setattr(runner, "log", said.append)
    monkeypatch.setattr(runner.capture, "release_instances", lambda: released.append(True))
    started = time.monotonic()
    runner._tear_down(Keeper(block_s=5))
    assert time.monotonic() - started < 2  # not the host's HANG_MARGIN_S
    assert len(said) == 1 and "the teardown after the last run took over" in said[0], said
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    keeper = Keeper(block_s=0.0)
    runner._tear_down(keeper)  # within its budget: all of it, nothing said
    assert keeper.closed and released == [True] and len(said) == 1


def test_console_tail_puts_the_last_lines_in_the_message(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = remote.console_tail(log, lines=3)
    assert "line 97" in tail and "line 99" in tail and "line 96" not in tail
    assert remote.console_tail(tmp_path / "missing.log") == ""


class FlakyBoot:
    """Stands in for testbed.host.virtme: its run_in_guest fails ``failures`` times with ``error``, then
    runs the plan it is given (every run in it complete). Before failing, it completes the plan's
    first run and leaves the second one running, as a guest that hung in the middle would."""

    GuestError, GuestBootError, GuestHungError = guest.GuestError, guest.GuestBootError, guest.GuestHungError
    BOOT_TIMEOUT_S = 1

    def __init__(self, failures: int, error=guest.GuestBootError):
        self.failures, self.error, self.calls, self.plans = failures, error, 0, []

    def run_in_guest(self, kernel, config, plan_path, rwdirs, console_log, timeout_s, echo, on_line=None):
        self.calls += 1
        console_log.write_text(f"boot {self.calls}\n")
        plan = json.loads(plan_path.read_text())
        self.plans.append([r["run_dir"] for r in plan["runs"]])
        session = rwdirs[0]
        if self.calls <= self.failures:
            if self.error is not guest.GuestBootError:
                for run, status in zip(plan["runs"][:2], ["complete", "running"], strict=True):
                    write_manifest(session / run["run_dir"], status)
            raise self.error(f"the guest failed; console log: {console_log}")
        for run in plan["runs"]:
            write_manifest(session / run["run_dir"], "complete")
        return {"wall_s": 1.0}


def write_manifest(directory, status):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps({"status": status}))


def session_with_plan(tmp_path, runs=3):
    session = tmp_path / f"session{len(list(tmp_path.iterdir()))}"
    session.mkdir()
    plan = {"context": {}, "runs": [{"run_dir": f"p/seed{i}", "estimate_s": 10} for i in range(1, runs + 1)]}
    (session / "plan.json").write_text(json.dumps(plan))
    return session


def test_a_guest_that_does_not_boot_is_booted_once_more_with_its_first_console_kept(tmp_path):
    from testbed.host.secondboot import run_with_second_boot

    flaky, session = FlakyBoot(failures=1), session_with_plan(tmp_path)
    assert run_with_second_boot(flaky, None, None, session / "plan.json", session, 10) == {"wall_s": 1.0}
    assert flaky.calls == 2 and flaky.plans[1] == flaky.plans[0]
    assert (session / "guest-console-boot1.log").read_text() == "boot 1\n"
    assert (session / "guest-console.log").read_text() == "boot 2\n"
    with pytest.raises(guest.GuestBootError):  # twice: reported
        session = session_with_plan(tmp_path)
        run_with_second_boot(FlakyBoot(failures=2), None, None, session / "plan.json", session, 10)
    crashed = FlakyBoot(failures=1, error=guest.GuestError)  # the runner had started: not a boot failure
    session = session_with_plan(tmp_path)
    with pytest.raises(guest.GuestError):
        run_with_second_boot(crashed, None, None, session / "plan.json", session, 10)
    assert crashed.calls == 1


def test_a_guest_that_hangs_is_booted_once_more_for_the_runs_not_finished(tmp_path):
    from testbed.host.secondboot import run_with_second_boot
    from testbed.results.manifest import run_status

    hung, session = FlakyBoot(failures=1, error=guest.GuestHungError), session_with_plan(tmp_path)
    run_with_second_boot(hung, None, None, session / "plan.json", session, 10)
    # run 1 completed before the hang and is kept; run 2 (running when it hung) and run 3 run again
    assert hung.plans == [["p/seed1", "p/seed2", "p/seed3"], ["p/seed2", "p/seed3"]]
    assert [run_status(session / "p" / f"seed{i}") for i in (1, 2, 3)] == ["complete"] * 3
    (aside,) = (session / ".attempts" / "p").iterdir()
    assert aside.name.startswith("seed2-") and json.loads((aside / "manifest.json").read_text())["status"] == "running"
    assert (session / "guest-console-boot1.log").read_text() == "boot 1\n"
    twice = FlakyBoot(failures=2, error=guest.GuestHungError)
    session = session_with_plan(tmp_path)
    with pytest.raises(guest.GuestHungError):
        run_with_second_boot(twice, None, None, session / "plan.json", session, 10)


class HungAfterItsRuns(FlakyBoot):
    """A guest that completes every run of its plan, then falls silent before it ends the plan."""

    def run_in_guest(self, kernel, config, plan_path, rwdirs, console_log, timeout_s, echo, on_line=None):
        self.calls += 1
        for run in json.loads(plan_path.read_text())["runs"]:
            write_manifest(rwdirs[0] / run["run_dir"], "complete")
        raise guest.GuestHungError(f"the guest stopped responding between runs; console log: {console_log}")


def test_a_guest_silent_after_its_last_run_is_not_booted_again_for_runs_all_done(tmp_path):
    from testbed.host.secondboot import run_with_second_boot

    hung, session, said = HungAfterItsRuns(failures=1), session_with_plan(tmp_path), []
    assert run_with_second_boot(hung, None, None, session / "plan.json", session, 10, log=said.append) == {}
    assert hung.calls == 1 and not (session / "plan-second-boot.json").exists()
    assert len(said) == 1 and "every run is done, so it is not booted again" in said[0], said


def test_a_silent_guest_is_hung_only_past_the_current_runs_budget():
    progress = remote.RunnerProgress([10.0, 100.0], started=0.0, start_timeout_s=guest.BOOT_TIMEOUT_S)
    budget = runner.run_budget_s(100.0)
    assert budget == 100.0 * runner.RUN_WATCHDOG_FACTOR + runner.RUN_WATCHDOG_SLACK_S
    assert not progress.overdue(guest.BOOT_TIMEOUT_S + remote.HANG_MARGIN_S - 1)  # booting
    progress.line("run 1/2: p p seed=1 (ETA 1.0 min)", now=50.0)
    progress.line("  traffic t= 9.0 s of 10 s, 1 connections active", now=60.0)  # not a run line
    assert not progress.overdue(50.0 + runner.run_budget_s(10.0) + remote.HANG_MARGIN_S - 1)
    assert progress.overdue(50.0 + runner.run_budget_s(10.0) + remote.HANG_MARGIN_S + 1)
    assert "run 1/2" in progress.status_text(400)
    progress.line("run 1/2 complete", now=100.0)  # between runs: the next must start soon
    assert progress.overdue(100.0 + remote.HANG_MARGIN_S + 1) and "between runs" in progress.status_text(1)
    progress.line("run 2/2: p p seed=2 (ETA 1.0 min)", now=110.0)
    assert not progress.overdue(110.0 + budget + remote.HANG_MARGIN_S - 1)
    assert progress.overdue(110.0 + budget + remote.HANG_MARGIN_S + 1)
    progress.line("run 2/2 failed: the run exceeded its time budget (watchdog)", now=120.0)
    assert not progress.overdue(120.0 + remote.HANG_MARGIN_S - 1)
