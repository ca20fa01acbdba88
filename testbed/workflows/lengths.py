"""``testbed lengths SESSION``: a session's goodput claims judged over windows of its runs (the first T
seconds, and the run with a warm-up left out: analysis/verdicts/lengths.py), to see where each effect settles before
choosing a claim's run length. Writes ``lengths.csv``, ``lengths.md`` and ``figures/lengths.png`` in the
session folder; runs nothing.
"""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plots
from analysis.raw.loaders import LoadError, load_session
from analysis.verdicts import claims, lengths
from testbed.report.pages.analyses import analyze_runs, session_run_dirs
from testbed.report.pages.points import text_table
from testbed.report.pages.templating import fmt
from testbed.results import rundir


def shown(table) -> list[str]:
    """The table as terminal lines: effects and intervals as percentages."""
    frame = table.copy()
    for column in ("effect", "low", "high"):
        frame[column] = [f"{v:+.0%}" if v == v else "-" for v in frame[column]]
    frame["detectable"] = [f"{v:.0%}" if v == v else "-" for v in frame["detectable"]]
    frame["r"] = [f"{v:.2f}" if v == v else "-" for v in frame["r"]]
    return text_table(frame.drop(columns=["condition", "point", "alpha"])).splitlines()


def run(session_dir: Path) -> tuple[Path, list[str]]:
    """Judge the session's goodput claims per window; returns the markdown file and its lines."""
    session_dir = Path(session_dir)
    try:
        session = load_session(session_dir)
    except LoadError:
        session = {}
    analyses = analyze_runs(session_dir, session_run_dirs(session_dir, session, []))
    known = claims.load_claims()
    table = lengths.table(analyses, known)
    table.to_csv(session_dir / "lengths.csv", index=False)
    figure = session_dir / "figures" / "lengths.png"
    figure.parent.mkdir(exist_ok=True)
    figure.write_bytes(plots.lengths_png(table, {c.id: c.paper_effect for c in known if c.paper_effect is not None}))
    complete = sum(a.status == "complete" for a in analyses)
    alpha = table["alpha"].iloc[0] if len(table) else claims.ALPHA
    lines = [
        f"{session_dir.name}: the goodput claims of {complete} complete runs, judged per window "
        f"(analysis/verdicts/lengths.py); {fmt(len(table))} rows",
        f"exploratory: each window judged at alpha {alpha:.3g} (0.05 shared by the windows tried); a window "
        "chosen here decides nothing until confirmed on seeds that took no part in choosing it "
        "(claims.yaml: warmup_confirmed)",
        "",
        *shown(table),
        "",
        f"figure: {figure}",
    ]
    path = session_dir / "lengths.md"
    rundir.write_text_atomic(path, "\n".join(["```", *lines, "```"]) + "\n")
    return path, lines
