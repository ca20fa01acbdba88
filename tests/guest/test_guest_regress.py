"""``testbed regress`` on real guests: a series of three builds of Debian 6.1 (6.1.0-54, -55, -56, whose
TCP code is the same) with the suite ``regression-check``, 3 interleaved repetitions each. No change
point may be found (nor a drift from first to last), the positive control (the last kernel's socket
buffers cut to 32 KiB) must be, with its metric and size; and the pair judge of ``testbed regress``
on the last two kernels' runs gives its own verdicts, control found, exit 0. Nine guest boots, about
6 min under TCG (a first run also downloads the kernels). In real time: in virtual time (the guest's
tick kept) the short upload's outcome came out two-valued at 2026-12-02 (8.9 Mbit/s and no retransmission,
or 6.5-7.4 and 19 % retransmitted, by run), so the control's window cut, 3 repetitions a kernel, was missed
(77.6 % detectable); before that, a run there hit the guest's watchdog."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testbed.results import rundir
from testbed.scenario.suite import load_suite
from testbed.workflows import compare, regress, series
from testbed.workflows.sessions import Where
from tests import machinefault

PROJECT = Path(__file__).resolve().parents[2]
KERNELS = ["6.1.0-54", "6.1.0-55", "6.1.0-56"]


@pytest.fixture(scope="module")
def suite():
    return load_suite(PROJECT / "scenarios" / "suites" / "regression-check.yaml", PROJECT / "scenarios")


@pytest.fixture(scope="module")
def result(suite, tmp_path_factory):
    return series.run_series(KERNELS, suite, 3, Where(results=tmp_path_factory.mktemp("results")))


def _manifests(folder: Path) -> list[dict]:
    return [rundir.read_json(m) for m in sorted(folder.rglob("manifest.json"))]


def _control_starved(result) -> str | None:
    """Why the control could not be seen at 3 repetitions, when the machine is to blame: a run of the last
    kernel left out only for the machine's doing (its hypervisor's steal, or processes the tests did not start:
    tests/machinefault.py), which leaves the control fewer than 3 pairs (at 2, a 64 % cut read p = 0.0085 before
    Holm's correction, and was missed)."""
    left = [
        m for m in _manifests(result.directory / KERNELS[-1]) if (m.get("fidelity") or {}).get("trustworthy") is False
    ]
    why = [machinefault.machines_fault(m) for m in left]
    if not left or None in why:
        return None
    return f"{len(left)} of the last kernel's runs left out, only for the machine's doing ({why[0]}): too few pairs"


def test_every_kernel_ran_every_repetition_in_turn(result):
    started = []
    for kernel in KERNELS:
        manifests = _manifests(result.directory / kernel)
        # when each session began on the host (its folder's UTC stamp), not the guest's clock (in virtual time
        # it runs at its own pace)
        paths = sorted((result.directory / kernel).rglob("manifest.json"))
        points = 2 if kernel == KERNELS[-1] else 1  # the last kernel runs the control too
        assert len(manifests) == 3 * points, kernel
        assert {m["status"] for m in manifests} == {"complete"}, [m.get("reason") for m in manifests]
        assert {m["kernel"]["release"] for m in manifests} == {f"{kernel}-amd64"}
        assert sorted(m["seed"] for m in manifests) == sorted([1, 2, 3] * points)
        started += [
            (rundir.read_json(path)["seed"], path.parents[2].name, kernel)
            for path in paths
            if rundir.read_json(path)["point_id"] == "upload.default"
        ]
    # interleaved: seed 1 on every kernel, then seed 2 on every kernel, ...
    assert [k for _, _, k in sorted(started, key=lambda s: s[1])] == KERNELS * 3


def test_three_builds_of_one_series_show_no_change_point(result):
    compared = [s for s in result.steps if s.kind != "control"]
    assert {(s.before, s.after) for s in compared} == {
        (KERNELS[0], KERNELS[1]),
        (KERNELS[1], KERNELS[2]),
        (KERNELS[0], KERNELS[2]),
    }
    # only trustworthy runs are compared: a run the host's contention made untrustworthy is left out (and
    # said so), so a step pairs the seeds both its kernels kept
    kept = {
        kernel: {
            m["seed"]
            for m in _manifests(result.directory / kernel)
            if m["point_id"] == "upload.default" and (m.get("fidelity") or {}).get("trustworthy") is not False
        }
        for kernel in KERNELS
    }
    for s in compared:
        both = kept[s.before] & kept[s.after]
        assert s.comparison.test == ("paired" if len(both) >= 2 else "Welch"), (s.before, s.after, both)
        assert len(s.comparison.baseline) == (len(both) if len(both) >= 2 else len(kept[s.before]))
    for kernel in KERNELS:
        if len(kept[kernel]) < 3:
            assert any(line.startswith(f"{kernel}: upload.default: ") for line in result.left_out), result.left_out
    assert result.change_points == [], [
        (s.before, s.after, s.comparison.metric, s.comparison.change) for s in result.change_points
    ]
    assert not any(s.moved for s in compared)
    if result.exit_code != 0 and all("positive control" in f and "missed" in f for f in result.failures):
        if starved := _control_starved(result):
            pytest.skip(f"the control's exit status not judged: {starved}")
    assert result.exit_code == 0, result.failures


def test_the_control_is_found_and_the_outputs_written(result):
    [goodput] = [s.comparison for s in result.steps if s.kind == "control" and s.comparison.metric == "goodput"]
    if goodput.verdict != "regression" and (starved := _control_starved(result)):
        pytest.skip(f"the control not judged: {starved}")
    assert goodput.verdict == "regression" and goodput.change < -0.3, goodput
    [line] = result.controls
    assert ": detected: reno goodput " in line
    text = (result.directory / "series.txt").read_text()
    assert "change points: 0 of 6 comparisons" in text and "exit status 0 (nothing regressed)" in text
    recorded = json.loads((result.directory / "series.json").read_text())
    assert recorded["compared"] == KERNELS and len(recorded["steps"]) == 8
    assert ET.parse(result.directory / "junit.xml").getroot().findall(".//failure") == []
    page = (result.directory / "report.html").read_text()
    assert page.count("<img") == 2  # goodput and retransmission ratio across the kernels
    assert "trend.csv" not in page and (result.directory / "trend.csv").stat().st_size > 0


def test_the_pair_judge_on_the_last_two_kernels_finds_the_control_and_nothing_else(result, suite):
    sessions = {
        side: {p.parent for p in (result.directory / kernel).rglob(rundir.SESSION)}
        for side, kernel in zip(regress.SIDES, KERNELS[1:], strict=True)
    }
    assert all(len(found) == 3 for found in sessions.values()), sessions
    bases = {c: compare.control_base(suite, c) for c in suite.controls}
    (result.directory / "pair").mkdir()
    pair = regress.judge_comparison(
        result.directory / "pair", sessions, KERNELS[1], KERNELS[2], 3, None, suite.controls, bases
    )
    plain = [c for c in pair.comparisons if c.point == "upload.default"]
    assert plain and all(c.verdict == "no change" for c in plain), [(c.metric, c.change, c.p_value) for c in plain]
    [line] = pair.controls
    assert ": detected: reno goodput " in line and "Cohen's d" in line
    assert pair.exit_code == 0, pair.failures
