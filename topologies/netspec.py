"""A topology as plain data: nodes, links, addresses, routes and per-interface egress plans.

Topology classes compute a :class:`NetSpec` purely (unit-tested without root); the one place
that touches the kernel is :mod:`testbed.guest.network`, which builds any NetSpec with Mininet nodes
and pyroute2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topologies.shaping import EgressPlan


@dataclass(frozen=True)
class LinkSpec:
    node1: str
    intf1: str
    node2: str
    intf2: str


@dataclass(frozen=True)
class Endpoint:
    """A host that sends or receives a flow."""

    node: str
    ip: str


@dataclass(frozen=True)
class Bottleneck:
    """One direction of a shaped link: where its queue is, and its configured rate and size."""

    node: str
    intf: str
    rate_mbit: float
    queue_pkts: int | None
    direction: str  # "forward" (left to right) or "reverse"


@dataclass(frozen=True)
class Probe:
    """A UDP rate probe before traffic: over ``pair`` in ``direction``; expects ``rate_mbit`` less ``loss_pct``."""

    direction: str
    pair: int
    rate_mbit: float
    queue_pkts: int | None
    loss_pct: float = 0.0


@dataclass(frozen=True)
class Sprayer:
    """Per-packet round-robin over parallel paths on ``node``: packets routed out of ``intf`` (path 0)
    are spread over ``intf`` and ``paths`` (each ``(interface, next-hop IPv4)``), in that order."""

    node: str
    intf: str
    paths: tuple[tuple[str, str], ...]
    direction: str  # the traffic direction it sprays: "forward" or "reverse"


@dataclass
class NetSpec:
    hosts: list[str] = field(default_factory=list)
    routers: list[str] = field(default_factory=list)
    links: list[LinkSpec] = field(default_factory=list)
    #: (node, intf) -> "10.1.0.1/24", or a list of them (the first is the primary address)
    addresses: dict[tuple[str, str], str | list[str]] = field(default_factory=dict)
    routes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # node -> [(dst cidr, gateway)]
    egress: dict[tuple[str, str], EgressPlan] = field(default_factory=dict)
    bottlenecks: list[Bottleneck] = field(default_factory=list)
    #: routers whose ingress traffic is captured: together they see every packet before any bottleneck drop
    capture_nodes: list[str] = field(default_factory=list)
    #: tcpdump filter per capture node (default: every TCP packet entering it)
    capture_filters: dict[str, str] = field(default_factory=dict)
    #: per-packet spraying over parallel paths (multipath); set up by the runner
    sprayers: list[Sprayer] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return self.hosts + self.routers

    def interfaces(self, node: str) -> list[str]:
        names = [link.intf1 for link in self.links if link.node1 == node]
        names += [link.intf2 for link in self.links if link.node2 == node]
        return sorted(names, key=lambda n: int(n.rsplit("eth", 1)[1]))

    @property
    def needs_netem(self) -> bool:
        return any(plan.needs_netem for plan in self.egress.values())

    @property
    def has_configured_loss(self) -> bool:
        """Some link loses packets on purpose (Bernoulli, a netem model or a timed two-state channel)."""
        return any(plan.loss_pct or plan.loss_model is not None for plan in self.egress.values())

    @property
    def needs_fq(self) -> bool:
        """Per-destination delays: fq and the edt_delay program."""
        return any(plan.needs_fq for plan in self.egress.values())

    @property
    def qdisc_modules(self) -> list[str]:
        """The kernel modules of the queue disciplines its links ask for (fifo is built in)."""
        return sorted(
            {
                f"sch_{plan.discipline.discipline}"
                for plan in self.egress.values()
                if plan.discipline is not None and plan.discipline.discipline != "fifo"
            }
        )
