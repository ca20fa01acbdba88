"""A Dask scheduler preload for SSH clusters: the scheduler ends when the controller's client leaves.

SSHCluster starts the scheduler and the workers on remote hosts over SSH. When the controller is
killed (SIGKILL: no ``close()``), nothing tells them: without a terminal, sshd does not hang up the
remote commands, and they would wait for their idle and death timeouts with a run still going. The
controller's connection to the scheduler does drop at once, so this plugin closes the scheduler when
its last client is gone; a closing scheduler tells its workers to close, and a worker that ends takes
its run down with it (:mod:`testbed.host.clusterwork`). Loaded with ``scheduler_options={"preload": [...]}``.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import SchedulerPlugin

#: Dask's own pseudo-client for tasks that outlive their client
_FIRE_AND_FORGET = "fire-and-forget"


class EndWithController(SchedulerPlugin):
    name = "cc-testbed-end-with-controller"

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler

    def remove_client(self, scheduler, client: str) -> None:
        if not [c for c in scheduler.clients if c not in (client, _FIRE_AND_FORGET)]:
            scheduler.loop.add_callback(scheduler.close)


def dask_setup(scheduler) -> None:
    scheduler.add_plugin(EndWithController(scheduler))
