"""The results layout and the manifest: where a run's files go, written so nothing is half-written.

::

    results/<scenario>/<UTC time>-<git sha7>/            a sweep ("session")
        session.json                                     what was asked, on which kernel and backend
        report.html, summary.md                          the sweep report (testbed.report.pages.sessionpage)
        figures/*.png, figures/drawn.json                its figures, and the sha256 of each as drawn
        <point>/seed=<n>/                                one run
            manifest.json                                provenance, status, fidelity, sha256 of every file
            raw/                                         iperf3 JSON, tcp_probe trace, pcaps, tc -s, ping
            flows.csv, series.csv                        analysis.runs.analyze
            report.html                                  testbed.report.pages.runpage

A run's manifest (its model: :mod:`testbed.results.manifest`) is written first with ``status: running``;
a run that is killed keeps that status and the next look at it reads "incomplete". This module holds
the one reader and the one writer of the folder's JSON and text files: every write goes to a
temporary file in the same folder, is flushed to disk and renamed into place (a reader never sees
half a file, a crash never leaves one); every read that fails raises :class:`LoadError` naming the file.
A reader of a folder someone else writes while it reads (the live page reads the guest's run folders)
gives a ``limit``: the file is then opened by :func:`open_regular` (never through a symbolic link, never
blocking on a FIFO) and refused when it holds more than ``limit`` bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

MANIFEST = "manifest.json"
SESSION = "session.json"
#: the figures a session's report drew: their sha256 and the runs they were drawn from (record_figures)
FIGURES_DRAWN = "figures/drawn.json"
STATUSES = ("running", "complete", "failed", "incomplete")


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def utc_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def session_dir(results_root: Path, scenario_name: str, git_sha: str | None) -> Path:
    return results_root / scenario_name / f"{utc_stamp()}-{(git_sha or 'nogit')[:7]}"


def run_dir(session: Path, point_id: str, seed: int) -> Path:
    return session / point_id / f"seed={seed}"


class LoadError(ValueError):
    """A file of a results folder could not be used; the message names the file and what is wrong."""

    def __init__(self, path: Path | str, message: str):
        self.path = Path(path)
        self.message = message
        super().__init__(f"{display_path(self.path)}: {message}")


def display_path(path: Path) -> str:
    """``raw/<name>`` for files in a run's raw folder, else the file name: short, but unambiguous in a run."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}" if path.parent.name == "raw" else path.name


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file in the same folder, flushed to disk before it is renamed
    into place: a reader never sees half a file, and a guest that dies right after keeps a whole one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it private; results are meant to be shared
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: object) -> None:
    """``data`` as indented JSON, written by :func:`write_text_atomic` (what JSON lacks is written as text)."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, only when it is a regular file: a symbolic link is not followed
    (O_NOFOLLOW: OSError ELOOP) and a FIFO or a device is not waited on (O_NONBLOCK, then refused by
    fstat: :class:`LoadError`), so that whoever writes the folder can neither point a reader elsewhere
    nor hang it."""
    handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise LoadError(path, "not a regular file")
    return handle


def read_bounded(path: Path, limit: int) -> bytes:
    """``path``'s bytes through :func:`open_regular`; :class:`LoadError` when it holds more than ``limit``
    (its size first, then no more than ``limit + 1`` bytes read: it may grow), OSError when it cannot be opened."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise LoadError(path, f"larger than {limit} bytes: not read")
    return data


def read_text(path: Path, limit: int | None = None) -> str:
    """A file's text, or :class:`LoadError` saying whether it is missing or unreadable; with ``limit``,
    read by :func:`read_bounded` (a link, a FIFO or a larger file is unreadable)."""
    try:
        if limit is not None:
            return read_bounded(path, limit).decode(errors="replace")
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        raise LoadError(path, "missing") from None
    except OSError as exc:
        raise LoadError(path, f"unreadable ({exc.strerror})") from None


def read_json(path: Path, limit: int | None = None) -> Any:
    """A JSON file, or :class:`LoadError` saying whether it is missing, empty, cut short or not JSON
    (``limit``: as :func:`read_text`)."""
    path = Path(path)
    text = read_text(path, limit)
    if not text.strip():
        raise LoadError(path, "empty file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated string"):
            raise LoadError(path, f"JSON cut short at character {exc.pos} of {len(text)} ({exc.msg})") from None
        raise LoadError(path, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


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


def record_figures(session: Path, run_dirs: list[Path], since: float) -> dict:
    """Record the figures the session's report just drew (``figures/*.png`` written at or after ``since``,
    a time.time()) in ``figures/drawn.json``: each one's sha256 and the runs it was drawn from, so that a
    figure handed in can be told from one drawn elsewhere or edited (testbed lab check). Figures drawn
    by an earlier report and not again keep their entry."""
    path = session / FIGURES_DRAWN
    record = read_json(path) if path.is_file() else {"figures": {}}
    for png in sorted((session / "figures").glob("*.png")):
        if png.stat().st_mtime >= since - 1:
            record["figures"][png.name] = sha256_file(png)
    record["runs"] = sorted(str(r.relative_to(session)) for r in run_dirs if r.is_relative_to(session))
    # the data each run's figures were drawn from: a flows.csv edited afterwards no longer matches
    record["data"] = {
        run: sha256_file(session / run / "flows.csv")
        for run in record["runs"]
        if (session / run / "flows.csv").is_file()
    }
    record["drawn_utc"] = utc_iso()
    write_json_atomic(path, record)
    return record
