"""Guest kernels: Debian kernel packages fetched once into a cache, or a local vmlinuz / .deb.

A kernel is named as a Debian package version (``6.1.0-56``, ``6.12.117+deb12``), as
``default`` (what Debian 12's ``linux-image-amd64`` depends on today), as a path to a
vmlinuz (its modules under ``../lib/modules/<release>``, the layout ``dpkg-deb -x`` gives) or to
a ``.deb``, or by its source, built here (``tree:PATH[@REV]``, ``6.1+patch:FILE``, ``6.1+source``:
:mod:`testbed.host.kernelsource`, :mod:`testbed.host.kernelbuild`). Packages are fetched with
``apt-get download`` of one exact name (never a wildcard: that fetches dozens of kernels) and
unpacked with ``dpkg-deb -x``; nothing is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from testbed.guest import build
from testbed.host import kernelbuild, kernelsource

FLAVOUR = "amd64"


class KernelError(Exception):
    """A kernel that cannot be had; the message lists what can."""


@dataclass(frozen=True)
class Kernel:
    vmlinuz: Path
    release: str  # uname -r of the guest
    source: str  # package name or path it came from, or its source name
    #: a kernel built here: its source, commit, patches, config and build (kernelbuild's build.json)
    build: dict | None = field(default=None, compare=False, hash=False)

    @property
    def modules_dir(self) -> Path:
        return self.vmlinuz.parent.parent / "lib" / "modules" / self.release


def cache_root() -> Path:
    """Where unpacked kernels are kept: ``~/.cache/cc-testbed/kernels``."""
    return build.cache_base() / "kernels"


def package_name(version: str) -> str:
    """``6.1.0-56`` -> ``linux-image-6.1.0-56-amd64``; a full package name passes through."""
    if version.startswith("linux-image-"):
        return version
    return f"linux-image-{version}-{FLAVOUR}"


def default_package() -> str:
    """The kernel package Debian's ``linux-image-amd64`` meta-package points at."""
    out = subprocess.run(["apt-cache", "depends", f"linux-image-{FLAVOUR}"], capture_output=True, text=True)
    match = re.search(rf"Depends: (linux-image-\S+-{FLAVOUR})\b", out.stdout)
    if not match:
        raise KernelError(
            f"cannot resolve linux-image-{FLAVOUR} (apt-cache depends said: {out.stderr.strip() or 'nothing'}); "
            "run 'apt-get update' or name a kernel version with --kernel"
        )
    return match.group(1)


def available_lines() -> list[str]:
    """``testbed kernels``: the default guest kernel, those in the cache and those apt can download."""
    cached = sorted(_cached_name(p) for p in cache_root().glob("*") if (p / ".complete").exists())
    return [
        f"default: {default_package()}",
        "cached: " + (", ".join(cached) or "none"),
        "downloadable: " + ", ".join(available_versions()),
    ]


def _cached_name(root: Path) -> str:
    """A cached kernel's folder name, with the source name of one built here."""
    if (root / "build.json").exists():
        record = json.loads((root / "build.json").read_text())
        return f"{root.name} ({record['name']} at {record['commit'][:12]}{', dirty' if record['dirty'] else ''})"
    return root.name


def available_versions() -> list[str]:
    """Versions ``apt-get download`` can fetch for this flavour, oldest first."""
    out = subprocess.run(
        ["apt-cache", "search", "--names-only", rf"^linux-image-[0-9].*-{FLAVOUR}$"],
        capture_output=True,
        text=True,
    )
    names = [line.split()[0] for line in out.stdout.splitlines()]
    versions = [n.removeprefix("linux-image-").removesuffix(f"-{FLAVOUR}") for n in names]
    # concrete builds of the plain flavour only: 6.1.0-56, 6.12.117+deb12 (not -rt, -cloud, meta names)
    versions = [v for v in versions if re.fullmatch(r"\d+\.\d+\.\d+(-\d+|\+deb\d+)", v)]
    return sorted(
        versions, key=lambda v: [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.split(r"[.+-]", v)]
    )


def _release_of(root: Path) -> str:
    releases = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))
    if not releases:
        raise KernelError(f"no boot/vmlinuz-* in {root}")
    return releases[-1]


def _unpack(deb: Path, dest: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "root")], check=True, capture_output=True)
        (tmp / "root" / ".complete").write_text(deb.name + "\n")
        os.replace(tmp / "root", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(version: str | None = None, log=print, allow_dirty: bool = False) -> Kernel:
    """The kernel named by ``version`` (see the module docstring), fetched into the cache if needed;
    ``allow_dirty``: a tree's uncommitted changes built as a patch (testbed.host.kernelsource.resolve)."""
    if kernelsource.is_source(version):
        return _from_source(debian_config(version, log), log, allow_dirty)
    if version and (version.endswith(".deb") or "/" in version):
        return _from_path(Path(version), log)
    package = default_package() if version in (None, "", "default") else package_name(version)
    root = cache_root() / package
    if not (root / ".complete").exists():
        cache_root().mkdir(parents=True, exist_ok=True)
        log(f"fetching kernel {package} (once; cached in {root.parent})")
        with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
            out = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True, text=True)
            debs = list(Path(tmp).glob("*.deb"))
            if out.returncode != 0 or not debs:
                versions = available_versions()
                shown = ", ".join(versions) if versions else "none (run 'apt-get update')"
                raise KernelError(
                    f"kernel '{version}' (package {package}) cannot be downloaded: "
                    f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'no such package'}. "
                    f"Versions that can be had: {shown}"
                )
            if root.exists():
                shutil.rmtree(root)
            _unpack(debs[0], root)
    release = _release_of(root)
    return Kernel(root / "boot" / f"vmlinuz-{release}", release, package)


def _from_source(name: str, log, allow_dirty: bool = False) -> Kernel:
    """A kernel built here from its source (built now unless this source and config already were)."""
    try:
        cache_root().mkdir(parents=True, exist_ok=True)
        source = kernelsource.resolve(name, log, allow_dirty)
        root = kernelbuild.build(source, cache_root(), log)
    except kernelsource.SourceError as err:
        raise KernelError(str(err)) from err
    # the build is the first name's that made it; the record is this name's (the same commit and patches)
    record = {**json.loads((root / "build.json").read_text()), **source.record()}
    return Kernel(root / "boot" / f"vmlinuz-{record['release']}", record["release"], name, build=record)


def settle(name: str, log=print) -> None:
    """A kernel made as ready as it can be before its turn: a package downloaded (or refused with the
    versions there are), a source name resolved (its tree, revision and patches checked) and its build left
    to the first session that runs it, so a series of commits starts at once and a commit that does not
    build is that side's failure, not the series' (testbed/workflows/series.py)."""
    if not kernelsource.is_source(name):
        fetch(name, log=log)
        return
    try:
        kernelsource.resolve(debian_config(name, log), log)
    except kernelsource.SourceError as err:
        raise KernelError(str(err)) from err


def pinned(name: str, allow_dirty: bool = False) -> str:
    """A source name as a comparison keeps it (:func:`kernelsource.pin`): a tree at the commit it stands for
    now (``tree:PATH@<sha>``), each patch and a dirty tree's diff read now and named by its sha256, so that
    every session of a comparison of hours builds the same bytes whatever is committed or edited meanwhile;
    other names as they are."""
    try:
        if not kernelsource.is_source(name):
            return name
        return kernelsource.pin(debian_config(name, lambda _line: None), allow_dirty)
    except kernelsource.SourceError as err:
        raise KernelError(str(err)) from err


def debian_config(name: str, log=print) -> str:
    """``...+config:config-RELEASE`` where no such file is here: Debian's config of that kernel (its
    package's ``boot/config-RELEASE``, the package downloaded once as ``--kernel`` does), the name then
    pointing at it in the kernel cache; other names as they are."""
    try:
        parsed = kernelsource.parse(name)
    except kernelsource.SourceError as err:
        raise KernelError(str(err)) from err
    wanted = parsed.config
    if wanted is None or parsed.config_pin or wanted.is_file() or len(wanted.parts) > 1:
        return name
    if not wanted.name.startswith("config-"):
        return name  # _read_patch says there is no such file, and what a config may be
    release = wanted.name.removeprefix("config-")
    path = fetch(f"linux-image-{release}", log).vmlinuz.parent / wanted.name
    if not path.is_file():
        raise KernelError(f"+config:{wanted}: the package linux-image-{release} has no boot/{wanted.name}")
    return name.replace(f"+config:{wanted}", f"+config:{path}", 1)


def _from_path(path: Path, log) -> Kernel:
    path = path.resolve()
    if not path.exists():
        raise KernelError(f"{path} does not exist; give a vmlinuz, a .deb, or a Debian kernel version")
    if path.suffix == ".deb":
        root = cache_root() / f"local-{path.stem}"
        if not (root / ".complete").exists():
            cache_root().mkdir(parents=True, exist_ok=True)
            log(f"unpacking {path.name} into {root}")
            if root.exists():
                shutil.rmtree(root)
            _unpack(path, root)
        release = _release_of(root)
        return Kernel(root / "boot" / f"vmlinuz-{release}", release, str(path))
    release = path.name.removeprefix("vmlinuz-")
    kernel = Kernel(path, release, str(path))
    if not kernel.modules_dir.is_dir():
        raise KernelError(f"{path}: its modules are expected in {kernel.modules_dir} (the layout of dpkg-deb -x)")
    return kernel


#: Debian's other flavours of a kernel build: ``6.1.0-56-cloud`` names linux-image-6.1.0-56-cloud-amd64
FLAVOURS = ("cloud", "rt")


def _split_flavour(version: str) -> tuple[str, str]:
    """``6.1.0-56-cloud`` -> (``6.1.0-56``, ``-cloud``); a plain version -> (it, "")."""
    match = re.fullmatch(rf"(.+)(-(?:{'|'.join(FLAVOURS)}))", version)
    return (match.group(1), match.group(2)) if match else (version, "")


def expand_series(spec: str, available: list[str] | None = None) -> list[str]:
    """The kernels of ``testbed regress --series``, oldest first: ``6.1.0-47..6.1.0-56`` is every version
    installable here from the one to the other (both included; a flavour on both ends, ``-cloud`` or
    ``-rt``, applies to all), ``6.1.0-55,6.1.0-56,6.12.117+deb12`` that list in its order,
    ``tree:PATH@A..B`` a tree's commits from A to B (first-parent line, built here). Refused
    (KernelError, listing what can be had): an end that cannot be had, ends in the wrong order, fewer
    than two kernels, a kernel named twice."""
    spec = spec.strip()
    if spec.startswith(kernelsource.TREE) and ".." in spec:  # tree:PATH@A..B: its commits from A to B
        path, _, revs = spec.removeprefix(kernelsource.TREE).partition("@")
        first, _, last = revs.partition("..")
        try:
            kernels = kernelsource.tree_versions(Path(path), first, last)
        except kernelsource.SourceError as err:
            raise KernelError(f"--series {spec}: {err}") from err
    elif ".." in spec:
        first, _, last = (part.strip() for part in spec.partition(".."))
        (first, flavour), (last, last_flavour) = _split_flavour(first), _split_flavour(last)
        if flavour != last_flavour:
            raise KernelError(
                f"--series {spec}: both ends need the same flavour ({flavour or 'plain'} vs {last_flavour or 'plain'})"
            )
        available = available_versions() if available is None else available
        shown = ", ".join(available) or "none (run 'apt-get update')"
        for end in (first, last):
            if end not in available:
                raise KernelError(
                    f"--series {spec}: kernel {end} cannot be had here. Versions that can be had: {shown}"
                )
        i, j = available.index(first), available.index(last)
        if i >= j:
            raise KernelError(
                f"--series {spec}: {first} is not older than {last}; give the oldest first (--series {last}..{first})"
            )
        kernels = [v + flavour for v in available[i : j + 1]]
    else:
        kernels = [part.strip() for part in spec.split(",") if part.strip()]
    if len(kernels) < 2:
        raise KernelError(f"--series {spec}: a series needs two kernels or more (a range A..B, or a list A,B,C)")
    if twice := sorted({k for k in kernels if kernels.count(k) > 1}):
        raise KernelError(f"--series {spec}: {', '.join(twice)} named twice")
    return kernels


def newest(series: str, available: list[str] | None = None) -> str:
    """The newest installable version of a series (``6.1``: 6.1.0-56; ``6.12``: 6.12.117+deb12)."""
    available = available_versions() if available is None else available
    mine = [v for v in available if v == series or any(v.startswith(series + sep) for sep in ".-+")]
    if not mine:
        series_here = sorted({".".join(v.split(".")[:2]) for v in available})
        raise KernelError(
            f"--latest {series}: no installable kernel of that series; series here: "
            f"{', '.join(series_here) or 'none (run apt-get update)'}"
        )
    return mine[-1]
