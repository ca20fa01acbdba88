"""The papers' sweep figures (analysis/figures/sweeps.py) on synthetic per-flow tables."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.figures import sweeps


def _row(experiment, params, seed, flow, cc, goodput, direction="forward", sent=1000.0, retrans=10.0, recv=None):
    run = f"{experiment}-{sorted(params.items())}-{seed}"
    return {
        "experiment": experiment,
        "profile": "quick",
        "params": params,
        "seed": seed,
        "run": run,
        "kernel": "k",
        "flow": flow,
        "cc": cc,
        "direction": direction,
        "goodput_mbit": goodput,
        "recv_goodput_mbit": goodput if recv is None else recv,
        "sent_bytes": sent,
        "retrans_bytes": retrans,
    }


def _parking_lot() -> pd.DataFrame:
    rows = []
    for hops in (1, 3):
        for cc, c1 in (("reno", 4.0), ("westwood", 4.5)):
            for seed, jitter in ((1, 0.0), (2, 0.2)):
                params = {"hops": hops, "cc": cc}
                rows.append(_row("parking-lot", params, seed, 0, cc, c1 / hops + jitter))
                rows += [_row("parking-lot", params, seed, 1 + h, "reno", 6.0) for h in range(hops)]
                rows += [_row("parking-lot", params, seed, 10 + h, "reno", 5.0, "reverse") for h in range(hops)]
    return pd.DataFrame(rows)


def test_c1_goodput_and_total_per_hop_count_over_seeds():
    flows = _parking_lot()
    [c1] = [f for f in sweeps.FIGURES if f.experiment == "parking-lot" and f.metric == "goodput"]
    table = sweeps.summary(sweeps.run_values(flows, c1))
    westwood_3 = table[(table["cc"] == "westwood") & (table["x"] == 3)].iloc[0]
    assert westwood_3["mean"] == pytest.approx(1.6) and westwood_3["min"] == pytest.approx(1.5)
    assert westwood_3["max"] == pytest.approx(1.7) and westwood_3["runs"] == 2
    [total] = [f for f in sweeps.FIGURES if f.metric == "c1_plus_cross"]
    table = sweeps.summary(sweeps.run_values(flows, total))
    # C1 + the mean of the forward cross flows (the reverse ones do not count)
    assert table[(table["cc"] == "reno") & (table["x"] == 1)]["mean"].iloc[0] == pytest.approx(4.0 + 0.1 + 6.0)


def test_figures_are_drawn_for_swept_parameters_only():
    drawn = sweeps.sweep_figures(_parking_lot())
    assert {f.metric for f, _, _ in drawn} == {"goodput", "c1_plus_cross"}
    assert all(png.startswith(b"\x89PNG") for _, _, png in drawn)
    one_point = _parking_lot()
    one_point = one_point[[p["hops"] == 1 for p in one_point["params"]]]
    assert sweeps.sweep_figures(one_point) == []


def test_other_swept_parameters_become_panels():
    rows = []
    for paths in (2, 4):
        for delay in (10, 60):
            for cc in ("reno", "westwood"):
                params = {"paths": paths, "delay_ms": delay, "cc": cc}
                rows.append(_row("multipath", params, 1, 0, cc, paths * 1.4, recv=paths * 1.2))
    [figure] = [f for f in sweeps.FIGURES if f.experiment == "multipath"]
    table = sweeps.summary(sweeps.run_values(pd.DataFrame(rows), figure))
    assert set(table["panel"]) == {"paths=2", "paths=4"}
    # paper 004's end-to-end throughput is what the receiver got, not the sender's (sent - retransmitted)
    assert sorted(table["mean"].round(6).unique()) == [2.4, 4.8]
    assert sorted(table["x"].unique()) == [10, 60]
    assert sweeps.sweep_png(table, figure).startswith(b"\x89PNG")
