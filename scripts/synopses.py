"""docs/commands.md's synopses, one per ``testbed`` command, written from the argument parser itself
(``testbed/cli/``), so the page never lists an option the command lacks or misses one it has.

    .venv/bin/python scripts/synopses.py    # rewrites each "### testbed NAME" section's first code block

tests/unit/test_layout.py fails when the page and the parser differ. argparse's own usage line is the
synopsis (``-h`` left out), at a fixed width so the page does not depend on the terminal.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PAGE = PROJECT / "docs" / "commands.md"
WIDTH = "110"


def synopses() -> dict[str, str]:
    """Each subcommand's usage as the page shows it (with COLUMNS set to WIDTH: argparse wraps usage at
    the terminal's width)."""
    from testbed.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    found = {}
    for name, parser in commands.choices.items():
        found[name] = "\n".join(_usage(p) for p in _actions(parser))
    return found


def _actions(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """A command's parser, or each of its actions' (``testbed lab check``...) when it has them."""
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(nested[0].choices.values()) if nested else [parser]


def _usage(parser: argparse.ArgumentParser) -> str:
    usage = parser.format_usage().removeprefix("usage: ").replace(" [-h]", "", 1).rstrip()
    return re.sub(r"\n +", "\n    ", usage)  # continuation lines indented by four


def rewritten(page: str, found: dict[str, str]) -> str:
    """``page`` with the code block right under each ``### testbed NAME`` replaced by NAME's synopsis."""
    for name, usage in found.items():
        pattern = rf"(### testbed {re.escape(name)}\n\n```\n).*?(\n```)"
        page = re.sub(pattern, lambda m, usage=usage: m.group(1) + usage + m.group(2), page, count=1, flags=re.S)
    return page


if __name__ == "__main__":
    os.environ["COLUMNS"] = WIDTH
    sys.path.insert(0, str(PROJECT))
    PAGE.write_text(rewritten(PAGE.read_text(), synopses()))
