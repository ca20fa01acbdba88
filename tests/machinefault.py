"""A run (in a guest or on this host) that failed only because of the machine, not the testbed: the host's
own hypervisor stole CPU time from this machine (a cloud VM's neighbours), or a process the tests did not
start took the CPUs (a fresh CI machine's daily apt job, say; the run's manifest names the busiest
others: testbed.host.hostload). No run made here then could be trustworthy, whatever the code does. The
tests that need a trustworthy run skip on it, or leave that one assertion out, saying so: the fidelity
check did its job, and the machine, not the testbed, was at fault. Contention by the tests' own processes
(a guest, iperf3, the controller, the box build) stays a failure."""

from __future__ import annotations

from pathlib import Path

from testbed.guest.fidelity import HOST_STEAL_LIMIT_PCT, OTHER_BUSY_LIMIT_PCT
from testbed.results import rundir

#: command lines of processes the tests start, directly or through the testbed
OURS = ("qemu", "virtiofsd", "vng", "iperf3", "tcpdump", "testbed", "pytest", "build-box", "mmdebstrap", "vagrant")


def stolen(manifest: dict) -> str | None:
    """Why the run is untrustworthy when that is only the hypervisor's steal (None otherwise)."""
    host = _host_only(manifest)
    if host is None:
        return None
    steal, others = host.get("host_steal_pct", 0), host.get("other_busy_pct", 0)
    if steal <= HOST_STEAL_LIMIT_PCT or others > OTHER_BUSY_LIMIT_PCT:
        return None
    return f"the host's hypervisor stole {steal:.0f} % of its CPU time (limit {HOST_STEAL_LIMIT_PCT:g} %)"


def machines_fault(manifest: dict) -> str | None:
    """Why the run is untrustworthy when that is only the machine's doing: steal, or others' CPU use by
    processes none of which the tests started (None otherwise, and when the others were not named)."""
    if why := stolen(manifest):
        return why
    host = _host_only(manifest)
    busiest = (host or {}).get("busiest_others") or []
    if host is None or host.get("other_guests") or not busiest:
        return None
    if any(mark in text.rpartition(": ")[0] for text in busiest for mark in OURS):
        return None
    return f"others than the tests used {host.get('other_busy_pct', 0):.0f} % of the host: {', '.join(busiest)}"


def _host_only(manifest: dict) -> dict | None:
    """The manifest's host figures when the host-contention check is the only one that failed."""
    checks = (manifest.get("fidelity") or {}).get("checks") or []
    failed = [c.get("name") for c in checks if not c.get("ok")]
    return (manifest.get("host") or {}) if failed == ["host contention"] else None


def all_machines_fault(results: Path) -> list[str] | None:
    """Each untrustworthy run under ``results`` with the machine's doing, when every one is only that
    (else None)."""
    found = []
    for path in sorted(results.rglob(rundir.MANIFEST)):
        manifest = rundir.read_json(path)
        if (manifest.get("fidelity") or {}).get("trustworthy") is False:
            why = machines_fault(manifest)
            if why is None:
                return None
            found.append(f"{path.parent.relative_to(results)}: {why}")
    return found or None
