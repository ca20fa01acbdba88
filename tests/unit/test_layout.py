"""The layout: imports run one way between the rooms (.importlinter), and docs/layout.md names every module."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.prerequisites import require_module

PROJECT = Path(__file__).resolve().parents[2]
ROOMS = [
    "testbed/scenario",
    "testbed/plan",
    "testbed/results",
    "testbed/guest",
    "testbed/host",
    "testbed/report",
    "testbed/labs",
    "testbed/workflows",
    "analysis",
]


def test_the_import_contracts_hold(capsys):
    importlinter = require_module("importlinter.cli", "the import contracts")
    here = os.getcwd()
    os.chdir(PROJECT)  # the contracts name packages; grimp finds them from the checkout
    try:
        code = importlinter.lint_imports(config_filename=".importlinter", no_cache=True, no_logo=True)
    finally:
        os.chdir(here)
    assert code == 0, capsys.readouterr().out


def test_docs_layout_names_every_module_of_every_room():
    page = (PROJECT / "docs" / "layout.md").read_text()
    for room in ROOMS:
        section = page.split(f"### `{room}/`", 1)[1].split("\n### ", 1)[0]
        on_disk = {p.name for p in (PROJECT / room).glob("*.py") if p.name != "__init__.py"}
        named = set(re.findall(r"`([a-z_]+\.py)`", section))
        assert on_disk == named, f"docs/layout.md, {room}/: missing {on_disk - named}, gone {named - on_disk}"


def test_no_module_is_longer_than_500_lines_without_saying_why():
    """A module past 500 lines says why in its docstring (a line with "500 lines")."""
    long = []
    for path in [*(PROJECT / "testbed").rglob("*.py"), *(PROJECT / "analysis").glob("*.py")]:
        text = path.read_text()
        if text.count("\n") > 500 and "500 lines" not in text.split('"""', 2)[1]:
            long.append(f"{path.relative_to(PROJECT)} ({text.count(chr(10))} lines)")
    assert not long, f"over 500 lines without a word on why: {', '.join(long)}"
