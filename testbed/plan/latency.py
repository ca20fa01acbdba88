"""Latency traffic beside the bulk flows: which hosts, ports and times each ping and requests flow
uses (pure), and the argv that starts it.

A ``kind: ping`` flow is one ``ping`` process on its sending host, an ICMP echo every ``interval_ms``
to its receiving host: the round trip a packet sees through the queues the bulk flows fill (Flent's
"ping under load"). A ``kind: requests`` flow is a client on its sending host that fetches
``size_kb`` from a server on its receiving host, each request on a new TCP connection, one after
another with ``think_ms`` between (a web page's objects, Flent's TCP_CRR): each completion time, from
``connect()`` to the last byte, is how long a short transfer takes beside the bulk flows
(``testbed/guest/shortflows.py``).

A requests flow's connections bind client ports of its own (``client_ports``), below the hosts'
ephemeral range: a port from that range is how the bottleneck's control lane recognises iperf3's
control connections (topologies.shaping.CONTROL_PORT_MIN), and the responses would skip the queue.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

#: the requests servers listen from here (iperf3's servers use 5201 and up)
REQUEST_SERVER_PORT_BASE = 4000
#: each requests flow binds its connections to this many client ports of its own, in turn: a port is
#: used again only after this many requests (the hosts keep no TIME_WAIT: tcp_max_tw_buckets=0)
REQUEST_CLIENT_PORTS = 64
REQUEST_CLIENT_PORT_BASE = 20000
#: ping's deadline beyond its planned count: a slow start under TCG must not cut the last echoes
PING_DEADLINE_SLACK_S = 2
SHORTFLOWS = Path(__file__).resolve().parents[1] / "guest" / "shortflows.py"


@dataclass(frozen=True)
class LatencyFlow:
    id: str  # "p<k>" (ping) or "q<k>" (requests)
    kind: str  # "ping" or "requests"
    flow: int  # index of the flow in the scenario file
    replica: int
    period: int
    pair: int
    direction: str
    sender: str
    sender_ip: str
    receiver: str
    receiver_ip: str
    start_s: float
    stop_s: float
    base_rtt_ms: float
    cc: str | None = None  # requests: the algorithm of its connections
    interval_ms: float | None = None  # ping
    size_bytes: int | None = None  # requests: each response
    think_ms: float = 0.0  # requests
    server_port: int | None = None  # requests
    client_port_first: int | None = None  # requests: its connections bind this port and the next ones

    @property
    def duration_s(self) -> float:
        return self.stop_s - self.start_s

    def to_dict(self) -> dict:
        return asdict(self)


def plan_latency(scenario, topology) -> list[LatencyFlow]:
    """The ping and requests flows of a resolved scenario on ``topology`` (pairs as the bulk flows')."""
    planned: list[LatencyFlow] = []
    for flow_index, (flow, pairs) in enumerate(zip(scenario.flows, topology.flow_pairs(scenario.flows), strict=True)):
        if flow.kind == "bulk":
            continue
        for replica, pair in enumerate(pairs):
            sender, receiver = topology.endpoints(pair, flow.direction)
            for period, (start, stop) in enumerate(flow.on_periods(scenario.duration_s)):
                k = len(planned)
                requests = flow.kind == "requests"
                planned.append(
                    LatencyFlow(
                        id=f"{'q' if requests else 'p'}{k}",
                        kind=flow.kind,
                        flow=flow_index,
                        replica=replica,
                        period=period,
                        pair=pair,
                        direction=flow.direction,
                        sender=sender.node,
                        sender_ip=sender.ip,
                        receiver=receiver.node,
                        receiver_ip=receiver.ip,
                        start_s=float(start),
                        stop_s=float(stop),
                        base_rtt_ms=topology.base_rtt_ms(pair),
                        cc=flow.cc,
                        interval_ms=None if requests else flow.ping_interval_ms,
                        size_bytes=round(flow.size_kb * 1000) if requests else None,
                        think_ms=flow.think_ms if requests else 0.0,
                        server_port=REQUEST_SERVER_PORT_BASE + k if requests else None,
                        client_port_first=REQUEST_CLIENT_PORT_BASE + REQUEST_CLIENT_PORTS * k if requests else None,
                    )
                )
    return planned


def ping_argv(flow: LatencyFlow) -> list[str]:
    """``ping`` with a timestamp per reply (``-D``, the captures' clock), ``count`` echoes at the interval."""
    interval_s = flow.interval_ms / 1000
    count = max(1, math.floor(flow.duration_s / interval_s))
    deadline = math.ceil(flow.duration_s) + PING_DEADLINE_SLACK_S
    return [
        "ping",
        "-n",
        "-D",
        "-i",
        f"{interval_s:g}",
        "-c",
        str(count),
        "-w",
        str(deadline),
        "-I",
        flow.sender_ip,
        flow.receiver_ip,
    ]


def requests_server_argv(flow: LatencyFlow, python: str) -> list[str]:
    return [
        python,
        str(SHORTFLOWS),
        "serve",
        "--bind",
        flow.receiver_ip,
        "--port",
        str(flow.server_port),
        "--cc",
        flow.cc,
    ]


def requests_client_argv(flow: LatencyFlow, python: str) -> list[str]:
    """The client holds itself (SIGSTOP) once ready; continued at its start time, it runs for its duration."""
    return [
        python,
        str(SHORTFLOWS),
        "fetch",
        "--server",
        flow.receiver_ip,
        "--port",
        str(flow.server_port),
        "--bind",
        flow.sender_ip,
        "--first-port",
        str(flow.client_port_first),
        "--ports",
        str(REQUEST_CLIENT_PORTS),
        "--size",
        str(flow.size_bytes),
        "--think-ms",
        f"{flow.think_ms:g}",
        "--duration-s",
        f"{flow.duration_s:g}",
        "--cc",
        flow.cc,
    ]
