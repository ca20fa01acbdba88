"""The runner's side of the latency traffic (``testbed.plan.latency``): requests servers started with
the iperf3 servers, requests clients started and held with the iperf3 clients, and every ping and
requests flow let go at its start time by a thread of its own while the bulk flows run.

A ping is started before the traffic too, and held at its first ``socket()`` (the iperf3 clients' shim,
:mod:`testbed.guest.launch`: ping has no ``connect()`` when given its source address); ``-D`` stamps each
reply. Exec'd at its start time instead, a ping read its binary and libraries over the guest's shared
root filesystem while the traffic ran (90-180 system calls of the host's file server, virtiofsd, at
every bufferbloat run's start), a wait that in virtual time moved its start by the host's load. Their
output is the run's ``raw/ping-<id>.txt`` and ``raw/requests-<id>.jsonl``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed.guest import clients, launch
from testbed.guest.errors import RunFailed
from testbed.plan.latency import LatencyFlow, ping_argv, requests_client_argv, requests_server_argv

#: how long a latency flow may run past its stop before the run waits no longer for it
GRACE_S = 15.0


class LatencyTraffic:
    """The ping and requests flows of one run, from their servers to their exit."""

    def __init__(self, net, flows: list[LatencyFlow], raw: Path):
        self.net, self.flows, self.raw = net, flows, raw
        self.servers: dict[str, subprocess.Popen] = {}
        self.clients: dict[str, subprocess.Popen] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start_servers(self) -> None:
        for flow in self.flows:
            if flow.kind == "requests":
                command = launch.Command(requests_server_argv(flow, sys.executable), {})
                self.servers[flow.id] = launch.start(
                    self.net, flow.receiver, command, self.raw / f"requests-{flow.id}-server.log"
                )

    def prestart(self) -> None:
        """Ping and requests clients started and held; every requests server listening."""
        for flow in self.flows:
            if flow.kind == "requests":
                command = launch.Command(requests_client_argv(flow, sys.executable), {})
                self.clients[flow.id] = launch.start(
                    self.net, flow.sender, command, self.raw / f"requests-{flow.id}.jsonl"
                )
            else:
                command = launch.Command(ping_argv(flow), launch.held_at_socket_env())
                self.clients[flow.id] = launch.start(self.net, flow.sender, command, self.raw / f"ping-{flow.id}.txt")
        for fid, proc in self.clients.items():
            deadline = time.monotonic() + clients.CLIENT_PRESTART_TIMEOUT_S
            while clients.process_state(proc.pid) != "T":
                if proc.poll() is not None or time.monotonic() > deadline:
                    kind = next(f.kind for f in self.flows if f.id == fid)
                    output_file = self.raw / (f"requests-{fid}.jsonl" if kind == "requests" else f"ping-{fid}.txt")
                    output = output_file.read_text(errors="replace").strip()[-300:]
                    raise RunFailed(
                        f"the {kind} client of {fid} could not be started and held (exit status "
                        f"{proc.poll()}; its output: {output!r})"
                    )
                time.sleep(0.01)
        for fid, proc in self.servers.items():
            port = next(f.server_port for f in self.flows if f.id == fid)
            deadline = time.monotonic() + clients.SERVER_LISTEN_TIMEOUT_S
            while not clients.listening(proc.pid, port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = (self.raw / f"requests-{fid}-server.log").read_text(errors="replace").strip()[-300:]
                    raise RunFailed(
                        f"the requests server of {fid} did not listen on port {port} (exit status "
                        f"{proc.poll()}; its output: {output!r})"
                    )
                time.sleep(0.01)

    def release(self, t0: float) -> None:
        """From now on, each flow goes at ``t0`` + its start (monotonic clock), in a thread."""
        if self.flows:
            self._thread = threading.Thread(target=self._release, args=(t0,), name="latency", daemon=True)
            self._thread.start()

    def _release(self, t0: float) -> None:
        for flow in sorted(self.flows, key=lambda f: f.start_s):
            if self._stop.wait(max(0.0, t0 + flow.start_s - time.monotonic())):
                return
            self.clients[flow.id].send_signal(signal.SIGCONT)

    def wait(self, t0: float) -> list[str]:
        """Wait for every flow to end (its stop plus GRACE_S at most); the servers ended. Returns what failed."""
        failures = []
        if self._thread is not None:
            self._thread.join()
        for flow in self.flows:
            proc = self.clients.get(flow.id)
            if proc is None:
                failures.append(f"{flow.id}: the {flow.kind} flow was never started")
                continue
            try:
                proc.wait(timeout=max(0.0, t0 + flow.stop_s + GRACE_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                failures.append(f"{flow.id}: the {flow.kind} flow still ran {GRACE_S:g} s after its stop")
                continue
            # ping exits 1 when some echoes had no reply: a result (a full queue), not a failure
            if proc.returncode not in ((0, 1) if flow.kind == "ping" else (0,)):
                failures.append(f"{flow.id}: the {flow.kind} flow exited with status {proc.returncode}")
        self.stop()
        return failures

    def stop(self) -> None:
        """Everything still running ended (a run stopped early; the servers after the traffic)."""
        self._stop.set()
        for proc in [*self.servers.values(), *self.clients.values()]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
