"""Our Westwood+ module's trace (raw/westwood_tb.txt) in one run's analysis: each connection's bandwidth
estimate samples and congestion events, the series they add to series.csv (``bwe_mbit``,
``bwe_sample_mbit``, the real ``ssthresh_pkts``), the estimate's columns of flows.csv and the table of
congestion events (analysis/runs/analyze.py's module doc says what each is).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.raw.loaders import (
    WESTWOOD_CONG_FIELDS,
    LoadError,
    WestwoodTrace,
    display_path,
    load_westwood_tb,
)
from analysis.runs import metrics
from analysis.runs.connection import SERIES_COLUMNS, concat, nan_of
from testbed.scenario.algorithms import REGISTRY

#: flows.csv columns added when the run has the module's trace (raw/westwood_tb.txt)
WESTWOOD_FLOW_COLUMNS = ["bwe_mbit_final", "bwe_error_pct"]


#: the algorithms whose runs write raw/westwood_tb.txt (testbed/guest/runner.py, uses_project_module)
WESTWOOD_TB_CCS = {name for name, cc in REGISTRY.items() if cc.module == "tcp_westwood_tb"}


#: payload of a full segment on the testbed's links: MTU 1500 - 20 (IP) - 20 (TCP) - 12 (timestamp option);
#: tcp_probe does not print the MSS, and the manifest records no MTU
MSS_BYTES = 1448


MSS_BYTES_NO_TIMESTAMPS = 1460


def load_westwood(raw: Path, manifest: dict, connections: list[dict], problems: list[str]) -> WestwoodTrace | None:
    path = raw / "westwood_tb.txt"
    if not path.exists():
        captured = "westwood_tb" in (manifest.get("capture") or {})
        if raw.is_dir() and (captured or any(c.get("cc") in WESTWOOD_TB_CCS for c in connections)):
            problems.append(
                f"{display_path(path)}: missing (the run uses the westwood_tb module: no bandwidth estimate, "
                "no real ssthresh)"
            )
        return None
    try:
        trace = load_westwood_tb(path)
    except LoadError as exc:
        problems.append(str(exc))
        return None
    problems.extend(trace.problems)
    return trace


def mss_bytes(manifest: dict) -> int:
    timestamps = (manifest.get("sysctls") or {}).get("net.ipv4.tcp_timestamps")
    return MSS_BYTES_NO_TIMESTAMPS if str(timestamps).strip() == "0" else MSS_BYTES


def westwood_of(
    conn: dict, trace: WestwoodTrace, t0: float | None, problems: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The connection's samples and congestion events, with ``conn`` and ``t_s`` (since the run's t0)."""

    def own(frame: pd.DataFrame) -> pd.DataFrame:
        mask = frame["sport"] == conn.get("client_port")
        if conn.get("server_port") is not None:
            mask &= frame["dport"] == conn.get("server_port")
        mine = frame[mask].copy()
        mine.insert(0, "conn", conn["id"])
        mine.insert(1, "t_s", mine["t_mono_s"] - (t0 if t0 is not None else math.nan))
        return mine.reset_index(drop=True)

    samples, events = own(trace.samples), own(trace.events)
    if samples.empty and conn.get("cc") in WESTWOOD_TB_CCS:
        problems.append(f"{display_path(trace.path)}: no samples of {conn['id']} (sport {conn.get('client_port')})")
    return samples, events


def westwood_series(conn: dict, samples: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    to_mbit = metrics.BITS_PER_BYTE / metrics.BITS_PER_MBIT
    parts = [
        ("bwe_mbit", samples["t_s"], samples["est_Bps"] * to_mbit),
        ("bwe_sample_mbit", samples["t_s"], samples["sample_Bps"] * to_mbit),
        ("ssthresh_pkts", events["t_s"], events["ssthresh_after"]),  # NaN while infinite (loader)
    ]
    frames = [
        pd.DataFrame(
            {
                "conn": conn["id"],
                "t_s": t_s.to_numpy(dtype=float),
                "metric": name,
                "value": pd.to_numeric(values, errors="coerce").to_numpy(dtype=float),
            }
        )
        for name, t_s, values in parts
    ]
    return concat(frames, SERIES_COLUMNS)


def add_estimate_columns(flows: pd.DataFrame, connections: list[dict], samples: list[pd.DataFrame]) -> pd.DataFrame:
    """``bwe_mbit_final``: mean estimate over the connection's last half (start_s + (stop_s - start_s)/2 on,
    or the second half of its samples' span when its times are unknown); ``bwe_error_pct``: that estimate's
    error vs the connection's sender goodput, in %. NaN for connections without samples."""
    final, error = [], []
    for row, own in zip(flows.itertuples(), samples, strict=True):
        if own.empty:
            final.append(math.nan)
            error.append(math.nan)
            continue
        start, stop = nan_of(row.start_s), nan_of(row.stop_s)
        if math.isnan(start) or math.isnan(stop) or stop <= start:
            start, stop = float(own["t_s"].min()), float(own["t_s"].max())
        half = start + (stop - start) / 2
        final.append(metrics.mean_estimate_mbit(own, half))
        error.append(metrics.estimate_vs_goodput(own, row.goodput_mbit, half) * 100)
    flows = flows.copy()
    flows["bwe_mbit_final"] = np.array(final, dtype=float)
    flows["bwe_error_pct"] = np.array(error, dtype=float)
    return flows


CONGESTION_COLUMNS = [
    "conn",
    "t_s",
    *(field for field in WESTWOOD_CONG_FIELDS if field not in ("sport", "dport")),
    "expected",
    "diff_segments",
]


def congestion_table(events: pd.DataFrame, samples: pd.DataFrame, mss_bytes: float) -> pd.DataFrame:
    """The congestion events, sorted by time, with the papers' expected ssthresh for westwood_paper's
    recovery and loss events (metrics.paper_ssthresh_check; NaN for the others)."""
    check = metrics.paper_ssthresh_check(events, samples, mss_bytes)
    check = check[["t_s", "sport", "kind", "expected", "diff_segments"]].drop_duplicates(["t_s", "sport", "kind"])
    if check.empty:
        table = events.assign(expected=math.nan, diff_segments=math.nan)
    else:
        table = events.merge(check.astype({"sport": events["sport"].dtype}), on=["t_s", "sport", "kind"], how="left")
    for name in CONGESTION_COLUMNS:
        if name not in table.columns:
            table[name] = pd.Series(dtype="float64")
    return table.sort_values(["t_s", "conn"], kind="stable")[CONGESTION_COLUMNS].reset_index(drop=True)
