"""Provenance of a run: kernel, modules, sysctls, tool versions, git state."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
from pathlib import Path

#: TCP and queueing sysctls that change results; read inside a sender's namespace (most are per-netns)
SYSCTLS = [
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_dsack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_frto",
    "net.ipv4.tcp_recovery",
    "net.ipv4.tcp_early_retrans",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.default_qdisc",
]


def _run(argv: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(repo: Path) -> dict:
    sha = _run(["git", "rev-parse", "HEAD"], cwd=repo)
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return {"sha": sha, "dirty": bool(dirty) if dirty is not None else None}


def kernel_info() -> dict:
    clocksource = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    try:
        cmdline = Path("/proc/cmdline").read_text().split()
    except OSError:
        cmdline = []
    return {
        "release": platform.release(),
        "version": platform.version(),
        "machine": platform.machine(),
        "clocksource": clocksource.read_text().strip() if clocksource.exists() else None,
        "cpus": os.cpu_count(),
        # the guest's own parameters only (virtme-ng's long plumbing arguments left out)
        "cmdline": [arg for arg in cmdline if not arg.startswith(("virtme", "init=", "nr_open"))],
    }


def module_info(module: str) -> dict | None:
    """File, sha256, version and srcversion of a module (a copy of :func:`_module_info`'s)."""
    info = _module_info(module)
    return None if info is None else dict(info)


# cached: one process (a guest's runner) records the same modules and tools for every run, and each
# costs a few processes (~0.1 s each under TCG)
@functools.cache
def _module_info(module: str) -> dict | None:
    """File, sha256, version and srcversion of a module, named or given as a .ko path (None when built in)."""
    filename = _run(["modinfo", "-F", "filename", module])
    if not filename or not filename.startswith("/"):
        return None
    info = {
        "filename": filename,
        "srcversion": _run(["modinfo", "-F", "srcversion", module]),
        "version": _run(["modinfo", "-F", "version", module]),
    }
    try:
        info["sha256"] = hashlib.sha256(Path(filename).read_bytes()).hexdigest()
    except OSError:
        info["sha256"] = None
    return info


def tool_versions() -> dict:
    """The versions of the tools a run uses (a copy of :func:`_tool_versions`'s)."""
    return dict(_tool_versions())


@functools.cache
def _tool_versions() -> dict:
    def first_line(argv: list[str]) -> str | None:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = (out.stdout or out.stderr).strip()
        return text.splitlines()[0] if text else None

    versions = {
        "iperf3": first_line(["iperf3", "--version"]),
        "tcpdump": first_line(["tcpdump", "--version"]),
        "tc": first_line(["tc", "-V"]),
        "python": platform.python_version(),
    }
    for package in ("mininet", "pyroute2", "pydantic"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:  # noqa: BLE001 - a missing distribution is recorded as unknown
            versions[package] = None
    return versions
