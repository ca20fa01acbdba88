"""Git repositories named by URL (``tree:URL``, testbed/host/kernelsource.py), kept as bare mirrors in the
cache: cloned once, their branches and tags fetched again on each use, so a branch name means what the
remote says now, while a commit once fetched stays (a comparison pins its tree to the mirror's commit
and fetches nothing later)."""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from testbed.guest import build as build_cache


class MirrorError(ValueError):
    """A URL that cannot be cloned or fetched; the message says what would do."""


def mirrors_root() -> Path:
    return build_cache.cache_base() / "kernel-remotes"


def mirror(url: str, log=print) -> Path:
    """A bare mirror of the git repository at ``url`` in the cache (cloned once, its branches and tags
    fetched again on each call), one process at a time."""
    root = mirrors_root()
    root.mkdir(parents=True, exist_ok=True)
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40]
    repo = root / f"{base}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"
    with open(root / f".{repo.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process cloning or fetching it: wait for its copy
        if not (repo / "HEAD").is_file():
            log(f"cloning {url} (once, a bare mirror in {root}; a Linux tree is a few GB)")
            shutil.rmtree(repo, ignore_errors=True)
            verb, argv = "clone", ["git", "clone", "--quiet", "--bare", url, str(repo)]
        else:
            refs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
            verb, argv = "fetch", ["git", "-C", str(repo), "fetch", "--quiet", "--prune", url, *refs]
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            if verb == "clone":
                shutil.rmtree(repo, ignore_errors=True)
            raise MirrorError(
                f"git {verb} failed ({out.stderr.strip()[-300:] or 'no output'}); give a git URL this machine "
                "can reach (git ls-remote URL tells), or clone it yourself and give tree:PATH"
            )
    return repo


def is_bare(repo: Path) -> bool:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--is-bare-repository"], capture_output=True, text=True)
    return out.stdout.strip() == "true"


def origin(repo: Path) -> str:
    """Where a tree came from: the URL a mirror of the cache was cloned from, else its path."""
    if repo.parent == mirrors_root() and is_bare(repo):
        out = subprocess.run(["git", "-C", str(repo), "config", "remote.origin.url"], capture_output=True, text=True)
        return out.stdout.strip() or str(repo)
    return str(repo)
