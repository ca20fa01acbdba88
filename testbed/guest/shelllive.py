"""``live`` in ``testbed shell``: the shell's network recorded as a run records it, for the live page.

The shell's plan folder is a session of one run (``plan.json``, run folder ``shell``). The host serves
the live page on that folder from the shell's start (testbed.report.live.liveserver; a guest writes the
folder through virtme-ng's shared folder) and leaves the page's URL in it (:data:`URL_FILE`). ``live``
then starts what a run starts for the page: the ``tcp:tcp_probe`` trace of the scenario's connections
(``raw/tcp_probe.txt``), the bottlenecks' queue sampler (``raw/queues-live.csv``) and a running
manifest with the connections, the topology and the time zero; the page draws every flow the shell
starts from then on, on one clock. Leaving the shell ends the recording and the page says so.

In the lab VM the folder is the VM's, which the host cannot read while the shell runs: ``live`` says so.
"""

from __future__ import annotations

import time
from pathlib import Path

from testbed.guest import capture, queues
from testbed.guest.network import Network
from testbed.plan.connections import Connection
from testbed.results import rundir
from testbed.scenario.points import RunSpec

#: the file in the shell's plan folder where the host leaves the page's URL (and the ssh -L line)
URL_FILE = "live-url"
#: the shell's run folder in its plan (testbed.host.shell)
RUN = "shell"


class ShellRecording:
    """The traces the live page reads, started by ``live`` and ended with the shell."""

    def __init__(self, folder: Path, spec: RunSpec, net: Network, connections: list[Connection]):
        self.folder, self.spec, self.net, self.connections = folder, spec, net, connections
        self.run_dir = folder / RUN
        self.trace: capture.EventTrace | None = None
        self.sampler: queues.QueueSampler | None = None
        self.manifest: dict = {}

    def start(self) -> str:
        """Start recording (once); the page's URL, or why there is none."""
        url_file = self.folder / URL_FILE
        if not url_file.is_file():
            return (
                "no live page here: it reads the shell's folder on the host, which a shell in the lab VM "
                "does not share (run 'testbed shell' with --backend guest or local to watch it)"
            )
        if self.trace is None:
            raw = self.run_dir / "raw"
            raw.mkdir(parents=True, exist_ok=True)
            self.trace = capture.tcp_probe_trace(raw / "tcp_probe.txt", [c.client_port for c in self.connections])
            self.trace.start()
            links = [(b.node, b.intf) for b in self.net.spec.bottlenecks]
            self.sampler = queues.QueueSampler(links, self.net.netns_path, live_path=raw / queues.LIVE_CSV)
            self.sampler.start()
            self.manifest = {
                "status": "running",
                "scenario": self.spec.scenario_name,
                "point_id": self.spec.point_id,
                "seed": self.spec.seed,
                "t0_monotonic": time.monotonic(),
                "connections": [c.to_dict() for c in self.connections],
                "topology": {
                    "name": self.spec.scenario.topology.name,
                    "bottlenecks": [b.__dict__ for b in self.net.spec.bottlenecks],
                },
            }
            rundir.write_json_atomic(self.run_dir / rundir.MANIFEST, self.manifest)
        return f"live page (every flow started from now on): {url_file.read_text().strip()}"

    def stop(self) -> None:
        """End the recording: the page is told the shell's run has ended."""
        if self.trace is None:
            return
        self.trace.stop()
        capture.release_instances()  # the trace's own instance: nothing of the shell's is left
        if self.sampler is not None:
            self.sampler.stop()
        rundir.write_json_atomic(self.run_dir / rundir.MANIFEST, {**self.manifest, "status": "ended"})
        self.trace = self.sampler = None
