"""A session's runs analysed: the run folders it lists, each run's analysis from the cache when its inputs are
unchanged (testbed/report/cache/entries.py), the others analysed in parallel, and one run analysed into the
cache ahead of the report (testbed/report/live/ahead.py). Every report, workflow and lab reads runs through
here.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from analysis.runs.analyze import RunAnalysis
from testbed.report.cache import entries
from testbed.report.pages.runpage import report_run

#: the machine's cores are shared with the guests and other work: two processes at most
MAX_WORKERS = 2


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
        return _without_analysis(run_dir, f"{run_dir.name}: run folder missing", "missing", "run folder missing")
    try:
        return report_run(run_dir)
    except Exception as exc:  # one broken run must not take the sweep's report down with it
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        return _without_analysis(
            run_dir, f"analysis failed: {type(exc).__name__}: {exc} ({where})", "unanalysed", f"analysis failed: {exc}"
        )


def _without_analysis(run_dir: Path, problem: str, status: str, reason: str) -> RunAnalysis:
    """A run the report lists with why it has no numbers."""
    return RunAnalysis(
        run_dir=run_dir,
        manifest={},
        flows=pd.DataFrame(),
        series=pd.DataFrame(),
        problems=[problem],
        status=status,
        reason=reason,
    )


def _analyze_keyed(run_dir: Path) -> tuple[RunAnalysis, str | None]:
    """A run's analysis and the inputs' key taken before it ran (None for a missing folder)."""
    key = entries.inputs_key(run_dir) if run_dir.is_dir() else None
    return _analyze(run_dir), key


def analyze_into_cache(session_dir: Path, run_dir: Path) -> None:
    """What :func:`analyze_runs` does for one run it does not find in the cache, done ahead of it (its
    outputs written, the analysis stored): the report then finds it there (testbed/report/live/ahead.py)."""
    if entries.load(session_dir, run_dir) is not None:
        return
    result, key = _analyze_keyed(run_dir)
    if key is not None:
        entries.store(session_dir, run_dir, result, key)


def analyze_runs(session_dir: Path, run_dirs: list[Path]) -> list[RunAnalysis]:
    """Every run's analysis: from the cache when its inputs are unchanged (testbed/report/cache/entries.py), the others
    analysed in parallel, one process per core (each run's capture parsing and figures are independent)."""
    results: dict[int, RunAnalysis] = {}
    todo = []
    for index, run_dir in enumerate(run_dirs):
        cached = entries.load(session_dir, run_dir) if run_dir.is_dir() else None
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
            entries.store(session_dir, run_dirs[index], result, key)
    return [results[i] for i in range(len(run_dirs))]
