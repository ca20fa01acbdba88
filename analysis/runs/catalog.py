"""The results catalog: every run under a results folder, queryable across scenarios, kernels,
algorithms and seeds (issue 6).

The catalog is one SQLite file in the results folder (``results/catalog.sqlite``) with two tables:

* ``runs``: one row per run folder (``<scenario>/<session>/<point>/seed=N``), from its manifest:
  scenario, profile, point, swept parameters (JSON), seed, identity, status and reason, whether the
  fidelity checks trusted it, kernel release and version, backend and accelerator, git commit, start
  and end times;
* ``flows``: one row per connection of a run, from the run's ``flows.csv`` (the run's analysis is
  made first when that file is missing or older than the manifest): algorithm, direction, sender and
  receiver goodput, retransmission ratio, bytes, RTTs.

Why SQLite: it is an embedded store in Python's standard library (no server, no new dependency in
the lab VM or the guests), one file that copies with the results, and readable from any tool
(``sqlite3``, pandas, DuckDB's ``ATTACH``). A catalog is thousands of runs and tens of thousands of
flow rows: far below what a columnar store would be needed for. It is also only an index: the run
folders stay the source of truth, so ``ingest(..., rebuild=True)`` recreates it from them.

Paths are stored relative to the results folder, so a copied results folder keeps its catalog.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.runs.latency import SUMMARY_COLUMNS
from testbed.results.manifest import MANIFEST, Manifest, read_manifest
from testbed.results.rundir import LoadError

CATALOG_NAME = "catalog.sqlite"
SCHEMA_VERSION = 1

#: runs table: column -> how it is read from a manifest
RUN_COLUMNS = [
    "run_id",
    "scenario",
    "profile",
    "point_id",
    "params",
    "seed",
    "identity",
    "status",
    "reason",
    "trustworthy",
    "kernel_release",
    "kernel_version",
    "backend",
    "accel",
    "git_sha",
    "git_dirty",
    "started_utc",
    "ended_utc",
    "stamp",
]
#: flows table: the columns of flows.csv that are kept (absent ones are NULL)
FLOW_COLUMNS = [
    "conn",
    "flow",
    "replica",
    "period",
    "cc",
    "direction",
    "sender",
    "receiver",
    "start_s",
    "stop_s",
    "base_rtt_ms",
    "sent_bytes",
    "retrans_bytes",
    "unique_bytes",
    "transfer_s",
    "goodput_mbit",
    "recv_bytes",
    "recv_s",
    "recv_goodput_mbit",
    "retrans_ratio",
    "mean_rtt_ms",
]

#: latency table: the columns of latency.csv (analysis.runs.latency.SUMMARY_COLUMNS, one row per ping or requests flow)
LATENCY_COLUMNS = SUMMARY_COLUMNS

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs ({", ".join(c + (" TEXT PRIMARY KEY" if c == "run_id" else "") for c in RUN_COLUMNS)});
CREATE TABLE IF NOT EXISTS flows (run_id TEXT REFERENCES runs(run_id) ON DELETE CASCADE, {", ".join(FLOW_COLUMNS)});
CREATE INDEX IF NOT EXISTS flows_run ON flows(run_id);
CREATE TABLE IF NOT EXISTS latency (run_id TEXT REFERENCES runs(run_id) ON DELETE CASCADE,
                                    {", ".join(LATENCY_COLUMNS)});
"""


class CatalogError(Exception):
    """The catalog cannot be opened or a filter names something that does not exist."""


@dataclass
class IngestResult:
    """What ``ingest`` did: run ids added, updated (manifest changed), removed (folder gone)."""

    path: Path
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"catalog {self.path}: {len(self.added)} runs added, {len(self.updated)} updated, "
            f"{self.unchanged} unchanged, {len(self.removed)} removed"
        )
        return text + "".join(f"\n  {p}" for p in self.problems)


def catalog_path(results_root: Path) -> Path:
    return Path(results_root) / CATALOG_NAME


def _connect(path: Path) -> sqlite3.Connection:
    try:
        db = sqlite3.connect(path)
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(_SCHEMA)
        found = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if found is None:
            db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif found[0] != str(SCHEMA_VERSION):
            db.close()
            raise CatalogError(
                f"{path}: catalog schema {found[0]}, this testbed writes {SCHEMA_VERSION}: "
                "rebuild it with 'testbed results --rebuild' (the run folders are the source)"
            )
    except sqlite3.DatabaseError as exc:
        raise CatalogError(f"{path}: not a readable catalog ({exc}); 'testbed results --rebuild' recreates it") from exc
    return db


def run_folders(results_root: Path) -> Iterable[Path]:
    """Every run folder under the results folder: a ``seed=N`` folder holding a manifest."""
    for manifest in sorted(Path(results_root).glob(f"**/seed=*/{MANIFEST}")):
        yield manifest.parent


def _stamp(run_dir: Path) -> str:
    parts = []
    for name in (MANIFEST, "flows.csv"):
        path = run_dir / name
        parts.append(f"{path.stat().st_mtime_ns}:{path.stat().st_size}" if path.exists() else "-")
    return "/".join(parts)


def run_row(run_id: str, manifest: Manifest, stamp: str) -> dict:
    """The ``runs`` row of one manifest."""
    trusted = manifest.fidelity.trustworthy if manifest.fidelity else None
    dirty = manifest.git.dirty
    return {
        "run_id": run_id,
        "scenario": manifest.scenario,
        "profile": manifest.profile,
        "point_id": manifest.point_id,
        "params": None if manifest.params is None else json.dumps(manifest.params, sort_keys=True),
        "seed": manifest.seed,
        "identity": manifest.identity,
        "status": manifest.run_status,
        "reason": manifest.reason,
        "trustworthy": None if trusted is None else int(trusted),
        "kernel_release": manifest.kernel.release or manifest.backend.kernel_release,
        "kernel_version": manifest.kernel.version,
        "backend": manifest.backend.kind,
        "accel": manifest.backend.accel,
        "git_sha": manifest.git.sha,
        "git_dirty": None if dirty is None else int(dirty),
        "started_utc": manifest.started_utc,
        "ended_utc": manifest.ended_utc,
        "stamp": stamp,
    }


def _flows_of(run_dir: Path, problems: list[str]) -> pd.DataFrame:
    csv = run_dir / "flows.csv"
    manifest = run_dir / MANIFEST
    if not csv.exists() or csv.stat().st_mtime_ns < manifest.stat().st_mtime_ns:
        from analysis.runs.analyze import analyze_run  # the analysis writes flows.csv

        try:
            analyze_run(run_dir)
        except Exception as exc:  # one broken run must not stop the catalog
            problems.append(f"{run_dir}: analysis failed ({type(exc).__name__}: {exc}); no flow rows")
            return pd.DataFrame(columns=FLOW_COLUMNS)
    try:
        flows = pd.read_csv(csv)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        problems.append(f"{csv}: unreadable ({exc}); no flow rows")
        return pd.DataFrame(columns=FLOW_COLUMNS)
    return flows.reindex(columns=FLOW_COLUMNS)


def _latency_of(run_dir: Path) -> pd.DataFrame:
    """latency.csv, written by the analysis beside flows.csv for a run with ping or requests flows."""
    csv = run_dir / "latency.csv"
    try:
        return pd.read_csv(csv).reindex(columns=LATENCY_COLUMNS) if csv.exists() else pd.DataFrame()
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _rows(run_id: str, frame: pd.DataFrame) -> list[list]:
    return [
        [run_id, *(None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in rec)]
        for rec in frame.itertuples(index=False)
    ]


def update(results_root: Path) -> list[str]:
    """:func:`ingest` after runs: what did not go in, as lines to show (the runs themselves are kept
    whatever happens to their catalog)."""
    try:
        result = ingest(results_root)
    except CatalogError as err:
        return [f"catalog not updated: {err}"]
    return [f"catalog: {problem}" for problem in result.problems]


def ingest(results_root: Path, rebuild: bool = False) -> IngestResult:
    """Bring the catalog of a results folder up to date with its run folders (module doc).

    Runs whose manifest and flows.csv are unchanged since the last ingest are skipped; runs whose
    folder is gone are removed from the catalog. ``rebuild`` starts from an empty catalog.
    """
    results_root = Path(results_root)
    if not results_root.is_dir():
        raise CatalogError(f"{results_root}: no such results folder (runs write into results/ by default)")
    path = catalog_path(results_root)
    if rebuild:
        path.unlink(missing_ok=True)
    result = IngestResult(path=path)
    db = _connect(path)
    try:
        known = dict(db.execute("SELECT run_id, stamp FROM runs").fetchall())
        seen = set()
        for run_dir in run_folders(results_root):
            run_id = run_dir.relative_to(results_root).as_posix()
            seen.add(run_id)
            if known.get(run_id) == _stamp(run_dir):
                result.unchanged += 1
                continue
            try:
                manifest = read_manifest(run_dir)
            except LoadError as exc:
                result.problems.append(f"{exc}: not catalogued")
                continue
            flows = _flows_of(run_dir, result.problems)
            stamp = _stamp(run_dir)  # the analysis may just have written flows.csv
            row = run_row(run_id, manifest, stamp)
            with db:
                db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                db.execute(
                    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                    [row[c] for c in RUN_COLUMNS],
                )
                db.executemany(
                    f"INSERT INTO flows (run_id, {', '.join(FLOW_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * (len(FLOW_COLUMNS) + 1))})",
                    _rows(run_id, flows),
                )
                db.execute("DELETE FROM latency WHERE run_id = ?", (run_id,))
                db.executemany(
                    f"INSERT INTO latency (run_id, {', '.join(LATENCY_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * (len(LATENCY_COLUMNS) + 1))})",
                    _rows(run_id, _latency_of(run_dir)),
                )
            (result.updated if run_id in known else result.added).append(run_id)
        gone = sorted(set(known) - seen)
        with db:
            db.executemany("DELETE FROM runs WHERE run_id = ?", [(r,) for r in gone])
        result.removed = gone
    finally:
        db.close()
    return result


#: filters of runs() and flows(): name -> the runs column it matches
FILTERS = {
    "scenario": "runs.scenario",
    "profile": "runs.profile",
    "point": "runs.point_id",
    "seed": "runs.seed",
    "status": "runs.status",
    "kernel": "runs.kernel_release",
    "backend": "runs.backend",
    "git": "runs.git_sha",
}


def _where(filters: dict) -> tuple[str, list]:
    clauses, values = [], []
    for name, wanted in filters.items():
        if wanted is None:
            continue
        if name == "cc":
            clauses.append("runs.run_id IN (SELECT run_id FROM flows WHERE cc = ?)")
            values.append(wanted)
            continue
        if name not in FILTERS:
            raise CatalogError(f"unknown filter {name!r}; valid: {', '.join([*FILTERS, 'cc'])}")
        column = FILTERS[name]
        if name in ("kernel", "git", "point") and isinstance(wanted, str):
            clauses.append(f"{column} LIKE ?")  # a prefix is enough: 6.1.0-56, a short sha
            values.append(wanted + "%")
        else:
            clauses.append(f"{column} = ?")
            values.append(wanted)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", values


def _query(results_root: Path, sql: str, filters: dict) -> pd.DataFrame:
    path = catalog_path(results_root)
    if not path.exists():
        raise CatalogError(f"{path}: no catalog yet: 'testbed results --update' (or any run) makes it")
    where, values = _where(filters)
    db = _connect(path)
    try:
        return pd.read_sql_query(sql + where + " ORDER BY runs.run_id", db, params=values)
    finally:
        db.close()


def runs(results_root: Path, **filters) -> pd.DataFrame:
    """The catalogued runs, one row each, filtered by ``scenario``, ``profile``, ``point`` (prefix),
    ``seed``, ``status``, ``kernel`` (release prefix), ``backend``, ``git`` (sha prefix) and ``cc``
    (runs with a flow of that algorithm). ``params`` is decoded to a dict."""
    frame = _query(results_root, "SELECT runs.* FROM runs", filters)
    frame["params"] = [json.loads(p) if p else {} for p in frame["params"]]
    frame["path"] = [str(Path(results_root) / r) for r in frame["run_id"]]
    return frame.drop(columns=["stamp"])


def flows(results_root: Path, **filters) -> pd.DataFrame:
    """The catalogued flows with their run's columns, filtered like ``runs``; ``cc`` keeps the flows of
    that algorithm."""
    columns = ", ".join(f"runs.{c}" for c in RUN_COLUMNS if c not in ("run_id", "stamp", "params"))
    filters = dict(filters)
    cc = filters.pop("cc", None)
    sql = f"SELECT flows.*, {columns} FROM flows JOIN runs USING (run_id)"
    frame = _query(results_root, sql, filters)
    return frame[frame["cc"] == cc].reset_index(drop=True) if cc is not None else frame


def latency(results_root: Path, **filters) -> pd.DataFrame:
    """The catalogued ping and requests flows (their percentiles) with their run's columns, filtered like ``runs``."""
    columns = ", ".join(f"runs.{c}" for c in RUN_COLUMNS if c not in ("run_id", "stamp", "params"))
    filters = dict(filters)
    filters.pop("cc", None)
    return _query(results_root, f"SELECT latency.*, {columns} FROM latency JOIN runs USING (run_id)", filters)
