"""A test that cannot run here is skipped with its reason outside CI and fails under CI or --require-tiers,
and a tier in which every test skipped fails there (tests/prerequisites.py, tests/conftest.py): pytest run
for real on small test files, with and without the strict setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

NEEDS_A_TOOL = """
from tests.prerequisites import require_tools

def test_needs_a_tool():
    require_tools(("no-such-tool-here",), "the imaginary tier")
"""
SKIPS_FOR_ITS_OWN_REASON = """
import pytest

def test_long():
    pytest.skip("too long for make test")
"""
ONE_RUNS = (
    SKIPS_FOR_ITS_OWN_REASON
    + """

def test_runs():
    assert True
"""
)


def _pytest(tmp_path: Path, source: str, strict: bool) -> subprocess.CompletedProcess:
    test = tmp_path / "test_tier.py"
    test.write_text(source)
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "CC_TESTBED_REQUIRE_TIERS")}
    if strict:
        env["CC_TESTBED_REQUIRE_TIERS"] = "1"
    # tests/conftest.py as a plugin: its session hook, as for the tiers under tests/
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-rs",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_tool_skips_with_its_reason_outside_ci(tmp_path):
    done = _pytest(tmp_path, NEEDS_A_TOOL, strict=False)
    assert done.returncode == 0, done.stdout
    assert "the imaginary tier needs no-such-tool-here: run 'make setup'" in done.stdout and "1 skipped" in done.stdout


def test_a_missing_tool_fails_under_require_tiers(tmp_path):
    done = _pytest(tmp_path, NEEDS_A_TOOL, strict=True)
    assert done.returncode == 1, done.stdout
    assert "missing prerequisite: the imaginary tier needs no-such-tool-here" in done.stdout
    assert "--require-tiers" in done.stdout and "1 failed" in done.stdout


@pytest.mark.parametrize(
    ("source", "strict", "code"),
    [(SKIPS_FOR_ITS_OWN_REASON, True, 1), (SKIPS_FOR_ITS_OWN_REASON, False, 0), (ONE_RUNS, True, 0)],
)
def test_a_tier_where_every_test_skipped_fails_only_when_required(tmp_path, source, strict, code):
    done = _pytest(tmp_path, source, strict)
    assert done.returncode == code, done.stdout
    assert ("every test skipped" in done.stdout) == (code == 1)
    assert "too long for make test" in done.stdout  # the skip says why either way
