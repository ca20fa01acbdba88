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
        assert re.search(rf"^{target}:", makefile, re.M), (
            f"README names 'make {target}', the Makefile has none"
        )


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
    bad.write_text("topology: {name: dumbbell, bottleneck: {rate_mbit: -1}}\nflows: [{cc: reno, rtt_ms: 10}]\n"
                   "duration_s: 5\n")  # fmt: skip
    assert main(["run", str(bad), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "line 1" in err and "rate_mbit" in err
    assert not (tmp_path / "r").exists(), "nothing is written for a scenario that does not validate"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("topology: {name: dumbbell, bottleneck: {rate_mbit: true}}\nflows: [{cc: reno, rtt_ms: 10}]\nduration_s: 5\n",
         "  line 1, topology.bottleneck.rate_mbit: expected a number in Mbit/s, got the bool true"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n",
         "  line 1: lists and mappings are nested more than 64 levels deep; a scenario or suite file may nest "
         "at most 64"),
    ],
    ids=["bool-for-a-number", "5000-brackets"],
)  # fmt: skip
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
