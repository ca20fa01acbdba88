"""What a test needs that this machine may lack (root, a tool, a daemon), and what happens when it is
missing: outside CI the test is skipped and says why; under ``CI=true`` or ``--require-tiers``
(``CC_TESTBED_REQUIRE_TIERS=1``, set by scripts/pytest-tier.sh) it fails and names what is missing.

Why: pytest exits 0 when every test skipped, so a CI machine without the tools would pass a tier with
nothing run. netdev's NIPA and KernelCI report a test that could not run as a failure of the setup,
never as a pass; this does the same."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

#: why the rule is strict here (empty outside CI and --require-tiers)
STRICT_BECAUSE = (
    "CI=true"
    if os.environ.get("CI", "").lower() == "true"
    else "--require-tiers"
    if os.environ.get("CC_TESTBED_REQUIRE_TIERS") == "1"
    else ""
)


def missing(what: str) -> NoReturn:
    """The test cannot run here because ``what`` is missing: skip it, or fail it under CI / --require-tiers."""
    if STRICT_BECAUSE:
        pytest.fail(
            f"missing prerequisite: {what} (under {STRICT_BECAUSE} a test that cannot run fails)", pytrace=False
        )
    pytest.skip(what)


def require_root(why: str) -> None:
    if os.geteuid() != 0:
        missing(f"needs root ({why})")


def require_tools(tools: tuple[str, ...] | list[str], purpose: str, extra_path: str = "") -> None:
    """Every tool on PATH (and /usr/sbin, /sbin, and ``extra_path``), or the test is missing them."""
    path = ":".join(p for p in (os.environ.get("PATH", ""), "/usr/sbin:/sbin", extra_path) if p)
    absent = [tool for tool in tools if not shutil.which(tool, path=path)]
    if absent:
        missing(f"{purpose} needs {', '.join(absent)}: run 'make setup'")


def require_files(files: tuple[Path, ...] | list[Path], purpose: str) -> None:
    absent = [str(f) for f in files if not Path(f).exists()]
    if absent:
        missing(f"{purpose} needs {', '.join(absent)}: run 'make setup'")


def require_module(name: str, purpose: str):
    """The module ``name`` imported, or the test is missing it (pytest.importorskip, strict under CI)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(f"{purpose} needs the Python module {name}: run 'make setup' (requirements.lock)")
