"""What the running kernel must have for a run: the algorithms and qdisc modules it needs, loaded,
and the project's own module inserted from the build the manifest records."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testbed.guest import kernellock, modules
from testbed.guest.console import log
from testbed.guest.errors import RunFailed
from testbed.results import provenance
from testbed.scenario.algorithms import lookup as cc_lookup
from testbed.scenario.schema import Scenario


def available_ccs() -> list[str]:
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def load_project_modules(paths: dict[str, str | None]) -> dict[str, str]:
    """insmod this project's modules; returns the .ko path of each as loaded.

    A path of None means "build it here for the running kernel" (the lab VM: the host has no
    headers for the VM's kernel). A module of the same name already loaded from another build
    (the lab VM's DKMS copy, loaded at boot) is replaced, so that what runs is what the manifest
    records.
    """
    with kernellock.loading_modules():
        return {name: _loaded(name, path) for name, path in paths.items()}


def _loaded(name: str, path: str | None) -> str:
    """One project module inserted (or kept, when this build of it is in already); the .ko's path."""
    ko = Path(path) if path else modules.build(os.uname().release, log=log)
    wanted = provenance.module_info(str(ko)) or {}
    sys_module = Path(f"/sys/module/{name}")
    if sys_module.exists():
        current = (sys_module / "srcversion").read_text().strip() if (sys_module / "srcversion").exists() else None
        if current and current == wanted.get("srcversion"):
            return str(ko)
        out = subprocess.run(["rmmod", name], capture_output=True, text=True)
        if out.returncode != 0:
            raise RunFailed(
                f"another build of {name} is loaded and cannot be unloaded ({out.stderr.strip()}): "
                f"end the connections that use it, or 'rmmod {name}'"
            )
    out = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RunFailed(f"insmod {ko} failed: {out.stderr.strip()} (built for another kernel? see dmesg)")
    return str(ko)


def ensure_kernel_support(
    scenario: Scenario, needs_netem: bool, project_modules: dict[str, str | None], qdisc_modules: list[str] = ()
) -> dict:
    """Load the modules a run needs; fail with what the kernel has when something is missing (a queue
    discipline's module that is missing fails where the qdisc is made: testbed.guest.shaping).

    Returns the project modules as loaded (name -> .ko path)."""
    wanted = sorted(scenario.algorithms)
    loaded = load_project_modules(
        {m: p for m, p in project_modules.items() if m in {cc_lookup(cc).module for cc in wanted}}
    )
    modules = [cc_lookup(cc).module for cc in wanted if cc_lookup(cc).module and not cc_lookup(cc).project_module]
    modules += ["sch_htb", "cls_u32", *qdisc_modules] + (["sch_netem", "sch_prio"] if needs_netem else [])
    subprocess.run(["modprobe", "-a", "-q", *modules], capture_output=True)
    have = available_ccs()
    missing = [cc for cc in wanted if cc not in have]
    if missing:
        raise RunFailed(
            f"this kernel ({os.uname().release}) has no congestion control {', '.join(missing)}; it has: "
            f"{', '.join(have)}. westwood and vegas are modules of Debian's kernel: run in the guest "
            f"(testbed run --backend guest, the default when the host kernel lacks them)"
        )
    return loaded
