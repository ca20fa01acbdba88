"""Kernels built here from a source name (issue 55; names: :mod:`testbed.host.kernelsource`).

A build is keyed by the source's tree, its patches' sha256 and the config's digest (the fragment
``kernel-patch/testbed-guest.config``, virtme-ng's version, and the compiler's, assembler's and
linker's): the same key is built once and kept in the kernel cache as ``build-<key>/`` (``boot/vmlinuz-<release>``,
``lib/modules/<release>/``, ``build.json``), the layout every kernel here has. Each source tree gets one
checkout (a ``git clone --shared``) and one object folder in ``~/.cache/cc-testbed/kernel-worktrees``:
going from one revision to the next, make rebuilds what changed, and ccache (when installed) keeps
every object it compiled, so a bisection going back and forth recompiles little.

The config is virtme-ng's guest config (``virtme-configkernel --defconfig``) with the fragment on top;
an option of the fragment the tree's Kconfig does not give is refused before the build, naming it.
Our Westwood+ module is built against the new tree right after; when it does not build, the kernel is
still kept and ``build.json`` says why (a run that needs the module fails saying so).

Past 500 lines because a build's steps (checkout, configure, make, install) share its lock, its key and
its cleanup after a kill, and read as one sequence; the config's reading is testbed/host/kernelconfig.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed import PROJECT
from testbed.guest import build as build_cache
from testbed.guest import modules
from testbed.host.kernelconfig import is_full_config, missing_options, required_options, unset_new_options
from testbed.host.kernelsource import Patch, Source, SourceError, resolve

FRAGMENT = PROJECT / "kernel-patch" / "testbed-guest.config"
#: a first build's size and time here (linux-source-6.1, the fragment's config, 2 cores; docs/regression.md):
#: the estimate printed before a first build, until this machine has built one itself
FIRST_BUILD = {"compiled": 2506, "seconds": 860.0, "jobs": 2}
#: how often a running build says how far it is
PROGRESS_EVERY_S = 30.0
#: the environment variables a build reads from the user's (kbuild's toolchain and flags): each one set is
#: part of the build's key and of build.json, so LLVM=1 or KCFLAGS=-O3 is another build
#: (not CC, LD, AR...: kbuild's Makefile sets those itself and overrides the environment's); the search
#: paths of a toolchain loaded from elsewhere (modules on a cluster host) too
TOOLCHAIN = (
    "ARCH",
    "CROSS_COMPILE",
    "LLVM",
    "LLVM_IAS",
    "HOSTCFLAGS",
    "HOSTLDFLAGS",
    "KCFLAGS",
    "KCPPFLAGS",
    "KAFLAGS",
    "KRUSTFLAGS",
    "KBUILD_BUILD_TIMESTAMP",
    "LD_LIBRARY_PATH",
    "PKG_CONFIG_PATH",
    "CPATH",
    "LIBRARY_PATH",
)
#: the rest of the environment a build sees: what the shell and the tools need, not what they build
PASSED = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "LOGNAME")
#: checkout, configure, compile, install (kernelbuild.build's phases, each said as it starts)
BUILD_PHASES = 4
#: free space a build needs on the disks of its checkout and the kernel cache (a defconfig build with the
#: project's fragment: about 3 GB of objects; Debian's config: over 10)
MIN_FREE_BYTES = 5 << 30
#: how long make's group has after SIGTERM to stop (deleting its half-written targets) before SIGKILL
STOP_GRACE_S = 10.0
#: in an object folder: its last build was killed before it could stop (the next one starts clean)
INTERRUPTED = ".testbed-interrupted"


class BuildError(SourceError):
    """A build that failed: the message has the compiler's last lines and the log's path."""


def worktrees_root() -> Path:
    return build_cache.cache_base() / "kernel-worktrees"


#: what a kernel build needs here (tools on PATH, headers), and the Debian packages that give them
NEEDED = {
    "gcc": "build-essential",
    "make": "make",
    "flex": "flex",
    "bison": "bison",
    "bc": "bc",
    "/usr/include/libelf.h": "libelf-dev",
    "/usr/include/openssl/ssl.h": "libssl-dev",
}


def missing_tools() -> list[str]:
    """What a kernel build needs and this machine lacks, as Debian packages."""
    return sorted(
        {
            package
            for need, package in NEEDED.items()
            if not (Path(need).exists() if need.startswith("/") else shutil.which(need))
        }
    )


def config_digest() -> str:
    """The config's part of a build's key: the fragment, virtme-ng's version, and the compiler's, the
    assembler's and the linker's (:func:`toolchain_versions`: what the final ``.config`` records as
    CONFIG_CC_VERSION_TEXT, CONFIG_AS_VERSION and CONFIG_LD_VERSION, known before configuring)."""
    digest = hashlib.sha256(FRAGMENT.read_bytes())
    digest.update(importlib.metadata.version("virtme-ng").encode())
    for tool, version in toolchain_versions().items():
        digest.update(f"\0{tool}={version}".encode())
    return digest.hexdigest()[:12]


def toolchain_tools() -> dict[str, str]:
    """The compiler, assembler and linker kbuild runs in this environment (its top Makefile's choice:
    ``$(CROSS_COMPILE)gcc``, ``as`` and ``ld``, or with ``LLVM=1`` clang, its integrated assembler and
    ld.lld; ``LLVM=-15`` a suffix, ``LLVM=/opt/llvm/bin/`` a prefix)."""
    variables = toolchain()
    llvm = variables.get("LLVM")
    if llvm:
        prefix = llvm if llvm.endswith("/") else ""
        suffix = llvm if llvm.startswith("-") else ""
        assembler = "clang" if variables.get("LLVM_IAS", "1") != "0" else "as"
        return {"CC": f"{prefix}clang{suffix}", "AS": f"{prefix}{assembler}{suffix}", "LD": f"{prefix}ld.lld{suffix}"}
    cross = variables.get("CROSS_COMPILE", "")
    return {"CC": f"{cross}gcc", "AS": f"{cross}as", "LD": f"{cross}ld"}


def toolchain_versions() -> dict[str, str]:
    """Each tool of :func:`toolchain_tools` with the first line of its ``--version`` ('absent' when it is
    not there: the build then refuses, naming it); a binutils or compiler upgrade is another build."""
    versions = {}
    for role, tool in toolchain_tools().items():
        try:
            out = subprocess.run([tool, "--version"], capture_output=True, text=True, env=_make_env())
            versions[role] = f"{tool}: {out.stdout.partition(chr(10))[0].strip()}"
        except OSError:
            versions[role] = f"{tool}: absent"
    return versions


def build_key(source: Source, config: str) -> str:
    """What a build is: the commit's tree (not the commit: an amend that keeps the files, or Debian's
    source fetched again, builds the same), the patches, the config's digest and the toolchain variables
    the build sees (:func:`toolchain`)."""
    digest = hashlib.sha256((source.tree_id or source.commit).encode())
    for patch in source.patches:
        digest.update(patch.sha256.encode())
    if source.config is not None:
        digest.update(b"\0config\0" + source.config.sha256.encode())
    digest.update(config.encode())
    for name, value in toolchain().items():
        digest.update(f"\0{name}={value}".encode())
    return digest.hexdigest()[:12]


def toolchain() -> dict[str, str]:
    """The variables of :data:`TOOLCHAIN` set in this environment: the build sees them, its key holds them."""
    return {name: os.environ[name] for name in TOOLCHAIN if name in os.environ}


def cached(kernels: Path, key: str) -> Path | None:
    """The build of this key in the kernel cache ``kernels``, if it is there whole (its use recorded, for
    :func:`prune`)."""
    root = kernels / f"build-{key}"
    if not (root / ".complete").exists():
        return None
    with contextlib.suppress(OSError):
        (root / ".last-used").touch()
    return root


def prune(kernels: Path, older_than_days: float, log=print) -> list[Path]:
    """Remove the kernels built here (``build-*``) unused for ``older_than_days``, and the checkouts of
    trees with no build left; the builds and checkouts removed. Debian's packages are left alone (a
    download, not a build)."""
    cutoff = time.time() - older_than_days * 86400
    removed = []
    for root in sorted(kernels.glob("build-*")):
        used = max((p.stat().st_mtime for p in (root / ".last-used", root / ".complete") if p.exists()), default=0)
        if used < cutoff:
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    origins = {
        json.loads((r / "build.json").read_text()).get("origin")
        for r in kernels.glob("build-*")
        if (r / "build.json").is_file()
    }
    kept = {_worktree_name(Path(origin)) for origin in origins if origin}  # a tree a build left is from
    for tree in sorted(worktrees_root().glob("*")) if worktrees_root().is_dir() else []:
        used = (tree / "lock").stat().st_mtime if (tree / "lock").exists() else 0
        if used < cutoff and tree.name not in kept:
            shutil.rmtree(tree, ignore_errors=True)
            removed.append(tree)
    for path in removed:
        log(f"removed {path}")
    return removed


def build(source: Source, kernels: Path, log=print) -> Path:
    """The folder of ``source``'s build in the kernel cache ``kernels``, built now unless it already is."""
    config = config_digest()
    key = build_key(source, config)
    if (root := cached(kernels, key)) is not None:
        return root
    if missing := missing_tools():
        raise BuildError(
            f"building a kernel needs {', '.join(missing)}: apt-get install {' '.join(missing)} "
            "(make setup installs them)"
        )
    tree = worktrees_root() / _worktree_name(source.repo)
    tree.mkdir(parents=True, exist_ok=True)
    with _locked(tree / "lock", f"{source.name} ({source.commit[:12]})", log):
        if (root := cached(kernels, key)) is not None:  # built by another process while this one waited
            return root
        check_free_space(tree, kernels)
        _clean_after_a_kill(tree / "obj", log)
        phase = _phases(f"kernel build-{key} ({source.name})", log)
        phase("checkout and patches")
        src, obj = _checkout(source, tree)
        phase("configure")
        _configure(src, obj, source.config)
        unset = unset_new_options(source, (obj / ".config").read_text())
        if unset:
            log(
                f"kernel build: the patches add {', '.join(unset)}, which this build leaves unset (default off): the "
                "patched code is not built unless a config turns them on (+config:FILE with them =y)"
            )
        phase("compile (bzImage, modules)")
        started = time.monotonic()
        release = _make(src, obj, key, tree / f"build-{key}.log", log)
        seconds = time.monotonic() - started
        phase("install (modules_install, the project's module)")
        return _install(source, src, obj, kernels / f"build-{key}", config, release, seconds, log)


def _phases(what: str, log):
    """A logger of a build's phases: each named with its number, and the time the one before took."""
    names: list[str] = []
    last = [time.monotonic()]

    def phase(name: str) -> None:
        took = f" (the one before took {time.monotonic() - last[0]:.0f} s)" if names else ""
        names.append(name)
        last[0] = time.monotonic()
        log(f"{what}: phase {len(names)} of {BUILD_PHASES}, {name}{took}")

    return phase


def _worktree_name(repo: Path) -> str:
    """A tree's checkout and object folder in :func:`worktrees_root`: one per repository."""
    return f"{repo.name}-{hashlib.sha256(str(repo).encode()).hexdigest()[:10]}"


def check_free_space(tree: Path, kernels: Path) -> None:
    """Refuse a build that would fill the disk (a kernel's objects, modules and install take several GB),
    naming what to remove."""
    for folder in (tree, kernels):
        folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder).free
        if free < MIN_FREE_BYTES:
            raise BuildError(
                f"{free / 2**30:.1f} GiB free on the disk of {folder}; a kernel build needs "
                f"{MIN_FREE_BYTES / 2**30:.0f} GiB: remove builds (build-* in {kernels}) or checkouts "
                f"({worktrees_root()}) you no longer need"
            )


@contextlib.contextmanager
def _locked(path: Path, what: str, log):
    """The tree's lock, held for a build; while another process holds it, say whose it is and wait."""
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(500).strip() or "another process"
            log(f"kernel build: {path.parent.name} is in use, waiting for {holder}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(
            f"pid {os.getpid()} on {socket.gethostname()}, building {what} since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n"
        )
        handle.flush()
        yield


def _clean_after_a_kill(obj: Path, log) -> None:
    """A build killed before it could stop may have left truncated objects newer than their sources,
    which make would link: the object folder goes, and the build starts clean (ccache keeps it quick)."""
    if (obj / INTERRUPTED).exists():
        log(f"kernel build: the last build in {obj} was killed mid-way; its objects are removed")
        shutil.rmtree(obj)


def _stop(proc: subprocess.Popen, obj: Path) -> None:
    """make's whole group stopped: SIGTERM first (make deletes the targets it was writing), SIGKILL after
    STOP_GRACE_S; a killed build marks its object folder for a clean start (:func:`_clean_after_a_kill`)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    stopped = False
    try:
        proc.wait(STOP_GRACE_S)
        stopped = True
    except subprocess.TimeoutExpired:
        pass
    finally:  # a second Ctrl-C while waiting still kills the group and marks the folder
        if not stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            (obj / INTERRUPTED).write_text("killed mid-build: the next build starts clean\n")


def _git(src: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(src), *args], input=stdin, capture_output=True)


def _checkout(source: Source, tree: Path) -> tuple[Path, Path]:
    """The tree's checkout at the source's commit with its patches applied, and its object folder."""
    src, obj = tree / "src", tree / "obj"
    if not (src / ".git").exists():
        shutil.rmtree(src, ignore_errors=True)
        out = subprocess.run(
            ["git", "clone", "-q", "--shared", "--no-checkout", str(source.repo), str(src)],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise BuildError(f"git clone of {source.repo} into {src} failed: {out.stderr.strip()[-300:]}")
    # objects come through the clone's alternates: a commit made in the tree since the clone is there too.
    # clean -x too: the objects are in obj/, and a file an earlier patch made may be one .gitignore hides
    for args in (["checkout", "-q", "--force", "--detach", source.commit], ["clean", "-ffdxq"]):
        out = _git(src, *args)
        if out.returncode != 0:
            raise BuildError(f"git {' '.join(args)} in {src} failed: {out.stderr.decode().strip()[-300:]}")
    for patch in source.patches:
        out = _git(src, "apply", "--whitespace=nowarn", "-", stdin=patch.text)
        if out.returncode != 0:
            raise BuildError(
                f"patch {patch.name} does not apply to {source.origin} at {source.commit[:12]}: "
                f"{out.stderr.decode().strip()[-400:]}"
            )
    obj.mkdir(exist_ok=True)
    return src, obj


def _configkernel() -> str:
    return str(Path(sys.executable).with_name("virtme-configkernel"))


def _make_env() -> dict:
    """The environment make sees: the shell's basics (:data:`PASSED`) and the toolchain's variables
    (:func:`toolchain`, in the key), nothing else: make reads every variable of its environment, and one
    that is in neither (a KCONFIG_CONFIG, a W=1) must not change a build its key does not name."""
    env = {name: os.environ[name] for name in PASSED if name in os.environ} | toolchain()
    # ccache's base folder: paths under it are hashed relative to the object folder, so a tree's second
    # checkout (another tree cloned from it, the same commit) hits what the first one compiled
    env.update(
        KBUILD_BUILD_USER="testbed",
        KBUILD_BUILD_HOST="cc-testbed",
        CCACHE_BASEDIR=str(worktrees_root()),
        CCACHE_DIR=str(build_cache.cache_base() / "ccache"),
        CCACHE_MAXSIZE="8G",
    )
    return env


def _configure(src: Path, obj: Path, config: Patch | None = None) -> None:
    """virtme-ng's guest config with the fragment merged on top (virtme-ng applies its own items after
    a ``--custom`` one, debug info among them); every fragment option must hold. The developer's own
    ``config`` (``+config:FILE``): a full ``.config`` replaces virtme-ng's as the base, a fragment is merged
    onto it; the project's fragment is merged last either way (what runs need)."""
    merge = ["scripts/kconfig/merge_config.sh", "-m", "-O", str(obj), str(obj / ".config")]
    steps = [[_configkernel(), "--defconfig", f"O={obj}"]]
    if config is not None:
        mine = obj / "developer.config"
        mine.write_bytes(config.text)
        steps = (
            [["cp", str(mine), str(obj / ".config")]] if is_full_config(config.text) else [*steps, [*merge, str(mine)]]
        )
    steps += [[*merge, str(FRAGMENT)], ["make", f"O={obj}", "olddefconfig"]]
    for argv in steps:
        out = subprocess.run(argv, cwd=src, env=_make_env(), capture_output=True, text=True)
        if out.returncode != 0 or not (obj / ".config").exists():
            raise BuildError(f"{Path(argv[0]).name} failed in {src}: {(out.stdout + out.stderr).strip()[-600:]}")
    missing = missing_options(required_options(FRAGMENT.read_text()), (obj / ".config").read_text())
    if missing:
        raise BuildError(
            f"this tree's Kconfig does not give what runs need ({FRAGMENT.name}): "
            f"{'; '.join(missing)}. See {obj / '.config'}; the suites need them"
        )


def _make_argv(src: Path, obj: Path, key: str, *targets: str) -> list[str]:
    return [
        "make",
        "-C",
        str(src),
        f"O={obj}",
        f"-j{os.cpu_count() or 1}",
        f"LOCALVERSION=-tb{key[:8]}",
        *_compiler(),
        *targets,
    ]


def _compiler() -> list[str]:
    """The compiler through ccache when it is installed: LLVM=1's clang, else gcc (kbuild's own choices);
    LLVM=-14 and LLVM=/path are left to kbuild (no ccache)."""
    chosen = toolchain()
    if not shutil.which("ccache") or chosen.get("LLVM", "1") != "1":
        return []
    return [f"CC=ccache {'clang' if 'LLVM' in chosen else 'gcc'}"]


def build_estimate_s() -> float:
    """A first build's seconds on this machine (FIRST_BUILD scaled by its cores): what a kernel to build
    adds to a comparison's estimate (less when ccache has seen the commit)."""
    return FIRST_BUILD["seconds"] * FIRST_BUILD["jobs"] / (os.cpu_count() or 1)


def unbuilt(names: list[str], kernels: Path) -> list[str]:
    """The source names among ``names`` whose build is not in the kernel cache (a name that cannot be
    resolved yet counts as one to build)."""
    config = config_digest()
    missing = []
    for name in dict.fromkeys(names):
        try:
            built = cached(kernels, build_key(resolve(name, log=lambda _line: None), config)) is not None
        except (SourceError, OSError, subprocess.SubprocessError):
            built = False
        if not built:
            missing.append(name)
    return missing


def estimate_text(stats: dict | None) -> str:
    """Before a build: how long it should take (this tree's last full build, or this machine's first)."""
    if stats:
        return (
            f"incremental: this tree was last built in {stats['seconds'] / 60:.1f} min; a change to a few files "
            "takes a few minutes (vmlinux is linked again)"
        )
    scale = FIRST_BUILD["jobs"] / (os.cpu_count() or 1)
    warm = " (far less for a commit ccache has seen: 1.7 min measured)" if shutil.which("ccache") else ""
    return (
        f"first build of this tree: about {FIRST_BUILD['seconds'] * scale / 60:.0f} min on {os.cpu_count()} "
        f"core(s){warm}, {FIRST_BUILD['compiled']} files; later revisions rebuild only what changed"
    )


def _make(src: Path, obj: Path, key: str, log_path: Path, log) -> str:
    """Build bzImage and modules with progress lines; the release (``uname -r``) built."""
    stats_path = obj / ".testbed-build-stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
    log(f"kernel build-{key}: {estimate_text(stats)}; log: {log_path}")
    started, compiled, said = time.monotonic(), 0, time.monotonic()
    expected = FIRST_BUILD["compiled"] if stats is None else None
    argv = _make_argv(src, obj, key, "bzImage", "modules")
    # a session of its own: stopped (Ctrl-C, SIGTERM), the whole make goes, not only its first process
    popen = {
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "text": True,
        "env": _make_env(),
        "start_new_session": True,
    }
    with open(log_path, "w") as out, subprocess.Popen(argv, **popen) as proc:
        try:
            for line in proc.stdout:
                out.write(line)
                compiled += line.startswith("  CC ")
                if time.monotonic() - said >= PROGRESS_EVERY_S:
                    said = time.monotonic()
                    log(progress_text(compiled, expected, said - started))
        finally:
            if proc.poll() is None:
                _stop(proc, obj)
    if proc.returncode != 0:
        raise BuildError(
            f"the kernel did not build (make exited {proc.returncode}); last lines:\n"
            f"{_last_lines(log_path)}\nlog: {log_path}"
        )
    seconds = time.monotonic() - started
    if stats is None or compiled > 0.5 * stats.get("compiled", 0):
        stats_path.write_text(json.dumps({"compiled": compiled, "seconds": round(seconds, 1)}))
    log(f"kernel build-{key}: built in {seconds / 60:.1f} min ({compiled} files compiled)")
    release = subprocess.run(
        _make_argv(src, obj, key, "-s", "kernelrelease"), capture_output=True, text=True, env=_make_env()
    ).stdout.split()
    if not release:
        raise BuildError(f"make kernelrelease printed nothing in {src}; the build's log: {log_path}")
    return release[-1]


def progress_text(compiled: int, expected: int | None, elapsed_s: float) -> str:
    """A running build's line: files so far, and the time left when the total is known."""
    if not expected or compiled == 0:
        return f"kernel build: {compiled} files compiled, {elapsed_s / 60:.1f} min so far"
    done = min(compiled / expected, 0.99)
    left = elapsed_s * (1 - done) / done
    return f"kernel build: {compiled} of about {expected} files ({done:.0%}), about {left / 60:.0f} min left"


def _last_lines(log_path: Path, count: int = 20) -> str:
    """The lines around the compiler's first error (``file:line:col: error:``), else the log's last."""
    lines = log_path.read_text(errors="replace").splitlines()
    errors = [i for i, line in enumerate(lines) if re.search(r": (fatal )?error:|\*\*\* ", line)]
    end = errors[0] + 5 if errors else len(lines)
    return "\n".join(lines[max(0, end - count) : end])


def _install(source: Source, src: Path, obj: Path, dest: Path, config: str, release: str, seconds: float, log) -> Path:
    """The build, kept in the kernel cache as ``dest`` (``build-<key>/``), with Westwood+'s module tried
    against it."""
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=dest.parent))
    try:
        return _install_into(source, src, obj, dest, tmp / "root", config, release, seconds, log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _install_into(
    source: Source, src: Path, obj: Path, dest: Path, root: Path, config: str, release: str, seconds: float, log
) -> Path:
    key = dest.name.removeprefix("build-")
    out = subprocess.run(
        _make_argv(src, obj, key, "-s", f"INSTALL_MOD_PATH={root}", "INSTALL_MOD_STRIP=1", "modules_install"),
        env=_make_env(),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0 or not (root / "lib" / "modules" / release / "modules.dep").exists():
        raise BuildError(
            f"make modules_install (with depmod) failed for {release}: "
            f"{(out.stdout + out.stderr).strip()[-600:] or 'no modules.dep written'}"
        )
    (root / "boot").mkdir()
    shutil.copy2(obj / "arch" / "x86" / "boot" / "bzImage", root / "boot" / f"vmlinuz-{release}")
    shutil.copy2(obj / ".config", root / "boot" / f"config-{release}")
    record = {
        **source.record(),
        "key": key,
        "config_digest": config,
        "toolchain": toolchain(),
        "toolchain_versions": toolchain_versions(),
        "release": release,
        "config_sha256": hashlib.sha256((obj / ".config").read_bytes()).hexdigest(),
        "build_seconds": round(seconds, 1),
        "ccache": bool(shutil.which("ccache")),
        "unset_new_options": unset_new_options(source, (obj / ".config").read_text()),
        "westwood_tb": _project_module(release, obj, log),
    }
    (root / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    (root / ".complete").write_text(key + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(root, dest)
    return dest


def _project_module(release: str, obj: Path, log) -> str:
    """Our Westwood+ module built against the new tree now (the object folder moves on to other revisions):
    "built", or why not."""
    try:
        modules.build(release, log=log, kdir=obj)
    except modules.ModuleBuildError as err:
        return f"not built: {err}"
    return "built"
