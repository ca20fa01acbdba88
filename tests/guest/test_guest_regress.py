"""``testbed regress`` on real guests: two builds of Debian 6.1 (6.1.0-55 and 6.1.0-56, whose TCP code
is the same) with the suite ``regression-check``, 3 interleaved repetitions each. The 1 MB upload
must show no regression on any metric, and its positive control (the candidate's socket buffers cut
to 32 KiB) must be found, with the metric and the effect size named. Six guest boots, about 6 min
under TCG (a first run also downloads 6.1.0-55)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testbed.results import rundir
from testbed.scenario.suite import load_suite
from testbed.workflows import regress

PROJECT = Path(__file__).resolve().parents[2]
BASELINE, CANDIDATE = "6.1.0-55", "6.1.0-56"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression-check.yaml", PROJECT / "scenarios")
    return regress.regress(BASELINE, CANDIDATE, suite, 3, results_root=tmp_path_factory.mktemp("results"))


def test_both_kernels_ran_every_repetition_in_turn(result):
    # the candidate runs the upload and its control; the baseline the upload only (the control unharmed)
    for side, version, points in (("baseline", BASELINE, 1), ("candidate", CANDIDATE, 2)):
        manifests = [rundir.read_json(m) for m in sorted((result.directory / side).rglob("manifest.json"))]
        assert len(manifests) == 3 * points, side
        assert {m["status"] for m in manifests} == {"complete"}, [m.get("reason") for m in manifests]
        assert {m["kernel"]["release"] for m in manifests} == {f"{version}-amd64"}
        assert sorted(m["seed"] for m in manifests) == sorted([1, 2, 3] * points)


def test_two_builds_of_one_series_show_no_regression(result):
    plain = [c for c in result.comparisons if c.point == "upload.default"]
    assert {c.metric for c in plain} >= {"goodput", "retrans_ratio"}
    assert all(c.test == "paired" and len(c.baseline) == 3 for c in plain)
    assert all(c.verdict == "no change" for c in plain), [(c.metric, c.change, c.p_value) for c in plain]
    assert result.exit_code == 0, result.failures


def test_the_injected_regression_is_found_with_its_metric_and_effect_size(result):
    goodput = next(c for c in result.comparisons if c.point == "upload.default.control" and c.metric == "goodput")
    assert goodput.verdict == "regression" and goodput.change < -0.3, goodput
    [line] = result.controls
    assert ": detected: reno goodput " in line and "Cohen's d" in line
    text = (result.directory / "regress.txt").read_text()
    assert "regression (positive control)" in text and "exit status 0 (nothing regressed)" in text
    recorded = json.loads((result.directory / "regress.json").read_text())
    assert recorded["controls"] == {"upload.default.control": {"window_kb": 32}}
    suites = ET.parse(result.directory / "junit.xml").getroot()
    assert not suites.findall(".//failure") and not suites.findall(".//error")
    assert suites.find(".//testcase[@name='positive control detected']") is not None
