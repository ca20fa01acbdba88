"""A run's flows as the claims read them, over the whole run or over a window of it.

``flow_rows``: one row per flow of every complete run, with the run's condition (experiment, profile,
swept parameters, seed) and its totals; ``windowed_flows``: the same rows with each flow's goodput over
a window of its run (the first T seconds, or the run less a warm-up): the sender's acknowledged bytes
in it (tcp_probe's ``snd_una``, series.csv's ``acked_mb``) over the window's length, added over a
flow's connections. Only goodput claims (``WINDOWED_METRICS``) have a per-window value. The claims
(analysis/verdicts/claims.py) and the windows' table (analysis/verdicts/lengths.py) both read runs through here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: metrics computed from the flows' goodput, which a measurement window (a warm-up left out) changes
WINDOWED_METRICS = ("goodput", "total_goodput", "jain")


@dataclass(frozen=True)
class Window:
    start_s: float
    stop_s: float | None  # None: to the end of each run

    @property
    def label(self) -> str:
        return f"{self.start_s:g}-{'end' if self.stop_s is None else f'{self.stop_s:g}'} s"


def acked_goodput(series: pd.DataFrame, conn: str, start_s: float, stop_s: float) -> float:
    """Mbit/s acknowledged to ``conn``'s sender between ``start_s`` and ``stop_s`` (series.csv's ``acked_mb``,
    interpolated at both ends); NaN without samples covering the window."""
    samples = series[(series["conn"] == conn) & (series["metric"] == "acked_mb")]
    if len(samples) < 2 or stop_s <= start_s:
        return math.nan
    t, acked = samples["t_s"].to_numpy(dtype=float), samples["value"].to_numpy(dtype=float)
    if t[0] > start_s + 1.0 or t[-1] < stop_s - 1.0:  # the trace does not cover the window
        return math.nan
    at = np.interp([start_s, stop_s], t, acked)
    return float(at[1] - at[0]) * 8 / (stop_s - start_s)


def windowed_flows(analyses, window: Window) -> pd.DataFrame:
    """``claims.flow_rows`` of ``analyses`` with each flow's ``goodput_mbit`` over ``window`` instead of the
    whole run (from its connections' acknowledged bytes), ``duration_s`` the run's length as far as the
    window goes and ``window_from_s`` where the window starts."""
    frames = []
    for analysed in analyses:
        rows = flow_rows([analysed])
        if rows.empty:
            continue
        duration = float((analysed.manifest.get("resolved") or {}).get("duration_s") or math.nan)
        stop = duration if window.stop_s is None else window.stop_s
        if math.isnan(duration) or stop > duration:
            continue
        conns = analysed.flows.groupby(["flow", "replica"])["conn"].apply(list).to_dict()
        rows["goodput_mbit"] = [
            _flow_goodput(analysed.series, conns.get((flow, replica), []), window.start_s, stop)
            for flow, replica in zip(rows["flow"], rows.get("replica", pd.Series([0] * len(rows))), strict=True)
        ]
        # a first-T-seconds window is what a run of T s measures; a warm-up window is the run's, less its start
        rows["duration_s"] = stop
        rows["window_from_s"] = window.start_s
        frames.append(rows)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _flow_goodput(series: pd.DataFrame, conns: list[str], start_s: float, stop_s: float) -> float:
    values = [acked_goodput(series, conn, start_s, stop_s) for conn in conns]
    return float(sum(values)) if values and not any(math.isnan(v) for v in values) else math.nan


def untrusted_because(manifest: dict) -> str:
    """Why a run's fidelity says it is untrustworthy: its failed checks' names ('' when it is trusted or
    says nothing). Bounded: a guest's manifest may hold anything."""
    fidelity = manifest.get("fidelity") or {}
    if not isinstance(fidelity, dict) or fidelity.get("trustworthy") is not False:
        return ""
    failed = [
        str(c.get("name"))[:60]
        for c in (fidelity.get("checks") or [])[:200]
        if isinstance(c, dict) and c.get("ok") is False
    ]
    return ", ".join(sorted(set(failed))[:3]) or "its fidelity says so"


def flow_rows(analyses) -> pd.DataFrame:
    """One row per flow of every complete run: experiment, profile, params, seed, run, the flow's
    index, algorithm, direction and totals (metrics.flow_totals), and ``untrusted``: why the run's fidelity
    checks say it is untrustworthy ('' when they do not: analysis/verdicts/claims.py leaves such runs out)."""
    frames = []
    for analysed in analyses:
        if analysed.status != "complete" or analysed.flow_totals.empty:
            continue
        manifest = analysed.manifest
        totals = analysed.flow_totals.copy()
        totals["experiment"] = manifest.get("scenario")
        totals["profile"] = manifest.get("profile")
        totals["params"] = [manifest.get("params") or {}] * len(totals)
        totals["point"] = manifest.get("point_id")
        totals["seed"] = manifest.get("seed")
        totals["run"] = str(analysed.run_dir)
        totals["kernel"] = (manifest.get("kernel") or {}).get("release")
        totals["wall_s"] = ((manifest.get("timing") or {}).get("run_wall_s")) or math.nan
        totals["duration_s"] = (manifest.get("resolved") or {}).get("duration_s") or math.nan
        totals["untrusted"] = untrusted_because(manifest)
        frames.append(totals)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
