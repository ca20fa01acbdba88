"""One cached builder for what the project compiles: the module's ``.ko``, the tc-BPF ``.bpf.o``
programs and the client hold shim's ``.so``.

Each artefact is built once per source version into ``~/.cache/cc-testbed/<kind>/<digest>/``
(``CC_TESTBED_CACHE`` or ``XDG_CACHE_HOME`` move it), written under a temporary name and renamed
into place, so a build killed half way leaves nothing a later run would load. The host builds
before it boots a guest (the guest reads the host's cache through virtiofs); the lab VM and a
run on this machine's own kernel build for themselves through the same functions.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path


def cache_base() -> Path:
    """``~/.cache/cc-testbed`` (or ``$CC_TESTBED_CACHE``, or ``$XDG_CACHE_HOME/cc-testbed``)."""
    base = os.environ.get("CC_TESTBED_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cc-testbed"
    )
    return Path(base)


def source_digest(sources: Iterable[Path]) -> str:
    """A short digest of these files' names and contents: a changed source gets a new build."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def cached_file(
    kind: str, digest: str, name: str, compile_to: Callable[[Path], None], log: Callable[[str], object], what: str
) -> Path:
    """``<cache>/<kind>/<digest>/<name>``, made by ``compile_to(temporary path)`` when it is missing.

    ``compile_to`` raises (with a message naming the tool and the fix) when the build fails; the
    temporary file is removed and nothing lands in the cache."""
    target = cache_base() / kind / digest / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log(what)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=Path(name).suffix, delete=False) as tmp:
        temporary = Path(tmp.name)
    try:
        compile_to(temporary)
        temporary.replace(target)
    finally:
        temporary.unlink(missing_ok=True)
    return target
