"""The project's own congestion-control module (``kernel-patch/``), built for the kernel that runs it.

Each kernel release gets its own build in the cache (``~/.cache/cc-testbed/modules/<release>/``,
:mod:`testbed.guest.build`),
compiled against that release's headers (Debian: ``linux-headers-<release>``, installed with apt
when missing; it says so). The runner ``insmod``s the result before it checks which algorithms
the kernel has, and records its sha256, version and srcversion in the manifest.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testbed import PROJECT
from testbed.guest import build as build_cache
from testbed.scenario.algorithms import lookup

SOURCE = PROJECT / "kernel-patch"
MODULE = "tcp_westwood_tb"


class ModuleBuildError(Exception):
    """The module could not be built; the message says what to install or fix."""


def needed(ccs: set[str]) -> set[str]:
    """The project modules these algorithms need."""
    return {lookup(cc).module for cc in ccs if lookup(cc).project_module}


def _source_digest() -> str:
    sources = [
        path
        for path in sorted(SOURCE.iterdir())
        if path.is_file() and path.suffix in (".c", ".h", "") and not path.name.startswith(".")
    ]
    return build_cache.source_digest(sources)


def headers_dir(release: str, log=print) -> Path:
    kdir = Path(f"/usr/src/linux-headers-{release}")
    if (kdir / "Makefile").exists():
        return kdir
    package = f"linux-headers-{release}"
    log(f"installing {package} to build {MODULE} (apt)")
    out = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package], capture_output=True, text=True
    )
    if out.returncode != 0 or not (kdir / "Makefile").exists():
        raise ModuleBuildError(
            f"cannot build {MODULE} for {release}: kernel headers missing and 'apt-get install {package}' failed "
            f"({(out.stderr.strip().splitlines() or ['no output'])[-1]}); install them or pick another kernel"
        )
    return kdir


def built(release: str) -> Path | None:
    """The module's .ko for ``release`` at this source version, if it was built."""
    ko = build_cache.cache_base() / "modules" / release / _source_digest() / f"{MODULE}.ko"
    return ko if ko.exists() else None


def build(release: str, log=print, kdir: Path | None = None) -> Path:
    """The module's .ko for ``release``, built once per release and source version (against ``kdir``, a
    kernel's build tree, when given: a kernel built here from source; else its headers package)."""
    build_dir = build_cache.cache_base() / "modules" / release / _source_digest()
    ko = build_dir / f"{MODULE}.ko"
    if ko.exists():
        return ko
    kdir = kdir or headers_dir(release, log)
    if build_dir.exists():
        shutil.rmtree(build_dir)
    shutil.copytree(SOURCE, build_dir, ignore=shutil.ignore_patterns("*.o", "*.ko", ".*.cmd", "*.mod*"))
    log(f"building {MODULE} for {release}")
    out = subprocess.run(["make", "-C", str(build_dir), f"KDIR={kdir}"], capture_output=True, text=True)
    if out.returncode != 0 or not ko.exists():
        (build_dir / "build.log").write_text(out.stdout + out.stderr)
        raise ModuleBuildError(f"building {MODULE} for {release} failed; log: {build_dir / 'build.log'}")
    return ko
