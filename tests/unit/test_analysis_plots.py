"""analysis.figures.plots: figures render to PNG, take their colours from testbed/scenario/algorithms.py and
survive missing data."""

from __future__ import annotations

import io

import matplotlib.image
import numpy as np
import pandas as pd

from analysis.figures import plots
from testbed.scenario.algorithms import REGISTRY


def colours_in(png: bytes) -> set[tuple[int, int, int]]:
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    rgb = (pixels[..., :3] * 255).round().astype(int).reshape(-1, 3)
    return {tuple(int(c) for c in row) for row in np.unique(rgb, axis=0)}


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def test_point_bars_are_coloured_by_the_cc_registry():
    table = pd.DataFrame(
        {
            "label": ["loss 0 Westwood+", "loss 0 Reno", "loss 1 Reno"],
            "cc": ["westwood", "reno", "reno"],
            "goodput_mbit": [9.0, 8.0, float("nan")],
            "goodput_mbit_min": [8.5, 8.0, float("nan")],
            "goodput_mbit_max": [9.4, 8.0, float("nan")],
        }
    )
    png = plots.point_bars_png(table, "goodput_mbit", "goodput_mbit_min", "goodput_mbit_max", "Mbit/s", "test")
    assert png.startswith(b"\x89PNG")
    found = colours_in(png)
    assert rgb(REGISTRY["westwood"].colour) in found
    assert rgb(REGISTRY["reno"].colour) in found
    assert rgb(REGISTRY["cubic"].colour) not in found


def test_time_plots_draw_each_connection_in_its_ccs_colour():
    series = pd.DataFrame(
        {
            "conn": ["c0"] * 4 + ["c1"] * 4,
            "t_s": [0.0, 1.0, 0.0, 1.0] * 2,
            "metric": ["cwnd_pkts", "cwnd_pkts", "ssthresh_current_pkts", "ssthresh_current_pkts"] * 2,
            "value": [10, 20, float("nan"), 15, 12, 30, float("nan"), 9],
        }
    )
    connections = pd.DataFrame({"conn": ["c0", "c1"], "cc": ["westwood", "vegas"]})
    found = colours_in(plots.cwnd_ssthresh_png(series, connections))
    assert rgb(REGISTRY["westwood"].colour) in found and rgb(REGISTRY["vegas"].colour) in found


def test_plots_without_data_still_render():
    empty_series = pd.DataFrame(columns=["conn", "t_s", "metric", "value"])
    connections = pd.DataFrame({"conn": ["c0"], "cc": ["westwood"]})
    for png in [
        plots.cwnd_ssthresh_png(empty_series, connections),
        plots.srtt_png(empty_series, connections),
        plots.interval_goodput_png(pd.DataFrame(columns=["conn", "t_start_s", "t_end_s", "goodput_mbit"]), connections),
        plots.point_bars_png(pd.DataFrame(columns=["label", "cc", "v", "lo", "hi"]), "v", "lo", "hi", "y", "t"),
    ]:
        assert png.startswith(b"\x89PNG")
    assert rgb(REGISTRY["westwood"].colour) not in colours_in(plots.srtt_png(empty_series, connections))
