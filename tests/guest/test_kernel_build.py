"""A kernel built from source, for real (issue 55): Debian's linux-source-6.1 built here with the testbed
config (``6.1+source``), the same with a one-line patch in net/ipv4/ (``6.1+patch:``, an incremental
build in the same object folder), both booted in guests, and ``testbed regress`` finding the patch's
harm with the upload's goodput; every run's manifest says which source, commit, patch and config it ran.

A first build takes about 20 minutes of both cores here (docs/regression.md), more than a test may,
so this runs only with CC_TESTBED_LONG_TESTS=1; the unit tier runs the same naming, caching and
bisection code on simulated builds (tests/unit/test_kernel_source.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from testbed.results import rundir
from tests.conftest import PROJECT

PATCH = PROJECT / "kernel-patch" / "examples" / "no-slow-start.patch"

pytestmark = pytest.mark.skipif(
    not os.environ.get("CC_TESTBED_LONG_TESTS"),
    reason="builds two kernels (about 25 min the first time on 2 cores): CC_TESTBED_LONG_TESTS=1 runs it",
)


def test_a_one_line_patch_is_built_booted_and_its_regression_found(tmp_path):
    results = tmp_path / "results"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "regress",
            "--baseline",
            "6.1+source",
            "--candidate",
            f"6.1+patch:{PATCH}",
            "--suite",
            "regression-check",
            "--repeat",
            "3",
            "--results",
            str(results),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]  # 1: a regression
    [folder] = (results / "regress").iterdir()
    verdicts = rundir.read_json(folder / "regress.json")["comparisons"]
    [upload] = [c for c in verdicts if c["point"] == "upload.default" and c["metric"] == "goodput"]
    assert upload["verdict"] == "regression" and upload["change"] < -0.3, upload
    builds = {}
    for manifest in folder.rglob("manifest.json"):
        record = rundir.read_json(manifest)["backend"]["kernel_build"]
        builds[record["name"]] = record
    stock, patched = builds["6.1+source"], builds[f"6.1+patch:{PATCH}"]
    assert stock["commit"] == patched["commit"] and stock["origin"].startswith("linux-source-6.1=")
    assert patched["patches"] == [{"name": str(PATCH), "sha256": hashlib.sha256(PATCH.read_bytes()).hexdigest()}]
    assert stock["config_digest"] == patched["config_digest"] and stock["key"] != patched["key"]
    assert stock["westwood_tb"] == patched["westwood_tb"] == "built"
