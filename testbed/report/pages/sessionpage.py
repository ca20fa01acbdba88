"""The sweep ("session") report: every run analysed, every point summarised across its seeds.

The steps are modules of their own: the runs analysed (analyses.py, with testbed/report/cache/entries.py), aggregated by
point (points.py), the claims' verdicts shown (verdicts.py); this writes the report from them.

``write_session_report(session_dir)`` analyses each run listed in ``session.json`` (run.py writes
each run's flows.csv, series.csv and report.html; a run whose inputs did not change since the last
report comes from ``.report-cache/``, testbed/report/cache/entries.py, and the others are analysed two at a time), then
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
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pandas as pd

from analysis.figures import plots, sweeps
from analysis.raw.loaders import LoadError, load_session
from analysis.runs.analyze import RunAnalysis, write_text_atomic
from analysis.verdicts import ablation, claims
from testbed.report.cache import entries
from testbed.report.pages import latencypage, templating
from testbed.report.pages.analyses import analyze_runs, session_run_dirs
from testbed.report.pages.points import (
    aggregate_points,
    display_table,
    point_id_of,
    run_group_rows,
    sort_value,
    text_table,
)
from testbed.report.pages.runpage import provenance_items
from testbed.report.pages.templating import Link
from testbed.report.pages.verdicts import claims_section, counts_text, judge_claims, terminal_lines, wrapped
from testbed.results.rundir import record_figures
from testbed.scenario.algorithms import lookup


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
    try:  # each claim by its session's one design (sequential.json): a plain session's report is its one look
        verdicts, notes = judge_claims(session_dir, analyses, flows)
        problems += notes
    except (claims.ClaimsError, LoadError) as exc:  # a broken claims file must not take the report down
        problems.append(f"claims not judged: {exc}")
        verdicts = []
    for v in verdicts:  # the latest `testbed explain` of a claim the runs go against, beside its verdict
        if v.verdict in ("opposite", "not reproduced"):
            v.explained = ablation.latest_text(v.claim.id, session_dir.parent.parent)
    _write_figures(session_dir, sections)
    summary_text = _summary_text(session_dir, heading, analyses, shown, verdicts)
    if latencypage.wanted(analyses):  # the latency table answers first (after the claims' verdicts, if any)
        delays = latencypage.point_table(analyses, lambda a: point_id_of(a, session_dir))[0]
        first, rest = summary_text.split("\n", 1) if "\n" in summary_text else (summary_text, "")
        summary_text = "\n".join(
            [first, "latency under load:", *text_table(latencypage.shown(delays)).splitlines(), "", rest]
        )
    html_path, md_path = session_dir / "report.html", session_dir / "summary.md"
    page = _page(session_dir, session, analyses, shown, problems, heading, verdicts, sections)
    page["summary_claims"] = terminal_lines(verdicts)
    page["latency"] = latencypage.section(session_dir, analyses, lambda a: point_id_of(a, session_dir))
    write_text_atomic(html_path, templating.render("session.html.j2", **page))
    write_text_atomic(md_path, templating.render("session.md.j2", **page))
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
    for analysed in analyses:
        run_rows += run_group_rows(analysed, point_id_of(analysed, session_dir))
    table = aggregate_points(pd.DataFrame(run_rows))
    shown = display_table(table)
    flows = claims.flow_rows(analyses)
    drawn = sweeps.experiment_figures(
        flows, lambda t, f: entries.figure(session_dir, lambda: sweeps.sweep_png(t, f), "sweep", t, f)
    )
    return table, shown, flows, _experiment_sections(session_dir, table, shown, analyses, drawn, scenario)


def draw_figures_ahead(session_dir: Path, run_dirs: list[Path]) -> None:
    """The session's figures over these finished runs (their analyses from the cache) into the figure cache,
    ahead of the report (testbed/report/live/ahead.py): an experiment whose runs are all among them gets the
    figures the report will draw (each is stored under the hash of what it shows, so no other is reused)."""
    analyses = [a for a in (entries.load(session_dir, d) for d in run_dirs) if a is not None]
    if analyses:
        try:
            session = load_session(session_dir)
        except LoadError:
            session = {}
        scenario = session.get("scenario") or next((a.manifest.get("scenario") for a in analyses if a.manifest), None)
        _tables_and_figures(session_dir, analyses, scenario)


def _summary_text(
    session_dir: Path, heading: str, analyses: list[RunAnalysis], shown: pd.DataFrame, verdicts: list[claims.Verdict]
) -> str:
    """What the terminal shows, the answer first: the heading, the claims' verdicts (:func:`terminal_lines`,
    wrapped to 100 columns), the table, the runs that did not complete."""
    judged = [v for v in verdicts if v.verdict != "no data"]
    if judged:  # the first line answers: the four verdicts' counts
        counts = claims.verdict_counts(judged)
        heading += f"; claims: {counts_text(counts)}"
    lines = [heading] + wrapped(terminal_lines(verdicts))
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
        lines += [
            f"  {_relative(a.run_dir, session_dir)}: {a.status}: {a.reason or 'no reason recorded'}"
            for a in not_complete
        ]
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
    untrusted = Counter(
        str(a.manifest["cluster"].get("host")) for a in analyses if a.manifest.get("cluster") and a.trustworthy is False
    )
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
        "shown": templating.table(shown),
        "sections": sections,
        "claims": claims_section(session_dir, verdicts) if verdicts else None,
        "runs": _runs_table(analyses, session_dir),
        "failed": [(_relative(a.run_dir, session_dir), a.status, a.reason or "no reason recorded") for a in failed],
        # the summary lists every run's problems too; the page leaves them to each run's report
        "all_problems": [(None, p) for p in problems]
        + [(_relative(a.run_dir, session_dir), p) for a in analyses for p in a.problems],
    }


UNKNOWN_EXPERIMENT = "(no manifest)"


def _experiment_of(analysed: RunAnalysis, default: str | None) -> str:
    scenario = analysed.manifest.get("scenario")
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
                "shown": templating.table(own_shown),
                "md_shown": templating.table(own_shown, plain=True),
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
        drawn.append(entries.figure(session_dir, draw, "bars", shown, ylabel, title))
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
    for run in sorted(complete, key=lambda a: sort_value(a.manifest.get("seed"))):
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
    png = entries.figure(session_dir, partial(plots.trace_comparison_png, traces, title), "trace", traces, title)
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


def _runs_table(analyses: list[RunAnalysis], session_dir: Path) -> templating.Table:
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
    return templating.table(runs)


def _sweep(figure, fig_table: pd.DataFrame, png: bytes) -> dict:
    """One of the papers' figures: its plot and its numbers (the page's digits, the summary's plain values)."""
    numbers = _sweep_table(fig_table, figure)
    return {
        "title": figure.title,
        "experiment": figure.experiment,
        "path": f"figures/{figure.experiment}-{figure.metric}-vs-{figure.x}.png",
        "png": png,
        "table": templating.table(numbers),
        "md_table": templating.table(numbers, plain=True),
    }


def _sweep_table(table: pd.DataFrame, figure) -> pd.DataFrame:
    shown = table.assign(cc=[lookup(cc).label for cc in table["cc"]])
    shown = shown.rename(columns={"x": figure.x, "mean": f"{figure.metric} mean", "cc": "algorithm"})
    if (shown["panel"] == "").all():
        shown = shown.drop(columns="panel")
    return shown.round(4)


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
