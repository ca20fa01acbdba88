"""Kernels named by their source (testbed/host/kernelsource.py, kernelbuild.py) on simulated builds: a
git tree whose Makefile answers the targets the build asks for (defconfig, bzImage, modules,
kernelrelease, modules_install) in a moment, so naming, keys, caching, refusals and a bisection
over a tree's commits run the real code without compiling a kernel. The real build is measured by
tests/guest/test_kernel_build.py and docs/regression.md."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis.kernels import bisection
from testbed.host import gitmirror, kernelbuild, kernels, kernelsource
from testbed.workflows import bisect as bisect_workflow
from testbed.workflows.compare import label
from testbed.workflows.sessions import Where

MAKEFILE = """\
O ?= .
%_defconfig:
\t@mkdir -p $(O) && printf 'CONFIG_BASE=y\\n' > $(O)/.config
olddefconfig:
\t@true
bzImage:
\t@if grep -q BREAK net/ipv4/*.c; then echo "net/ipv4/tcp.c:1:1: error: a planted syntax error"; exit 1; fi
\t@for f in net/ipv4/*.c; do echo "  CC      $$f"; done
\t@mkdir -p $(O)/arch/x86/boot && cat net/ipv4/*.c > $(O)/arch/x86/boot/bzImage
\t@echo "built with: llvm=$(LLVM) foo=$(FOO)" >> $(O)/arch/x86/boot/bzImage
modules:
\t@echo "  CC [M]  net/sched/sch_htb.o"
kernelrelease:
\t@echo 6.1.0$(LOCALVERSION)
modules_install:
\t@mkdir -p $(INSTALL_MOD_PATH)/lib/modules/6.1.0$(LOCALVERSION)/kernel
\t@touch $(INSTALL_MOD_PATH)/lib/modules/6.1.0$(LOCALVERSION)/modules.dep
"""
# merge_config.sh -m -O OBJ BASE FRAGMENT: a Kconfig that gives every option but those in LACKS
MERGE = """#!/bin/sh
shift 3
echo >> "$1"
grep '^CONFIG_' "$2" | grep -v -f LACKS >> "$1"
"""


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _commit(tree: Path, text: str, message: str) -> str:
    (tree / "net" / "ipv4" / "tcp.c").write_text(text)
    _git(tree, "commit", "-qam", message)
    return _git(tree, "rev-parse", "HEAD")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A simulated kernel tree with one commit; the caches in tmp_path."""
    monkeypatch.setenv("CC_TESTBED_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "linux"
    (root / "net" / "ipv4").mkdir(parents=True)
    (root / "scripts" / "kconfig").mkdir(parents=True)
    (root / "Makefile").write_text(MAKEFILE)
    (root / "scripts" / "kconfig" / "merge_config.sh").write_text(MERGE)
    (root / "scripts" / "kconfig" / "merge_config.sh").chmod(0o755)
    (root / "LACKS").write_text("")
    (root / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 10;\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "first")
    return root


def _fetch(name: str) -> tuple[kernels.Kernel, list[str]]:
    said: list[str] = []
    return kernels.fetch(name, log=said.append), said


def test_names_parse_into_their_parts_and_a_malformed_one_lists_the_forms():
    assert kernelsource.parse("tree:/src/linux@v6.1") == kernelsource.SourceName("tree:", Path("/src/linux"), "v6.1")
    assert kernelsource.parse("6.1+source") == kernelsource.SourceName("debian", series="6.1")
    parsed = kernelsource.parse("6.1+patch:a.patch+patch:b.patch")
    assert parsed.series == "6.1" and parsed.patches == (Path("a.patch"), Path("b.patch"))
    for bad in ("tree:", "6.1+", "6.1+patch:", "6.1+sauce", "latest+source"):
        with pytest.raises(kernelsource.SourceError, match=r"tree:PATH\[@REV\]|after 6.1\+ comes"):
            kernelsource.parse(bad)
    assert kernelsource.is_source("6.1+patch:x.patch") and not kernelsource.is_source("6.1.0-56")
    assert not kernelsource.is_source("/boot/vmlinuz-6.1.0-56-amd64") and not kernelsource.is_source(None)
    assert label("tree:/src/linux@1a2b3c4d5e6f") == "tree-linux-1a2b3c4d5e6f"
    assert label("tree:/src/linux@origin/net-next") == "tree-linux-origin-net-next"  # vng's safe characters
    assert label("6.1+patch:/tmp/halve-iw.patch") == "6.1+patch-halve-iw" and label("6.1+source") == "6.1+source"


def test_a_tree_builds_once_per_commit_and_config_and_its_manifest_record_says_what_was_built(tree):
    first = _git(tree, "rev-parse", "HEAD")
    kernel, said = _fetch(f"tree:{tree}")
    assert kernel.vmlinuz.is_file() and kernel.modules_dir.is_dir()
    assert kernel.release.startswith("6.1.0-tb") and kernel.source == f"tree:{tree}"
    record = kernel.build
    assert record["commit"] == first and record["patches"] == [] and not record["dirty"]
    assert record["origin"] == str(tree) and record["config_digest"] == kernelbuild.config_digest()
    # the fake tree has no module build: the kernel is kept, and the record says why the module is not
    assert record["westwood_tb"].startswith("not built:")
    assert any("first build of this tree" in line for line in said)
    assert any(line.startswith(f"kernel build-{record['key']}: built in") for line in said)
    again, said_again = _fetch(f"tree:{tree}@{first[:8]}")  # the same commit by another name: no build
    assert again.vmlinuz == kernel.vmlinuz and not any("kernel build" in line for line in said_again)
    second = _commit(tree, "int tcp_init_cwnd = 5;\n", "halve the initial window")
    moved, said = _fetch(f"tree:{tree}")
    assert moved.build["commit"] == second and moved.vmlinuz != kernel.vmlinuz
    assert b"= 5;" in moved.vmlinuz.read_bytes() and b"= 10;" in kernel.vmlinuz.read_bytes()
    assert any("incremental" in line for line in said)  # the tree's object folder was built before
    back, said = _fetch(f"tree:{tree}@{first}")
    assert back.vmlinuz == kernel.vmlinuz and not any("kernel build" in line for line in said)


def test_a_dirty_tree_is_refused_unless_allowed_and_its_diff_is_then_built_and_recorded(tree, monkeypatch):
    (tree / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 4;\n")
    with pytest.raises(
        kernels.KernelError,
        match=r"uncommitted changes \(working tree diff \(1 files: "
        r"net/ipv4/tcp.c\)\).*--allow-dirty",
    ):
        _fetch(f"tree:{tree}")
    kernel = kernels.fetch(f"tree:{tree}", log=lambda line: None, allow_dirty=True)
    assert kernel.build["dirty"] and kernel.build["patches"][0]["name"].startswith("working tree diff")
    assert b"= 4;" in kernel.vmlinuz.read_bytes()
    clean, _ = _fetch(f"tree:{tree}@HEAD~0")  # a named revision is built as committed, dirty or not
    assert b"= 10;" in clean.vmlinuz.read_bytes() and not clean.build["dirty"]


def test_a_file_touched_but_unchanged_is_not_a_dirty_tree(tree):
    source = tree / "net" / "ipv4" / "tcp.c"
    source.write_text(source.read_text())  # the same bytes, written again: only its stat information moved
    later = time.time() + 5
    os.utime(source, (later, later))
    kernel, _ = _fetch(f"tree:{tree}")
    assert not kernel.build["dirty"]


def test_a_patch_is_part_of_the_key_and_one_that_does_not_apply_names_itself(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(kernelsource, "debian_source", lambda series, log: (tree, "6.1.0-sim"))
    good = tmp_path / "cwnd.patch"
    (tree / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 2;\n")
    good.write_text(_git(tree, "diff") + "\n")
    _git(tree, "checkout", "-q", "--", ".")
    stock, _ = _fetch("6.1+source")
    patched, _ = _fetch(f"6.1+patch:{good}")
    assert stock.build["origin"] == "linux-source-6.1=6.1.0-sim" and stock.build["patches"] == []
    assert patched.build["patches"] == [{"name": str(good), "sha256": kernelsource.Patch("", good.read_bytes()).sha256}]
    assert patched.build["key"] != stock.build["key"] and b"= 2;" in patched.vmlinuz.read_bytes()
    stale = tmp_path / "stale.patch"
    stale.write_text(good.read_text().replace("= 10;", "= 11;"))
    with pytest.raises(kernels.KernelError, match=rf"patch {stale} does not apply to linux-source-6.1=6.1.0-sim"):
        _fetch(f"6.1+patch:{stale}")
    with pytest.raises(kernels.KernelError, match=r"patch /nonexistent.patch: no such file"):
        _fetch("6.1+patch:/nonexistent.patch")


def test_what_the_runs_need_is_checked_before_the_build_and_a_failed_build_shows_the_compiler(tree):
    (tree / "LACKS").write_text("CONFIG_NET_SCH_CAKE\n")
    _git(tree, "commit", "-qam", "a Kconfig without cake")
    with pytest.raises(
        kernels.KernelError,
        match=r"Kconfig does not give what runs need.*CONFIG_NET_SCH_CAKE=m "
        r"\(it has: not set\)",
    ):
        _fetch(f"tree:{tree}")
    (tree / "LACKS").write_text("")
    _commit(tree, "int tcp_init_cwnd = 10; BREAK\n", "a typo")
    with pytest.raises(kernels.KernelError, match=r"(?s)did not build.*error: a planted syntax error.*log: .*\.log"):
        _fetch(f"tree:{tree}")
    for bad, why in (
        (f"tree:{tree}@nosuchrev", r"nosuchrev is not a commit of .*; recent ones:\n.* a typo"),
        (f"tree:{tree / 'net'}", r"not a Linux source tree"),
    ):
        with pytest.raises(kernels.KernelError, match=why):
            _fetch(bad)


def test_a_tree_range_is_its_first_parent_commits_and_bad_ranges_say_why(tree):
    first = _git(tree, "rev-parse", "HEAD")
    commits = [first] + [_commit(tree, f"int tcp_init_cwnd = {n};\n", f"step {n}") for n in (9, 8, 7)]
    names = kernelsource.tree_versions(tree, first[:7], "HEAD")
    assert names == [f"tree:{tree}@{c[:12]}" for c in commits]
    assert kernels.expand_series(f"tree:{tree}@{first}..HEAD") == names
    with pytest.raises(kernelsource.SourceError, match="comes after --bad .*: swap them"):
        kernelsource.tree_versions(tree, "HEAD", first)
    # diverged ends: the merge base named, as git bisect would test it
    _git(tree, "checkout", "-q", "-b", "side", commits[1])
    side = _commit(tree, "int tcp_init_cwnd = 3;\n", "a side line")
    _git(tree, "checkout", "-q", "-")
    base = commits[1][:12]
    with pytest.raises(kernelsource.SourceError, match=rf"lines diverged at {base} .*--good {base}"):
        kernelsource.tree_versions(tree, side, "HEAD")
    with pytest.raises(bisect_workflow.BisectError, match="adjacent commits"):
        bisect_workflow.tree_versions(tree, "HEAD~1", "HEAD", first_parent=True)


class BuiltKernels:
    """bisection's ``measure`` on simulated builds: each kernel is built (kernels.fetch) and its goodput
    drops by 30 % where the built image holds the planted change; seeded noise as test_bisection's,
    the same at every test run."""

    def __init__(self):
        self.calls: list[str] = []

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        self.calls.append(kernel)
        image = kernels.fetch(kernel, log=lambda line: None).vmlinuz.read_bytes()
        planted = b"PLANTED" in image
        rows = []
        for seed in seeds:  # seeded by the image, not the name: a commit's hash differs at every test run
            noise = random.Random(seed).gauss(0, 0.1) + random.Random(image + str(seed).encode()).gauss(0, 0.03)
            rows.append(
                {
                    "run": f"{kernel}/{seed}",
                    "point": "upload",
                    "seed": seed,
                    "cc": "westwood",
                    "metric": "goodput",
                    "value": 9.0 * (0.7 if planted else 1) * math.exp(noise),
                }
            )
        return pd.DataFrame(rows)


def test_a_bisection_over_a_trees_commits_names_the_planted_commit_building_each_step_once(tree, tmp_path):
    for n in range(1, 8):
        text = f"int tcp_init_cwnd = 10; /* {n} */\n" + ("/* PLANTED */\n" if n >= 5 else "")
        _commit(tree, text, f"commit {n}" + (" (the planted change)" if n == 5 else ""))
    planted = _git(tree, "rev-parse", "HEAD~2")
    versions, parents = bisect_workflow.tree_versions(tree, "HEAD~7", "HEAD")
    measure = BuiltKernels()
    result = bisection.bisect(versions, measure, parents=parents)
    assert result.first_bad == f"tree:{tree}@{planted[:12]}" and result.last_good == versions[4]
    built = list((kernelbuild.build_cache.cache_base() / "kernels").glob("build-*"))
    assert len(built) == len(set(measure.calls)) < len(versions)  # each step built once; not every commit
    assert json.loads((built[0] / "build.json").read_text())["origin"] == str(tree)
    change = bisection.change_at(result)  # the planted commit against the one before it, paired by seed
    low, high = change.interval()
    assert low < -0.3 < high and -0.4 < change.relative < -0.2
    folder = tmp_path / "bisect"
    folder.mkdir()
    spec = {
        "versions": versions,
        "cc": "reno",
        "metric": None,
        "repeat": 3,
        "max_repeat": 9,
        "inject": {},
        "inject_from": None,
        "clock": "auto",
    }
    packing = {"guests": 2, "side_by_side": 0}  # two guests, runs side by side left to auto
    again = bisect_workflow.reproduce_lines(spec, result, "regression-check", "upload.default", tree, packing)
    bisect_workflow._write(folder, result, SimpleNamespace(sessions=len(measure.calls)), None, None, again)
    text = (folder / "bisect.txt").read_text()
    assert f"first bad version: {result.first_bad} (last good: {versions[4]})" in text
    assert f"{result.first_bad} against {versions[4]}: goodput {change.relative:+.1%} (95 % interval" in text
    # every option the bisection ran with, and its answer alone
    good, bad = (kernelsource.parse(v).rev for v in (versions[0], versions[-1]))  # --tree takes commits
    assert (
        f"reproduce the bisection: testbed bisect --good {good} --bad {bad} --tree {tree} "
        "--suite regression-check --point upload.default --cc reno --repeat 3 --max-repeat 9 --guests 2"
    ) in text
    assert (
        f"reproduce its answer: testbed regress --baseline {versions[4]} --candidate {result.first_bad} "
        f"--suite regression-check --repeat 9 --guests 2 (then read its upload.default, {result.key[1]} goodput "
        "line)"
    ) in text


def test_a_missing_build_tool_is_named_with_its_package_before_anything_is_checked_out(tree, monkeypatch):
    real = kernelbuild.shutil.which
    monkeypatch.setattr(kernelbuild.shutil, "which", lambda name: None if name in ("flex", "bison") else real(name))
    with pytest.raises(kernels.KernelError, match=r"building a kernel needs bison, flex: apt-get install bison flex"):
        _fetch(f"tree:{tree}")
    assert not kernelbuild.worktrees_root().exists()


def test_a_file_a_patch_adds_is_gone_before_the_next_patch_even_where_gitignore_hides_it(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(kernelsource, "debian_source", lambda series, log: (tree, "6.1.0-sim"))
    (tree / ".gitignore").write_text("/net/ipv4/added.c\n")  # as Debian's top-level .gitignore hides most
    _git(tree, "add", ".gitignore")
    _git(tree, "commit", "-qm", "ignore")
    patches = []
    for n in (1, 2):
        patch = tmp_path / f"add{n}.patch"
        patch.write_text(f"--- /dev/null\n+++ b/net/ipv4/added.c\n@@ -0,0 +1 @@\n+int added = {n};\n")
        patches.append(patch)
    first, _ = _fetch(f"6.1+patch:{patches[0]}")
    second, _ = _fetch(f"6.1+patch:{patches[1]}")
    assert b"int added = 1;" in first.vmlinuz.read_bytes() and b"int added = 2;" in second.vmlinuz.read_bytes()


def test_a_comparisons_inputs_are_pinned_when_it_starts_a_tree_at_its_commit_a_patch_and_a_diff_by_sha256(
    tree, tmp_path, monkeypatch
):
    head = _git(tree, "rev-parse", "HEAD")
    assert kernels.pinned(f"tree:{tree}") == f"tree:{tree}@{head}"
    assert kernels.pinned(f"tree:{tree}@HEAD") == f"tree:{tree}@{head}" and kernels.pinned("6.1.0-56") == "6.1.0-56"
    assert label(f"tree:{tree}@{head}") == f"tree-linux-{head[:12]}"
    # a patch on the tree: read once, kept by its sha256; edited later, the comparison still builds what it read
    patch = tmp_path / "fix.patch"
    (tree / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 6;\n")
    patch.write_bytes(subprocess.run(["git", "-C", str(tree), "diff"], capture_output=True, check=True).stdout)
    _git(tree, "checkout", "-q", "--", ".")
    pinned = kernels.pinned(f"tree:{tree}+patch:{patch}")
    assert pinned.startswith(f"tree:{tree}@{head}+patch:{patch}@sha256:")
    assert label(pinned) == f"tree-linux-{head[:12]}+patch-fix"
    patch.write_text("edited during the comparison\n")
    kernel, _ = _fetch(pinned)
    assert b"= 6;" in kernel.vmlinuz.read_bytes() and kernel.build["patches"][0]["name"] == str(patch)
    # a dirty tree's diff (--allow-dirty) the same way: the tree at its commit, the diff a pinned patch
    (tree / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 4;\n")
    with pytest.raises(kernels.KernelError, match="uncommitted changes"):
        kernels.pinned(f"tree:{tree}")
    dirty = kernels.pinned(f"tree:{tree}", allow_dirty=True)
    assert dirty.startswith(f"tree:{tree}@{head}+patch:{kernelsource.WORKING_TREE}@sha256:")
    _git(tree, "checkout", "-q", "--", ".")  # the tree cleaned during the comparison
    kernel, _ = _fetch(dirty)
    assert b"= 4;" in kernel.vmlinuz.read_bytes() and kernel.build["dirty"]  # still recorded as uncommitted


def test_two_patches_of_one_file_name_in_a_series_are_refused_before_anything_runs(tmp_path):
    from testbed import PROJECT
    from testbed.scenario.suite import load_suite
    from testbed.workflows import series

    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression-check.yaml", PROJECT / "scenarios")
    named = [f"6.1+patch:{tmp_path / 'a' / 'fix.patch'}", f"6.1+patch:{tmp_path / 'b' / 'fix.patch'}"]
    with pytest.raises(ValueError, match=r"would share the folder 6\.1\+patch-fix: give one of them another"):
        series.run_series(["6.1+source", *named], suite, 2, Where(results=tmp_path / "results"))
    assert not (tmp_path / "results").exists()  # refused before anything ran or was built


def test_a_build_stopped_gets_sigterm_first_and_only_a_killed_one_starts_clean_next_time(tree, tmp_path, monkeypatch):
    obj = tmp_path / "obj"
    obj.mkdir()
    polite = subprocess.Popen(["sleep", "30"], start_new_session=True)
    kernelbuild._stop(polite, obj)  # sleep dies of SIGTERM: make would have deleted its half-written target
    assert polite.returncode == -15 and not (obj / kernelbuild.INTERRUPTED).exists()
    monkeypatch.setattr(kernelbuild, "STOP_GRACE_S", 0.3)
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"], start_new_session=True)
    time.sleep(0.2)  # its trap set
    kernelbuild._stop(stubborn, obj)
    assert stubborn.returncode == -9 and (obj / kernelbuild.INTERRUPTED).exists()
    # the next build of a tree whose last one was killed starts with an empty object folder
    kernel, said = _fetch(f"tree:{tree}")
    [worktree] = kernelbuild.worktrees_root().iterdir()
    (worktree / "obj" / "truncated.o").write_text("half")
    (worktree / "obj" / kernelbuild.INTERRUPTED).write_text("killed\n")
    _commit(tree, "int tcp_init_cwnd = 12;\n", "another")
    _, said = _fetch(f"tree:{tree}")
    assert any("was killed mid-way; its objects are removed" in line for line in said), said
    assert not (worktree / "obj" / "truncated.o").exists()


def test_a_build_waiting_for_the_trees_lock_says_whose_it_is(tree):
    kernel, _ = _fetch(f"tree:{tree}")  # the worktree and its lock made
    [worktree] = kernelbuild.worktrees_root().iterdir()
    (worktree / "lock").write_text("pid 4242 on elsewhere, building tree:linux (abc) since 2026-12-02\n")
    hold = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(1.5)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", hold, str(worktree / "lock")], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout.readline().strip() == "held"
        _commit(tree, "int tcp_init_cwnd = 14;\n", "another")
        _, said = _fetch(f"tree:{tree}")
    assert any("is in use, waiting for pid 4242 on elsewhere, building tree:linux (abc)" in line for line in said), said
    assert (worktree / "lock").read_text().startswith(f"pid {os.getpid()} on ")


def test_a_build_without_the_free_space_it_needs_is_refused_naming_what_to_remove(tree, monkeypatch):
    monkeypatch.setattr(kernelbuild.shutil, "disk_usage", lambda path: SimpleNamespace(free=1 << 30))
    with pytest.raises(kernels.KernelError, match=r"1.0 GiB free on the disk of .*needs 5 GiB: remove builds"):
        _fetch(f"tree:{tree}")


def test_the_key_is_the_trees_files_and_the_toolchain_the_build_sees(tree, monkeypatch):
    first, said = _fetch(f"tree:{tree}")
    assert any("kernel build-" in line for line in said)
    _git(tree, "commit", "-q", "--amend", "-m", "the same files, another message")  # another commit, one tree
    again, said = _fetch(f"tree:{tree}")
    assert again.vmlinuz == first.vmlinuz and not any("kernel build-" in line for line in said), said
    monkeypatch.setenv("LLVM", "1")  # kbuild's toolchain: another build, its variable in the key and the record
    monkeypatch.setenv("FOO", "bar")  # not a toolchain variable: make never sees it
    llvm, said = _fetch(f"tree:{tree}")
    assert llvm.vmlinuz != first.vmlinuz and b"built with: llvm=1 foo=\n" in llvm.vmlinuz.read_bytes()
    assert json.loads((llvm.vmlinuz.parents[1] / "build.json").read_text())["toolchain"] == {"LLVM": "1"}


def test_a_binutils_or_compiler_upgrade_is_another_build_and_llvm_keys_clang_not_gcc(tree, tmp_path, monkeypatch):
    """The key holds the versions the final .config records (CONFIG_CC_VERSION_TEXT, AS, LD), of the tools
    kbuild would run here: a new ld on PATH is another build; LLVM=1 keys clang and ld.lld."""
    first, _ = _fetch(f"tree:{tree}")
    assert set(first.build["toolchain_versions"]) == {"CC", "AS", "LD"}
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "ld").write_text("#!/bin/sh\necho 'GNU ld (GNU Binutils) 9.99'\n")
    (shadow / "ld").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shadow}:{os.environ['PATH']}")
    upgraded, said = _fetch(f"tree:{tree}")
    assert upgraded.vmlinuz != first.vmlinuz and any("kernel build-" in line for line in said)
    assert upgraded.build["toolchain_versions"]["LD"] == "ld: GNU ld (GNU Binutils) 9.99"
    monkeypatch.setenv("LLVM", "-15")
    assert kernelbuild.toolchain_tools() == {"CC": "clang-15", "AS": "clang-15", "LD": "ld.lld-15"}
    monkeypatch.setenv("CROSS_COMPILE", "aarch64-linux-gnu-")
    monkeypatch.delenv("LLVM")
    assert kernelbuild.toolchain_tools()["LD"] == "aarch64-linux-gnu-ld"


def test_a_tree_at_a_git_url_is_mirrored_fetched_again_and_pinned_to_the_mirror(tree, tmp_path):
    """tree:URL@REV (file:// here: any URL git reaches): built from a bare mirror in the cache, a branch
    read again on each use, a comparison pinned to the mirror's commit (no fetch later); an unreachable
    URL says what would do."""
    url = f"file://{tree}"
    kernel, said = _fetch(f"tree:{url}@HEAD")
    assert any(line.startswith(f"cloning {url}") for line in said)
    assert kernel.build["origin"] == url and kernel.build["commit"] == _git(tree, "rev-parse", "HEAD")
    second = _commit(tree, "int tcp_init_cwnd = 5;\n", "halve the initial window")
    branch = _git(tree, "rev-parse", "--abbrev-ref", "HEAD")
    moved, _ = _fetch(f"tree:{url}@{branch}")  # the branch as the remote has it now
    assert moved.build["commit"] == second and b"= 5;" in moved.vmlinuz.read_bytes()
    pinned = kernelsource.pin(f"tree:{url}@{branch}")
    assert pinned.startswith(f"tree:{gitmirror.mirrors_root()}/") and pinned.endswith(f"@{second}")
    shutil.move(tree, tmp_path / "gone")  # the remote unreachable: the pinned name still resolves
    source = kernelsource.resolve(pinned)
    assert source.commit == second and source.origin == url
    with pytest.raises(kernelsource.SourceError, match=r"(?s)git fetch failed .*git ls-remote URL"):
        kernelsource.resolve(f"tree:{url}")
    with pytest.raises(kernelsource.SourceError, match=r"git clone failed"):
        kernelsource.resolve("tree:file:///nonexistent/linux.git@v6.1")
    assert kernelsource.parse("tree:ssh://git@host/linux.git").url == "ssh://git@host/linux.git"
    parsed = kernelsource.parse("tree:https://git.kernel.org/netdev/net-next.git@net/next+patch:a.patch")
    assert (parsed.url, parsed.rev, parsed.patches) == (
        "https://git.kernel.org/netdev/net-next.git",
        "net/next",
        (Path("a.patch"),),
    )
    assert label("tree:https://git.kernel.org/netdev/net-next.git@main") == "tree-net-next-main"


class SkippingBuilt(BuiltKernels):
    """BuiltKernels with the workflow's rule (testbed/workflows/bisect.py): a kernel that does not build is skipped."""

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        try:
            return super().__call__(kernel, seeds)
        except kernels.KernelError as err:
            raise bisection.Skip(kernel, f"refused the suite ({err})") from err


def test_a_bisection_goes_round_a_commit_that_does_not_build_and_still_names_the_planted_one(tree):
    for n in range(1, 8):
        text = f"int tcp_init_cwnd = 10; /* {n} */\n" + ("/* PLANTED */\n" if n >= 5 else "")
        _commit(tree, text + ("BREAK\n" if n == 3 else ""), f"commit {n}")  # commit 3 does not build
    planted, broken = _git(tree, "rev-parse", "HEAD~2"), _git(tree, "rev-parse", "HEAD~4")
    versions, parents = bisect_workflow.tree_versions(tree, "HEAD~7", "HEAD")
    result = bisection.bisect(versions, SkippingBuilt(), parents=parents)
    assert result.first_bad == f"tree:{tree}@{planted[:12]}" and result.between == []
    [(skipped, why)] = result.skipped
    assert skipped == f"tree:{tree}@{broken[:12]}" and "a planted syntax error" in why


def _side_commit(tree: Path, text: str, message: str) -> str:
    (tree / "net" / "ipv4" / "side.c").write_text(text)
    _git(tree, "add", "net/ipv4/side.c")
    return _commit(tree, (tree / "net" / "ipv4" / "tcp.c").read_text(), message)


def test_a_bisection_enters_a_merged_branch_goes_round_a_commit_that_does_not_build_and_names_the_planted_one(tree):
    """The planted change on a branch merged into the line (a net-next base), a commit of the line that does
    not build: the commit graph is walked as git bisect walks it, the branch entered, the broken commit
    skipped. On the first-parent line the answer is the merge that brought the change."""
    good = _git(tree, "rev-parse", "HEAD")
    _git(tree, "checkout", "-q", "-b", "side")
    side = [
        _side_commit(tree, f"int side = {n};\n" + ("/* PLANTED */\n" if n >= 2 else ""), f"side {n}") for n in (1, 2, 3)
    ]
    _git(tree, "checkout", "-q", "-")
    line = [
        _commit(tree, f"int tcp_init_cwnd = {n};\n" + ("BREAK\n" if n == 2 else ""), f"line {n}") for n in (1, 2, 3)
    ]
    _git(tree, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = _git(tree, "rev-parse", "HEAD")
    last = _commit(tree, "int tcp_init_cwnd = 4;\n", "line 4")
    versions, parents = bisect_workflow.tree_versions(tree, good, "HEAD")
    assert len(versions) == 9 and parents[f"tree:{tree}@{merge[:12]}"] == [
        f"tree:{tree}@{line[-1][:12]}",
        f"tree:{tree}@{side[-1][:12]}",
    ]
    result = bisection.bisect(versions, SkippingBuilt(), parents=parents)
    assert result.first_bad == f"tree:{tree}@{side[1][:12]}" and result.between == [] and result.confirmed
    assert result.last_good in (f"tree:{tree}@{side[0][:12]}", f"tree:{tree}@{good[:12]}")
    assert all(kernel == f"tree:{tree}@{line[1][:12]}" for kernel, _ in result.skipped)
    line_only, first_parents = bisect_workflow.tree_versions(tree, good, last, first_parent=True)
    assert line_only == [f"tree:{tree}@{c[:12]}" for c in (good, *line, merge, last)]
    on_line = bisection.bisect(line_only, SkippingBuilt(), parents=first_parents)
    assert on_line.first_bad == f"tree:{tree}@{merge[:12]}"
    # the good end reached only through the merge's second parent: the whole graph still has a range
    assert len(bisect_workflow.tree_versions(tree, side[0], "HEAD")[0]) > 3


NEW_OPTION = """diff --git a/net/ipv4/Kconfig b/net/ipv4/Kconfig
new file mode 100644
--- /dev/null
+++ b/net/ipv4/Kconfig
@@ -0,0 +1,2 @@
+config TCP_NEW
+\tbool "a new option, default off"
"""


def test_a_developers_own_config_is_merged_keyed_and_an_option_the_patch_adds_left_unset_is_said(tree, tmp_path):
    patch = tmp_path / "new.patch"
    patch.write_text(NEW_OPTION)
    plain, said = _fetch(f"tree:{tree}+patch:{patch}")
    phases = [line.split(": phase ")[1].split(",")[0] for line in said if ": phase " in line]
    assert phases == ["1 of 4", "2 of 4", "3 of 4", "4 of 4"], said  # every phase of a build said as it starts
    assert plain.build["unset_new_options"] == ["CONFIG_TCP_NEW"]
    assert any("the patches add CONFIG_TCP_NEW, which this build leaves unset" in line for line in said), said
    fragment = tmp_path / "mine.config"
    fragment.write_text("CONFIG_TCP_NEW=y\n")
    mine, said = _fetch(f"tree:{tree}+patch:{patch}+config:{fragment}")
    assert mine.build["key"] != plain.build["key"] and mine.build["unset_new_options"] == []
    assert mine.build["config"]["name"] == str(fragment) and label(f"tree:{tree}+config:{fragment}").endswith(
        "+config-mine"
    )
    config = (mine.vmlinuz.parents[1] / "boot").glob("config-*")
    text = next(config).read_text()
    assert "CONFIG_TCP_NEW=y" in text and "CONFIG_BASE=y" in text  # merged onto virtme-ng's base
    full = tmp_path / "full.config"  # a whole .config replaces the base
    full.write_text("#\n# Automatically generated file; DO NOT EDIT.\n#\nCONFIG_FULL=y\n")
    whole, _ = _fetch(f"tree:{tree}+config:{full}")
    text = next((whole.vmlinuz.parents[1] / "boot").glob("config-*")).read_text()
    assert "CONFIG_FULL=y" in text and "CONFIG_BASE=y" not in text
    pinned = kernels.pinned(f"tree:{tree}+config:{full}")  # a comparison pins it like a patch
    assert "+config:" in pinned and "@sha256:" in pinned.split("+config:")[1]


def test_prune_removes_the_builds_unused_for_days_and_the_checkouts_they_leave(tree, capsys):
    import os as _os

    kernel, _ = _fetch(f"tree:{tree}")
    kernels_dir = kernel.vmlinuz.parents[2]
    [build] = kernels_dir.glob("build-*")
    assert kernelbuild.prune(kernels_dir, 30) == []  # used just now: kept, and its checkout with it
    old = time.time() - 40 * 86400
    for path in (build / ".complete", build / ".last-used", *kernelbuild.worktrees_root().glob("*/lock")):
        if path.exists():
            _os.utime(path, (old, old))
    removed = kernelbuild.prune(kernels_dir, 30)
    assert build in removed and not build.exists() and not any(kernelbuild.worktrees_root().iterdir())
    again, said = _fetch(f"tree:{tree}")  # built anew when asked for again
    assert any("kernel build-" in line for line in said) and again.vmlinuz.exists()


def test_a_comparison_counts_the_kernels_it_builds_into_its_estimate(tree, monkeypatch):
    from testbed.workflows import sessions

    said: list[str] = []
    monkeypatch.setattr(sessions, "log", said.append)
    sessions.refuse_runaway([], sessions.Where(), [f"tree:{tree}", "6.1.0-56"])  # a package is downloaded, not built
    assert [line for line in said if line.startswith("builds: 1 kernel(s) to build here first, about ")], said
    _fetch(f"tree:{tree}")
    said.clear()
    sessions.refuse_runaway([], sessions.Where(), [f"tree:{tree}"])
    assert not [line for line in said if line.startswith("builds:")]
    monkeypatch.setattr(kernelbuild, "build_estimate_s", lambda: 2 * 86400.0)  # two days of builds: refused
    _commit(tree, "int tcp_init_cwnd = 11;\n", "another")
    with pytest.raises(ValueError, match="--yes"):
        sessions.refuse_runaway([], sessions.Where(), [f"tree:{tree}"])


def test_allow_dirty_travels_as_an_argument_and_pins_the_diff_when_the_command_starts(tree):
    """--allow-dirty is no environment variable: the command reads the diff once (kernels.pinned) and every
    later step builds those bytes, whatever the tree holds by then."""
    from testbed import cli

    (tree / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 5;\n")
    args = cli.build_parser().parse_args(["run", "default", "--kernel", f"tree:{tree}", "--allow-dirty"])
    where = cli.options.where(args)
    assert where.allow_dirty and where.kernel.startswith(f"tree:{tree}@")
    assert f"+patch:{kernelsource.WORKING_TREE}@sha256:" in where.kernel and "TESTBED_ALLOW_DIRTY" not in os.environ
    _git(tree, "checkout", "-q", "--", ".")
    kernel, _ = _fetch(where.kernel)
    assert b"= 5;" in kernel.vmlinuz.read_bytes() and kernel.build["dirty"]
    refused = cli.build_parser().parse_args(["run", "default", "--kernel", f"tree:{tree}"])
    (tree / "net" / "ipv4" / "tcp.c").write_text("int tcp_init_cwnd = 5;\n")
    with pytest.raises(kernels.KernelError, match="uncommitted changes .*--allow-dirty"):
        _fetch(cli.options.where(refused).kernel)


def test_a_series_of_commits_builds_each_when_reached_and_goes_on_without_one_that_does_not_build(
    tree, tmp_path, monkeypatch
):
    """regress --series tree:PATH@A..B: nothing is built before the first session; the commit that does not
    build is dropped with the compiler's words and the others run every repetition (run_session replaced
    by one that builds its kernel, as the guest backend does, and runs nothing)."""
    from testbed.scenario.suite import load_suite
    from testbed.workflows import compare
    from testbed.workflows import series as series_workflow
    from tests.conftest import PROJECT
    from tests.unit.test_series import recording_session

    first = _git(tree, "rev-parse", "HEAD")
    commits = [_commit(tree, f"int tcp_init_cwnd = {n};\n" + ("BREAK\n" if n == 2 else ""), f"c{n}") for n in (1, 2, 3)]
    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression-check.yaml", PROJECT / "scenarios")
    built_before_runs, ran = [], []

    def builds(kernel: str) -> None:
        if not ran and not built_before_runs:
            built_before_runs.append(len(list((kernels.cache_root()).glob("build-*"))))
        kernels.fetch(kernel, log=lambda line: None)  # the guest backend's first step

    monkeypatch.setattr(compare, "run_session", recording_session(ran, builds))
    monkeypatch.setattr(compare, "completed_runs", lambda session: (1, []))
    monkeypatch.setattr(series_workflow, "judge_series", lambda result, kept, *a, **k: result)
    chosen = kernels.expand_series(f"tree:{tree}@{first}..HEAD")
    result = series_workflow.run_series(chosen, suite, 2, Where(results=tmp_path / "results"))
    assert built_before_runs == [0], "a commit was built before the series' first session"
    broken = f"tree:{tree}@{commits[1]}"  # a series names each commit whole (kernels.pinned)
    assert broken not in ran and len(ran) == 6, ran  # the other three, two repetitions each
    [failure] = result.failures
    assert failure.startswith(f"{broken}: it refused the suite before any run (the kernel did not build")
    assert failure.endswith("the series goes on without it")


def test_debians_config_is_named_by_its_release_and_read_from_its_package(tree):
    """+config:config-RELEASE with no such file here: the config of Debian's linux-image-RELEASE (the package
    as kernels.fetch keeps it: here one put in the cache by hand, as a download would unpack it)."""
    release = "6.1.0-99-amd64"
    package = kernels.cache_root() / f"linux-image-{release}"
    (package / "boot").mkdir(parents=True)
    (package / "boot" / f"vmlinuz-{release}").write_bytes(b"image")
    (package / "boot" / f"config-{release}").write_text("CONFIG_FROM_DEBIAN=y\n")
    (package / ".complete").write_text("by hand\n")
    kernel, _ = _fetch(f"tree:{tree}+config:config-{release}")
    text = next((kernel.vmlinuz.parents[1] / "boot").glob("config-*")).read_text()
    assert "CONFIG_FROM_DEBIAN=y" in text and kernel.build["config"]["name"] == str(
        package / "boot" / f"config-{release}"
    )
    named, found = f"tree:{tree}+config:config-{release}", kernels.debian_config(f"tree:{tree}+config:config-{release}")
    assert found == f"tree:{tree}+config:{package / 'boot' / f'config-{release}'}" and label(named) == label(found)
    with pytest.raises(kernels.KernelError, match=r"config nosuch\.config: no such file"):
        _fetch(f"tree:{tree}+config:nosuch.config")
