"""A session's runs aggregated by point: one row per run, point and algorithm (and direction), then per
point across its seeds (mean, min, max, a 95 % Student-t interval of the mean), and the tables shown
(terminal and page). The module doc of testbed/report/pages/sessionpage.py says what each value is.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.runs import metrics
from analysis.runs.analyze import RunAnalysis
from analysis.verdicts import stats
from testbed.report.pages.templating import fmt, is_missing
from testbed.scenario.algorithms import lookup

SENDER_GOODPUT = "sender goodput Mbit/s (paper)"


RECEIVER_GOODPUT = "receiver goodput Mbit/s (iperf3)"


def point_id_of(analysed: RunAnalysis, session_dir: Path) -> str:
    point = analysed.manifest.get("point_id")
    if isinstance(point, str) and point:
        return point
    try:
        return str(analysed.run_dir.relative_to(session_dir).parent)
    except ValueError:
        return analysed.run_dir.parent.name


def _params(analysed: RunAnalysis) -> dict:
    params = analysed.manifest.get("params")
    return params if isinstance(params, dict) else {}


def run_group_rows(analysed: RunAnalysis, point_id: str) -> list[dict]:
    """One row per (direction, cc) of a run with that run's values (module doc)."""
    params = _params(analysed)
    scenario = analysed.manifest.get("scenario")
    base = {
        "point_id": point_id,
        "experiment": scenario if isinstance(scenario, str) else None,
        "params": params,
        "seed": analysed.manifest.get("seed"),
        "status": analysed.status,
        "trustworthy": analysed.trustworthy,
    }
    totals = analysed.flow_totals
    if totals.empty:
        cc = params.get("cc") if isinstance(params.get("cc"), str) else None
        if cc is None and not analysed.flows.empty and "cc" in analysed.flows:
            ccs = sorted({c for c in analysed.flows["cc"].dropna()})
            cc = "+".join(ccs) or None
        return [base | {"direction": None, "cc": cc, "flows": math.nan}]
    rows = []
    for (direction, cc), group in totals.groupby(["direction", "cc"], sort=True, dropna=False):
        sent = metrics.sum_or_nan(group["sent_bytes"])
        retransmitted = metrics.sum_or_nan(group["retrans_bytes"])
        goodputs = group["goodput_mbit"]
        rows.append(
            base
            | {
                "direction": None if is_missing(direction) else direction,
                "cc": None if is_missing(cc) else cc,
                "flows": len(group),
                "goodput_mbit": math.nan if goodputs.isna().any() else float(goodputs.mean()),
                "total_goodput_mbit": math.nan if goodputs.isna().any() else float(goodputs.sum()),
                "recv_goodput_mbit": math.nan
                if group["recv_goodput_mbit"].isna().any()
                else float(group["recv_goodput_mbit"].mean()),
                "retrans_ratio": metrics.retransmission_ratio(retransmitted, sent),
                "jain": analysed.jain.get(direction, math.nan) if isinstance(direction, str) else math.nan,
            }
        )
    return rows


def sort_value(value) -> tuple:
    if is_missing(value):
        return (2, 0.0, "")
    if isinstance(value, bool):
        return (0, float(value), "")
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def aggregate_points(run_rows: pd.DataFrame) -> pd.DataFrame:
    """The session table from :func:`run_group_rows` of every run (module doc)."""
    if run_rows.empty:
        return pd.DataFrame()
    # a suite holds several experiments, each with its own parameters: one column names the
    # experiment and one the point's values, instead of the union of every experiment's columns
    several = "experiment" in run_rows and run_rows["experiment"].dropna().nunique() > 1
    param_names: list[str] = []
    for params in [] if several else run_rows["params"]:
        for key in params:
            if key not in param_names:
                param_names.append(key)
    # the algorithm is what a row compares: it comes last, after the conditions (loss, RTT, ...)
    param_names = [n for n in param_names if n != "cc"] + [n for n in param_names if n == "cc"]
    # a run with nothing but its status (no connections known) only counts towards its point's runs,
    # unless the point has nothing else to show
    status_only = run_rows["flows"].isna() & run_rows["direction"].isna()
    has_data = run_rows[~status_only]["point_id"].unique()
    grouped = run_rows[~(status_only & run_rows["point_id"].isin(has_data))]
    rows = []
    for (point_id, direction, cc), group in grouped.groupby(["point_id", "direction", "cc"], sort=False, dropna=False):
        params = next((p for p in group["params"] if p), {})
        complete = group[group["status"] == "complete"]
        point_runs = run_rows[run_rows["point_id"] == point_id].drop_duplicates(subset=["seed", "status"])
        row = {name: params.get(name) for name in param_names if name != "cc"}
        if several:
            row["experiment"] = group["experiment"].iloc[0]
            row["point"] = ",".join(f"{k}={v}" for k, v in params.items() if k != "cc") or "-"
        elif not param_names:
            row["point"] = point_id
        if "cc" in param_names:
            # the point's cc axis; a row's own flows may run another algorithm (e.g. cross traffic)
            row["point_cc"] = params.get("cc")
        row["cc"] = params.get("cc") if is_missing(cc) else cc
        row["direction"] = None if is_missing(direction) else direction
        row["flows"] = complete["flows"].max() if not complete.empty else math.nan
        row |= _seed_stats(complete)
        row["runs_complete"] = int((point_runs["status"] == "complete").sum())
        row["runs_total"] = int(point_runs["seed"].nunique(dropna=False)) if not point_runs.empty else 0
        trust = [t for t in complete["trustworthy"] if t is not None and not is_missing(t)]
        row["trustworthy_runs"] = sum(bool(t) for t in trust)
        row["trust_known_runs"] = len(trust)
        row["point_id"] = point_id
        rows.append(row)
    table = pd.DataFrame(rows)
    order_keys = ["experiment"] + [n for n in param_names if n != "cc"] + ["point", "point_cc", "cc", "direction"]
    table["_order"] = [tuple(sort_value(row[k]) for k in order_keys if k in table) for _, row in table.iterrows()]
    table = table.sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)
    if table["direction"].isin(["forward"]).all() or table["direction"].isna().all():
        table = table.drop(columns="direction")
    if "point_cc" in table and (table["point_cc"] == table["cc"]).all():
        table = table.drop(columns="point_cc")
    table.insert(len(table.columns), "label", [_label(row, param_names) for _, row in table.iterrows()])
    return table


def _seed_stats(complete: pd.DataFrame) -> dict:
    """Each value column's mean, min, max, 95 % interval and count over the complete runs' seeds."""
    row = {}
    for column in ["goodput_mbit", "total_goodput_mbit", "recv_goodput_mbit", "retrans_ratio", "jain"]:
        values = complete[column] if column in complete else pd.Series(dtype=float)
        summary = stats.seed_stats(values)
        row[column] = summary.mean
        row[f"{column}_min"] = summary.min
        row[f"{column}_max"] = summary.max
        row[f"{column}_ci_low"] = summary.ci_low
        row[f"{column}_ci_high"] = summary.ci_high
        row[f"{column}_n"] = summary.n
    return row


def _label(row: pd.Series, param_names: list[str]) -> str:
    parts = [f"{k}={row[k]}" for k in param_names if k != "cc"] or (
        [str(row[k]) for k in ("experiment", "point") if k in row and isinstance(row[k], str)]
    )
    cc = row.get("cc")
    if isinstance(cc, str):
        parts.append(lookup(cc).label if "+" not in cc else cc)
    if isinstance(row.get("direction"), str) and row["direction"] != "forward":
        parts.append(row["direction"])
    return "\n".join(parts)


def _value_text(row: pd.Series, column: str, scale: float = 1.0, digits: int = 3) -> str:
    mean = row.get(column)
    if is_missing(mean):
        return "n/a"
    text = fmt(mean * scale, digits)
    low, high = row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
    if not is_missing(low) and not is_missing(high):
        text += f" ±{fmt((high - low) / 2 * scale, 2)}"
    return text


def _trust_text(row: pd.Series) -> str:
    known, good = row.get("trust_known_runs", 0), row.get("trustworthy_runs", 0)
    if not known:
        return "n/a"
    if good == known:
        return "yes"
    return "no" if good == 0 else f"{good}/{known}"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as printed: params, cc, flows, goodputs (mean ±95 % CI half width), retrans %, Jain,
    runs complete/total, trustworthy."""
    if table.empty:
        return pd.DataFrame()
    first = [c for c in table.columns if c not in _VALUE_COLUMNS and not c.startswith(_VALUE_PREFIXES)]
    first = [
        c
        for c in first
        if c
        not in (
            "runs_complete",
            "runs_total",
            "trustworthy_runs",
            "trust_known_runs",
            "point_id",
            "label",
            "flows",
        )
    ]
    out = pd.DataFrame({c: [("n/a" if is_missing(v) else str(v)) for v in table[c]] for c in first})
    multi_flow = table["flows"].fillna(1).max() > 1
    show_jain = bool(table["jain"].notna().any())
    if multi_flow or show_jain:
        out["flows"] = [fmt(v) for v in table["flows"]]
    out[SENDER_GOODPUT] = [_value_text(r, "goodput_mbit") for _, r in table.iterrows()]
    if multi_flow:
        out["total sender goodput Mbit/s"] = [_value_text(r, "total_goodput_mbit") for _, r in table.iterrows()]
    out[RECEIVER_GOODPUT] = [_value_text(r, "recv_goodput_mbit") for _, r in table.iterrows()]
    out["retrans %"] = [_value_text(r, "retrans_ratio", 100) for _, r in table.iterrows()]
    if show_jain:
        out["Jain"] = [_value_text(r, "jain", digits=4) for _, r in table.iterrows()]
    out["runs complete"] = [f"{r['runs_complete']}/{r['runs_total']}" for _, r in table.iterrows()]
    out["trustworthy"] = [_trust_text(r) for _, r in table.iterrows()]
    return out


_VALUE_COLUMNS = {"goodput_mbit", "total_goodput_mbit", "recv_goodput_mbit", "retrans_ratio", "jain"}


_VALUE_PREFIXES = tuple(f"{c}_" for c in _VALUE_COLUMNS)


def text_table(frame: pd.DataFrame) -> str:
    """A plain-text table with aligned columns (numbers right-aligned)."""
    if frame.empty:
        return ""
    columns = list(frame.columns)
    cells = [[str(v) for v in row] for row in frame.itertuples(index=False)]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def right(text: str) -> bool:
        return bool(text) and (text[0].isdigit() or text[0] in "-+.") or text == "n/a"

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if right(v) else v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    header = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
    return "\n".join([header, "  ".join("-" * w for w in widths)] + [line(r) for r in cells])
