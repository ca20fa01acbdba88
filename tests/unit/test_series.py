"""A kernel series' change points (analysis/kernels/series.py) and its kernels (testbed.host.kernels.expand_series,
newest) on simulated runs of known truth: no kernel involved."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from analysis.kernels import series
from testbed.host import kernels
from testbed.workflows import compare
from testbed.workflows import series as series_workflow
from testbed.workflows.sessions import Where

AVAILABLE = ["6.1.0-47", "6.1.0-48", "6.1.0-49", "6.1.0-50", "6.1.0-55", "6.1.0-56", "6.12.115+deb12", "6.12.117+deb12"]
POINTS = [f"point{i}" for i in range(5)]
METRICS = ("goodput", "retrans_ratio")


def simulated(
    order: list[str], rng: random.Random, repeat: int = 5, noise: float = 0.03, moved: dict | None = None
) -> dict[str, pd.DataFrame]:
    """run_metrics frames per kernel: every point's goodput about 9 and retransmission ratio about 0.02,
    with ``noise`` (relative) per run and a per-seed effect every kernel shares (the seeded losses);
    ``moved``: (point, metric) -> (first kernel moved, factor)."""
    seed_effect = {(p, s): rng.gauss(0, 0.1) for p in POINTS for s in range(1, repeat + 1)}
    frames = {}
    for k, kernel in enumerate(order):
        rows = []
        for point in POINTS:
            for seed in range(1, repeat + 1):
                for metric, level in zip(METRICS, (9.0, 0.02), strict=True):
                    factor = 1.0
                    if moved and (point, metric) in moved and k >= order.index(moved[point, metric][0]):
                        factor = moved[point, metric][1]
                    value = level * factor * math.exp(seed_effect[point, seed] + rng.gauss(0, noise))
                    rows.append(
                        {
                            "run": f"{kernel}/{point}/{seed}",
                            "point": point,
                            "seed": seed,
                            "cc": "reno",
                            "metric": metric,
                            "value": value,
                        }
                    )
        frames[kernel] = pd.DataFrame(rows)
    return frames


def test_a_step_is_found_after_its_version_and_nowhere_else():
    order = AVAILABLE[:5]
    frames = simulated(order, random.Random(1), moved={("point2", "goodput"): ("6.1.0-50", 0.8)})
    steps = series.compare_series(frames, order)
    assert len(steps) == (len(order) - 1 + 1) * len(POINTS) * len(METRICS)  # adjacent pairs and first-last
    [point] = series.change_points(steps)
    assert (point.before, point.after, point.comparison.point, point.comparison.metric) == (
        "6.1.0-49",
        "6.1.0-50",
        "point2",
        "goodput",
    )
    assert point.comparison.verdict == "regression" and point.comparison.change == pytest.approx(-0.2, abs=0.03)
    [drift] = [s for s in steps if s.kind == series.OVERALL and s.moved]
    assert (drift.before, drift.after) == ("6.1.0-47", "6.1.0-55")


def test_series_without_change_raise_an_alarm_in_at_most_five_percent_of_series():
    """200 simulated series of 5 kernels, 10 comparisons per kernel pair (50 in all with first-last), the
    noise as wide as 20 % so the 5 % threshold hides nothing: Holm over the series keeps the share of
    series with any change point within 5 % plus the simulation's binomial spread (3.1 sd)."""
    rng = random.Random(5)
    order = AVAILABLE[:5]
    alarmed = sum(
        any(s.moved for s in series.compare_series(simulated(order, rng, noise=0.2), order)) for _ in range(200)
    )
    assert alarmed / 200 <= 0.05 + 3.1 * math.sqrt(0.05 * 0.95 / 200), alarmed


def test_the_trend_gives_each_kernels_mean_with_its_interval_relative_to_the_first():
    order = AVAILABLE[:3]
    frames = simulated(order, random.Random(2), moved={("point0", "goodput"): ("6.1.0-49", 1.5)})
    table = series.trend(frames, order)
    assert set(table["kernel"]) == set(order) and (table["n"] == 5).all()
    assert (table["ci_low"] < table["mean"]).all() and (table["mean"] < table["ci_high"]).all()
    relative = series.relative_trend(table, order)
    mine = relative[(relative["point"] == "point0") & (relative["metric"] == "goodput")].set_index("kernel")
    assert mine.loc["6.1.0-47", "mean"] == 0
    assert mine.loc["6.1.0-49", "mean"] == pytest.approx(0.5, abs=0.06)


def test_a_series_needs_two_kernels():
    with pytest.raises(ValueError, match="two kernels or more"):
        series.compare_series({}, ["6.1.0-56"])


def test_series_ranges_lists_and_flavours():
    assert kernels.expand_series("6.1.0-48..6.1.0-55", AVAILABLE) == ["6.1.0-48", "6.1.0-49", "6.1.0-50", "6.1.0-55"]
    assert kernels.expand_series("6.1.0-55-cloud..6.1.0-56-cloud", AVAILABLE) == ["6.1.0-55-cloud", "6.1.0-56-cloud"]
    assert kernels.expand_series("6.1.0-56, 6.12.117+deb12") == ["6.1.0-56", "6.12.117+deb12"]
    assert kernels.newest("6.1", AVAILABLE) == "6.1.0-56" and kernels.newest("6.12", AVAILABLE) == "6.12.117+deb12"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "6.1.0-56..6.1.0-47",
            "6.1.0-56 is not older than 6.1.0-47; give the oldest first .--series 6.1.0-47..6.1.0-56",
        ),
        ("6.1.0-40..6.1.0-56", "6.1.0-40 cannot be had here. Versions that can be had: 6.1.0-47, "),
        ("6.1.0-56", "two kernels or more"),
        ("6.1.0-55,6.1.0-56,6.1.0-55", "6.1.0-55 named twice"),
        ("6.1.0-55-cloud..6.1.0-56", "the same flavour"),
    ],
)
def test_bad_series_are_refused_with_what_would_do(spec, message):
    with pytest.raises(kernels.KernelError, match=message):
        kernels.expand_series(spec, AVAILABLE)
    with pytest.raises(kernels.KernelError, match="series here: 6.1, 6.12"):
        kernels.newest("5.10", AVAILABLE)


def test_an_injected_harm_starts_at_its_version_and_needs_both_options():
    order = AVAILABLE[:4]
    assert [compare.injected(k, order, {"window_kb": 32}, "6.1.0-49") for k in order] == [
        None,
        None,
        {"window_kb": 32},
        {"window_kb": 32},
    ]
    with pytest.raises(ValueError, match="go together"):
        compare.check_injection({"window_kb": 32}, None, order)
    with pytest.raises(ValueError, match="not one of the kernels run"):
        compare.check_injection({"window_kb": 32}, "6.1.0-56", order)


def test_latest_finds_a_pair_already_compared_but_not_a_failed_one(tmp_path):
    from testbed.results import rundir

    folder = tmp_path / "regress" / "20261128T000000Z-6.1.0-55-vs-6.1.0-56"
    folder.mkdir(parents=True)
    rundir.write_json_atomic(folder / "regress.json", {"exit_code": 2})
    assert series_workflow.already_compared(tmp_path, "6.1.0-55", "6.1.0-56") is None  # failed: run it again
    rundir.write_json_atomic(folder / "regress.json", {"exit_code": 1})
    assert series_workflow.already_compared(tmp_path, "6.1.0-55", "6.1.0-56") == folder / "regress.json"
    assert series_workflow.already_compared(tmp_path, "6.1.0-54", "6.1.0-56") is None


def recording_session(ran: list, before=lambda kernel: None):
    """run_session replaced: ``before(kernel)`` first (it may raise, as a kernel that refuses the suite does),
    then the kernel recorded in ``ran`` and an empty session folder made; nothing runs."""

    def run_session(scenario, kernel_version, results_root, **_):
        before(kernel_version)
        ran.append(kernel_version)
        folder = results_root / f"session{len(ran)}"
        folder.mkdir(parents=True)
        return type("Result", (), {"directory": folder})()

    return run_session


def test_a_kernel_that_refuses_the_suite_is_dropped_and_the_series_goes_on(tmp_path, monkeypatch):
    """run_session replaced: 6.1.0-48 refuses (its module cannot be built, as 6.12.100's headers were not
    in apt here); the other two run every repetition and are compared; the series exits 2 naming it."""
    from testbed.guest.modules import ModuleBuildError
    from testbed.scenario.suite import load_suite
    from tests.conftest import PROJECT

    suite = load_suite(PROJECT / "scenarios" / "suites" / "regression-check.yaml", PROJECT / "scenarios")
    ran, judged = [], {}

    def refuses(kernel: str) -> None:
        if kernel == "6.1.0-48":
            raise ModuleBuildError("kernel headers missing for 6.1.0-48")

    monkeypatch.setattr(series_workflow.kernels, "settle", lambda kernel, log: None)
    monkeypatch.setattr(compare, "run_session", recording_session(ran, refuses))
    monkeypatch.setattr(compare, "completed_runs", lambda session: (1, []))
    monkeypatch.setattr(
        series_workflow, "judge_series", lambda result, kept, *a, **k: judged.update(kept=kept) or result
    )
    result = series_workflow.run_series(["6.1.0-47", "6.1.0-48", "6.1.0-49"], suite, 2, Where(results=tmp_path))
    assert ran == ["6.1.0-47", "6.1.0-49"] * 2 and judged["kept"] == ["6.1.0-47", "6.1.0-49"]
    [failure] = result.failures
    assert failure.startswith("6.1.0-48: it refused the suite before any run (kernel headers missing")
    assert failure.endswith("the series goes on without it")


def test_latest_compares_with_the_newest_older_kernel_of_its_series_in_the_catalog(tmp_path, monkeypatch):
    import analysis.runs.catalog

    history = pd.DataFrame({"kernel_release": ["6.1.0-47-amd64", "6.1.0-55-amd64", "6.12.117+deb12-amd64"]})
    monkeypatch.setattr(analysis.runs.catalog, "ingest", lambda root: None)
    monkeypatch.setattr(analysis.runs.catalog, "runs", lambda root, **filters: history)
    monkeypatch.setattr(kernels, "available_versions", lambda: AVAILABLE)
    assert series_workflow.baseline_from_history(tmp_path, "6.1", "6.1.0-56") == "6.1.0-55"
    assert series_workflow.baseline_from_history(tmp_path, "6.1", "6.1.0-50") == "6.1.0-47"
    with pytest.raises(ValueError, match="no kernel of that series older than 6.1.0-47 .* give --baseline"):
        series_workflow.baseline_from_history(tmp_path, "6.1", "6.1.0-47")
