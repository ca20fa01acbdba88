"""The iperf3 clients of a run: started before traffic and held at their first connect(), released
on schedule, and how late their data really started (read from the captures)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from testbed.guest import launch
from testbed.guest.errors import RunFailed
from testbed.guest.network import Network
from testbed.plan.connections import Connection
from testbed.results.pcapfile import first_bulk_times, setup_retransmission_s

#: how long iperf3 may overrun its planned stop before the run is declared failed: this, plus a little
#: per connection (under TCG, 210 iperf3 pairs ending at once write their JSON slowly)
CLIENT_GRACE_S = 30.0


CLIENT_GRACE_S_PER_CONNECTION = 0.1


#: every client must be started and stopped (held for its start time) within this long
CLIENT_PRESTART_TIMEOUT_S = 600.0


#: traffic starts at least this long after the schedule is computed, once every server listens (the
#: loss channels are armed in between); it was a fixed 1 s that also covered the servers' start
START_DELAY_S = 0.3


#: every iperf3 server must listen within this long of its start
SERVER_LISTEN_TIMEOUT_S = 30.0


#: iperf3's cookie, the first thing a client sends on a data connection: a larger segment starts the data
IPERF3_COOKIE_BYTES = 37


def prestart_clients(
    net: Network, connections: list[Connection], raw: Path, scratch: Path
) -> dict[str, subprocess.Popen]:
    """Every connection's iperf3 client, started before traffic and held (stopped at its first
    connect(), :mod:`testbed.guest.launch`) until it is continued shortly before its start time.

    Starting a process costs tens of milliseconds in a TCG guest, seconds for hundreds of them.
    We wait until every one has stopped, so that no SIGCONT can come before its SIGSTOP."""
    library = launch.hold_library()
    clients = {
        c.id: launch.start(
            net, c.sender, launch.client_command(c, scratch, library), raw / f"iperf3-{c.id}-client.json"
        )
        for c in connections
    }
    deadline = time.monotonic() + CLIENT_PRESTART_TIMEOUT_S
    for cid, proc in clients.items():
        while process_state(proc.pid) != "T":
            if proc.poll() is not None or time.monotonic() > deadline:
                output = (raw / f"iperf3-{cid}-client.json").read_text(errors="replace").strip()[-300:]
                raise RunFailed(
                    f"the iperf3 client of {cid} could not be started and held before traffic "
                    f"(exit status {proc.poll()}; its output: {output!r}); is iperf3 installed in "
                    f"the guest?"
                )
            time.sleep(0.01)
    return clients


def wait_listening(servers: dict[str, subprocess.Popen], ports: dict[str, int], raw: Path) -> None:
    """Return once every server listens on its port (read from ``/proc/<pid>/net/tcp*``, its own
    namespace's sockets: no process started per check); RunFailed naming the one that does not."""
    deadline = time.monotonic() + SERVER_LISTEN_TIMEOUT_S
    for cid, proc in servers.items():
        while not listening(proc.pid, ports[cid]):
            if proc.poll() is not None or time.monotonic() > deadline:
                output = (raw / f"iperf3-{cid}-server.json").read_text(errors="replace").strip()[-300:]
                raise RunFailed(
                    f"the iperf3 server of {cid} did not listen on port {ports[cid]} (exit status "
                    f"{proc.poll()}; its output: {output!r})"
                )
            time.sleep(0.01)


def listening(pid: int, port: int) -> bool:
    needle = f":{port:04X} "
    for table in ("tcp6", "tcp"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        # columns: sl local_address rem_address st ...; st 0A is LISTEN
        if any(needle in f"{fields[1]} " and fields[3] == "0A" for fields in (line.split() for line in lines)):
            return True
    return False


def data_starts(connections: list[Connection], raw: Path, t0_unix: float) -> tuple[dict[str, float], list[str]]:
    """How late each connection's data started against its schedule, from the captures (the first segment
    larger than iperf3's cookie where its packets enter the network); and what could not be read."""
    lag: dict[str, float] = {}
    problems = []
    for node in sorted({c.capture_node for c in connections}):
        mine = {(c.sender_ip, c.client_port): c for c in connections if c.capture_node == node}
        found, problem = first_bulk_times(raw / f"{node}.pcap", set(mine), IPERF3_COOKIE_BYTES)
        if problem:
            problems.append(problem)
        for key, ts in found.items():
            c = mine[key]
            lag[c.id] = round(ts - (t0_unix + c.start_s), 3)
    return lag, problems


def setup_waits(connections: list[Connection], raw: Path, t0_unix: float, lag: dict[str, float]) -> dict[str, float]:
    """For the connections in ``lag`` (late ones): how long their set-up waited on segments sent again
    (testbed.results.pcapfile.setup_retransmission_s), from the captures."""
    waits: dict[str, float] = {}
    for node in sorted({c.capture_node for c in connections if c.id in lag}):
        mine = {(c.sender_ip, c.client_port): c for c in connections if c.capture_node == node and c.id in lag}
        setups = {key: (c.server_port, t0_unix + c.start_s + lag[c.id]) for key, c in mine.items()}
        found, _ = setup_retransmission_s(raw / f"{node}.pcap", setups)
        waits.update({mine[key].id: round(seconds, 3) for key, seconds in found.items()})
    return waits


def process_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``T``: stopped), or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
