"""A claim's effect against the window it is measured over: where does it settle?

The papers ran 250-1000 s; the quick profiles run 10-30 s, where the first losses of slow start (a
bandwidth estimate still near zero, a window fallen from 57 packets to 4) weigh as much as the steady
state, and the answer can flip with the run's length. One session of long runs shows where the effect
settles: every side's goodput is recomputed over windows of the same runs, and each window is judged by
the claims' own rule (analysis/claims.py: paired by seed, the same bounds):

* ``0-T``: the first T seconds, which is what a run of T seconds measures (a flow does not know when it
  will be stopped; iperf3's end is outside the window);
* ``W-end``: the whole run with its first W seconds left out (a warm-up).

Goodput over a window is the sender's acknowledged bytes in it (tcp_probe's ``snd_una``, series.csv's
``acked_mb``: the paper's sender goodput per window) over the window's length, added over a flow's
connections. Only goodput claims (``goodput``, ``total_goodput``, ``jain``) have a per-window value; the
others are left out and said so.

Pure: it reads analyses already made (analysis/run.py), no kernel.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import claims as claims_module

WINDOWED_METRICS = claims_module.WINDOWED_METRICS
#: window ends and warm-ups tried, in seconds (those a run is long enough for)
PREFIXES_S = (10, 15, 20, 25, 30, 40, 60, 100, 200, 300)
WARMUPS_S = (10, 20, 30, 60)


@dataclass(frozen=True)
class Window:
    start_s: float
    stop_s: float | None  # None: to the end of each run

    @property
    def label(self) -> str:
        return f"{self.start_s:g}-{'end' if self.stop_s is None else f'{self.stop_s:g}'} s"


def windows_for(duration_s: float) -> list[Window]:
    """The prefixes and warm-ups a run of ``duration_s`` allows (the whole run among the prefixes)."""
    prefixes = [Window(0, t) for t in PREFIXES_S if t < duration_s] + [Window(0, None)]
    return prefixes + [Window(w, None) for w in WARMUPS_S if w <= duration_s / 2]


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
    for analysis in analyses:
        rows = claims_module.flow_rows([analysis])
        if rows.empty:
            continue
        duration = float((analysis.manifest.get("resolved") or {}).get("duration_s") or math.nan)
        stop = duration if window.stop_s is None else window.stop_s
        if math.isnan(duration) or stop > duration:
            continue
        conns = analysis.flows.groupby(["flow", "replica"])["conn"].apply(list).to_dict()
        rows["goodput_mbit"] = [
            _flow_goodput(analysis.series, conns.get((flow, replica), []), window.start_s, stop)
            for flow, replica in zip(rows["flow"], rows.get("replica", pd.Series([0] * len(rows))), strict=True)
        ]  # fmt: skip
        # a first-T-seconds window is what a run of T s measures; a warm-up window is the run's, less its start
        rows["duration_s"] = stop
        rows["window_from_s"] = window.start_s
        frames.append(rows)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _flow_goodput(series: pd.DataFrame, conns: list[str], start_s: float, stop_s: float) -> float:
    values = [acked_goodput(series, conn, start_s, stop_s) for conn in conns]
    return float(sum(values)) if values and not any(math.isnan(v) for v in values) else math.nan


def table(analyses, claims: list[claims_module.Claim]) -> pd.DataFrame:
    """One row per claim, condition and window: the effect with its 95 % interval, the test, the finding
    and the claim's verdict on that window alone (module doc), the two sides' correlation across seeds
    (``r``) and the smallest effect its test shows with 80 % power at this noise (``detectable``)."""
    complete = [a for a in analyses if a.status == "complete"]
    durations = {float((a.manifest.get("resolved") or {}).get("duration_s") or math.nan) for a in complete}
    longest = max((d for d in durations if not math.isnan(d)), default=math.nan)
    rows = []
    for window in windows_for(longest) if not math.isnan(longest) else []:
        flows = windowed_flows(complete, window)
        for claim in claims:
            if claim.metric not in WINDOWED_METRICS or flows.empty or claim.experiment not in set(flows["experiment"]):
                continue
            verdict = claims_module.judge(claim, flows)
            for c in verdict.conditions:
                low, high = c.interval()
                rows.append({"claim": claim.id, "condition": c.condition, "point": _point(c.condition),
                             "window": window.label,
                             "effect": c.difference, "low": low, "high": high,
                             "test": c.effect.test if c.effect else "", "finding": c.finding,
                             "verdict": verdict.label, "r": pair_correlation(c),
                             "detectable": c.effect.detectable() if c.effect else math.nan})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = ["claim", "condition", "point", "window", "effect", "low", "high", "test", "finding", "verdict", "r",
           "detectable"]  # fmt: skip
#: the run length and window that claims._condition_text appends to a condition's parameters
_LENGTH = re.compile(r", (?:[\d.]+-)?[\d.]+ s (?:of [\d.]+ s )?runs$")


def _point(condition: str) -> str:
    """The condition's parameters without its run length and window: what the windows of one point share."""
    return _LENGTH.sub("", condition)


def pair_correlation(condition: claims_module.ConditionResult) -> float:
    """Pearson's r of the two sides' values across the seeds they share (what pairing can take out); NaN with
    fewer than three pairs or without a paired effect."""
    effect = condition.effect
    if effect is None or not effect.paired or len(effect.pairs) < 3 or len(condition.a) != len(condition.b):
        return math.nan
    a, b = np.array(condition.a, dtype=float), np.array(condition.b, dtype=float)
    if a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])
