"""The results layout and the manifest: where a run's files go, written so nothing is half-written.

::

    results/<scenario>/<UTC time>-<git sha7>/            a sweep ("session")
        session.json                                     what was asked, on which kernel and backend
        report.html, summary.md                          the sweep report (written by analysis)
        <point>/seed=<n>/                                one run
            manifest.json                                provenance, status, fidelity, sha256 of every file
            raw/                                         iperf3 JSON, tcp_probe trace, pcaps, tc -s, ping
            flows.csv, series.csv, report.html           written by analysis

A run's manifest is written first with ``status: running``; a run that is killed keeps that
status and the next look at it reads "incomplete". Every JSON write goes to a temporary file
and is renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

MANIFEST = "manifest.json"
SESSION = "session.json"
STATUSES = ("running", "complete", "failed", "incomplete")


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def utc_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def session_dir(results_root: Path, scenario_name: str, git_sha: str | None) -> Path:
    return results_root / scenario_name / f"{utc_stamp()}-{(git_sha or 'nogit')[:7]}"


def run_dir(session: Path, point_id: str, seed: int) -> Path:
    return session / point_id / f"seed={seed}"


def write_json_atomic(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory`` except the manifest itself, by relative path."""
    return {
        str(p.relative_to(directory)): sha256_file(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    }


def run_status(directory: Path) -> str:
    """complete / failed / incomplete (a run still marked running after its process ended) / missing."""
    path = directory / MANIFEST
    if not path.exists():
        return "missing"
    try:
        status = read_json(path).get("status", "incomplete")
    except (OSError, ValueError):
        return "incomplete"
    return "incomplete" if status == "running" else status
