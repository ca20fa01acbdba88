"""Kernels named by their source (issue 55): what a name says, and the exact source it stands for.

- ``tree:PATH[@REV][+patch:FILE...]``: a git tree (a revision of it: a commit, tag or branch; its HEAD by
  default), with patches on top when named (a base and a series, as NIPA tests patches);
- ``tree:URL[@REV]...``: a git URL this machine can reach (``https://``, ``http://``, ``git://``,
  ``ssh://``, ``file://``), kept as a bare mirror in the cache and fetched again when a name is resolved
  (:func:`mirror`); a comparison pins it to the mirror at its commit, so later sessions fetch nothing;
- ``SERIES+patch:FILE[+patch:FILE2...]``: Debian's ``linux-source-SERIES`` with these patches;
- ``...+config:FILE`` on either: the developer's own config, a full ``.config`` or a fragment, merged
  with what runs need (testbed/host/kernelbuild.py);
- ``SERIES+source``: Debian's ``linux-source-SERIES`` as it is, built here the same way: the fair
  baseline for a patch (Debian's own package differs from it in config and compiler flags, so a
  patched build against Debian's package would measure the config too).

A name resolves to a git repository, a commit and the patches' bytes; with the config's digest they
make the build's key (:mod:`testbed.host.kernelbuild`). Debian's source is fetched once with
``apt-get download`` and kept as a one-commit git repository, so both kinds build the same way.
A tree with uncommitted changes is refused unless allowed (``allow_dirty``: the commands' ``--allow-dirty``,
which pins the diff when the command starts, so nothing later reads the tree's state again): then its
diff is built as a patch and recorded as such.

A comparison reads its inputs once (:func:`pin`): each patch file, and a dirty tree's diff, is copied
into a store named by its sha256 and the name rewritten to ``patch:FILE@sha256:HEX``, which every later
session reads from the store, so editing a patch during a comparison of hours changes nothing in it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.guest import build as build_cache
from testbed.host import gitmirror

TREE, DEBIAN = "tree:", "debian"


class SourceError(ValueError):
    """A source name that cannot be built; the message says what would do."""


@dataclass(frozen=True)
class Patch:
    name: str  # the file's path as given, or "working tree diff"
    text: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text).hexdigest()


@dataclass(frozen=True)
class SourceName:
    """What a name says, before anything is read."""

    kind: str  # TREE or DEBIAN
    tree: Path | None = None
    rev: str | None = None
    series: str | None = None
    patches: tuple[Path, ...] = ()
    pins: tuple[str | None, ...] = ()  # each patch's sha256 when pinned (read from the store), else None
    config: Path | None = None  # the developer's config (+config:FILE)
    config_pin: str | None = None
    url: str | None = None  # tree:URL: the git URL (``tree`` is None)


@dataclass(frozen=True)
class Source:
    """The exact source a name stands for."""

    name: str
    repo: Path  # the git repository it is built from
    commit: str
    patches: tuple[Patch, ...]
    origin: str  # the tree's path, or linux-source-6.1=6.1.192-3
    dirty: bool = False
    config: Patch | None = None  # the developer's config (a full .config or a fragment), read as bytes
    #: the commit's tree (``git rev-parse COMMIT^{tree}``): what is built, whatever the commit's message,
    #: author or date (an amend that keeps the files, Debian's source fetched again)
    tree_id: str = ""

    def record(self) -> dict:
        """What a run's manifest records of it."""
        return {
            "name": self.name,
            "origin": self.origin,
            "commit": self.commit,
            "tree": self.tree_id,
            "dirty": self.dirty,
            "patches": [{"name": p.name, "sha256": p.sha256} for p in self.patches],
            "config": {"name": self.config.name, "sha256": self.config.sha256} if self.config else None,
        }


def is_source(name: str | None) -> bool:
    return bool(name) and (name.startswith(TREE) or bool(re.fullmatch(r"\d+\.\d+\+(source|patch:|config:).*", name)))


def parse(name: str) -> SourceName:
    """The parts of a source name (module doc); a malformed one says what the forms are."""
    forms = (
        "tree:PATH[@REV][+patch:FILE][+config:FILE], SERIES+patch:FILE (e.g. 6.1+patch:fix.patch) or "
        "SERIES+source [+config:FILE]"
    )
    if name.startswith(TREE):
        head, *parts = re.split(r"\+(?=(?:patch|config):)", name[len(TREE) :])
        if URL.match(head):
            url, rev = _url_and_rev(head)
            return SourceName(TREE, url=url, rev=rev, **_parts(name, parts, forms))
        path, _, rev = head.partition("@")
        if not path:
            raise SourceError(f"kernel {name!r}: no tree path; give {forms}")
        return SourceName(TREE, tree=Path(path).expanduser(), rev=rev or None, **_parts(name, parts, forms))
    series, _, rest = name.partition("+")
    if not re.fullmatch(r"\d+\.\d+", series) or not rest:
        raise SourceError(f"kernel {name!r}: not a source name; give {forms}")
    parts = re.split(r"\+(?=(?:patch|config|source))", rest)
    if parts[0] == "source":
        parts = parts[1:]
        if any(p.startswith("patch:") for p in parts):
            raise SourceError(f"kernel {name!r}: 'source' takes no patches; give {forms}")
    return SourceName(DEBIAN, series=series, **_parts(name, parts, forms))


#: a git URL as ``tree:`` takes it
URL = re.compile(r"(?:https?|git|ssh|file)://")


def _url_and_rev(text: str) -> tuple[str, str | None]:
    """``URL[@REV]``: the revision is what follows the last ``@`` when a path comes before it
    (``ssh://git@host/linux.git`` has no revision; ``https://host/linux.git@net/next`` has)."""
    url, at, rev = text.rpartition("@")
    if at and re.fullmatch(r"[a-z+]+://[^/]*/.+", url):
        return url, rev or None
    return text, None


def _parts(name: str, parts: list[str], forms: str) -> dict:
    """The patches (and the config) of ``patch:FILE[@sha256:HEX]`` and ``config:FILE[@sha256:HEX]`` parts."""
    kinds = [part.partition(":") for part in parts]
    if (
        not all(kind in ("patch", "config") and rest for kind, _, rest in kinds)
        or sum(kind == "config" for kind, _, _ in kinds) > 1
    ):
        raise SourceError(
            f"kernel {name!r}: after the source come patch:FILE parts and at most one config:FILE; give {forms}"
        )
    split = [(kind, *re.fullmatch(r"(.+?)(?:@sha256:([0-9a-f]{64}))?", rest).groups()) for kind, _, rest in kinds]
    patches = [(Path(path).expanduser(), pin) for kind, path, pin in split if kind == "patch"]
    config = next(((Path(path).expanduser(), pin) for kind, path, pin in split if kind == "config"), (None, None))
    return {
        "patches": tuple(p for p, _ in patches),
        "pins": tuple(pin for _, pin in patches),
        "config": config[0],
        "config_pin": config[1],
    }


def label(name: str) -> str:
    """A source name as a folder name: ``tree-linux-1a2b3c4d5e6f``, ``6.1+patch-fix``, ``6.1+source``; only
    the characters virtme-ng takes in a shared folder's path (letters, digits, ``_+.-``)."""
    parsed = parse(name)
    if parsed.kind == TREE:
        rev = parsed.rev[:12] if parsed.rev and re.fullmatch(r"[0-9a-f]{40}", parsed.rev) else parsed.rev
        patched = "".join(f"+patch-{p.stem}" for p in parsed.patches)
        base = parsed.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") if parsed.url else parsed.tree.name
        text = f"tree-{base.removesuffix('.git')}" + (f"-{rev}" if rev else "") + patched
    else:
        text = parsed.series + ("".join(f"+patch-{p.stem}" for p in parsed.patches) or "+source")
    text += f"+config-{parsed.config.stem}" if parsed.config else ""
    return re.sub(r"[^A-Za-z0-9_+.-]", "-", text)


def resolve(name: str, log=print, allow_dirty: bool = False) -> Source:
    """The source ``name`` stands for (Debian's fetched once); bad paths, revisions or patches say why.
    ``allow_dirty``: a tree's uncommitted changes are built as a patch, not refused."""
    parsed = parse(name)
    pins = parsed.pins or (None,) * len(parsed.patches)
    patches = tuple(_read_patch(path, pin) for path, pin in zip(parsed.patches, pins, strict=True))
    # a dirty tree's diff pinned when a comparison started: still the tree's uncommitted changes
    pinned_dirty = any(path.name == WORKING_TREE for path in parsed.patches)
    config = _read_patch(parsed.config, parsed.config_pin, "config") if parsed.config else None
    if parsed.kind == DEBIAN:
        repo, version = debian_source(parsed.series, log)
        commit = _git(repo, "rev-parse", "HEAD")
        return Source(
            name,
            repo,
            commit,
            patches,
            f"linux-source-{parsed.series}={version}",
            config=config,
            tree_id=_git(repo, "rev-parse", f"{commit}^{{tree}}"),
        )
    repo = _mirror(parsed.url, log) if parsed.url else _tree(parsed.tree)
    commit = _commit(repo, parsed.rev, name)
    bare = gitmirror.is_bare(repo)
    if bare:
        _linux_at(repo, commit, parsed.url or str(repo))
    dirty = _dirty_patch(repo) if parsed.rev in (None, "HEAD") and not bare else None
    if dirty is not None:
        if not allow_dirty:
            raise SourceError(
                f"{repo} has uncommitted changes ({dirty.name}): commit them, name a "
                f"revision (tree:{repo}@REV), or pass --allow-dirty to build the diff"
            )
        patches += (dirty,)
    return Source(
        name,
        repo,
        commit,
        patches,
        parsed.url or gitmirror.origin(repo),
        dirty=dirty is not None or pinned_dirty,
        config=config,
        tree_id=_git(repo, "rev-parse", f"{commit}^{{tree}}"),
    )


def tree_versions(tree: Path | str, good: str, bad: str) -> list[str]:
    """The kernels of a tree from ``good`` to ``bad`` (both included, oldest first): the commits on the
    first-parent line between them, each named ``tree:PATH@<12 hex digits>``."""
    repo = repository(tree)
    first, last = _commit(repo, good, f"tree:{repo}@{good}"), _commit(repo, bad, f"tree:{repo}@{bad}")
    if not _is_ancestor(repo, first, last):
        raise SourceError(_not_ancestor(repo, good, bad, first, last))
    between = _git(repo, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{first}..{last}").split()
    return [f"{TREE}{repo}@{commit[:12]}" for commit in [first, *between]]


def tree_graph(
    tree: Path | str, good: str, bad: str, first_parent: bool = False
) -> tuple[list[str], dict[str, list[str]]]:
    """The kernels of a tree for ``testbed bisect``, as ``git bisect`` sees them: ``good``, then every commit
    ``bad`` descends from that ``good`` does not (merged branches too), parents before children (``git
    rev-list --topo-order``), each named ``tree:PATH@<12 hex digits>``; and each one's parents (a parent
    outside the range is older than ``good``'s line). ``first_parent``: the first-parent line only."""
    repo = repository(tree)
    first, last = _commit(repo, good, f"tree:{repo}@{good}"), _commit(repo, bad, f"tree:{repo}@{bad}")
    if not _is_ancestor(repo, first, last):
        raise SourceError(_not_ancestor(repo, good, bad, first, last))
    walk = ["--first-parent", "--ancestry-path"] if first_parent else []
    lines = _git(repo, "rev-list", "--topo-order", "--reverse", "--parents", *walk, f"{first}..{last}").splitlines()
    name = {first: f"{TREE}{repo}@{first[:12]}"}
    parents: dict[str, list[str]] = {name[first]: []}
    for line in lines:
        commit, *above = line.split()
        name[commit] = f"{TREE}{repo}@{commit[:12]}"
        shown = above[:1] if first_parent else above
        parents[name[commit]] = [name.get(p, f"{TREE}{repo}@{p[:12]}") for p in shown]
    return list(parents), parents


def repository(tree: Path | str) -> Path:
    """The git repository of a tree's path, or of a git URL (its mirror: :func:`mirror`)."""
    return _mirror(str(tree)) if URL.match(str(tree)) else _tree(Path(tree).expanduser())


def _is_ancestor(repo: Path, first: str, last: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", first, last]).returncode == 0


def _not_ancestor(repo: Path, good: str, bad: str, first: str, last: str) -> str:
    """Why ``good`` cannot start a bisection to ``bad``, and what would (as ``git bisect`` tests the merge base)."""
    if _is_ancestor(repo, last, first):
        return f"--good {good} comes after --bad {bad} in {repo}: swap them (the older commit is --good)"
    base = subprocess.run(["git", "-C", str(repo), "merge-base", first, last], capture_output=True, text=True)
    if base.returncode != 0 or not base.stdout.strip():
        return f"--good {good} and --bad {bad} share no history in {repo}: give two commits of one line"
    where = base.stdout.strip()[:12]
    return (
        f"--good {good} is not an ancestor of --bad {bad} in {repo}: their lines diverged at {where} (git "
        f"merge-base). If {where} is good, bisect from it: --good {where}; if it is bad already, the change is "
        f"older than both lines"
    )


def pins_root() -> Path:
    """Where a comparison's inputs are kept by their sha256 (:func:`pin`)."""
    return build_cache.cache_base() / "pinned-inputs"


def pin(name: str, allow_dirty: bool = False) -> str:
    """``name`` with each patch read now and named by its sha256 (``patch:FILE@sha256:HEX``), its bytes
    kept in :func:`pins_root`; a dirty tree's diff (``--allow-dirty``) kept the same way, the tree named at
    its commit with the diff as a patch. Other names as they are."""
    if not is_source(name) or name.endswith("+source"):
        return name
    source = resolve(name, log=lambda _line: None, allow_dirty=allow_dirty)
    for patch in (*source.patches, *([source.config] if source.config else [])):
        _store(patch)
    parsed = parse(name)
    tokens = [f"{p}@sha256:{patch.sha256}" for p, patch in zip(parsed.patches, source.patches, strict=False)]
    if source.dirty and not any(p.name == WORKING_TREE for p in parsed.patches):  # not pinned yet
        tokens.append(f"{WORKING_TREE}@sha256:{source.patches[-1].sha256}")
    text = "".join(f"+patch:{t}" for t in tokens) or ("" if parsed.kind == TREE else "+source")
    text += f"+config:{parsed.config}@sha256:{source.config.sha256}" if source.config else ""
    if parsed.kind == TREE:
        return f"{TREE}{source.repo}@{source.commit}{text}"
    return f"{parsed.series}{text}"


def _store(patch: Patch) -> None:
    """``patch``'s bytes in :func:`pins_root` under their sha256, written whole or not at all."""
    pins_root().mkdir(parents=True, exist_ok=True)
    stored = pins_root() / patch.sha256
    if not stored.is_file() or hashlib.sha256(stored.read_bytes()).hexdigest() != patch.sha256:
        partial = stored.with_name(f".{patch.sha256}.{os.getpid()}")  # a reader never sees half of it
        partial.write_bytes(patch.text)
        partial.replace(stored)


#: the file name a dirty tree's pinned diff goes by (it is no file of the user's)
WORKING_TREE = "working-tree.diff"


def _read_patch(path: Path, pin: str | None = None, what: str = "patch") -> Patch:
    if pin is not None:  # pinned when the comparison started: its bytes from the store, whatever the file holds now
        stored = pins_root() / pin
        if not stored.is_file() or hashlib.sha256(stored.read_bytes()).hexdigest() != pin:
            raise SourceError(
                f"{what} {path}: its copy pinned when the comparison started ({stored}) is gone or "
                "changed: start the comparison again (--force)"
            )
        return Patch(str(path), stored.read_bytes())
    if what == "config" and not path.is_file():
        raise SourceError(f"config {path}: no such file (config:FILE, a full .config or a fragment of CONFIG_ lines)")
    if not path.is_file():
        raise SourceError(f"patch {path}: no such file (the name is SERIES+patch:FILE, a path to a unified diff)")
    return Patch(str(path), path.read_bytes())


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SourceError(f"git {' '.join(args)} in {repo} failed: {out.stderr.strip()[-300:] or 'no output'}")
    return out.stdout.strip()


def _mirror(url: str, log) -> Path:
    try:
        return gitmirror.mirror(url, log)
    except gitmirror.MirrorError as err:
        raise SourceError(f"tree:{url}: {err}") from err


def _linux_at(repo: Path, commit: str, where: str) -> None:
    """A bare repository's commit is a Linux tree (a Makefile and net/ipv4/ in it), as :func:`_tree` asks
    of a checkout."""
    for path in ("Makefile", "net/ipv4"):
        if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{path}"]).returncode != 0:
            raise SourceError(f"tree:{where}: {commit[:12]} is not a Linux source tree (no {path} in it)")


def _tree(path: Path) -> Path:
    path = path.resolve()
    if gitmirror.is_bare(path):  # a mirror (tree:URL pinned to it): its commits are checked by _linux_at
        return path
    if not (path / "Makefile").is_file() or not (path / "net" / "ipv4").is_dir():
        raise SourceError(f"tree:{path}: not a Linux source tree (no Makefile and net/ipv4/ there)")
    if subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        raise SourceError(
            f"tree:{path}: not a git repository; the build is keyed by its commit (git init and "
            f"commit it, or use SERIES+patch:FILE for Debian's source with a patch)"
        )
    return path


def _commit(repo: Path, rev: str | None, name: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev or 'HEAD'}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        recent = _git(repo, "log", "--oneline", "-5", "--no-decorate")
        raise SourceError(f"kernel {name!r}: {rev or 'HEAD'} is not a commit of {repo}; recent ones:\n{recent}")
    return out.stdout.strip()


def _dirty_patch(repo: Path) -> Patch | None:
    """The working tree's uncommitted changes to tracked files as one patch, or None when clean (untracked
    files are not part of a build: git add them). Plumbing, not ``git diff``: a user's diff settings
    (colour, no prefix, an external diff) would spoil the patch. The index's stat information is
    refreshed first (as ``git status`` does): a file touched but unchanged is not a change."""
    subprocess.run(["git", "-C", str(repo), "update-index", "-q", "--refresh"], capture_output=True)  # 1: changes
    files = _git(repo, "diff-index", "--name-only", "HEAD").splitlines()
    if not files:
        return None
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff-index", "-p", "--binary", "HEAD"], capture_output=True, check=True
    )
    return Patch(
        f"working tree diff ({len(files)} files: {', '.join(files[:3])}{'...' if len(files) > 3 else ''})", diff.stdout
    )


def sources_root() -> Path:
    return build_cache.cache_base() / "kernel-sources"


def debian_source(series: str, log=print) -> tuple[Path, str]:
    """Debian's ``linux-source-SERIES`` as a one-commit git repository in the cache, and its version."""
    repo = sources_root() / f"linux-source-{series}"
    stamp = repo / ".git" / "testbed-version"
    if not stamp.exists():
        sources_root().mkdir(parents=True, exist_ok=True)
        with open(sources_root() / f".{repo.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process fetching it: wait for its copy
            if not stamp.exists():
                _fetch_debian_source(series, repo, log)
    return repo, stamp.read_text().strip()


def _fetch_debian_source(series: str, repo: Path, log) -> None:
    package = f"linux-source-{series}"
    log(f"fetching {package} (apt-get download, once; kept as a git repository in {repo.parent})")
    repo.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repo.parent) as tmp:
        out = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("*.deb"))
        if out.returncode != 0 or not debs:
            found = subprocess.run(
                ["apt-cache", "search", "--names-only", r"^linux-source-[0-9.]+$"], capture_output=True, text=True
            ).stdout
            have = [line.split(" - ")[0] for line in found.splitlines() if line.strip()]
            series_here = ", ".join(h.removeprefix("linux-source-") for h in have) or "none"
            raise SourceError(
                f"{series}+...: {package} cannot be downloaded "
                f"({out.stderr.strip()[-200:] or 'no output'}); series here: {series_here}"
            )
        version = debs[0].name.split("_")[1]
        _unpack_source(debs[0], Path(tmp) / "src", package)
        # --force: Debian's top-level .gitignore ignores everything but debian/
        commit = [
            "-c",
            "user.name=testbed",
            "-c",
            "user.email=testbed@localhost",
            "commit",
            "-q",
            "-m",
            f"{package} {version}",
        ]
        for args in (["init", "-q"], ["add", "-A", "--force"], commit):
            subprocess.run(["git", "-C", str(Path(tmp) / "src"), *args], check=True, capture_output=True)
        (Path(tmp) / "src" / ".git" / "testbed-version").write_text(version + "\n")
        if repo.exists():
            shutil.rmtree(repo)
        os.replace(Path(tmp) / "src", repo)


def _unpack_source(deb: Path, dest: Path, package: str) -> None:
    """The tarball inside the package, unpacked without its top folder."""
    tarball = f"./usr/src/{package}.tar.xz"
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as dpkg:
        subprocess.run(
            ["tar", "-x", "-C", str(deb.parent), "--strip-components=3", "-f", "-", tarball],
            stdin=dpkg.stdout,
            check=True,
        )
    if dpkg.returncode != 0:
        raise SourceError(f"dpkg-deb could not read {deb} (exit {dpkg.returncode})")
    dest.mkdir()
    subprocess.run(
        ["tar", "-x", "-C", str(dest), "--strip-components=1", "-f", str(deb.parent / f"{package}.tar.xz")], check=True
    )
    (deb.parent / f"{package}.tar.xz").unlink()
