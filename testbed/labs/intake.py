"""A student's folder read as untrusted: no link followed out of it, nothing but files and folders in
it, its size bounded, and grading's own outputs written without following a link.

Grading runs as root (``testbed lab check`` beside the testbed, Gradescope's autograder): a
``grade/results.json`` that is a symlink to a file outside the submission would have the grade written
over that file, and a ``results/`` that links to another student's folder would be graded as this
one's and have the catalog written into it. So before anything is read, :func:`problems` walks the
folder without following links (``os.scandir``, ``follow_symlinks=False``) and names every symlink,
FIFO, socket or device in it, and a folder beyond :data:`MAX_FILES` files or :data:`MAX_BYTES`; grading
refuses such a folder, naming them. :func:`write_fresh` writes the grade into a folder it has just
made (``O_EXCL | O_NOFOLLOW``), then puts it in the place of ``grade/`` (a link there is removed, never
followed).

Why by hand: the standard library's tree walkers follow links by default or hide them
(``Path.rglob`` before Python 3.13, ``shutil.copytree``); what grading needs is the list of what is
not a plain file, which none of them gives.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from testbed.labs.definition import LabError

#: a submission of more files than this, or bytes, is refused (the wireless lab's: about 100 files, 10 MB)
MAX_FILES = 20_000
MAX_BYTES = 4 << 30


class Unsafe(LabError):
    """A folder grading will not read: it holds links or special files, or is too large."""


def problems(folder: Path) -> list[str]:
    """What in ``folder`` grading will not read: each link and special file (at most ten named), and a
    size beyond the bounds. Empty: every entry is a plain file or folder."""
    if folder.is_symlink():
        return [f"{folder} is a symbolic link: hand in the folder itself"]
    if not folder.is_dir():
        return []
    found, files, size = [], 0, 0
    try:
        entries = list(_walk(folder, MAX_FILES + 1))
    except OSError as err:  # a folder of it that cannot be read (permissions), too deep a tree
        return [f"{folder} cannot be read whole ({err}): hand in plain files and folders"]
    too_large = f"{folder} holds more than {MAX_FILES} files or {MAX_BYTES >> 30} GiB: hand in the lab folder only"
    if len(entries) > MAX_FILES:
        return [too_large]
    for entry in entries:
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISREG(mode):
            files, size = files + 1, size + entry.stat(follow_symlinks=False).st_size
        elif not stat.S_ISDIR(mode):
            found.append(f"{Path(entry.path).relative_to(folder)} ({_kind(mode)})")
        if size > MAX_BYTES:
            return [too_large]
    if not found:
        return []
    more = f" and {len(found) - 10} more" if len(found) > 10 else ""
    return [
        f"{folder} holds what is not a plain file: {', '.join(found[:10])}{more}: grading follows no link "
        "and reads no special file; replace each by the file itself (cp -L) and hand in again"
    ]


def _walk(folder: Path, limit: int) -> Iterator[os.DirEntry]:
    """The entries under ``folder`` (at most ``limit``), from a stack rather than by recursion (a deep tree
    cannot exhaust Python's), never entering a link."""
    pending, seen = [folder], 0
    while pending and seen < limit:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                seen += 1
                yield entry
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def refuse_unsafe(*folders: Path) -> None:
    """Raise :class:`Unsafe` naming what grading will not read in any of ``folders``."""
    found = [problem for folder in dict.fromkeys(folders) for problem in problems(folder)]
    if found:
        raise Unsafe("; ".join(found))


def files_named(folder: Path, name: str) -> list[Path]:
    """The plain files called ``name`` under ``folder``, found without following a link."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    found = _walk(folder, MAX_FILES * 4)  # bounded: a class's folders are compared, never an unbounded tree
    return sorted(Path(e.path) for e in found if e.name == name and e.is_file(follow_symlinks=False))


def write_fresh(destination: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` (name -> content) into a folder made for them, then put that folder at
    ``destination`` in place of what was there (a link or a file removed, not followed)."""
    fresh = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    for name, content in files.items():
        descriptor = os.open(fresh / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(descriptor, "wb") as out:
            out.write(content)
    fresh.chmod(0o755)
    if destination.is_symlink() or destination.is_file():
        destination.unlink()
    elif destination.is_dir():
        shutil.rmtree(destination)  # removes links inside it, never what they point to
    fresh.rename(destination)
    return destination
