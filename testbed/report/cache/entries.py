"""Reuse of a run's analysis between two reports of the same session, never of stale results.

Analysing a run and drawing its page take most of a session report's time (capture accounting,
tcp_probe parsing, four time-series figures per run). A report written again over unchanged runs
(``testbed report`` after ``make experiment``, or after a look at one failed run) reuses them: the
:class:`~analysis.runs.analyze.RunAnalysis` is pickled into ``<session>/.report-cache/`` keyed on

* every input file of the run (``manifest.json`` and each file under ``raw/``: its path, size and
  modification time in ns), and
* the code that made it (the text of the analysis and report modules and templates),

and an entry counts only while the outputs it stands for (the run's ``report.html``, ``flows.csv``,
``series.csv``) still have the modification times they had when it was stored. Anything else (a
raw file rewritten, the manifest amended, a new version of the analysis, an output deleted or
rewritten by someone else) is a miss, and the run is analysed again.

The session's own figures (:func:`figure`) are stored under the hash of the data they draw and the code,
so a figure is drawn again exactly when what it shows changes.

Unpickling runs whatever code the pickle names, and the session folder is written by others: the guest
writes its run folders, and a results folder may be shared. So every entry (analyses and figures alike) is
signed with a key only this user holds, and nothing is unpickled or shown before its tag is checked
(testbed/report/cache/signed.py); caching is skipped when any of this fails.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import analysis
import testbed.report
from analysis.runs.analyze import RunAnalysis
from testbed.report.cache import signed

CACHE_DIR = ".report-cache"
#: what the analysis and the run's page write beside the manifest (analysis/runs/analyze.py, pages/runpage.py)
OUTPUTS = ("report.html", "flows.csv", "series.csv")


@cache
def code_version() -> str:
    """A hash of the analysis and report code and templates: a new version analyses every run again."""
    digest = hashlib.sha256()
    roots = [Path(analysis.__file__).parent, Path(testbed.report.__file__).parent]
    for root in roots:
        for path in sorted([*root.rglob("*.py"), *root.rglob("*.yaml"), *root.rglob("*.j2")]):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def inputs_key(run_dir: Path) -> str:
    """The run's inputs (manifest and raw files: path, size, mtime) and the code version, hashed."""
    digest = hashlib.sha256(code_version().encode())
    files = [run_dir / "manifest.json", *sorted(p for p in (run_dir / "raw").rglob("*") if p.is_file())]
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            digest.update(f"{path.relative_to(run_dir)}\0missing\n".encode())
            continue
        digest.update(f"{path.relative_to(run_dir)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _outputs(run_dir: Path) -> dict[str, int] | None:
    try:
        return {name: (run_dir / name).stat().st_mtime_ns for name in OUTPUTS}
    except OSError:
        return None


@dataclass
class _Entry:
    key: str
    outputs: dict[str, int]
    result: RunAnalysis


def _entry_path(session_dir: Path, run_dir: Path) -> Path:
    name = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:24]
    return Path(session_dir) / CACHE_DIR / f"{name}.pickle"


def load(session_dir: Path, run_dir: Path) -> RunAnalysis | None:
    """The stored analysis of ``run_dir`` when its inputs, the code and its outputs are unchanged, else None."""
    payload = signed.read_entry(_entry_path(session_dir, run_dir))
    if payload is None:
        return None
    try:  # ours (its tag checked): an error here is a pickle of an older version of the code
        entry = pickle.loads(payload)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        return None
    if not isinstance(entry, _Entry) or entry.key != inputs_key(Path(run_dir)):
        return None
    if entry.outputs != _outputs(Path(run_dir)):
        return None
    return entry.result


def store(session_dir: Path, run_dir: Path, result: RunAnalysis, key: str) -> None:
    """Keep ``result`` for the next report; ``key`` is :func:`inputs_key` taken before the analysis ran, so
    an input that changed while it ran makes the entry a miss. Only a complete, written analysis is kept."""
    outputs = _outputs(Path(run_dir))
    if outputs is None or result.report_path is None:
        return
    payload = pickle.dumps(_Entry(key, outputs, result), protocol=pickle.HIGHEST_PROTOCOL)
    signed.write_entry(_entry_path(session_dir, run_dir), payload)


def figure(session_dir: Path, draw: Callable[[], bytes], *inputs) -> bytes:
    """A session figure's PNG, drawn by ``draw()`` unless one drawn from the same ``inputs`` (the data it shows,
    its title) by the same code is stored: the file name is the hash of both, so changed data is never stale.
    The inputs are pickled only to be hashed; a stored figure is shown only with this user's tag."""
    digest = hashlib.sha256(code_version().encode())
    for part in inputs:
        digest.update(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
    path = Path(session_dir) / CACHE_DIR / f"figure-{digest.hexdigest()[:32]}.png"
    stored = signed.read_entry(path)
    if stored is not None:
        return stored
    png = draw()
    signed.write_entry(path, png)
    return png
