"""The papers' claims as a report judges and shows them: each claim by the design of the session its runs
came from (``judge_claims``), the terminal's lines (the counts first, then one entry per judged claim,
findings against the paper first) and the page's section (the verdicts' table, each condition's effect
with its interval and the forest figure).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd

from analysis.figures import plots
from analysis.runs.analyze import RunAnalysis
from analysis.verdicts import claims, sequential
from testbed.report.pages import templating
from testbed.results.rundir import write_json_atomic

#: the terminal's width the summary is written for (claims and notes are wrapped to it)
TERMINAL_COLUMNS = 100


def counts_text(counts: dict[str, int]) -> str:
    """'7 reproduced, 2 opposite, 5 not reproduced, 11 undecided': every verdict, zeros too, but "short of the
    paper" only where some are (it is rare, and the line must fit a terminal); '7 reproduced (2 smaller than
    the paper's effect)' where some are shown short of the paper's."""
    smaller = f" ({counts['smaller']} smaller than the paper's effect)" if counts.get("smaller") else ""
    shown = [v for v in claims.VERDICTS if v != "short of the paper" or counts.get(v)]
    return ", ".join(f"{counts.get(v, 0)} {v}" + (smaller if v == "reproduced" else "") for v in shown)


def headline(verdicts: list[claims.Verdict]) -> str:
    """'claims: 7 reproduced, 2 opposite, 5 not reproduced, 11 undecided (of 25 judged here)', then the
    claims without data apart."""
    judged = [v for v in verdicts if v.verdict != "no data"]
    counts = claims.verdict_counts(judged)
    text = f"claims: {counts_text(counts)} (of {len(judged)} judged here)"
    missing = [v for v in verdicts if v.verdict == "no data"]
    elsewhere = [v for v in missing if v.claim.not_here]
    if len(missing) > len(elsewhere):
        text += (
            f"; {len(missing) - len(elsewhere)} more about these experiments compare runs this session did "
            "not make (no data; make reproduce decides them)"
        )
    if elsewhere:
        text += f"; {len(elsewhere)} cannot be decided on a machine like this one (below)"
    return text


#: the order claims are listed in: findings against the paper first, then what is not decided, then agreement
VERDICT_ORDER = {"opposite": 0, "not reproduced": 1, "short of the paper": 2, "undecided": 3, "reproduced": 4}


def terminal_lines(verdicts: list[claims.Verdict]) -> list[str]:
    """The summary's claims, verdict first: the headline, then per judged claim its verdict and the measured
    numbers of both sides per condition, the comparison, the paper's numbers and, when not reproduced, the note."""
    if not verdicts:
        return []
    lines = [headline(verdicts)]
    judged = sorted((v for v in verdicts if v.verdict != "no data"), key=lambda v: VERDICT_ORDER.get(v.verdict, 5))
    for v in judged:
        texts = [c.text(v.claim) for c in v.conditions] or [v.measured]
        lines.append(f"  {v.claim.id}: {v.label}: {texts[0]}")
        lines += [f"      {text}" for text in texts[1:]]
        if cost := v.cost_text():
            lines.append(f"      to decide: {cost}")
        if left := v.left_out_text():
            lines.append(f"      {left}")
        if v.alpha < claims.ALPHA:  # judged at a look of testbed suite --decide's design (sequential.json)
            lines.append(f"      tested at alpha {v.alpha:.3g}: its look's share of 0.05 (sequential.json)")
        if v.design_note:
            lines.append(f"      {v.design_note}")
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


def wrapped(lines: list[str], width: int = TERMINAL_COLUMNS) -> list[str]:
    """Each line cut at ``width`` columns, continuation lines indented under the text they continue."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return out


VERDICT_CLASS = {
    "reproduced": "good",
    "not reproduced": "warn",
    "opposite": "bad",
    "short of the paper": "warn",
    "undecided": "muted",
    "no data": "muted",
}


def claims_section(session_dir: Path, verdicts: list[claims.Verdict]) -> dict:
    """The judged claims' table as plain text (the summary's cells, the alignment) with each verdict's parts
    behind its row, from which the page draws richer cells (quote, one line per condition, badge); the note
    (why modern Linux may differ) stands beside the claims not reproduced. Claims without data are listed apart."""
    judged = sorted((v for v in verdicts if v.verdict != "no data"), key=lambda v: VERDICT_ORDER.get(v.verdict, 4))
    frame = pd.DataFrame(
        [
            {
                "claim": f"{v.claim.id}: {v.claim.compared()}",
                "verdict": v.label,
                "measured here": v.measured + (f"; {v.left_out_text()}" if v.left_out else ""),
                "paper": f"{v.claim.source}: {v.claim.paper_numbers}",
                "why it may differ": (v.claim.note if v.verdict in ("opposite", "not reproduced") else "")
                + (f" Measured (testbed explain): {v.explained}" if v.explained else ""),
                "kernel, profile": f"{', '.join(v.kernels) or '-'}; {', '.join(v.profiles) or '-'}",
            }
            for v in judged
        ],
        columns=["claim", "verdict", "measured here", "paper", "why it may differ", "kernel, profile"],
    )
    rows = templating.table(frame, plain=True)
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
    return {
        "headline": headline(verdicts),
        "rule": claims.RULE,
        "table": rows,
        "no_data": no_data,
        "forest": forest.read_bytes(),
        "forest_path": str(forest.relative_to(session_dir)),
        "effects": templating.table(effects_shown(effects)),
    }


def effects_shown(effects: pd.DataFrame) -> pd.DataFrame:
    """The forest plot's numbers as text: one row per claim and condition."""

    def pct(value: float) -> str:
        return "" if math.isnan(value) else f"{value:+.0%}"

    return pd.DataFrame(
        {
            "claim": effects["claim"],
            "condition": effects["condition"],
            "verdict": effects["verdict"],
            "effect": effects["effect"].map(pct),
            # at the claim's level: 95 % at 0.05, wider at a sequential design's look
            "interval": [
                f"{pct(lo)} to {pct(hi)}" + ("" if abs(a - 0.05) < 1e-9 else f" ({100 * (1 - a):.3g} %)")
                if not math.isnan(lo)
                else ""
                for lo, hi, a in zip(effects["low"], effects["high"], effects["alpha"], strict=True)
            ],
            "paper": effects["paper"].map(pct),
            "margin": [
                f"{pct(lo)} to {pct(hi)}" for lo, hi in zip(effects["margin_low"], effects["margin_high"], strict=True)
            ],
            "shows": effects["finding"],
            "runs": effects["runs"],
        }
    )


def judge_claims(session_dir: Path, analyses: list[RunAnalysis], flows: pd.DataFrame) -> tuple[list, list[str]]:
    """The claims' verdicts by the design of the session their runs came from (analysis/verdicts/sequential.py), and
    notes for the page. A session's own report records its look (``sequential.json``); a report over runs of
    other sessions (a combined report, a catalog selection) reads their records and writes none: a claim
    whose runs came from one session gets that session's verdict, one pooled over several sessions is
    judged once more and marked exploratory, a look no design planned."""
    sources: dict[Path, list[RunAnalysis]] = {}
    for analysed in analyses:
        sources.setdefault(Path(analysed.run_dir).resolve().parent.parent, []).append(analysed)
    own = Path(session_dir).resolve()
    if set(sources) <= {own}:
        final = all(a.status == "complete" for a in analyses)  # else a preview: the planned runs are not all in
        judged = sequential.judge_by_design(session_dir, analyses, sequential.read_record(session_dir), flows, final)
        if judged.verdicts and final:
            write_json_atomic(session_dir / sequential.RECORD_FILE, judged.record.to_json())
        return judged.verdicts, judged.notes
    per_source = {
        source: sequential.judge_by_design(source, runs, sequential.read_record(source)).verdicts
        for source, runs in sorted(sources.items())
    }
    pooled = {v.claim.id: v for v in claims.verdicts(analyses, flows=flows)}
    verdicts = []
    for claim_id, verdict in pooled.items():
        found = [v for vs in per_source.values() for v in vs if v.claim.id == claim_id and v.verdict != "no data"]
        if len(found) == 1:
            verdicts.append(found[0])
            continue
        if found:
            verdict.design_note = (
                f"exploratory: its runs come from {len(found)} sessions, each judged by its own "
                "design; pooled, they make a look no design planned"
            )
        verdicts.append(verdict)
    return verdicts, []
