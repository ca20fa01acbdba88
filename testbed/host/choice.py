"""Where runs go when nobody says (``--backend auto``): this machine's own kernel when it has everything
the runs need, else the lab VM when it is up, else a virtme-ng guest.

Its own module because the session (testbed/host/session.py) and a cluster's workers
(testbed/host/clusterwork.py, each deciding ``auto`` on its own host) both ask it, and the session
imports the cluster: here neither imports the other.
"""

from __future__ import annotations

import os
from pathlib import Path

from testbed.host import vagrant
from testbed.plan import estimate
from testbed.scenario.algorithms import lookup as cc_lookup
from testbed.scenario.points import RunSpec


def host_can_run(runs: list[RunSpec]) -> tuple[bool, str]:
    """Whether this machine's own kernel can execute these runs (root, netem if needed, every algorithm)."""
    if os.geteuid() != 0:
        return False, "not root"
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    modules_possible = Path("/proc/modules").exists()
    wanted = sorted(set().union(*(r.scenario.algorithms for r in runs)))
    release = os.uname().release
    # the project's module is built for the running kernel: its headers must be there (the lab VM has them)
    headers = Path(f"/usr/src/linux-headers-{release}/Makefile").exists()
    missing = [
        cc
        for cc in wanted
        if (cc_lookup(cc).project_module and not (modules_possible and headers))
        or (cc not in available and not (modules_possible and cc_lookup(cc).module))
    ]
    if missing:
        return False, f"the host kernel lacks {', '.join(missing)}"
    needs_netem = any(estimate.needs_netem(r) for r in runs)
    if needs_netem and not _kernel_has_qdisc("netem", modules_possible):
        return False, "the host kernel has no netem (delay/loss)"
    if any(estimate.netspec(r).needs_fq for r in runs) and not _kernel_has_qdisc("fq", modules_possible):
        return False, "the host kernel has no fq (per-flow delays)"
    disciplines = sorted(set().union(*(estimate.netspec(r).qdisc_modules for r in runs)))
    lacking = [m for m in disciplines if not _kernel_has_qdisc(m.removeprefix("sch_"), modules_possible)]
    if lacking:
        return False, f"the host kernel has no {', '.join(m.removeprefix('sch_') for m in lacking)} (queue discipline)"
    return True, "the host kernel has everything these runs need"


def choose_backend(runs: list[RunSpec], kernel: str | None = None) -> tuple[str, str]:
    """Where runs go when nobody says: a guest when a kernel is named (only a guest boots one), else this
    kernel when it can, else the lab VM when it is up, else a virtme-ng guest. Returns the backend's name
    (:data:`backends.NAMES`) and why."""
    if kernel:
        return "guest", f"--kernel {kernel} boots in a guest"
    local_ok, why = host_can_run(runs)
    if local_ok:
        return "local", why
    if vagrant.vm_running():
        return "vagrant", f"{why}; the lab VM is up (vagrant)"
    return "guest", f"{why}; no lab VM is up"


def _kernel_has_qdisc(kind: str, modules_possible: bool) -> bool:
    release = os.uname().release
    if modules_possible and list(Path(f"/lib/modules/{release}").rglob(f"sch_{kind}.ko*")):
        return True
    config = Path(f"/boot/config-{release}")
    return config.exists() and f"CONFIG_NET_SCH_{kind.upper()}=y" in config.read_text()
