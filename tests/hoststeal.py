"""A run (in a guest or on this host) that failed only because the host's own hypervisor stole CPU time
from this machine (a cloud VM's neighbours): no run made here then could be trustworthy, whatever the
code does. The tests that need a trustworthy run skip on it, or leave that one assertion out, saying
so: the fidelity check did its job, and the machine, not the testbed, was at fault."""

from __future__ import annotations

from pathlib import Path

from testbed.guest.fidelity import HOST_STEAL_LIMIT_PCT, OTHER_BUSY_LIMIT_PCT
from testbed.results import rundir


def stolen(manifest: dict) -> str | None:
    """Why the run is untrustworthy when that is only the hypervisor's steal (None otherwise)."""
    checks = (manifest.get("fidelity") or {}).get("checks") or []
    failed = [c for c in checks if not c.get("ok")]
    host = manifest.get("host") or {}
    if [c.get("name") for c in failed] != ["host contention"]:
        return None
    steal, others = host.get("host_steal_pct", 0), host.get("other_busy_pct", 0)
    if steal <= HOST_STEAL_LIMIT_PCT or others > OTHER_BUSY_LIMIT_PCT:
        return None
    return f"the host's hypervisor stole {steal:.0f} % of its CPU time (limit {HOST_STEAL_LIMIT_PCT:g} %)"


def all_stolen(results: Path) -> list[str] | None:
    """Each untrustworthy run under ``results`` with its steal, when every one is only that (else None)."""
    found = []
    for path in sorted(results.rglob(rundir.MANIFEST)):
        manifest = rundir.read_json(path)
        if (manifest.get("fidelity") or {}).get("trustworthy") is False:
            why = stolen(manifest)
            if why is None:
                return None
            found.append(f"{path.parent.relative_to(results)}: {why}")
    return found or None
