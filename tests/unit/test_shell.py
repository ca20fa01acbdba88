"""``testbed shell`` before any kernel: which run it builds, how a guest is asked for a terminal, and
a scenario whose knobs are left TODO refused with the task that sets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cli import main
from testbed.host import shell, virtme
from testbed.host.kernels import Kernel
from testbed.scenario.load import scenario_from_dict
from tests.conftest import PROJECT

SWEEP = {
    "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
    "flows": [{"cc": ["reno", "westwood"], "rtt_ms": 20}],
    "duration_s": 5,
    "seeds": [3, 4],
}


def test_the_shell_builds_the_first_point_and_says_how_to_pick_another():
    said = []
    run = shell.chosen_run(scenario_from_dict(SWEEP, name="sweep"), log=said.append)
    assert (run.point_id, run.seed) == ("cc=reno", 3)
    assert "2 points" in said[0] and "cc=westwood" in said[0] and "--only" in said[0]
    selected = scenario_from_dict(SWEEP, name="sweep").select(["cc=westwood"], [4])
    said.clear()
    assert (shell.chosen_run(selected, log=said.append).point_id, said) == ("cc=westwood", [])


def test_a_guest_shell_gets_the_terminal_as_its_console_without_qemus_monitor():
    kernel = Kernel(release="6.1.0-56-amd64", vmlinuz=Path("/k/vmlinuz"), source="test")
    config = virtme.GuestConfig("tcg", 2, "2G", "tsc=reliable")
    argv = virtme.vng_argv(kernel, config, [Path("/tmp/s")], shell=Path("/tmp/s/login.sh"))
    assert argv[-3:] == ["--disable-monitor", "--shell", "/tmp/s/login.sh"]
    assert "--exec" not in argv and "-v" not in argv  # no boot log over the student's terminal
    assert "--exec" in virtme.vng_argv(kernel, config, [], "true")


def test_a_starter_file_with_knobs_left_is_refused_before_anything_boots(capsys):
    status = main(["shell", str(PROJECT / "labs" / "wireless" / "wireless.yaml")])
    assert status == 2
    err = capsys.readouterr().err
    assert "left for you to set" in err and "task 1" in err


def test_a_guest_that_never_reaches_its_login_is_booted_once_more_then_refused(tmp_path, capsys):
    """Real processes stand for the guest (``sh``): one that never runs the login script is stopped at
    the deadline, twice, and the error says what to try; one that logs in runs past the deadline."""
    started = tmp_path / "login-started"
    silent = ["sh", "-c", f"echo $$ > {tmp_path}/pid; sleep 60"]
    with pytest.raises(virtme.GuestBootError, match="did not reach its shell twice.*--kernel"):
        shell.attached_booting_twice(silent, started, timeout_s=1)
    assert "booting it once more" in capsys.readouterr().err
    pid = int((tmp_path / "pid").read_text())
    assert not Path(f"/proc/{pid}").exists(), "the silent guest was left running"
    logs_in = ["sh", "-c", f"sleep 0.2; touch {started}; sleep 2; exit 3"]
    assert shell.attached_booting_twice(logs_in, started, timeout_s=1) == 3
