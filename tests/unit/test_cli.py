"""The CLI: every command is documented in the README and has --help."""

import re

import pytest

from testbed.cli import build_parser
from tests.conftest import PROJECT


def commands():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(sub.choices)


def test_every_command_is_in_the_readme():
    readme = (PROJECT / "README.md").read_text()
    documented = set(re.findall(r"`testbed (\w+)", readme))
    assert set(commands()) <= documented, f"undocumented: {set(commands()) - documented}"


def test_every_make_target_in_the_readme_exists():
    makefile = (PROJECT / "Makefile").read_text()
    readme = (PROJECT / "README.md").read_text()
    for target in set(re.findall(r"`make ([a-z-]+)", readme)):
        assert re.search(rf"^{target}:", makefile, re.M), f"README names 'make {target}', the Makefile has none"


def test_quick_start_is_the_two_commands():
    readme = (PROJECT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```sh\n(.*?)```", quick, re.S).group(1)
    assert block.split("\n")[:2] == ["make experiment", "make test"]


@pytest.mark.parametrize("command", commands())
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: testbed" in capsys.readouterr().out


def test_bad_scenario_exits_2_with_the_problem(tmp_path, capsys):
    from testbed.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "topology: {name: dumbbell, bottleneck: {rate_mbit: -1}}\nflows: [{cc: reno, rtt_ms: 10}]\nduration_s: 5\n"
    )
    assert main(["run", str(bad), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "line 1" in err and "rate_mbit" in err
    assert not (tmp_path / "r").exists(), "nothing is written for a scenario that does not validate"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "topology: {name: dumbbell, bottleneck: {rate_mbit: true}}\n"
            "flows: [{cc: reno, rtt_ms: 10}]\nduration_s: 5\n",
            "  line 1, topology.bottleneck.rate_mbit: expected a number in Mbit/s, got the bool true",
        ),
        (
            "a: " + "[" * 5000 + "]" * 5000 + "\n",
            "  line 1: lists and mappings are nested more than 64 levels deep; a scenario or suite file may nest "
            "at most 64",
        ),
    ],
    ids=["bool-for-a-number", "5000-brackets"],
)
def test_check_of_a_bad_file_exits_2_naming_the_file_and_line(tmp_path, capsys, text, problem):
    import signal

    from testbed.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGPIPE)}  # main() sets both
    try:
        assert main(["check", str(bad)]) == 2  # an uncaught exception would end the test with its traceback
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"testbed: {bad}: 1 problem:", problem]
    assert "Traceback" not in err and not out


def _runaway(tmp_path):
    """300 RTTs x 300 seeds of 10 s: 90,000 runs, about 375 h here."""
    path = tmp_path / "runaway.yaml"
    path.write_text(
        "topology: {name: dumbbell, bottleneck: {rate_mbit: 10, queue_bdp: 1}}\n"
        f"flows: [{{cc: reno, rtt_ms: {list(range(10, 3010, 10))}}}]\n"
        f"duration_s: 10\nseeds: {list(range(1, 301))}\n"
    )
    return path


def test_a_sweep_of_more_than_a_day_is_refused_before_anything_runs_unless_asked(tmp_path, capsys):
    from testbed.cli import main

    path = _runaway(tmp_path)
    assert main(["check", str(path)]) == 0
    assert "warning: about 375.0 h of runs, over a day: testbed run will ask for --yes" in capsys.readouterr().err
    assert main(["run", str(path), "--results", str(tmp_path / "results"), "--backend", "local"]) == 2
    err = capsys.readouterr().err
    assert "90000 runs, estimated 375.0 h here" in err and "3.8 h on 100 hosts" in err and "--yes" in err
    assert not (tmp_path / "results").exists()
    # spread over 100 workers it is under a day: not refused for its length (the session's own checks follow)
    from testbed.host.clusterspec import host_count
    from testbed.plan.estimate import runaway

    assert host_count("local:100") == 100 and runaway([], 1) is None
