"""``testbed cleanup``: what killed controllers and runs left behind, removed; a live session's left alone.

Guests whose controller is gone (virtme.stop_orphans), and when no session runs on this kernel, the
processes, interfaces, namespaces and trace instances of killed runs; a killed cluster worker's
scratch folder and a killed controller's cluster credentials; the lab VM's orphaned runners.
"""

from __future__ import annotations

from testbed.guest import kernellock
from testbed.guest.capture import INSTANCES, remove_instance
from testbed.guest.network import cleanup_leftovers
from testbed.host import clustertls, vagrant
from testbed.host.clusterwork import DASK_DIRECTORY, clean_scratch
from testbed.host.virtme import stop_orphans


def cleanup() -> list[str]:
    """Remove every leftover (module doc); one line per thing removed or left alone, and why."""
    lines = []
    running = kernellock.busy()
    if running:  # its processes, interfaces and trace instances are not leftovers
        lines.append(
            f"cleanup: a session runs on this kernel ({running}): its runs' processes, interfaces and "
            f"trace instances are left alone"
        )
    done = stop_orphans() + ([] if running else cleanup_leftovers())
    done += [f"removed the folder of a killed cluster worker {folder}" for folder in clean_scratch()]
    done += [
        f"removed a killed controller's cluster credentials {folder}"
        for folder in clustertls.remove_stale(DASK_DIRECTORY)
    ]
    if vagrant.vm_running():
        with vagrant.LabVM() as vm:
            done += vm.stop_orphan_runners()
    for name in INSTANCES if not running else ():
        remove_instance(name)
    lines.append(f"cleanup: {len(done)} leftovers removed" if done else "cleanup: nothing left behind")
    return lines
