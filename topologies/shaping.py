"""What qdiscs go on which interface, computed purely (``testbed.guest.shaping`` installs them).

A topology describes each interface's egress as an :class:`EgressPlan` (rate + queue, and/or
delay + loss). :func:`qdisc_specs` turns a plan into the list of qdiscs/classes to create, a
pure function the unit tests check; :func:`testbed.guest.shaping.apply` sends them to the kernel through pyroute2
(netlink) inside a node's network namespace.

Layout on one interface:

* rate-limited egress (a bottleneck): ``htb 1:`` → class ``1:1`` (rate = ceil) → ``pfifo 10:``
  with ``limit = queue_pkts``: a drop-tail queue of exactly that many packets, or the link's queue
  discipline as ``10:`` (``topologies.queues``: codel, fq_codel, pie, red, cake); beside it the control
  lane, class ``1:2`` → ``pfifo 20:``, for TCP handshakes and what iperf3's server says on its
  control connections (:func:`control_lane_specs`: the papers' flows have neither);
* delay egress: ``netem 1:`` with a large ``limit`` (netem counts packets held for delay against
  its limit, so it must never be the queue that drops);
* delay and loss egress: ``prio 1:`` with two bands, each a netem with the delay: ``netem 20:``
  (band 2, everything) also drops, ``netem 10:`` (band 1) is the control lane and does not (the
  papers' channel carries neither handshakes nor control connections: a lost SYN would start a flow
  a second or more late); a Gilbert-Elliott or 4-state loss model is netem's ``loss gemodel`` or
  ``loss state``, installed with the ``tc`` command (pyroute2's netem has no loss models);
* per-destination delay (one node forwarding many flows, each with its own base RTT): ``fq`` as
  the root qdisc (no pacing, limits far above any window) and a tc-BPF program on the ``clsact``
  egress hook (``testbed/guest/bpf/edt_delay.bpf.c``) that stamps each packet with its departure time,
  now + its destination's delay, from a map the runner fills and corrects with ``bpftool``.
  One timer and per-flow time-ordered trees, whatever the number of destinations. The previous
  layout, an HTB class with a netem leaf and a u32 filter per destination, scales with the number
  of classes: in a 2-vCPU TCG guest, 210 iperf3 flows through 210 such classes kept the CPU 100 %
  busy (mostly kernel) and 61 of them failed, where the same flows through one netem left it about
  70 % idle; and 210 classes took 34-36 s to install. Put it on a forwarding node, never on a
  sending host: ``fq`` keeps a local socket's packets charged to the socket while they wait (TCP
  small queues would throttle the flow). The qdisc goes in with the ``tc`` command: pyroute2 has
  no ``fq``;
* the papers' time-based two-state loss: a tc-BPF program on the interface's ``clsact`` egress hook
  (:mod:`testbed.guest.lossbpf`), armed with the run's seeded timeline when traffic starts. Use it on a
  router's interface: a drop on a sending host's own egress is reported back to its socket.

A plan with both a rate and a delay is refused: keep them on different interfaces
(MACHINE.md: netem's limit would turn into the bottleneck queue).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topologies.lossmodel import (
    BernoulliLoss,
    FourStateLoss,
    GilbertElliottLoss,
    LossModel,
    NetemLossModel,
    TimedTwoStateLoss,
    netem_loss_args,
)
from topologies.params import WIRE_BYTES_PER_PACKET
from topologies.queues import Cake, Codel, Fifo, FqCodel, Pie, QueueDiscipline, Red

ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
#: the hosts' ephemeral ports, which iperf3's control connections take: 61440-65535, above every fixed
#: port (a control connection could otherwise take a client port first: "unable to connect stream:
#: Address already in use"), and the ports whose top four bits are set, so that one u32 mask finds
#: control traffic (control_lane_specs)
CONTROL_PORT_MIN = 0xF000
#: netem's own limit: far above any window in flight on the links we emulate
NETEM_LIMIT_PKTS = 100_000
#: the handle of the netem that drops on a lossy egress (the control lane's netem is 10:)
LOSSY_NETEM = "20:"
#: the tc-BPF program of per-destination delays (a name of ``testbed.guest.lossbpf.SOURCES``)
EDT_PROGRAM = "edt_delay"
#: fq's horizon: a departure time further ahead than this would be capped (delays are at most 50 s)
FQ_HORIZON_S = 100


@dataclass(frozen=True)
class DelayClass:
    """Packets to ``dst`` (one IPv4 address) wait ``delay_ms`` on this egress."""

    dst: str
    delay_ms: float


#: HTB burst, in time at the link's rate. HTB keeps at most ``burst`` bytes of tokens: when a dequeue
#: comes later than burst / rate (a busy or emulated CPU), the tokens of the delay are lost and the
#: link under-delivers. Measured on the 1-hop parking lot in a 2-vCPU TCG guest, UDP at 1.2 x 10 Mbit/s,
#: 5 probes per setting (expected 9.718 Mbit/s): a 2.4 ms burst read 9.29..9.69 (and 8.2 on a busier
#: machine), 5.3 ms 9.53..9.73, 10 ms 9.64..9.73. The cost is a burst of up to 10 ms of line-rate
#: frames after an idle spell, ~8 frames at 10 Mbit/s.
HTB_BURST_S = 0.010
#: and never below a few full-size frames
MIN_HTB_BURST_BYTES = 3_000


@dataclass(frozen=True)
class EgressPlan:
    """Egress emulation of one interface."""

    rate_mbit: float | None = None
    queue_pkts: int | None = None
    delay_ms: float = 0.0
    loss_pct: float = 0.0
    #: a loss model other than plain Bernoulli (which is ``loss_pct``)
    loss_model: NetemLossModel | TimedTwoStateLoss | None = None
    #: per-destination delays (a node that forwards many flows with different base RTTs)
    delay_classes: tuple[DelayClass, ...] = ()
    #: the discipline of the queue in front of the rate (None: drop-tail of queue_pkts)
    discipline: QueueDiscipline | None = None

    def __post_init__(self) -> None:
        if self.delay_classes and (self.rate_mbit is not None or self.delay_ms or self.loss_pct or self.loss_model):
            raise ValueError("per-destination delay classes take the whole egress: no rate, delay or loss with them")
        if self.rate_mbit is not None and (self.delay_ms or self.loss_pct or self.loss_model):
            raise ValueError("rate and delay/loss must be on different interfaces (netem's limit would queue)")
        if (self.queue_pkts is not None or self.discipline is not None) and self.rate_mbit is None:
            raise ValueError("a queue needs a rate (the queue forms in front of the rate limit)")
        if self.loss_pct and self.loss_model is not None:
            raise ValueError("give either loss_pct or loss_model, not both")

    @classmethod
    def with_loss(cls, model: LossModel | None, **kwargs) -> EgressPlan:
        """A plan carrying ``model`` (Bernoulli as ``loss_pct``, seeded Bernoulli as its timed channel, the
        others as ``loss_model``)."""
        if isinstance(model, BernoulliLoss) and model.seeded:
            return cls(loss_model=model.as_timed(), **kwargs)
        if isinstance(model, BernoulliLoss):
            return cls(loss_pct=model.loss_pct, **kwargs)
        return cls(loss_model=model, **kwargs)

    @property
    def timed_loss(self) -> TimedTwoStateLoss | None:
        return self.loss_model if isinstance(self.loss_model, TimedTwoStateLoss) else None

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms) or self.is_lossy

    @property
    def is_lossy(self) -> bool:
        """netem drops packets here (the timed channel is a tc-BPF program, not netem)."""
        return bool(self.loss_pct or isinstance(self.loss_model, (GilbertElliottLoss, FourStateLoss)))

    @property
    def needs_fq(self) -> bool:
        return bool(self.delay_classes)

    @property
    def is_empty(self) -> bool:
        return self.rate_mbit is None and not self.needs_netem and self.timed_loss is None and not self.needs_fq


@dataclass(frozen=True)
class QdiscSpec:
    """One pyroute2 ``tc()`` call: command, kind and keyword arguments."""

    command: str  # "add", "add-class" or "add-filter"; "tc": the ``tc`` command's arguments in kwargs["argv"]
    kind: str
    kwargs: dict = field(default_factory=dict)


def htb_burst_bytes(rate_mbit: float) -> int:
    """HTB burst: HTB_BURST_S worth of the rate, but never below a few frames."""
    return max(MIN_HTB_BURST_BYTES, int(rate_mbit * 1e6 / 8 * HTB_BURST_S))


def qdisc_specs(plan: EgressPlan) -> list[QdiscSpec]:
    """The qdiscs, classes and filters that implement a plan, root first."""
    if plan.rate_mbit is not None:
        rate = f"{round(plan.rate_mbit * 1e6)}bit"
        burst = htb_burst_bytes(plan.rate_mbit)
        shaped = {"parent": "1:", "rate": rate, "ceil": rate, "burst": burst, "cburst": burst}
        specs = [
            QdiscSpec("add", "htb", {"handle": "1:", "default": "1"}),
            QdiscSpec("add-class", "htb", {"handle": "1:1", "prio": 1, **shaped}),
        ]
        leaf = leaf_spec(plan)
        return specs + ([leaf] if leaf else []) + control_lane_specs(shaped)
    if plan.needs_netem:
        netem = {"handle": "1:", "limit": NETEM_LIMIT_PKTS}
        if plan.delay_ms:
            netem["delay"] = round(plan.delay_ms * 1000)  # pyroute2 takes microseconds
        if not plan.is_lossy:
            return [QdiscSpec("add", "netem", netem)]
        specs = [
            QdiscSpec("add", "prio", {"handle": "1:", "bands": 2, "priomap": [1] * 16}),
            QdiscSpec("add", "netem", {**netem, "handle": "10:", "parent": "1:1"}),
        ]
        if plan.loss_pct:  # percent; netem's loss models go in with the tc command (apply)
            specs.append(
                QdiscSpec("add", "netem", {**netem, "handle": LOSSY_NETEM, "parent": "1:2", "loss": plan.loss_pct})
            )
        # ARP too: a neighbour not resolved through 50 % loss each way stops whatever waits on it
        # (iperf3: "No route to host"), and the papers' channel has no ARP
        arp = QdiscSpec(
            "add-filter",
            "u32",
            {"parent": "1:", "prio": 2, "protocol": ETH_P_ARP, "target": "1:1", "keys": ["0x0/0x0+0"]},
        )
        return specs + control_filters("1:1", LOSS_LANE_MATCHES) + [arp]
    return []


def leaf_spec(plan: EgressPlan) -> QdiscSpec | None:
    """The queue under the shaped class, ``10:``: the plan's discipline, else a pfifo of ``queue_pkts``
    (none at all without either: HTB's default leaf, a pfifo of the interface's txqueuelen)."""
    queue = plan.discipline or (Fifo(discipline="fifo") if plan.queue_pkts is not None else None)
    if queue is None:
        return None
    where = {"handle": "10:", "parent": "1:1"}
    limit = getattr(queue, "limit_pkts", None) or plan.queue_pkts
    sized = {"limit": limit} if limit else {}
    if isinstance(queue, Fifo):
        return QdiscSpec("add", "pfifo", {**where, "limit": limit or FIFO_DEFAULT_LIMIT_PKTS})
    if isinstance(queue, Codel):
        return QdiscSpec("add", "codel", {**where, **_codel_kwargs("cdl", queue, limit)})
    if isinstance(queue, FqCodel):
        kwargs = {**where, **_codel_kwargs("fqc", queue, limit), "fqc_flows": queue.flows}
        if queue.quantum_bytes is not None:
            kwargs["fqc_quantum"] = queue.quantum_bytes
        return QdiscSpec("add", "fq_codel", kwargs)
    if isinstance(queue, Cake):
        return QdiscSpec(
            "add",
            "cake",
            {**where, "rtt": _us(queue.rtt_ms), "flow_mode": queue.flow_mode, "ack_filter": queue.ack_filter},
        )
    argv = ["tc", "qdisc", "add", "dev", "{dev}", "parent", "1:1", "handle", "10:"]
    if isinstance(queue, Pie):
        return QdiscSpec("tc", "pie", {"argv": argv + _pie_args(queue, sized)})
    if isinstance(queue, Red):
        return QdiscSpec("tc", "red", {"argv": argv + _red_args(queue, plan)})
    raise TypeError(f"no qdisc for {queue!r}")


#: pfifo's size when none is given: the kernel's, the interface's txqueuelen (1000 on a veth)
FIFO_DEFAULT_LIMIT_PKTS = 1000


def _us(ms: float) -> int:
    return round(ms * 1000)


def _codel_kwargs(prefix: str, queue: Codel | FqCodel, limit: int | None) -> dict:
    """pyroute2's codel and fq_codel attributes (times in microseconds, ``ecn`` 0/1)."""
    kwargs = {
        f"{prefix}_target": _us(queue.target_ms),
        f"{prefix}_interval": _us(queue.interval_ms),
        f"{prefix}_ecn": int(queue.ecn),
    }
    if limit:
        kwargs[f"{prefix}_limit"] = limit
    if queue.ce_threshold_ms is not None:
        kwargs[f"{prefix}_ce_threshold"] = _us(queue.ce_threshold_ms)
    return kwargs


def _pie_args(queue: Pie, sized: dict) -> list[str]:
    args = [
        "pie",
        "target",
        f"{_us(queue.target_ms)}us",
        "tupdate",
        f"{_us(queue.tupdate_ms)}us",
        "alpha",
        str(queue.alpha),
        "beta",
        str(queue.beta),
        "ecn" if queue.ecn else "noecn",
        "bytemode" if queue.bytemode else "nobytemode",
    ]
    return args + (["limit", str(sized["limit"])] if sized else [])


def _red_args(queue: Red, plan: EgressPlan) -> list[str]:
    """tc-red(8) counts bytes: packets here are full-size frames on the wire (WIRE_BYTES_PER_PACKET)."""
    limit, low, high = queue.thresholds_pkts(plan.queue_pkts)
    size = WIRE_BYTES_PER_PACKET
    args = [
        "red",
        "limit",
        str(limit * size),
        "min",
        str(round(low * size)),
        "max",
        str(round(high * size)),
        "avpkt",
        str(size),
        "probability",
        f"{queue.probability:g}",
        "bandwidth",
        f"{round(plan.rate_mbit * 1e6)}bit",
    ]
    return args + (["ecn"] if queue.ecn else []) + (["adaptive"] if queue.adaptive else [])


#: the control lane's own queue: far above what handshakes and control messages ever hold
CONTROL_LANE_LIMIT_PKTS = 10_000
#: u32 keys (value/mask at a byte offset of the IPv4 header; 20 is the TCP header of a header without
#: options, which the testbed's hosts never send): TCP, then what makes a packet the lane's
_IPV4_TCP = ["0x05000000/0x0f000000+0", "0x00060000/0x00ff0000+8"]
_HANDSHAKE = [*_IPV4_TCP, "0x00020000/0x00020000+32"]  # SYN or SYN-ACK
_TO_CONTROL_CLIENT = [*_IPV4_TCP, f"0x{CONTROL_PORT_MIN:08x}/0x{CONTROL_PORT_MIN:08x}+20"]  # what iperf3's server says
_FROM_CONTROL_CLIENT = [*_IPV4_TCP, f"0x{CONTROL_PORT_MIN << 16:08x}/0x{CONTROL_PORT_MIN << 16:08x}+20"]  # its client
#: iperf3's UDP "connect" (a UDP rate probe's start): the client's first datagram and the server's answer,
#: 4 bytes each, a 32-byte IPv4 packet without options. Without them a probe never starts: through 50 %
#: loss each way a probe's start got through one time in four (the probe read nothing, twice)
#: (one contiguous mask per key: pyroute2 packs a mask with a gap in it wrongly)
_UDP_CONNECT = ["0x05000000/0x0f000000+0", "0x00000020/0x0000ffff+0", "0x00110000/0x00ff0000+8"]
#: what the bottleneck's lane takes: handshakes, and the iperf3 server's side of a control connection.
#: The client's side (its parameters, then the end-of-test message) queues with the data: the client is
#: always the data's sender, so its end-of-test message would otherwise overtake the data it ends and
#: the server would stop counting before the data arrived (a 1 MB upload through 100 ms of 10 Mbit/s
#: reached the server as 350 KB)
QUEUE_LANE_MATCHES = (_HANDSHAKE, _TO_CONTROL_CLIENT)
#: what no lossy link drops: every packet of a handshake or a control connection, and a UDP probe's
#: start. The lane has the same delay as the data and no queue of its own, so nothing overtakes anything
LOSS_LANE_MATCHES = (_HANDSHAKE, _TO_CONTROL_CLIENT, _FROM_CONTROL_CLIENT, _UDP_CONNECT)


def control_lane_specs(shaped: dict) -> list[QdiscSpec]:
    """A second HTB class beside the shaped one, served first, for what the experiment does not contain.

    The papers' flows (ns-2 agents) start sending at their start time: they have no handshake and no
    control channel. iperf3 has both, and through a full drop-tail queue they are lost like data: with
    210 flows on one 10 Mbit/s bottleneck, 53 of 210 control connections and as many data connections
    had to send their SYN again (1 s, then 3 s timeouts). Here a connection's handshake (SYN,
    SYN-ACK) and what iperf3's server sends on a control connection (to a client port from
    CONTROL_PORT_MIN: the hosts' ephemeral range) take a lane of their own: the same rate and the
    same delays as the data, but their own queue, so they neither wait behind nor are dropped by the
    experiment's queue, and do not take its rate. Everything else, pings, UDP probes and what iperf3's
    client sends on its control connection (QUEUE_LANE_MATCHES says why) included, goes through the
    shaped class.
    """
    lane_queue = {"handle": "20:", "parent": "1:2", "limit": CONTROL_LANE_LIMIT_PKTS}
    return [
        QdiscSpec("add-class", "htb", {"handle": "1:2", "prio": 0, **shaped}),
        QdiscSpec("add", "pfifo", lane_queue),
    ] + control_filters("1:2", QUEUE_LANE_MATCHES)


def control_filters(target: str, matches: tuple[list[str], ...]) -> list[QdiscSpec]:
    """u32 filters on the root qdisc ``1:`` that send IPv4 packets matching any of ``matches`` (u32 keys) to
    class ``target``."""
    return [
        QdiscSpec(
            "add-filter", "u32", {"parent": "1:", "prio": 1, "protocol": ETH_P_IP, "target": target, "keys": match}
        )
        for match in matches
    ]


def fq_tc_argv(ifname: str) -> list[str]:
    """``tc`` arguments of the root ``fq`` that holds packets until the time the delay program gave them:
    no pacing (the papers' senders are not paced), limits far above any window."""
    return [
        "tc",
        "qdisc",
        "add",
        "dev",
        ifname,
        "root",
        "handle",
        "1:",
        "fq",
        "nopacing",
        "limit",
        str(NETEM_LIMIT_PKTS),
        "flow_limit",
        str(NETEM_LIMIT_PKTS),
        "horizon",
        f"{FQ_HORIZON_S}s",
        "horizon_cap",
    ]


def netem_tc_argv(ifname: str, plan: EgressPlan) -> list[str]:
    """``tc`` arguments of the lossy netem (prio band 2, beside the control lane's) that carries a
    Gilbert-Elliott or 4-state loss model, and the plan's delay."""
    argv = [
        "tc",
        "qdisc",
        "add",
        "dev",
        ifname,
        "parent",
        "1:2",
        "handle",
        LOSSY_NETEM,
        "netem",
        "limit",
        str(NETEM_LIMIT_PKTS),
    ]
    if plan.delay_ms:
        argv += ["delay", f"{round(plan.delay_ms * 1000)}us"]
    return argv + netem_loss_args(plan.loss_model)
