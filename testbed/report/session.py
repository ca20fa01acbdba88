"""The sweep ("session") report: every run analysed, every point summarised across its seeds.

``write_session_report(session_dir)`` analyses each run listed in ``session.json`` (run.py writes
each run's flows.csv, series.csv and report.html; a run whose inputs did not change since the last
report comes from ``.report-cache/``, cache.py, and the others are analysed two at a time), then
writes into the session folder, the answers first:

* ``report.html``: the papers' claims about the experiments that ran and their verdicts (measured
  numbers of both sides beside the paper's, the note beside a claim not reproduced), provenance, then
  one section per experiment with its own figures only (goodput against its swept parameter per
  algorithm, else bars per algorithm; cwnd, ssthresh and Westwood+'s estimate over time when its runs
  have the module trace) and its rows of the table, links to every run's report, and the runs that did
  not complete with their reasons;
* ``summary.md``: the claims' lines of the terminal summary, the table, the experiments' figures
  (``figures/*.png``) and the failures as Markdown.

``summary_text`` (what ``testbed report`` prints) starts with "k of n claims reproduced here; m not
(...)", one entry per judged claim, then the table and the runs that did not complete.

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
import multiprocessing
import os
import textwrap
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pandas as pd

from analysis import ablation, claims, figures, metrics, plots, sequential, stats
from analysis.loaders import LoadError, load_session
from analysis.run import RunAnalysis, write_text_atomic
from testbed.report import cache, latency, pages
from testbed.report.pages import Link, fmt, is_missing
from testbed.report.run import provenance_items, report_run
from testbed.results.rundir import record_figures
from testbed.scenario.algorithms import lookup

SENDER_GOODPUT = "sender goodput Mbit/s (paper)"
RECEIVER_GOODPUT = "receiver goodput Mbit/s (iperf3)"
#: the machine's cores are shared with the guests and other work: two processes at most
MAX_WORKERS = 2


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
            problems=[f"analysis failed: {type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})"],
            status="unanalysed",
            reason=f"analysis failed: {exc}",
        )


def _analyze_keyed(run_dir: Path) -> tuple[RunAnalysis, str | None]:
    """A run's analysis and the inputs' key taken before it ran (None for a missing folder)."""
    key = cache.inputs_key(run_dir) if run_dir.is_dir() else None
    return _analyze(run_dir), key


def analyze_into_cache(session_dir: Path, run_dir: Path) -> None:
    """What :func:`analyze_runs` does for one run it does not find in the cache, done ahead of it (its
    outputs written, the analysis stored): the report then finds it there (testbed/report/ahead.py)."""
    if cache.load(session_dir, run_dir) is not None:
        return
    result, key = _analyze_keyed(run_dir)
    if key is not None:
        cache.store(session_dir, run_dir, result, key)


def analyze_runs(session_dir: Path, run_dirs: list[Path]) -> list[RunAnalysis]:
    """Every run's analysis: from the cache when its inputs are unchanged (testbed/report/cache.py), the others
    analysed in parallel, one process per core (each run's capture parsing and figures are independent)."""
    results: dict[int, RunAnalysis] = {}
    todo = []
    for index, run_dir in enumerate(run_dirs):
        cached = cache.load(session_dir, run_dir) if run_dir.is_dir() else None
        if cached is not None:
            results[index] = cached
        else:
            todo.append(index)
    workers = min(len(todo), os.cpu_count() or 1, MAX_WORKERS)
    if workers > 1:
        # fork: the workers start with the modules already imported (pandas, matplotlib) instead of in a second
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            done = list(pool.map(_analyze_keyed, [run_dirs[i] for i in todo]))
    else:
        done = [_analyze_keyed(run_dirs[i]) for i in todo]
    for index, (result, key) in zip(todo, done, strict=True):
        results[index] = result
        if key is not None:
            cache.store(session_dir, run_dirs[index], result, key)
    return [results[i] for i in range(len(run_dirs))]


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
    table["_order"] = [tuple(_sort_value(row[k]) for k in order_keys if k in table) for _, row in table.iterrows()]
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


def write_session_report(session_dir: Path) -> SessionReport:
    """Analyse every run of a session and write its report.html and summary.md (module doc)."""
    session_dir = Path(session_dir)
    started = time.time()
    problems: list[str] = []
    try:
        session = load_session(session_dir)
    except LoadError as exc:
        problems.append(str(exc))
        session = {}
    run_dirs = session_run_dirs(session_dir, session, problems)
    analyses = analyze_runs(session_dir, run_dirs)
    scenario = session.get("scenario") or next((a.manifest.get("scenario") for a in analyses if a.manifest), None)
    complete = sum(a.status == "complete" for a in analyses)
    heading = f"{scenario or session_dir.name}: {complete}/{len(analyses)} runs complete"
    table, shown, flows, sections = _tables_and_figures(session_dir, analyses, scenario)
    try:  # a session grown by `--decide` is judged at the levels of its sequential design
        record = sequential.read_record(session_dir)
        verdicts = claims.verdicts(analyses, flows=flows, alpha=record.alpha_for if record else claims.ALPHA)
    except (claims.ClaimsError, LoadError) as exc:  # a broken claims file must not take the report down
        problems.append(f"claims not judged: {exc}")
        verdicts = []
    for v in verdicts:  # the latest `testbed explain` of a claim the runs go against, beside its verdict
        if v.verdict in ("opposite", "not reproduced"):
            v.explained = ablation.latest_text(v.claim.id, session_dir.parent.parent)
    _write_figures(session_dir, sections)
    summary_text = _summary_text(session_dir, heading, analyses, shown, verdicts)
    if latency.wanted(analyses):  # the latency table answers first (after the claims' verdicts, if any)
        delays = latency.point_table(analyses, lambda a: _point_id(a, session_dir))[0]
        first, rest = summary_text.split("\n", 1) if "\n" in summary_text else (summary_text, "")
        summary_text = "\n".join([first, "latency under load:", *text_table(latency.shown(delays)).splitlines(), "",
                                   rest])  # fmt: skip
    html_path, md_path = session_dir / "report.html", session_dir / "summary.md"
    page = _page(session_dir, session, analyses, shown, problems, heading, verdicts, sections)
    page["summary_claims"] = _claims_lines(verdicts)
    page["latency"] = latency.section(session_dir, analyses, lambda a: _point_id(a, session_dir))
    write_text_atomic(html_path, pages.render("session.html.j2", **page))
    write_text_atomic(md_path, pages.render("session.md.j2", **page))
    if (session_dir / "figures").is_dir():
        record_figures(session_dir, run_dirs, started)
    return SessionReport(
        html_path=html_path,
        md_path=md_path,
        summary_text=summary_text,
        table=table,
        runs=analyses,
        problems=problems,
        verdicts=verdicts,
    )


def _tables_and_figures(
    session_dir: Path, analyses: list[RunAnalysis], scenario: str | None
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[dict]]:
    """The table (one row per point and algorithm), as shown, the flows' rows and the experiments' sections
    with their figures (drawn, or from the figure cache)."""
    run_rows = []
    for analysis in analyses:
        run_rows += run_group_rows(analysis, _point_id(analysis, session_dir))
    table = aggregate_points(pd.DataFrame(run_rows))
    shown = display_table(table)
    flows = claims.flow_rows(analyses)
    sweeps = figures.experiment_figures(
        flows, lambda t, f: cache.figure(session_dir, lambda: figures.sweep_png(t, f), "sweep", t, f)
    )
    return table, shown, flows, _experiment_sections(session_dir, table, shown, analyses, sweeps, scenario)


def draw_figures_ahead(session_dir: Path, run_dirs: list[Path]) -> None:
    """The session's figures over these finished runs (their analyses from the cache) into the figure cache,
    ahead of the report (testbed/report/ahead.py): an experiment whose runs are all among them gets the
    figures the report will draw (each is stored under the hash of what it shows, so no other is reused)."""
    analyses = [a for a in (cache.load(session_dir, d) for d in run_dirs) if a is not None]
    if analyses:
        try:
            session = load_session(session_dir)
        except LoadError:
            session = {}
        scenario = session.get("scenario") or next((a.manifest.get("scenario") for a in analyses if a.manifest), None)
        _tables_and_figures(session_dir, analyses, scenario)


#: the terminal's width the summary is written for (claims and notes are wrapped to it)
TERMINAL_COLUMNS = 100


def _counts_text(counts: dict[str, int]) -> str:
    """'7 reproduced, 2 opposite, 5 not reproduced, 11 undecided': every verdict, zeros too; '7 reproduced (2
    smaller than the paper's effect)' where some are shown short of the paper's."""
    smaller = f" ({counts['smaller']} smaller than the paper's effect)" if counts.get("smaller") else ""
    return ", ".join(f"{counts.get(v, 0)} {v}" + (smaller if v == "reproduced" else "") for v in claims.VERDICTS)


def _claims_headline(verdicts: list[claims.Verdict]) -> str:
    """'claims: 7 reproduced, 2 opposite, 5 not reproduced, 11 undecided (of 25 judged here)', then the
    claims without data apart."""
    judged = [v for v in verdicts if v.verdict != "no data"]
    counts = claims.verdict_counts(judged)
    text = f"claims: {_counts_text(counts)} (of {len(judged)} judged here)"
    missing = [v for v in verdicts if v.verdict == "no data"]
    elsewhere = [v for v in missing if v.claim.not_here]
    if len(missing) > len(elsewhere):
        text += (f"; {len(missing) - len(elsewhere)} more about these experiments compare runs this session did "
                 "not make (no data; make reproduce decides them)")  # fmt: skip
    if elsewhere:
        text += f"; {len(elsewhere)} cannot be decided on a machine like this one (below)"
    return text


#: the order claims are listed in: findings against the paper first, then what is not decided, then agreement
VERDICT_ORDER = {"opposite": 0, "not reproduced": 1, "undecided": 2, "reproduced": 3}


def _claims_lines(verdicts: list[claims.Verdict]) -> list[str]:
    """The summary's claims, verdict first: the headline, then per judged claim its verdict and the measured
    numbers of both sides per condition, the comparison, the paper's numbers and, when not reproduced, the note."""
    if not verdicts:
        return []
    lines = [_claims_headline(verdicts)]
    judged = sorted((v for v in verdicts if v.verdict != "no data"), key=lambda v: VERDICT_ORDER.get(v.verdict, 4))
    for v in judged:
        texts = [c.text(v.claim) for c in v.conditions] or [v.measured]
        lines.append(f"  {v.claim.id}: {v.label}: {texts[0]}")
        lines += [f"      {text}" for text in texts[1:]]
        if cost := v.cost_text():
            lines.append(f"      to decide: {cost}")
        if v.alpha < claims.ALPHA:  # judged at a look of testbed suite --decide's design (sequential.json)
            lines.append(f"      tested at alpha {v.alpha:.3g}: its look's share of 0.05 (sequential.json)")
        lines.append(f"      compared: {v.claim.compared()}")
        lines.append(f"      paper ({v.claim.source}): {v.claim.paper_numbers}")
        if v.verdict in ("opposite", "not reproduced") and v.claim.note:
            lines.append(f"      note: {v.claim.note}")
        if v.explained:
            lines.append(f"      measured (testbed explain): {v.explained}")
    for v in verdicts:
        if v.verdict == "no data" and v.claim.not_here:
            lines.append(f"  {v.claim.id}: not decided here: {v.claim.not_here}")
    return lines


def _wrapped(lines: list[str], width: int = TERMINAL_COLUMNS) -> list[str]:
    """Each line cut at ``width`` columns, continuation lines indented under the text they continue."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return out


def _summary_text(
    session_dir: Path, heading: str, analyses: list[RunAnalysis], shown: pd.DataFrame, verdicts: list[claims.Verdict]
) -> str:
    """What the terminal shows, the answer first: the heading, the claims' verdicts (:func:`_claims_lines`,
    wrapped to 100 columns), the table, the runs that did not complete."""
    judged = [v for v in verdicts if v.verdict != "no data"]
    if judged:  # the first line answers: the four verdicts' counts
        counts = claims.verdict_counts(judged)
        heading += f"; claims: {_counts_text(counts)}"
    lines = [heading] + _wrapped(_claims_lines(verdicts))
    if verdicts:
        lines.append("")
    if shown.empty:
        if not analyses:
            lines.append(f"no runs found in {session_dir}")
    else:
        lines += text_table(shown).splitlines()
    not_complete = [a for a in analyses if a.status != "complete"]
    if not_complete:
        lines.append("not complete:")
        lines += [f"  {_relative(a.run_dir, session_dir)}: {a.status}: {a.reason or 'no reason recorded'}"
                  for a in not_complete]  # fmt: skip
    return "\n".join(lines)


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
    if (session.get("backend") or {}).get("kind") == "cluster":
        items.append(("cluster", _cluster_text(session["backend"], analyses)))
    description = session.get("description")
    if isinstance(description, str) and description.strip():
        items.append(("description", description.strip()))
    return items


#: a host with this many untrustworthy runs is named (testbed.host.cluster.SUSPECT_HOST_UNTRUSTWORTHY)
_SUSPECT_UNTRUSTWORTHY = 2


def _cluster_text(backend: dict, analyses: list[RunAnalysis]) -> str:
    """Where the runs ran: the cluster, its worker backend, runs per host, and hosts whose fidelity checks failed
    repeatedly (a host's own load or hardware: look at it before trusting its runs)."""
    hosts = Counter(str((a.manifest.get("cluster") or {}).get("host")) for a in analyses if a.manifest.get("cluster"))
    untrusted = Counter(str(a.manifest["cluster"].get("host")) for a in analyses
                        if a.manifest.get("cluster") and a.trustworthy is False)  # fmt: skip
    text = f"{backend.get('cluster')}, runs on {backend.get('worker_backend')}; runs by host: " + (
        ", ".join(f"{host} {n}" for host, n in sorted(hosts.items())) or "none yet"
    )
    suspects = [f"{host} ({n} untrustworthy)" for host, n in sorted(untrusted.items()) if n >= _SUSPECT_UNTRUSTWORTHY]
    if suspects:
        text += f"; hosts whose runs failed their fidelity checks repeatedly: {', '.join(suspects)}"
    return text


def _page(
    session_dir: Path,
    session: dict,
    analyses: list[RunAnalysis],
    shown: pd.DataFrame,
    problems: list[str],
    heading: str,
    verdicts: list[claims.Verdict],
    sections: list[dict],
) -> dict:
    """What report.html (session.html.j2) and summary.md (session.md.j2) show, built once for both."""
    failed = [a for a in analyses if a.status != "complete"]
    return {
        "title": f"Sweep {heading}",
        "heading": heading,
        "prov": _session_provenance(session, analyses),
        "untrusted": sum(a.status == "complete" and a.trustworthy is False for a in analyses),
        "problems": problems,
        "shown": pages.table(shown),
        "sections": sections,
        "claims": _claims(session_dir, verdicts) if verdicts else None,
        "runs": _runs_table(analyses, session_dir),
        "failed": [(_relative(a.run_dir, session_dir), a.status, a.reason or "no reason recorded") for a in failed],
        # the summary lists every run's problems too; the page leaves them to each run's report
        "all_problems": [(None, p) for p in problems]
        + [(_relative(a.run_dir, session_dir), p) for a in analyses for p in a.problems],
    }


UNKNOWN_EXPERIMENT = "(no manifest)"


def _experiment_of(analysis: RunAnalysis, default: str | None) -> str:
    scenario = analysis.manifest.get("scenario")
    return scenario if isinstance(scenario, str) and scenario else (default or UNKNOWN_EXPERIMENT)


def _experiment_sections(
    session_dir: Path,
    table: pd.DataFrame,
    shown: pd.DataFrame,
    analyses: list[RunAnalysis],
    sweeps: list,
    scenario: str | None,
) -> list[dict]:
    """One section per experiment, in the table's order: its rows of the table, its own figures (goodput
    against its swept parameter, else bars per algorithm) and, when its runs have the module trace, cwnd,
    ssthresh and bandwidth estimate over time of the algorithms compared. No figure mixes experiments."""
    if table.empty:
        return []
    if "experiment" in table:
        names = table["experiment"].where(table["experiment"].notna(), UNKNOWN_EXPERIMENT)
    else:  # one experiment: the table leaves its name out; the runs' manifests name it
        ran = list(dict.fromkeys(_experiment_of(a, scenario) for a in analyses if a.manifest))
        single = ran[0] if len(ran) == 1 else (scenario or UNKNOWN_EXPERIMENT)
        names = pd.Series([single] * len(table), index=table.index)
    sections = []
    for name in dict.fromkeys(names):
        mask = (names == name).to_numpy()
        rows, own_shown = table[mask], shown[mask].drop(columns=["experiment"], errors="ignore")
        own_sweeps = [_sweep(figure, fig_table, png) for figure, fig_table, png in sweeps if figure.experiment == name]
        own_runs = [a for a in analyses if _experiment_of(a, scenario) == name] if "experiment" in table else analyses
        sections.append(
            {
                "name": name,
                "slug": _slug(name),
                "shown": pages.table(own_shown),
                "md_shown": pages.table(own_shown, plain=True),
                "sweeps": own_sweeps,
                "bars": [] if own_sweeps else _experiment_bars(session_dir, rows, name),
                "trace": _trace_figure(session_dir, own_runs, name),
            }
        )
    return sections


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "experiment"


def _bar_label(row: pd.Series, several_points: bool) -> str:
    """A bar's label: the algorithm, its direction when reverse, the point when the experiment has several."""
    cc = row.get("cc")
    parts = [lookup(cc).label if isinstance(cc, str) and "+" not in cc else str(cc)]
    if isinstance(row.get("direction"), str) and row["direction"] != "forward":
        parts.append(row["direction"])
    if several_points:
        point = row.get("point") if isinstance(row.get("point"), str) else None
        point = point or "\n".join(line for line in str(row["label"]).splitlines() if line not in parts)
        parts.insert(0, point)
    return "\n".join(parts)


def _experiment_bars(session_dir: Path, rows: pd.DataFrame, name: str) -> list[dict]:
    """(figure file, PNG, alt text) of one experiment's sender goodput and retransmission ratio per algorithm,
    whiskers from the lowest to the highest seed."""
    several = rows["point_id"].nunique() > 1
    bars = rows.assign(
        label=[_bar_label(row, several) for _, row in rows.iterrows()],
        retrans_pct=rows["retrans_ratio"] * 100,
        retrans_pct_min=rows["retrans_ratio_min"] * 100,
        retrans_pct_max=rows["retrans_ratio_max"] * 100,
    )
    whiskers = "(mean; whiskers: min and max over seeds)"
    drawn = []
    for value, ylabel, title in [
        ("goodput_mbit", plots.SENDER_GOODPUT_LABEL, f"{name}: sender goodput {whiskers}"),
        ("retrans_pct", "retransmitted / sent bytes, %", f"{name}: retransmission ratio {whiskers}"),
    ]:
        # without the session table's index: an experiment's rows then hash alike whatever other runs it holds
        shown = bars[["label", "cc", value, f"{value}_min", f"{value}_max"]].reset_index(drop=True)
        draw = partial(plots.point_bars_png, shown, value, f"{value}_min", f"{value}_max", ylabel, title)
        drawn.append(cache.figure(session_dir, draw, "bars", shown, ylabel, title))
    goodput, retrans = drawn
    slug = _slug(name)
    return [
        {"path": f"figures/{slug}-goodput-bars.png", "png": goodput, "alt": f"{name}: sender goodput per algorithm"},
        {"path": f"figures/{slug}-retrans-bars.png", "png": retrans, "alt": f"{name}: retransmission ratio"},
    ]


#: lines in one experiment's trace figure (one per point and algorithm, lowest seed)
MAX_TRACES = 6


def _trace_figure(session_dir: Path, runs: list[RunAnalysis], name: str) -> dict | None:
    """cwnd, ssthresh and Westwood+'s estimate over time for the algorithms an experiment compares, when one
    of its complete runs has the module trace: per (point, algorithm), the first forward connection of the
    lowest seed."""
    complete = [a for a in runs if a.status == "complete" and not a.flows.empty and not a.series.empty]
    if not any(a.westwood_samples is not None for a in complete):
        return None
    chosen: dict[tuple, tuple[str, str, pd.DataFrame]] = {}
    for run in sorted(complete, key=lambda a: _sort_value(a.manifest.get("seed"))):
        forward = run.flows[run.flows["direction"] == "forward"] if "direction" in run.flows else run.flows
        for conn in forward.itertuples():
            key = (run.manifest.get("point_id"), conn.cc)
            if key in chosen or len(chosen) >= MAX_TRACES or not isinstance(conn.cc, str):
                continue
            several = len({p for p, _ in chosen} | {key[0]}) > 1
            label = lookup(conn.cc).label + (f" ({key[0]})" if several else "")
            chosen[key] = (label, conn.cc, _conn_series(run, conn.conn))
    title = f"{name}: cwnd, ssthresh and bandwidth estimate (first connection of each algorithm, lowest seed)"
    traces = list(chosen.values())
    png = cache.figure(session_dir, partial(plots.trace_comparison_png, traces, title), "trace", traces, title)
    return {"path": f"figures/{_slug(name)}-trace.png", "png": png, "alt": title}


def _conn_series(run: RunAnalysis, conn: str) -> pd.DataFrame:
    """A connection's series; without tcp_probe's cwnd, the module samples' cwnd (one per sampling window),
    as the run's page draws it."""
    series = run.series[run.series["conn"] == conn]
    samples = run.westwood_samples
    if (series["metric"] == "cwnd_pkts").any() or samples is None or samples.empty or "cwnd" not in samples:
        return series
    own = samples[samples["conn"] == conn]
    cwnd = pd.DataFrame({"conn": conn, "t_s": own["t_s"], "metric": "cwnd_pkts", "value": own["cwnd"]})
    return pd.concat([series, cwnd], ignore_index=True)


def _write_figures(session_dir: Path, sections: list[dict]) -> None:
    """Every section's figures as files too (summary.md links them)."""
    for section in sections:
        for figure in [*section["sweeps"], *section["bars"], *([section["trace"]] if section["trace"] else [])]:
            path = session_dir / figure["path"]
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(figure["png"])


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


VERDICT_CLASS = {"reproduced": "good", "not reproduced": "warn", "opposite": "bad", "undecided": "muted",
                 "no data": "muted"}  # fmt: skip


def _claims(session_dir: Path, verdicts: list[claims.Verdict]) -> dict:
    """The judged claims' table as plain text (the summary's cells, the alignment) with each verdict's parts
    behind its row, from which the page draws richer cells (quote, one line per condition, badge); the note
    (why modern Linux may differ) stands beside the claims not reproduced. Claims without data are listed apart."""
    judged = sorted((v for v in verdicts if v.verdict != "no data"), key=lambda v: VERDICT_ORDER.get(v.verdict, 4))
    frame = pd.DataFrame(
        [
            {
                "claim": f"{v.claim.id}: {v.claim.compared()}",
                "verdict": v.label,
                "measured here": v.measured,
                "paper": f"{v.claim.source}: {v.claim.paper_numbers}",
                "why it may differ": (v.claim.note if v.verdict in ("opposite", "not reproduced") else "")
                + (f" Measured (testbed explain): {v.explained}" if v.explained else ""),
                "kernel, profile": f"{', '.join(v.kernels) or '-'}; {', '.join(v.profiles) or '-'}",
            }
            for v in judged
        ],
        columns=["claim", "verdict", "measured here", "paper", "why it may differ", "kernel, profile"],
    )
    rows = pages.table(frame, plain=True)
    rows.right = [False] * len(rows.columns)  # prose, even where it starts with a figure number
    rows.items = [
        {
            "id": v.claim.id,
            "quote": v.claim.quote,
            "compared": v.claim.compared(),
            "source": v.claim.source,
            "paper_numbers": v.claim.paper_numbers,
            "conditions": [c.text(v.claim) for c in v.conditions] + [f"to decide: {c}" for c in [v.cost_text()] if c],
            "measured": v.measured,
            "css": VERDICT_CLASS.get(v.verdict, ""),
        }
        for v in judged
    ]
    no_data = [(v.claim.id, v.claim.compared(), v.measured) for v in verdicts if v.verdict == "no data"]
    effects = claims.effects_table(judged)
    forest = session_dir / "figures" / "claims-forest.png"
    forest.parent.mkdir(exist_ok=True)
    forest.write_bytes(plots.forest_png(effects))
    return {"headline": _claims_headline(verdicts), "rule": claims.RULE, "table": rows, "no_data": no_data,
            "forest": forest.read_bytes(), "forest_path": str(forest.relative_to(session_dir)),
            "effects": pages.table(_effects_shown(effects))}  # fmt: skip


def _effects_shown(effects: pd.DataFrame) -> pd.DataFrame:
    """The forest plot's numbers as text: one row per claim and condition."""

    def pct(value: float) -> str:
        return "" if math.isnan(value) else f"{value:+.0%}"

    return pd.DataFrame({
        "claim": effects["claim"], "condition": effects["condition"], "verdict": effects["verdict"],
        "effect": effects["effect"].map(pct),
        "95 % interval": [f"{pct(lo)} to {pct(hi)}" if not math.isnan(lo) else "" for lo, hi in
                          zip(effects["low"], effects["high"], strict=True)],
        "paper": effects["paper"].map(pct),
        "margin": [f"{pct(lo)} to {pct(hi)}"
                   for lo, hi in zip(effects["margin_low"], effects["margin_high"], strict=True)],
        "shows": effects["finding"], "runs": effects["runs"],
    })  # fmt: skip


def write_selection(results_root: Path, selected: pd.DataFrame, out_dir: Path, filters: dict) -> Path:
    """A report folder for catalogued runs (``report.write_run_list``): ``write_session_report(out_dir)``
    then analyses the stored runs again; nothing is run. Returns ``out_dir``."""
    chosen = {k: v for k, v in filters.items() if v is not None}
    scenarios = sorted(set(selected["scenario"].dropna()))
    description = (
        "runs from the catalog of "
        + str(Path(results_root).resolve())
        + (": " + ", ".join(f"{k}={v}" for k, v in chosen.items()) if chosen else ": every run")
    )
    run_dirs = [Path(results_root) / r for r in selected["run_id"]]
    return write_run_list(out_dir, run_dirs, scenarios[0] if len(scenarios) == 1 else "catalog selection", description)
