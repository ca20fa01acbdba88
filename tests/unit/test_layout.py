"""The layout: imports run one way between the rooms (.importlinter), and docs/layout.md names every module."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.prerequisites import require_module

PROJECT = Path(__file__).resolve().parents[2]
ROOMS = ["scenario", "plan", "results", "guest", "host", "report", "workflows"]


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
    rows = {room: next(line for line in page.splitlines() if line.startswith(f"| `testbed/{room}/`")) for room in ROOMS}
    for room, row in rows.items():
        on_disk = {p.name for p in (PROJECT / "testbed" / room).glob("*.py") if p.name != "__init__.py"}
        named = set(re.findall(r"`([a-z_]+\.py)`", row))
        assert on_disk == named, f"docs/layout.md, testbed/{room}/: missing {on_disk - named}, gone {named - on_disk}"
