"""testbed regress without guests: the suite's variants, the candidate's flow options, and the
verdict, JUnit, report and exit status written from run folders: real runs with real spread (the
wireless lab's three New Reno reference runs, tests/fixtures/lab-wireless), paired in another order
for a kernel pair with no change, and with a planted goodput loss that must be found."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from analysis.kernels import regression
from testbed.scenario.errors import ScenarioError
from testbed.scenario.suite import load_suite
from testbed.workflows import compare, regress

PROJECT = Path(__file__).resolve().parents[2]
FIXTURE = PROJECT / "tests" / "fixtures" / "run-westwood"
#: three real runs of one point (15 s each, seeds 1-3, goodput 1.00, 1.12 and 1.18 Mbit/s: 8 % run-to-run spread)
REAL_RUNS = sorted((PROJECT / "tests" / "fixtures" / "lab-wireless" / "results").glob("wireless/*/cc=reno/seed=[123]"))


def test_the_default_regression_suite_covers_every_path_type_and_algorithm():
    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression.yaml", PROJECT / "scenarios")
    topologies = {p.scenario.topology.name for p in suite.points}
    assert topologies == {"dumbbell", "many_flows", "parking_lot", "wireless", "geo"}
    ccs = {f.cc for p in suite.points for f in p.scenario.flows}
    assert {"westwood", "westwood_ml", "reno", "cubic", "vegas", "bbr"} <= ccs
    assert all(p.scenario.duration_s == pytest.approx(10) for p in suite.points)


def test_a_repetition_is_the_suite_with_its_seed_and_the_candidates_options():
    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression.yaml", PROJECT / "scenarios")
    third = compare.variant(suite, 3, {"sack": False}, candidate=True)
    assert [p.point_id for p in third.points] == [p.point_id for p in suite.points]
    assert all(p.scenario.seeds == [3] for p in third.points)
    assert all(f.sack is False for p in third.points for f in p.scenario.flows)
    assert all(f.sack is True for p in suite.points for f in p.scenario.flows)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["sack=no"], "sack is true or false"),
        (["sak=false"], "NAME one of sack, delayed_ack, initcwnd_segs, window_kb"),
        (["initcwnd_segs=ten"], "whole number"),
    ],
)
def test_bad_candidate_options_name_what_is_valid(given, message):
    with pytest.raises(ValueError, match=message):
        compare.parse_flow_options(given)
    assert compare.parse_flow_options(["sack=false", "initcwnd_segs=3"]) == {"sack": False, "initcwnd_segs": 3}


def _session(root: Path, side: str, seeds: list[int], status: str = "complete") -> Path:
    session = root / side / "lab" / f"20261122T000000Z-{side}"
    for seed in seeds:
        run = session / "lab.cc=westwood" / f"seed={seed}"
        shutil.copytree(FIXTURE, run)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest.update(scenario="lab", point_id="lab.cc=westwood", seed=seed, status=status)
        if status != "complete":
            manifest["reason"] = "guest did not boot (console: guest-console.log)"
        (run / "manifest.json").write_text(json.dumps(manifest))
    (session / "session.json").write_text(
        json.dumps({"scenario": "lab", "runs": [f"lab.cc=westwood/seed={s}" for s in seeds]})
    )
    return session


def _real_side(runs: list[Path], goodput_factor: float = 1.0) -> pd.DataFrame:
    """The metrics ``judge`` compares, from real runs' flows.csv (the trimmed fixture runs keep no raw
    files to analyse again): seed ``i + 1`` is ``runs[i]``; ``goodput_factor`` plants a change, every
    flow's goodput times it."""
    frames = []
    for seed, run in enumerate(runs, start=1):
        flows = pd.read_csv(run / "flows.csv")
        flows["goodput_mbit"] *= goodput_factor
        frames.append(
            flows.assign(run=f"{run.parent.name}/seed={seed}-of-{run.name}", point="wireless.cc=reno", seed=seed)
        )
    return regression.run_metrics(pd.concat(frames, ignore_index=True))


def _judge_real(tmp_path, monkeypatch, candidate_runs: list[Path], goodput_factor: float = 1.0):
    sides = {"baseline": _real_side(REAL_RUNS), "candidate": _real_side(candidate_runs, goodput_factor)}
    statuses = {"wireless.cc=reno": [("complete", None)] * 3}
    monkeypatch.setattr(compare, "side_metrics", lambda sessions: (sides[next(iter(sessions)).name], statuses))
    return regress.judge_comparison(
        tmp_path,
        {"baseline": {tmp_path / "baseline"}, "candidate": {tmp_path / "candidate"}},
        "6.1.0-55",
        "6.1.0-56",
        3,
    )


def test_two_kernels_with_no_change_but_real_spread_give_no_regression_and_exit_0(tmp_path, monkeypatch):
    # the same condition, each run paired with another of its runs: the pairs differ by run-to-run noise
    result = _judge_real(tmp_path, monkeypatch, REAL_RUNS[1:] + REAL_RUNS[:1])
    assert result.exit_code == 0 and not result.failures
    goodput = next(c for c in result.comparisons if c.metric == "goodput")
    assert len(set(goodput.baseline)) == 3 and list(goodput.baseline) != list(goodput.candidate)  # real spread
    assert goodput.verdict == "no change" and goodput.test == "paired" and goodput.p_value > 0.05, goodput
    verdicts = {c.metric: c.verdict for c in result.comparisons}
    assert "jain" not in verdicts  # one flow: no Jain index
    suites = ET.parse(tmp_path / "junit.xml").getroot()
    assert {c.get("name") for c in suites.findall(".//testcase")} >= {"reno / goodput", "reno / retrans_ratio"}
    assert not suites.findall(".//failure")
    assert "exit status 0 (nothing regressed)" in (tmp_path / "regress.txt").read_text()
    assert (tmp_path / "report.html").read_text().count("data:image/png") == 2


def test_a_planted_goodput_loss_in_real_runs_is_found_as_a_regression(tmp_path, monkeypatch):
    # the candidate's runs are the baseline's own with 40 % of their goodput taken
    result = _judge_real(tmp_path, monkeypatch, REAL_RUNS, goodput_factor=0.6)
    goodput = next(c for c in result.comparisons if c.metric == "goodput")
    assert goodput.verdict == "regression" and goodput.change == pytest.approx(-0.4, abs=0.05), goodput
    assert result.exit_code == 1
    failures = ET.parse(tmp_path / "junit.xml").getroot().findall(".//failure")
    assert any(f.get("message", "").startswith("regression") for f in failures)


def test_a_regression_fails_its_junit_case_and_exits_1(tmp_path, monkeypatch):
    def fake(sessions):  # the analysis of each side, replaced by known samples
        drop = 0.9 if any("candidate" in str(s) for s in sessions) else 1.0
        return pd.DataFrame(
            [
                {"run": f"r{i}", "point": "lab.cc=westwood", "cc": "westwood", "metric": "goodput", "value": v * drop}
                for i, v in enumerate([9.0, 9.1, 8.9, 9.05, 8.95])
            ]
        ), {}

    monkeypatch.setattr(compare, "side_metrics", fake)
    result = regress.judge_comparison(
        tmp_path,
        {"baseline": {tmp_path / "baseline"}, "candidate": {tmp_path / "candidate"}},
        "6.1.0-55",
        "6.1.0-56",
        5,
    )
    assert result.exit_code == 1
    [failure] = ET.parse(tmp_path / "junit.xml").getroot().findall(".//failure")
    assert failure.get("message") == "regression: -10.0%"
    assert json.loads((tmp_path / "regress.json").read_text())["comparisons"][0]["verdict"] == "regression"


def test_runs_failing_on_one_kernel_only_are_reported_as_such_and_exit_2(tmp_path):
    sessions = {
        "baseline": {_session(tmp_path, "baseline", [1, 2])},
        "candidate": {_session(tmp_path, "candidate", [1, 2], status="failed")},
    }
    result = regress.judge_comparison(tmp_path, sessions, "6.1.0-56", "6.12.117+deb12", 2)
    assert result.exit_code == 2
    [failure] = result.failures
    assert "lab.cc=westwood: 0 baseline and 2 candidate runs did not complete (on the candidate only)" in failure
    assert "guest did not boot" in failure
    assert all(c.verdict == "too few runs" for c in result.comparisons)  # not a regression of a metric
    assert ET.parse(tmp_path / "junit.xml").getroot().findall(".//error")


def test_a_single_repetition_is_refused():
    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression.yaml", PROJECT / "scenarios")
    with pytest.raises(ValueError, match="at least 2 repetitions"):
        regress.regress("6.1.0-56", "6.1.0-56", suite, 1)


def _fake_sides(candidate_values: dict):
    """``side_metrics_of`` replaced: the baseline's goodput is the same on every point; the candidate's
    is ``candidate_values[point]`` times it, repetition by repetition (seeds 1..5, paired)."""
    base = [9.0, 9.1, 8.9, 9.05, 8.95]

    def fake(sessions):
        candidate = any("candidate" in str(s) for s in sessions)
        rows = [
            {
                "run": f"{point}-{i}",
                "point": point,
                "seed": i + 1,
                "cc": "reno",
                "metric": "goodput",
                "value": v * (factor if candidate else 1.0),
            }
            for point, factor in candidate_values.items()
            for i, v in enumerate(base)
            if candidate or not point.endswith(".control")
        ]  # the baseline runs no control
        return pd.DataFrame(rows), {}

    return fake


def _judge_with_a_control(tmp_path, monkeypatch, control_factor: float):
    """``judge`` on an unharmed upload and its control, whose candidate goodput is ``control_factor``
    times the baseline's."""
    fake = _fake_sides({"upload.default": 1.0, "upload.default.control": control_factor})
    monkeypatch.setattr(compare, "side_metrics", fake)
    return regress.judge_comparison(
        tmp_path,
        {"baseline": {tmp_path / "baseline"}, "candidate": {tmp_path / "candidate"}},
        "6.1.0-55",
        "6.1.0-56",
        5,
        controls={"upload.default.control": {"initcwnd_segs": 1}},
        control_bases={"upload.default.control": "upload.default"},
    )


def test_a_positive_control_detected_is_not_a_regression_of_the_kernel(tmp_path, monkeypatch):
    result = _judge_with_a_control(tmp_path, monkeypatch, 0.66)
    assert result.exit_code == 0 and not result.failures
    [line] = result.controls
    assert line.startswith("positive control upload.default.control (candidate flows with initcwnd_segs=1): detected:")
    assert "reno goodput -34.0%" in line
    text = (tmp_path / "regress.txt").read_text()
    assert "regression (positive control)" in text and "exit status 0" in text
    suites = ET.parse(tmp_path / "junit.xml").getroot()
    assert not suites.findall(".//failure")
    assert [c.get("name") for c in suites.findall(".//testcase[@classname='upload.default.control']")] == [
        "positive control detected"
    ]


def test_a_missed_positive_control_fails_the_run_and_says_to_raise_the_repetitions(tmp_path, monkeypatch):
    result = _judge_with_a_control(tmp_path, monkeypatch, 0.99)
    assert result.exit_code == 2
    [failure] = result.failures
    assert "missed: no metric regressed" in failure and "raise --repeat" in failure
    [junit_failure] = ET.parse(tmp_path / "junit.xml").getroot().findall(".//failure")
    assert junit_failure.get("message") == "positive control missed"


def test_a_suites_control_runs_under_its_own_id_and_harms_only_the_candidate(tmp_path):
    path = tmp_path / "check.yaml"
    path.write_text(
        "experiments:\n  - {scenario: regression/upload}\n"
        "  - {scenario: regression/upload, control: {initcwnd_segs: 1}}\n"
        "  - {scenario: pipe-size, control: {sack: false}}\n"
    )
    suite = load_suite(path, PROJECT / "scenarios")
    ids = ["upload.default", "upload.default.control", "pipe-size.rate_mbit=2.4.control"]
    assert [p.point_id for p in suite.points] == ids
    assert suite.controls == {ids[1]: {"initcwnd_segs": 1}, ids[2]: {"sack": False}}
    baseline, candidate = compare.variant(suite, 2), compare.variant(suite, 2, candidate=True)
    # unharmed, a control is its point: the baseline runs the upload once (the judge uses it for
    # both), and the pipe-size control, whose point the suite lacks, as is
    assert [p.point_id for p in baseline.points] == [ids[0], ids[2]]
    assert all(f.initcwnd_segs is None and f.sack for p in baseline.points for f in p.scenario.flows)
    plain, control, other = candidate.points
    assert [f.initcwnd_segs for f in plain.scenario.flows] == [None]
    assert [f.initcwnd_segs for f in control.scenario.flows] == [1]
    assert {f.sack for f in other.scenario.flows} == {False}
    assert candidate.controls == suite.controls


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{scenario: regression/upload, control: {initcwnd: 1}}",
            r"line 2, experiments\[0\].control.initcwnd: unknown "
            r"field; valid fields here: sack, delayed_ack, initcwnd_segs, window_kb \(did you mean 'initcwnd_segs'\?\)",
        ),
        ("{scenario: regression/upload, control: {}}", "names no option"),
        ("{scenario: regression/upload, control: {initcwnd_segs: 0}}", "0 is out of range: must be between 1 and 1000"),
        ("{scenario: regression/upload, control: {sack: 0}}", "control.sack: expected true or false, got 0"),
    ],
)
def test_a_bad_control_names_what_is_valid(tmp_path, entry, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"experiments:\n  - {entry}\n")
    with pytest.raises(ScenarioError, match=message):
        load_suite(path, PROJECT / "scenarios")
