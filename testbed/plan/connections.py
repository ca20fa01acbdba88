"""Flows to iperf3 connections: which hosts, ports and times each connection uses (pure), and
the argv that starts its server and client.

A scenario flow with ``count: n`` is n flows; a flow with several ON periods is one iperf3
connection per period (paper 000 §3.1's reverse flows are ON in [250, 500] and [750, 1000] s).
Each connection gets its own server port and a fixed client port (``--cport``), so its data
packets and its tcp_probe events can be told apart from every other connection and from
iperf3's control connection, which shares the server port (MACHINE.md).

Runs side by side on one kernel (testbed.guest.sidebyside) each take a block of these ports of their own
(``slot``): their hosts live in namespaces of their own, but tcp_probe and our module's events are the
kernel's, told apart by port alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SERVER_PORT_BASE = 5201
CLIENT_PORT_BASE = 40000
MAX_CONNECTIONS = 20000
#: the most runs side by side on one kernel; each gets a block of MAX_CONNECTIONS // MAX_SLOTS ports
MAX_SLOTS = 4
#: ``--side-by-side auto``: how many slots is decided per session (testbed.host.slotchoice)
AUTO_SLOTS = 0
SLOT_PORTS = MAX_CONNECTIONS // MAX_SLOTS


@dataclass(frozen=True)
class Connection:
    id: str  # "c<k>"
    flow: int  # index of the flow in the scenario file
    replica: int  # 0..count-1
    period: int  # index of the ON period
    pair: int  # topology pair (sender/receiver hosts)
    cc: str
    direction: str
    sender: str
    sender_ip: str
    receiver: str
    receiver_ip: str
    server_port: int
    client_port: int
    start_s: float
    stop_s: float
    base_rtt_ms: float
    #: the router where its data packets enter the network; its pcap accounts for them
    capture_node: str | None = None
    #: a fixed-size transfer (iperf3 -n) instead of sending until stop_s
    size_bytes: int | None = None
    #: socket buffers in KiB on both ends (iperf3 -w), which cap the window
    window_kb: int | None = None

    @property
    def duration_s(self) -> float:
        return self.stop_s - self.start_s

    def to_dict(self) -> dict:
        return asdict(self)


def plan_connections(scenario, topology, slot: int | None = None) -> list[Connection]:
    """Expand a resolved scenario's flows into connections on ``topology`` (its ``flow_pairs`` says
    which sender/receiver pair each instance of each flow uses). ``slot``: the run's place among runs side
    by side on one kernel, whose ports it must not share (None: alone, every port is its own)."""
    offset, limit = (0, MAX_CONNECTIONS) if slot is None else (slot * SLOT_PORTS, SLOT_PORTS)
    if slot is not None and not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"slot {slot}: at most {MAX_SLOTS} runs side by side, slots 0-{MAX_SLOTS - 1}")
    connections: list[Connection] = []
    for flow_index, (flow, pairs) in enumerate(zip(scenario.flows, topology.flow_pairs(scenario.flows), strict=True)):
        if flow.kind != "bulk":
            continue  # ping and requests flows: testbed.plan.latency
        for replica, pair in enumerate(pairs):
            sender, receiver = topology.endpoints(pair, flow.direction)
            for period, (start, stop) in enumerate(flow.on_periods(scenario.duration_s)):
                k = len(connections)
                connections.append(
                    Connection(
                        id=f"c{k}",
                        flow=flow_index,
                        replica=replica,
                        period=period,
                        pair=pair,
                        cc=flow.cc,
                        direction=flow.direction,
                        sender=sender.node,
                        sender_ip=sender.ip,
                        receiver=receiver.node,
                        receiver_ip=receiver.ip,
                        server_port=SERVER_PORT_BASE + offset + k,
                        client_port=CLIENT_PORT_BASE + offset + k,
                        start_s=float(start),
                        stop_s=float(stop),
                        base_rtt_ms=topology.base_rtt_ms(pair),
                        capture_node=topology.ingress_router(pair, flow.direction),
                        size_bytes=round(flow.size_mb * 1e6) if flow.size_mb else None,
                        window_kb=flow.window_kb,
                    )
                )
    if len(connections) > limit:
        beside = " side by side with other runs (the ports are shared out): run it alone" if slot is not None else ""
        raise ValueError(f"{len(connections)} connections; at most {limit} are supported{beside}")
    return connections


#: iperf3's default TCP write size
MAX_BLOCK_BYTES = 128 * 1024


def block_bytes(size_bytes: int) -> int:
    """The largest write size up to iperf3's default that divides the transfer: iperf3 -n sends whole
    blocks, so 3.2 MB in 128 KiB blocks would send 3,276,800 bytes. A size with no divisor of at least
    1 KiB (a large prime) keeps 128 KiB blocks and is rounded up to whole blocks."""
    parts = -(-size_bytes // MAX_BLOCK_BYTES)
    while size_bytes % parts:
        parts += 1
    block = size_bytes // parts
    return block if block >= 1024 or size_bytes < 1024 else MAX_BLOCK_BYTES


#: at most this many iperf3 report intervals per connection: 1 s each up to 200 s, then coarser, so a
#: 1000 s run of 210 connections does not end with 420 processes writing ~0.5 MB of JSON each (under
#: TCG that took longer than the runner's 30 s grace at M = 200)
MAX_REPORT_INTERVALS = 200
REPORT_INTERVALS_S = (1, 2, 5, 10, 20, 50, 100)
#: iperf3's server gives up on a test after this long without data (its --rcv-timeout, default 120 s);
#: ours waits the whole run and more: a starved flow (RTO backed off to Linux's 120 s maximum, one of
#: 200 flows) is a result, and a hung one is the runner's to catch
RCV_TIMEOUT_SLACK_S = 120


def report_interval_s(duration_s: float) -> float:
    """iperf3's reporting interval for a connection of this duration (MAX_REPORT_INTERVALS)."""
    return next((i for i in REPORT_INTERVALS_S if duration_s / i <= MAX_REPORT_INTERVALS), REPORT_INTERVALS_S[-1])


def server_argv(conn: Connection) -> list[str]:
    # -1: serve exactly one test, then exit with its JSON on stdout
    timeout_ms = round((conn.duration_s + RCV_TIMEOUT_SLACK_S) * 1000)
    return [
        "iperf3",
        "-s",
        "-1",
        "-J",
        "-p",
        str(conn.server_port),
        "-i",
        f"{report_interval_s(conn.duration_s):g}",
        "--rcv-timeout",
        str(timeout_ms),
    ]


def client_argv(conn: Connection) -> list[str]:
    amount = (
        ["-n", str(conn.size_bytes), "-l", str(block_bytes(conn.size_bytes))]
        if conn.size_bytes
        else ["-t", f"{conn.duration_s:g}"]
    )
    return [
        "iperf3",
        "-c",
        conn.receiver_ip,
        "-B",
        conn.sender_ip,
        "-p",
        str(conn.server_port),
        "--cport",
        str(conn.client_port),
        "-C",
        conn.cc,
        *amount,
        *(["-w", f"{conn.window_kb}K"] if conn.window_kb else []),
        "-i",
        f"{report_interval_s(conn.duration_s):g}",
        "-J",
    ]
