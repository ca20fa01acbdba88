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
    "testbed/report/cache",
    "testbed/report/pages",
    "testbed/report/live",
    "testbed/labs",
    "testbed/workflows",
    "testbed/cli",
    "analysis/raw",
    "analysis/runs",
    "analysis/verdicts",
    "analysis/kernels",
    "analysis/figures",
]
#: packages that hold rooms and no modules of their own
HALLS = {"testbed", "testbed/report", "analysis"}


def test_the_import_contracts_hold(capsys):
    importlinter = require_module("importlinter.cli", "the import contracts")
    here = os.getcwd()
    os.chdir(PROJECT)  # the contracts name packages; grimp finds them from the checkout
    try:
        code = importlinter.lint_imports(config_filename=".importlinter", no_cache=True, no_logo=True)
    finally:
        os.chdir(here)
    assert code == 0, capsys.readouterr().out


def test_every_package_is_a_room_the_layout_test_knows():
    """A package added or moved (a new room, a room split) without docs/layout.md and this list fails here."""
    packages = {
        str(init.parent.relative_to(PROJECT))
        for top in ("testbed", "analysis")
        for init in (PROJECT / top).rglob("__init__.py")
    }
    assert packages == set(ROOMS) | HALLS, f"rooms not listed: {packages - set(ROOMS) - HALLS}"
    for hall in HALLS:
        modules = {p.name for p in (PROJECT / hall).glob("*.py")} - {"__init__.py"}
        assert not modules, f"{hall}/ holds rooms, not modules: {sorted(modules)}"


def test_docs_layout_names_every_module_of_every_room():
    page = (PROJECT / "docs" / "layout.md").read_text()
    for room in ROOMS:
        section = page.split(f"### `{room}/`", 1)[1].split("\n### ", 1)[0]
        on_disk = {p.name for p in (PROJECT / room).glob("*.py") if p.name != "__init__.py"}
        named = set(re.findall(r"`([a-z_]+\.py)`", section))
        assert on_disk == named, f"docs/layout.md, {room}/: missing {on_disk - named}, gone {named - on_disk}"


def test_a_file_name_repeats_only_where_docs_layout_says_why():
    """One name per thing: a module's name found in two rooms is one concept at two stages, and docs/layout.md's
    "Names that repeat" says which; a new repeat (two different things with one name) fails here."""
    from collections import Counter

    names = Counter(
        p.name
        for top in ("testbed", "analysis", "topologies")
        for p in (PROJECT / top).rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    repeated = {name for name, count in names.items() if count > 1}
    section = (PROJECT / "docs" / "layout.md").read_text().split("## Names that repeat", 1)[1].split("\n## ", 1)[0]
    explained = {
        name for name in re.findall(r"^- (.*?):", section, re.M) for name in re.findall(r"`([a-z_]+\.py)`", name)
    }
    assert repeated == explained, (
        f"repeated but not explained: {repeated - explained}; explained, not repeated: {explained - repeated}"
    )


def test_no_module_is_longer_than_500_lines_without_saying_why():
    """A module past 500 lines says why in its docstring (a line with "500 lines")."""
    long = []
    for path in [*(PROJECT / "testbed").rglob("*.py"), *(PROJECT / "analysis").rglob("*.py")]:
        text = path.read_text()
        if text.count("\n") > 500 and "500 lines" not in text.split('"""', 2)[1]:
            long.append(f"{path.relative_to(PROJECT)} ({text.count(chr(10))} lines)")
    assert not long, f"over 500 lines without a word on why: {', '.join(long)}"


#: a function's body (its docstring aside) longer than this is not read at once
MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_60_lines_without_saying_why():
    """A function's body past MAX_FUNCTION_LINES (its docstring aside) says why in its docstring (a line
    with "60 lines")."""
    import ast

    long = []
    for top in ("testbed", "analysis", "topologies"):
        for path in (PROJECT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(node) or ""
                start = node.body[1].lineno if doc and len(node.body) > 1 else node.body[0].lineno
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES and "60 lines" not in doc:
                    long.append(
                        f"{path.relative_to(PROJECT)}:{node.lineno} {node.name} ({node.end_lineno - start + 1})"
                    )
    assert not long, "functions over 60 lines without a word on why: " + ", ".join(long)


#: a path of the project's top folders, as the docs and the code cite them
CITED = re.compile(
    r"(?<![\w/.~-])((?:testbed|analysis|topologies|docs|scenarios|playbooks|kernel-patch|labs|tests|scripts)"
    r"/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)
#: cited on purpose though not in the checkout: a user's copy of playbooks/inventory/lab.ini.example, a
#: kernel tree's own script (kernelbuild runs it in the tree)
NOT_HERE = {"playbooks/inventory/lab.ini", "scripts/kconfig/merge_config.sh"}


def test_every_path_the_docs_and_the_code_cite_exists():
    """A cited file that moved or never was (a map that lies) fails here; a placeholder (labs/NAME, a glob
    ``lab-*``) is not a path."""
    texts = [*PROJECT.glob("*.md"), *(PROJECT / "docs").glob("*.md"), PROJECT / "Makefile"]
    texts += [
        p for room in ("testbed", "analysis", "topologies", "tests", "scripts") for p in (PROJECT / room).rglob("*.py")
    ]
    missing = []
    for path in texts:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CITED.finditer(line):
                cited, after = match.group(1).rstrip("."), line[match.end() : match.end() + 2]
                if (
                    re.search(r"[A-Z]{3,}", cited)
                    or (after[:1] and after[:1] in "*{<")
                    or after == "-*"
                    or cited in NOT_HERE
                ):
                    continue
                if not (PROJECT / cited).exists():
                    missing.append(f"{path.relative_to(PROJECT)}:{number}: {cited}")
    assert not missing, "cited but not in the checkout:\n" + "\n".join(missing)


#: a table cell longer than this is prose: it goes in a list or a paragraph beside the table
MAX_CELL = 200


def test_no_table_cell_of_the_docs_is_prose():
    """Tables hold short facts; a cell past MAX_CELL characters (a run log in a table) reads badly in
    every viewer, so the docs say it in a list or a paragraph instead."""
    long = []
    for path in [PROJECT / "README.md", *(PROJECT / "docs").glob("*.md")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("|") and not set(line.strip()) <= set("|-: "):
                widths = [len(cell.strip()) for cell in line.strip()[1:-1].split("|")]
                if max(widths) > MAX_CELL:
                    long.append(f"{path.relative_to(PROJECT)}:{number} ({max(widths)} characters)")
    assert not long, "table cells over 200 characters: " + ", ".join(long)


def test_the_commands_page_gives_each_commands_synopsis_as_its_parser_has_it(monkeypatch):
    """docs/commands.md's synopses are argparse's own usage (scripts/synopses.py writes them): an option
    added, renamed or removed in testbed/cli/ and not on the page fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("synopses", PROJECT / "scripts" / "synopses.py")
    synopses = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synopses)
    monkeypatch.setenv("COLUMNS", synopses.WIDTH)
    page = synopses.PAGE.read_text()
    assert page == synopses.rewritten(page, synopses.synopses()), (
        "docs/commands.md's synopses differ from the parser: run .venv/bin/python scripts/synopses.py"
    )
