"""The sweep ("session") report: every run analysed, every point summarised across its seeds.

``write_session_report(session_dir)`` analyses each run listed in ``session.json`` (run.py writes
each run's flows.csv, series.csv and report.html), then writes into the session folder:

* ``report.html``: provenance, sender goodput per point (bars coloured by algorithm, whiskers from
  the lowest to the highest seed), retransmission ratio per point, the table, links to every run's
  report, and the runs that did not complete with their reasons;
* ``summary.md``: the same table and failures as Markdown.

The table has one row per point and algorithm (per point when each point runs one algorithm, as
in a cc x loss sweep; a point that mixes algorithms, e.g. 5 Westwood+ and 5 Reno flows, gets one
row per algorithm, and reverse-direction background flows get rows of their own). The values of a
run are: the mean over its flows of that algorithm and direction of the sender goodput (paper 000
§3.1, each flow's ON periods added up), the same for the receiver goodput (iperf3 server), the
retransmission ratio of those flows' bytes together, their total goodput, and the Jain index over
all flows of that direction (paper 000 §3.2) when there is more than one. Across seeds: mean, min,
max and a 95 % Student-t interval of the mean (none for a single seed). Only complete runs count.
"""

from __future__ import annotations

import json
import math
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import claims, figures, metrics, plots
from analysis.loaders import LoadError, load_session
from analysis.run import RunAnalysis, write_text_atomic
from testbed.report import pages
from testbed.report.pages import Link, fmt, is_missing
from testbed.report.run import provenance_items, report_run
from testbed.scenario.algorithms import lookup

SENDER_GOODPUT = "sender goodput Mbit/s (paper)"
RECEIVER_GOODPUT = "receiver goodput Mbit/s (iperf3)"


@dataclass
class SessionReport:
    """What ``write_session_report`` wrote; ``table`` has one row per point and algorithm (module doc)."""

    html_path: Path
    md_path: Path
    summary_text: str
    table: pd.DataFrame
    runs: list[RunAnalysis] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    verdicts: list[claims.Verdict] = field(default_factory=list)


def session_run_dirs(session_dir: Path, session: dict, problems: list[str]) -> list[Path]:
    """The run folders of a session: ``session.json["runs"]`` (paths relative to the session), else
    every ``*/seed=*`` folder with a manifest."""
    listed = session.get("runs") if isinstance(session, dict) else None
    if isinstance(listed, list) and listed:
        dirs = []
        for entry in listed:
            if isinstance(entry, str) and (session_dir / entry).resolve() not in [d.resolve() for d in dirs]:
                dirs.append(session_dir / entry)
        return dirs
    found = sorted(path.parent for path in session_dir.glob("*/seed=*/manifest.json"))
    if session:
        problems.append(f"session.json: no runs listed; found {len(found)} run folders with a manifest")
    return found


def _analyze(run_dir: Path) -> RunAnalysis:
    if not run_dir.is_dir():
        return RunAnalysis(
            run_dir=run_dir,
            manifest={},
            flows=pd.DataFrame(),
            series=pd.DataFrame(),
            problems=[f"{run_dir.name}: run folder missing"],
            status="missing",
            reason="run folder missing",
        )
    try:
        return report_run(run_dir)
    except Exception as exc:  # one broken run must not take the sweep's report down with it
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return RunAnalysis(
            run_dir=run_dir,
            manifest={},
            flows=pd.DataFrame(),
            series=pd.DataFrame(),
            problems=[
                f"analysis failed: {type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})"
            ],
            status="unanalysed",
            reason=f"analysis failed: {exc}",
        )


def _point_id(analysis: RunAnalysis, session_dir: Path) -> str:
    point = analysis.manifest.get("point_id")
    if isinstance(point, str) and point:
        return point
    try:
        return str(analysis.run_dir.relative_to(session_dir).parent)
    except ValueError:
        return analysis.run_dir.parent.name


def _params(analysis: RunAnalysis) -> dict:
    params = analysis.manifest.get("params")
    return params if isinstance(params, dict) else {}


def run_group_rows(analysis: RunAnalysis, point_id: str) -> list[dict]:
    """One row per (direction, cc) of a run with that run's values (module doc)."""
    params = _params(analysis)
    scenario = analysis.manifest.get("scenario")
    base = {
        "point_id": point_id,
        "experiment": scenario if isinstance(scenario, str) else None,
        "params": params,
        "seed": analysis.manifest.get("seed"),
        "status": analysis.status,
        "trustworthy": analysis.trustworthy,
    }
    totals = analysis.flow_totals
    if totals.empty:
        cc = params.get("cc") if isinstance(params.get("cc"), str) else None
        if cc is None and not analysis.flows.empty and "cc" in analysis.flows:
            ccs = sorted({c for c in analysis.flows["cc"].dropna()})
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
                "jain": analysis.jain.get(direction, math.nan) if isinstance(direction, str) else math.nan,
            }
        )
    return rows


def _sort_value(value) -> tuple:
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
    for (point_id, direction, cc), group in grouped.groupby(
        ["point_id", "direction", "cc"], sort=False, dropna=False
    ):
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
    table["_order"] = [
        tuple(_sort_value(row[k]) for k in order_keys if k in table) for _, row in table.iterrows()
    ]
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
        stats = metrics.seed_stats(values)
        row[column] = stats.mean
        row[f"{column}_min"] = stats.min
        row[f"{column}_max"] = stats.max
        row[f"{column}_ci_low"] = stats.ci_low
        row[f"{column}_ci_high"] = stats.ci_high
        row[f"{column}_n"] = stats.n
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
        out["total sender goodput Mbit/s"] = [
            _value_text(r, "total_goodput_mbit") for _, r in table.iterrows()
        ]
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
        return "  ".join(
            v.rjust(w) if right(v) else v.ljust(w) for v, w in zip(values, widths, strict=True)
        ).rstrip()

    header = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
    return "\n".join([header, "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def write_session_report(session_dir: Path) -> SessionReport:
    """Analyse every run of a session and write its report.html and summary.md (module doc)."""
    session_dir = Path(session_dir)
    problems: list[str] = []
    try:
        session = load_session(session_dir)
    except LoadError as exc:
        problems.append(str(exc))
        session = {}
    run_dirs = session_run_dirs(session_dir, session, problems)
    analyses = [_analyze(d) for d in run_dirs]
    run_rows = []
    for analysis in analyses:
        run_rows += run_group_rows(analysis, _point_id(analysis, session_dir))
    table = aggregate_points(pd.DataFrame(run_rows))
    shown = display_table(table)
    scenario = session.get("scenario") or next(
        (a.manifest.get("scenario") for a in analyses if a.manifest), None
    )
    complete = sum(a.status == "complete" for a in analyses)
    heading = f"{scenario or session_dir.name}: {complete}/{len(analyses)} runs complete"
    flows = claims.flow_rows(analyses)
    sweeps = figures.sweep_figures(flows)
    for figure, _, png in sweeps:
        path = session_dir / "figures" / f"{figure.experiment}-{figure.metric}-vs-{figure.x}.png"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(png)
    try:
        verdicts = claims.verdicts(analyses, flows=flows)
    except claims.ClaimsError as exc:  # a broken claims file must not take the report down
        problems.append(f"claims not judged: {exc}")
        verdicts = []
    summary_text = _summary_text(session_dir, heading, analyses, shown, verdicts)
    html_path, md_path = session_dir / "report.html", session_dir / "summary.md"
    page = _page(session_dir, session, analyses, table, shown, problems, heading, verdicts, sweeps)
    write_text_atomic(html_path, pages.render("session.html.j2", **page))
    write_text_atomic(md_path, pages.render("session.md.j2", **page))
    return SessionReport(
        html_path=html_path,
        md_path=md_path,
        summary_text=summary_text,
        table=table,
        runs=analyses,
        problems=problems,
        verdicts=verdicts,
    )


def _summary_text(
    session_dir: Path, heading: str, analyses: list[RunAnalysis], shown: pd.DataFrame, verdicts: list[claims.Verdict]
) -> str:
    """What the terminal shows: the heading, the table, the judged claims, the runs that did not complete."""
    if shown.empty:
        summary_text = f"{heading}\nno runs found in {session_dir}" if not analyses else heading
    else:
        summary_text = heading + "\n" + text_table(shown)
    if verdicts:
        counts = claims.verdict_counts(verdicts)
        summary_text += "\nthe papers' claims: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        judged = [v for v in verdicts if v.verdict != "no data"]
        summary_text += "".join(f"\n  {v.claim.id}: {v.verdict}: {v.measured}" for v in judged)
        if len(judged) < len(verdicts):
            summary_text += (
                f"\n  {len(verdicts) - len(judged)} claims about these experiments compare runs this session did not "
                "make (no data; make reproduce runs their comparisons)"
            )
    not_complete = [a for a in analyses if a.status != "complete"]
    if not_complete:
        summary_text += "\nnot complete:\n" + "\n".join(
            f"  {_relative(a.run_dir, session_dir)}: {a.status}: {a.reason or 'no reason recorded'}"
            for a in not_complete
        )
    return summary_text


def write_run_list(out_dir: Path, run_dirs: list[Path], scenario: str, description: str) -> Path:
    """A report folder for runs stored elsewhere: ``out_dir/session.json`` lists them relative to it, so
    ``write_session_report(out_dir)`` analyses them again there; nothing is copied or run."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [os.path.relpath(Path(d).resolve(), out_dir.resolve()) for d in run_dirs]
    session = {"scenario": scenario, "description": description, "runs": runs}
    write_text_atomic(out_dir / "session.json", json.dumps(session, indent=2) + "\n")
    return out_dir


def combine_sessions(session_dirs: list[Path], out_dir: Path) -> Path:
    """One report folder over every run of several sessions (``make reproduce``'s reproduction report)."""
    run_dirs, scenarios = [], []
    for session_dir in session_dirs:
        session_dir = Path(session_dir)
        try:
            session = load_session(session_dir)
        except LoadError:
            session = {}
        scenarios.append(session.get("scenario") or session_dir.parent.name)
        run_dirs += session_run_dirs(session_dir, session, [])
    return write_run_list(out_dir, run_dirs, "reproduction", f"{len(session_dirs)} sessions: {', '.join(scenarios)}")


def _relative(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path, start)
    except ValueError:
        return str(path)


def _session_provenance(session: dict, analyses: list[RunAnalysis]) -> list[tuple[str, str]]:
    items = provenance_items({}, session)
    kernels = sorted(
        {
            str((a.manifest.get("kernel") or {}).get("release"))
            for a in analyses
            if (a.manifest.get("kernel") or {}).get("release")
        }
    )
    if kernels:
        items = [(k, ", ".join(kernels) if k == "kernel" else v) for k, v in items]
    description = session.get("description")
    if isinstance(description, str) and description.strip():
        items.append(("description", description.strip()))
    return items


def _page(
    session_dir: Path,
    session: dict,
    analyses: list[RunAnalysis],
    table: pd.DataFrame,
    shown: pd.DataFrame,
    problems: list[str],
    heading: str,
    verdicts: list[claims.Verdict],
    sweeps: list,
) -> dict:
    """What report.html (session.html.j2) and summary.md (session.md.j2) show, built once for both."""
    failed = [a for a in analyses if a.status != "complete"]
    return {
        "title": f"Sweep {heading}",
        "heading": heading,
        "prov": _session_provenance(session, analyses),
        "untrusted": sum(a.status == "complete" and a.trustworthy is False for a in analyses),
        "problems": problems,
        "point_plots": _point_plots(table),
        "shown": pages.table(shown),
        "sweeps": [_sweep(figure, fig_table, png) for figure, fig_table, png in sweeps],
        "claims": _claims(verdicts) if verdicts else None,
        "runs": _runs_table(analyses, session_dir),
        "failed": [(_relative(a.run_dir, session_dir), a.status, a.reason or "no reason recorded") for a in failed],
        # the summary lists every run's problems too; the page leaves them to each run's report
        "all_problems": [(None, p) for p in problems]
        + [(_relative(a.run_dir, session_dir), p) for a in analyses for p in a.problems],
    }


def _point_plots(table: pd.DataFrame) -> list[tuple[bytes, str]]:
    """(PNG, alt text): sender goodput and retransmission ratio per point, whiskers from min to max seed."""
    if table.empty:
        return []
    percent = table.assign(
        retrans_pct=table["retrans_ratio"] * 100,
        retrans_pct_min=table["retrans_ratio_min"] * 100,
        retrans_pct_max=table["retrans_ratio_max"] * 100,
    )
    goodput = plots.point_bars_png(
        table,
        "goodput_mbit",
        "goodput_mbit_min",
        "goodput_mbit_max",
        plots.SENDER_GOODPUT_LABEL,
        "sender goodput per point (mean; whiskers: min and max over seeds)",
    )
    retrans = plots.point_bars_png(
        percent,
        "retrans_pct",
        "retrans_pct_min",
        "retrans_pct_max",
        "retransmitted / sent bytes, %",
        "retransmission ratio per point (mean; whiskers: min and max)",
    )
    return [(goodput, "sender goodput per point"), (retrans, "retransmission ratio per point")]


def _runs_table(analyses: list[RunAnalysis], session_dir: Path) -> pages.Table:
    """Every run with a link to its report (when it got one), its status, trust and problems."""
    runs = pd.DataFrame(
        [
            {
                "run": Link(
                    _relative(a.run_dir, session_dir),
                    _relative(a.run_dir / "report.html", session_dir) if a.report_path else None,
                ),
                "status": a.status,
                "trustworthy": "n/a" if a.trustworthy is None else ("yes" if a.trustworthy else "no"),
                "reason / problems": "; ".join(([a.reason] if a.reason else []) + a.problems) or "",
            }
            for a in analyses
        ],
        columns=["run", "status", "trustworthy", "reason / problems"],
    )
    return pages.table(runs)


def _sweep(figure, fig_table: pd.DataFrame, png: bytes) -> dict:
    """One of the papers' figures: its plot and its numbers (the page's digits, the summary's plain values)."""
    numbers = _sweep_table(fig_table, figure)
    return {
        "title": figure.title,
        "experiment": figure.experiment,
        "path": f"figures/{figure.experiment}-{figure.metric}-vs-{figure.x}.png",
        "png": png,
        "table": pages.table(numbers),
        "md_table": pages.table(numbers, plain=True),
    }


def _sweep_table(table: pd.DataFrame, figure) -> pd.DataFrame:
    shown = table.assign(cc=[lookup(cc).label for cc in table["cc"]])
    shown = shown.rename(columns={"x": figure.x, "mean": f"{figure.metric} mean", "cc": "algorithm"})
    if (shown["panel"] == "").all():
        shown = shown.drop(columns="panel")
    return shown.round(4)


VERDICT_CLASS = {"reproduced": "good", "not reproduced": "warn", "opposite": "bad", "no data": "muted"}


def _claims(verdicts: list[claims.Verdict]) -> dict:
    """The claims' table as plain text (the summary's cells, the alignment) with each verdict's parts
    behind its row, from which the page draws richer cells (quote, one line per condition, badge)."""
    frame = pd.DataFrame(
        [
            {
                "claim": f"{v.claim.id}: {v.claim.compared()}",
                "paper": f"{v.claim.source}: {v.claim.paper_numbers}",
                "measured here": v.measured,
                "kernel, profile": f"{', '.join(v.kernels) or '-'}; {', '.join(v.profiles) or '-'}",
                "verdict": v.verdict,
                "note": v.claim.note,
            }
            for v in verdicts
        ]
    )
    rows = pages.table(frame, plain=True)
    rows.items = [
        {
            "id": v.claim.id,
            "quote": v.claim.quote,
            "compared": v.claim.compared(),
            "source": v.claim.source,
            "paper_numbers": v.claim.paper_numbers,
            "conditions": [c.text(v.claim.metric) for c in v.conditions],
            "measured": v.measured,
            "css": VERDICT_CLASS.get(v.verdict, ""),
        }
        for v in verdicts
    ]
    counts = claims.verdict_counts(verdicts)
    return {"counts": ", ".join(f"{n} {v}" for v, n in sorted(counts.items())), "rule": claims.RULE, "table": rows}


def write_selection(results_root: Path, selected: pd.DataFrame, out_dir: Path, filters: dict) -> Path:
    """A report folder for catalogued runs (``report.write_run_list``): ``write_session_report(out_dir)``
    then analyses the stored runs again; nothing is run. Returns ``out_dir``."""
    chosen = {k: v for k, v in filters.items() if v is not None}
    scenarios = sorted(set(selected["scenario"].dropna()))
    description = "runs from the catalog of " + str(Path(results_root).resolve()) + (
        ": " + ", ".join(f"{k}={v}" for k, v in chosen.items()) if chosen else ": every run"
    )
    run_dirs = [Path(results_root) / r for r in selected["run_id"]]
    return write_run_list(out_dir, run_dirs, scenarios[0] if len(scenarios) == 1 else "catalog selection", description)
