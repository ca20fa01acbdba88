"""Reuse of a run's analysis between two reports of the same session, never of stale results.

Analysing a run and drawing its page take most of a session report's time (capture accounting,
tcp_probe parsing, four time-series figures per run). A report written again over unchanged runs
(``testbed report`` after ``make experiment``, or after a look at one failed run) reuses them: the
:class:`~analysis.run.RunAnalysis` is pickled into ``<session>/.report-cache/`` keyed on

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
writes its run folders, and a results folder may be shared. So that a file planted in ``.report-cache/``
cannot run code as the user who reads the report (``testbed report``, ``watch``, ``--live``), every entry
(analyses and figures alike) begins with an HMAC-SHA256 of its name and content under a key only this
user holds (``report-cache.key``: 32 random bytes, made 0600 on first use, in a folder of the host's
``/dev/shm`` that a guest cannot see: :func:`key_folder`), and nothing is unpickled or shown before its
tag is checked. An entry without the
right tag, a symbolic link, a FIFO or a file larger than :data:`MAX_ENTRY_BYTES` is a miss (analysed or
drawn again), never an error. Entries are written through the folder opened without following links
(a ``.report-cache`` that is a link is not written to); caching is skipped when any of this fails.
A virtme-ng guest sees the host's files (read-only) but not its ``/dev/shm``, which is why the key is
there; a reboot loses it, and the next report analyses each run once again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import analysis
import testbed.report
from analysis.run import RunAnalysis
from testbed.guest import build
from testbed.results import rundir

CACHE_DIR = ".report-cache"
#: the per-user key of the entries' tags (key_folder)
KEY_FILE = "report-cache.key"
KEY_BYTES = 32
#: an entry larger than this is not read (a run's analysis pickles to a few MB)
MAX_ENTRY_BYTES = 256 << 20
_TAG_BYTES = hashlib.sha256().digest_size
#: the key, once read or made, by where it lives (a test moves the cache)
_KEYS: dict[Path, bytes] = {}
#: what the run's page and the analysis write next to the manifest (analysis/run.py, report/run.py)
OUTPUTS = ("report.html", "flows.csv", "series.csv")


@cache
def code_version() -> str:
    """A hash of the analysis and report code and templates: a new version analyses every run again."""
    digest = hashlib.sha256()
    roots = [Path(analysis.__file__).parent, Path(testbed.report.__file__).parent]
    for root in roots:
        for path in sorted([*root.glob("*.py"), *root.glob("*.yaml"), *root.glob("templates/*.j2")]):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
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
    analysis: RunAnalysis


def _entry_path(session_dir: Path, run_dir: Path) -> Path:
    name = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:24]
    return Path(session_dir) / CACHE_DIR / f"{name}.pickle"


def key_folder() -> Path | None:
    """Where this user's key lives: a folder of this host's ``/dev/shm`` (a tmpfs a virtme-ng guest does
    not share: the guest mounts its own ``/dev``, while it sees the host's other files), made 0700 and
    refused unless it is this user's alone; the project's cache where there is no ``/dev/shm``.
    ``CC_TESTBED_KEYS`` moves it (the tests). None: no safe folder (nothing is cached)."""
    if moved := os.environ.get("CC_TESTBED_KEYS"):
        return Path(moved)
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return build.cache_base()
    folder = shm / f"cc-testbed-{os.getuid()}"
    try:
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        info = folder.lstat()
    except OSError:  # a read-only or full /dev/shm: no cache, never an error
        return None
    private = not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and private
    return folder if mine else None


def _key() -> bytes | None:
    """This user's key, made on first use; None when there is no safe one (then nothing is cached)."""
    folder = key_folder()
    if folder is None:
        return None
    path = folder / KEY_FILE
    if path not in _KEYS:
        # read again after a failed make: another process made it first
        key = _read_key(path) or _make_key(path) or _read_key(path)
        if key is None:
            return None
        _KEYS[path] = key
    return _KEYS[path]


def _read_key(path: Path) -> bytes | None:
    """The key when it is a regular file of this user's that no one else may read, of the right length."""
    try:
        with rundir.open_regular(path) as handle:
            info = os.fstat(handle.fileno())
            key = handle.read(KEY_BYTES + 1)
    except (OSError, rundir.LoadError):
        return None
    private = info.st_uid == os.getuid() and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    return key if private and len(key) == KEY_BYTES else None


def _make_key(path: Path) -> bytes | None:
    """A new key written to ``path``, created 0600 and only when nothing is there (not even a link)."""
    key = secrets.token_bytes(KEY_BYTES)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def _tag(key: bytes, name: str, payload: bytes) -> bytes:
    """The entry's tag: its file name too, so that an entry copied under another name is a miss."""
    return hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()


def _read_entry(path: Path) -> bytes | None:
    """The content of the entry at ``path`` when its tag is this user's, else None (a miss)."""
    key = _key()
    if key is None:
        return None
    try:
        data = rundir.read_bounded(path, MAX_ENTRY_BYTES)
    except (OSError, rundir.LoadError):
        return None  # missing, a link, a FIFO, too large
    tag, payload = data[:_TAG_BYTES], data[_TAG_BYTES:]
    return payload if hmac.compare_digest(tag, _tag(key, path.name, payload)) else None


def _write_entry(path: Path, payload: bytes) -> None:
    """``payload`` under its tag at ``path``, through a temporary file renamed into place; skipped (an
    optimisation only) when there is no key, ``.report-cache`` is a link or anything else fails."""
    key = _key()
    if key is None:
        return
    temporary = f"{path.name}.tmp"
    try:
        path.parent.mkdir(exist_ok=True)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)  # one a killed writer left
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(temporary, flags, 0o644, dir_fd=folder), "wb") as handle:
            handle.write(_tag(key, path.name, payload) + payload)
        os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        return
    finally:
        os.close(folder)


def load(session_dir: Path, run_dir: Path) -> RunAnalysis | None:
    """The stored analysis of ``run_dir`` when its inputs, the code and its outputs are unchanged, else None."""
    payload = _read_entry(_entry_path(session_dir, run_dir))
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
    return entry.analysis


def store(session_dir: Path, run_dir: Path, result: RunAnalysis, key: str) -> None:
    """Keep ``result`` for the next report; ``key`` is :func:`inputs_key` taken before the analysis ran, so
    an input that changed while it ran makes the entry a miss. Only a complete, written analysis is kept."""
    outputs = _outputs(Path(run_dir))
    if outputs is None or result.report_path is None:
        return
    payload = pickle.dumps(_Entry(key, outputs, result), protocol=pickle.HIGHEST_PROTOCOL)
    _write_entry(_entry_path(session_dir, run_dir), payload)


def figure(session_dir: Path, draw: Callable[[], bytes], *inputs) -> bytes:
    """A session figure's PNG, drawn by ``draw()`` unless one drawn from the same ``inputs`` (the data it shows,
    its title) by the same code is stored: the file name is the hash of both, so changed data is never stale.
    The inputs are pickled only to be hashed; a stored figure is shown only with this user's tag."""
    digest = hashlib.sha256(code_version().encode())
    for part in inputs:
        digest.update(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
    path = Path(session_dir) / CACHE_DIR / f"figure-{digest.hexdigest()[:32]}.png"
    stored = _read_entry(path)
    if stored is not None:
        return stored
    png = draw()
    _write_entry(path, png)
    return png
