"""A real bisection over a kernel tree with a merge (issue 63): Debian's linux-source-6.1 as a git tree,
a comment-only commit on its main line, and a branch merged into it that holds the planted regression
(kernel-patch/examples/no-slow-start.patch), then a commit that does not compile and the commit that
mends it. ``testbed bisect --tree`` searches the commit graph as ``git bisect`` does (the merged branch
included), builds each commit it reaches, goes round one that does not build (skipped, named) and must
name the planted commit, confirmed on fresh seeds.

The first build of the tree takes about 15 minutes of both cores here and each later one about half a
minute (ccache, one object folder: docs/regression.md), so this runs only with CC_TESTBED_LONG_TESTS=1;
the unit tier runs the same search on simulated builds (tests/unit/test_kernel_source.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host import kernelsource
from testbed.results import rundir
from tests.conftest import PROJECT

PATCH = PROJECT / "kernel-patch" / "examples" / "no-slow-start.patch"

pytestmark = pytest.mark.skipif(
    not os.environ.get("CC_TESTBED_LONG_TESTS"),
    reason="builds 4-6 kernels (about 20 min the first time on 2 cores): CC_TESTBED_LONG_TESTS=1 runs it",
)


def _git(tree: Path, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        input=stdin,
        capture_output=True,
        check=True,
    )
    return out.stdout.decode().strip()


def _comment(tree: Path, path: str, text: str) -> str:
    """A commit that adds a comment line (a build that changes nothing the runs see)."""
    with open(tree / path, "a") as file:
        file.write(f"/* {text} */\n")
    _git(tree, "commit", "-qam", text)
    return _git(tree, "rev-parse", "HEAD")


def _tree_with_a_merge(where: Path) -> dict[str, str]:
    """Debian's source as a tree: main line base, m1; branch base, b1, PLANTED, broken, mended; merged."""
    repo, _version = kernelsource.debian_source("6.1", log=lambda _line: None)
    _git(where.parent, "clone", "-q", str(repo), str(where))
    commits = {"base": _git(where, "rev-parse", "HEAD")}
    _git(where, "checkout", "-qb", "feature")
    commits["b1"] = _comment(where, "net/ipv4/tcp_output.c", "feature: a comment")
    _git(where, "apply", "-", stdin=PATCH.read_bytes())
    _git(where, "commit", "-qam", "tcp: no slow start (the planted regression)")
    commits["planted"] = _git(where, "rev-parse", "HEAD")
    commits["broken"] = _comment(where, "net/ipv4/tcp_cong.c", "broken */ int this does not compile; /*")
    _git(where, "revert", "--no-edit", "HEAD")
    commits["mended"] = _git(where, "rev-parse", "HEAD")
    _git(where, "checkout", "-q", "-")
    commits["m1"] = _comment(where, "net/ipv4/tcp_input.c", "main line: a comment")
    _git(where, "merge", "-q", "--no-ff", "-m", "Merge branch 'feature'", "feature")
    commits["merge"] = _git(where, "rev-parse", "HEAD")
    return commits


def test_a_bisection_enters_a_merge_goes_round_a_commit_that_does_not_build_and_names_the_planted_one(tmp_path):
    tree = tmp_path / "linux"
    commits = _tree_with_a_merge(tree)
    results = tmp_path / "results"
    argv = ["bisect", "--tree", str(tree), "--good", commits["base"], "--bad", commits["merge"]]
    argv += ["--suite", "regression-check", "--point", "upload.default", "--results", str(results)]
    out = subprocess.run([sys.executable, "-m", "testbed.cli", *argv], cwd=PROJECT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    [folder] = (results / "bisect").iterdir()
    record = rundir.read_json(folder / "bisect.json")
    assert record["first_bad"].endswith(f"@{commits['planted'][:12]}"), record["first_bad"]
    assert record["confirmed"], record["confirmation"]
    assert len(record["versions"]) == 7 and record["parents"], record["versions"]  # the merged branch entered
    tried = {step["kernel"] for step in record["steps"]}
    skipped = {kernel for kernel, _why in record["skipped"]}
    assert not (tried | skipped) - set(record["versions"])
    if any(k.endswith(commits["broken"][:12]) for k in tried | skipped):  # reached: skipped, never judged
        assert any(k.endswith(commits["broken"][:12]) for k in skipped), record["skipped"]
