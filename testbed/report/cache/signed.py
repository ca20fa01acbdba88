"""The report cache's entries signed: an HMAC-SHA256 of each entry's name and content under a key only this
user holds, so that nothing planted in a session's ``.report-cache/`` is unpickled or shown
(testbed/report/cache/entries.py says what is kept and why it must be signed).

The key (``report-cache.key``: 32 random bytes, made 0600 on first use) lives in a folder of the host's
``/dev/shm`` that a virtme-ng guest cannot see (:func:`key_folder`); a reboot loses it, and the next report
analyses each run once again. An entry without the right tag, a symbolic link, a FIFO or a file larger than
:data:`MAX_ENTRY_BYTES` is a miss, never an error; entries are written through their folder opened without
following links.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from testbed.guest import build
from testbed.results import rundir

#: the per-user key of the entries' tags (key_folder)
KEY_FILE = "report-cache.key"
KEY_BYTES = 32
#: an entry larger than this is not read (a run's analysis pickles to a few MB)
MAX_ENTRY_BYTES = 256 << 20
#: the tag's length, before the entry's content
TAG_BYTES = hashlib.sha256().digest_size
#: the key, once read or made, by where it lives (a test moves the cache)
KEYS: dict[Path, bytes] = {}


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


def user_key() -> bytes | None:
    """This user's key, made on first use; None when there is no safe one (then nothing is cached)."""
    folder = key_folder()
    if folder is None:
        return None
    path = folder / KEY_FILE
    if path not in KEYS:
        # read again after a failed make: another process made it first
        key = read_key(path) or make_key(path) or read_key(path)
        if key is None:
            return None
        KEYS[path] = key
    return KEYS[path]


def read_key(path: Path) -> bytes | None:
    """The key when it is a regular file of this user's that no one else may read, of the right length."""
    try:
        with rundir.open_regular(path) as handle:
            info = os.fstat(handle.fileno())
            key = handle.read(KEY_BYTES + 1)
    except (OSError, rundir.LoadError):
        return None
    private = info.st_uid == os.getuid() and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    return key if private and len(key) == KEY_BYTES else None


def make_key(path: Path) -> bytes | None:
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


def sign(key: bytes, name: str, payload: bytes) -> bytes:
    """The entry's tag: its file name too, so that an entry copied under another name is a miss."""
    return hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()


def read_entry(path: Path) -> bytes | None:
    """The content of the entry at ``path`` when its tag is this user's, else None (a miss)."""
    key = user_key()
    if key is None:
        return None
    try:
        data = rundir.read_bounded(path, MAX_ENTRY_BYTES)
    except (OSError, rundir.LoadError):
        return None  # missing, a link, a FIFO, too large
    tag, payload = data[:TAG_BYTES], data[TAG_BYTES:]
    return payload if hmac.compare_digest(tag, sign(key, path.name, payload)) else None


def write_entry(path: Path, payload: bytes) -> None:
    """``payload`` under its tag at ``path``, through a temporary file renamed into place; skipped (an
    optimisation only) when there is no key, ``.report-cache`` is a link or anything else fails."""
    key = user_key()
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
            handle.write(sign(key, path.name, payload) + payload)
        os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        return
    finally:
        os.close(folder)
