"""A claim's effect over windows of its runs (analysis/verdicts/lengths.py), on synthetic runs whose truth is known:
Westwood+ slow for its first 10 s and faster than New Reno after, so the first window and the rest disagree."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.runs.analyze import RunAnalysis
from analysis.verdicts import claims, flowrows, lengths

CLAIM = claims.Claim.model_validate(
    {
        "id": "w-beats-r",
        "experiment": "exp",
        "source": "s",
        "quote": "q",
        "paper_numbers": "n",
        "metric": "goodput",
        "expect": "higher",
        "paper_effect": 0.2,
        "paper_effect_from": "test",
        "a": {"cc": "westwood"},
        "b": {"cc": "reno"},
    }
)


def _series(rates: list[tuple[float, float]], duration: float) -> pd.DataFrame:
    """acked_mb every 0.1 s of a connection sending ``rate`` Mbit/s from each ``start`` on."""
    t = np.arange(0.0, duration + 0.05, 0.1)
    rate = np.zeros_like(t)
    for start, value in rates:
        rate[t >= start] = value
    acked = np.concatenate([[0.0], np.cumsum(rate[:-1] * 0.1 / 8)])
    return pd.DataFrame({"conn": "c0", "t_s": t, "metric": "acked_mb", "value": acked})


def _run(cc: str, seed: int, rates: list[tuple[float, float]], duration: float = 60.0) -> RunAnalysis:
    manifest = {
        "scenario": "exp",
        "profile": "quick",
        "params": {"cc": cc},
        "point_id": f"exp.cc={cc}",
        "seed": seed,
        "kernel": {"release": "6.1.0-56-amd64"},
        "resolved": {"duration_s": duration},
    }
    flows = pd.DataFrame([{"conn": "c0", "flow": 0, "replica": 0}])
    totals = pd.DataFrame(
        [{"flow": 0, "replica": 0, "cc": cc, "direction": "forward", "goodput_mbit": 1.0, "recv_goodput_mbit": 1.0}]
    )
    return RunAnalysis(
        Path(f"/runs/{cc}-{seed}"), manifest, flows, _series(rates, duration), status="complete", flow_totals=totals
    )


def test_a_windows_goodput_is_the_acknowledged_bytes_in_it():
    series = _series([(0, 1.0), (10, 3.0)], 60)
    assert flowrows.acked_goodput(series, "c0", 0, 10) == pytest.approx(1.0, rel=0.02)
    assert flowrows.acked_goodput(series, "c0", 10, 60) == pytest.approx(3.0, rel=0.02)
    assert flowrows.acked_goodput(series, "c0", 0, 60) == pytest.approx((10 + 150) / 60, rel=0.02)
    assert math.isnan(flowrows.acked_goodput(series, "c0", 0, 90))  # the trace does not reach 90 s
    assert math.isnan(flowrows.acked_goodput(series, "c9", 0, 10))


def test_the_windows_a_run_allows():
    assert [w.label for w in lengths.windows_for(60)] == [
        "0-10 s",
        "0-15 s",
        "0-20 s",
        "0-25 s",
        "0-30 s",
        "0-40 s",
        "0-end s",
        "10-end s",
        "20-end s",
        "30-end s",
    ]
    assert [w.label for w in lengths.windows_for(10)] == ["0-end s"]


def test_the_effect_flips_after_the_warm_up_and_each_window_is_judged_by_the_claims_rule():
    runs = []
    for seed, noise in zip((1, 2, 3), (0.97, 1.0, 1.04), strict=True):  # each seed's spread, shared by both sides
        runs.append(_run("westwood", seed, [(0, 0.5 * noise), (10, 1.6 * noise)]))
        runs.append(_run("reno", seed, [(0, 1.0 * noise)]))
    table = lengths.table(runs, [CLAIM]).set_index("window")
    first, after = table.loc["0-10 s"], table.loc["10-end s"]
    assert first["effect"] == pytest.approx(-0.5, abs=0.02) and first["verdict"] == "exploratory: opposite"
    assert after["effect"] == pytest.approx(0.6, abs=0.02) and after["verdict"] == "exploratory: reproduced"
    assert first["test"] == "paired over 3 seeds"
    assert first["r"] == pytest.approx(1.0, abs=0.01) and first["detectable"] < 0.05  # the seeds' spread is shared
    whole = table.loc["0-end s"]
    assert whole["effect"] == pytest.approx((0.5 * 10 + 1.6 * 50) / 60 - 1, abs=0.02)
    assert "0-end s" in table.index and "60 s runs" in whole["condition"]
    assert set(table["point"]) == {"-"}  # one point: every window of it in one panel of the figure
    assert table.loc["10-end s", "condition"] == "-, 10-60 s of 60 s runs"


def test_a_claim_with_a_warm_up_is_judged_on_its_runs_after_it():
    runs = []
    for seed, noise in zip((1, 2, 3), (0.97, 1.0, 1.04), strict=True):
        runs.append(_run("westwood", seed, [(0, 0.5 * noise), (10, 1.6 * noise)]))
        runs.append(_run("reno", seed, [(0, 1.0 * noise)]))
    warm = CLAIM.model_copy(update={"warmup_s": 10.0, "warmup_from": "test"})
    (verdict,) = claims.verdicts(runs, [warm])
    assert verdict.verdict == "reproduced" and verdict.conditions[0].difference == pytest.approx(0.6, abs=0.02)
    assert "10-60 s of 60 s runs" in verdict.measured
    (whole,) = claims.verdicts(runs, [CLAIM])  # the flows' own goodput: the fixture's 1.0 on both sides
    assert "60 s runs" in whole.measured and "10-60" not in whole.measured
    with pytest.raises(ValueError, match="warmup_s needs a goodput metric"):
        claims.Claim.model_validate(CLAIM.model_dump() | {"metric": "retrans_ratio", "warmup_s": 5, "warmup_from": "x"})


def test_the_figure_draws_one_panel_per_claim_and_point():
    from analysis.figures import plots

    runs = []
    for seed in (1, 2, 3):
        runs.append(_run("westwood", seed, [(0, 0.5 + 0.01 * seed), (10, 1.6)]))
        runs.append(_run("reno", seed, [(0, 1.0 + 0.02 * seed)]))
    table = lengths.table(runs, [CLAIM])
    png = plots.lengths_png(table, {CLAIM.id: CLAIM.paper_effect})
    assert png.startswith(b"\x89PNG")
    assert len(table.groupby(["claim", "point"])) == 1 and len(table) == len(lengths.windows_for(60))
