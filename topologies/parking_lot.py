"""Parking lot: N hops in a chain, one path through all of them, cross traffic on every single hop.

::

    s0                a1      b1/a2      b2/a3          bN
     │                 │        │          │             │
     p0 ══hop 1══ k1 ══ p1 ══hop 2══ k2 ══ p2 ... ═══ kN ══ pN ── d0
     (a1 also at p0, b1 and a2 at p1, ..., bN and d0 at pN)

Routers ``p0..pN``; hop i joins ``p{i-1}`` and ``p{i}`` through a link node ``k{i}`` that carries
the hop's propagation delay (a netem on each of its two egresses), so that every router keeps a
plain drop-tail queue: ``p{i-1}``'s egress toward ``k{i}`` is hop i's forward bottleneck (HTB rate +
pfifo of ``queue_pkts``), ``p{i}``'s egress toward ``k{i}`` its reverse one.

Pairs: pair 0 is ``s0`` (at ``p0``) -> ``d0`` (at ``pN``): the path ``through`` every hop (C1 of
paper 000 §3.3). Pair i (1..N) is ``a{i}`` (at ``p{i-1}``) -> ``b{i}`` (at ``p{i}``): the path over
hop i only; a forward ``hop`` flow is the forward cross traffic of that hop, a reverse one its
reverse cross traffic. A flow with ``path: hop`` is one flow per hop.

Access links (host <-> router) carry their one-way delay as a netem on both ends' egress and are
not shaped: they are never the bottleneck (the paper's 100 Mbit/s against 10 Mbit/s hops; veth is
faster, and a 100 Mbit/s HTB is not faithful in a TCG guest). Base RTT of pair 0: 2 x (2 x access
delay + N x hop delay); of a hop pair: 2 x (2 x access delay + hop delay).

Addresses: ``s0`` 10.1.0.1/24, ``a{i}`` 10.1.{i}.1/24 (router side .254), ``d0`` 10.2.0.1/24,
``b{i}`` 10.2.{i}.1/24; hop i: ``p{i-1}`` 10.3.{i}.1/30 - ``k{i}`` 10.3.{i}.2/30 and ``k{i}``
10.4.{i}.1/30 - ``p{i}`` 10.4.{i}.2/30.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from topologies.base import StrictModel
from topologies.flowrules import Problem, by_flow, path_among, rtt_from_links
from topologies.netspec import Bottleneck, Endpoint, LinkSpec, NetSpec, Probe
from topologies.params import LinkParams, queue_packets
from topologies.shaping import EgressPlan

MAX_HOPS = 10
#: path -> what it is (a flow's ``path``)
PATHS = {"through": "every hop", "hop": "one flow per hop"}


class AccessParams(StrictModel):
    """An access link: only its one-way delay is emulated."""

    delay_ms: float = Field(default=0.0, ge=0, le=10_000, description="one-way propagation delay")


class ParkingLotParams(StrictModel):
    """N hops of the same link; access links with their delay."""

    name: Literal["parking_lot"] = "parking_lot"
    hops: int = Field(ge=1, le=MAX_HOPS, description="number of router-to-router hops")
    hop: LinkParams
    access: AccessParams = Field(default_factory=AccessParams)

    @model_validator(mode="after")
    def _hop_has_rate(self) -> ParkingLotParams:
        if self.hop.rate_mbit is None:
            raise ValueError("the parking lot's hop needs rate_mbit")
        if self.hop.loss_model is not None:
            raise ValueError("loss on the parking lot's hops is not supported yet; leave loss_pct/loss out")
        return self

    def check_flows(self, flows) -> list[Problem]:
        return by_flow(
            path_among(flows, PATHS, "the parking lot"),
            rtt_from_links(flows, "the parking lot's paths set the RTT (hop and access delays); leave rtt_ms out"),
        )


class ParkingLot:
    """The chain of ``hops`` hops; pair 0 crosses all of them, pair i only hop i."""

    Params = ParkingLotParams

    def __init__(self, params: ParkingLotParams):
        self.params = params

    @classmethod
    def from_scenario(cls, scenario) -> ParkingLot:
        return cls(scenario.topology)

    @property
    def hops(self) -> int:
        return self.params.hops

    def flow_pairs(self, flows) -> list[list[int]]:
        """``through``: pair 0 for each instance; ``hop``: pairs 1..N for each instance."""
        return [
            [0] * flow.count
            if flow.path == "through"
            else [hop for _ in range(flow.count) for hop in range(1, self.hops + 1)]
            for flow in flows
        ]

    def hosts_of(self, pair: int) -> tuple[str, str, int, int]:
        """(left host, right host, router of the left host, router of the right host)."""
        return ("s0", "d0", 0, self.hops) if pair == 0 else (f"a{pair}", f"b{pair}", pair - 1, pair)

    def endpoints(self, pair: int, direction: str) -> tuple[Endpoint, Endpoint]:
        left, right, _, _ = self.hosts_of(pair)
        a = Endpoint(left, f"10.1.{pair}.1")
        b = Endpoint(right, f"10.2.{pair}.1")
        return (a, b) if direction == "forward" else (b, a)

    def ingress_router(self, pair: int, direction: str) -> str:
        _, _, left_router, right_router = self.hosts_of(pair)
        return f"p{left_router if direction == 'forward' else right_router}"

    def hops_of(self, pair: int) -> int:
        return self.hops if pair == 0 else 1

    def base_rtt_ms(self, pair: int) -> float:
        return 2 * (2 * self.params.access.delay_ms + self.hops_of(pair) * self.params.hop.delay_ms)

    def one_way_delay_ms(self, pair: int) -> float:
        """The delay of the netem on the pair's hosts (what delay calibration adjusts)."""
        return self.params.access.delay_ms

    def delay_egress(self, pair: int) -> list[tuple[str, str]]:
        left, right, _, _ = self.hosts_of(pair)
        return [(left, f"{left}-eth0"), (right, f"{right}-eth0")]

    @property
    def queue_pkts(self) -> int | None:
        return queue_packets(self.params.hop, max(self.base_rtt_ms(0), 1e-3))

    def probes(self) -> list[Probe]:
        """The path through every hop, both directions: it measures the slowest hop of the chain."""
        rate = self.params.hop.rate_mbit
        return [Probe(direction, 0, rate, self.queue_pkts) for direction in ("forward", "reverse")]

    def netspec(self) -> NetSpec:
        n = self.hops
        spec = NetSpec(routers=[f"p{i}" for i in range(n + 1)] + [f"k{i}" for i in range(1, n + 1)])
        # router i's interface counter: eth0 toward k{i+1} (forward), eth1 toward k{i} (backward), then hosts
        next_intf = {f"p{i}": 0 for i in range(n + 1)}

        def intf(router: str) -> str:
            name = f"{router}-eth{next_intf[router]}"
            next_intf[router] += 1
            return name

        for i in range(1, n + 1):
            self._add_hop(spec, i, intf(f"p{i - 1}"), intf(f"p{i}"))
        subnets_at = self._add_hosts(spec, intf)
        _add_routes(spec, n, subnets_at)
        # each router captures what its own hosts send (transit traffic is captured where it entered)
        spec.capture_nodes = [f"p{i}" for i in range(n + 1)]
        spec.capture_filters = {
            f"p{i}": "tcp and (" + " or ".join(f"src net {s}" for s in subnets_at[i]) + ")" for i in range(n + 1)
        }
        spec.hosts.sort(key=lambda h: (h[0], int(h[1:])))
        return spec

    def _add_hop(self, spec: NetSpec, i: int, left_intf: str, right_intf: str) -> None:
        """Hop i: routers p{i-1} and p{i} through the link node k{i}, shaped both ways, its delay on k{i}."""
        hop, queue = self.params.hop, self.queue_pkts
        left, right, link = f"p{i - 1}", f"p{i}", f"k{i}"
        spec.links += [
            LinkSpec(left, left_intf, link, f"{link}-eth0"),
            LinkSpec(link, f"{link}-eth1", right, right_intf),
        ]
        spec.addresses.update(
            {
                (left, left_intf): f"10.3.{i}.1/30",
                (link, f"{link}-eth0"): f"10.3.{i}.2/30",
                (link, f"{link}-eth1"): f"10.4.{i}.1/30",
                (right, right_intf): f"10.4.{i}.2/30",
            }
        )
        for node, node_intf, direction in ((left, left_intf, "forward"), (right, right_intf, "reverse")):
            spec.egress[(node, node_intf)] = EgressPlan(rate_mbit=hop.rate_mbit, queue_pkts=queue, discipline=hop.queue)
            spec.bottlenecks.append(Bottleneck(node, node_intf, hop.rate_mbit, queue, direction))
        for link_intf in ("eth0", "eth1"):
            spec.egress[(link, f"{link}-{link_intf}")] = EgressPlan(delay_ms=hop.delay_ms)

    def _add_hosts(self, spec: NetSpec, intf) -> dict[int, list[str]]:
        """Every pair's two hosts on their routers, with the access delay; returns router index -> host subnets."""
        access = self.params.access
        subnets_at: dict[int, list[str]] = {i: [] for i in range(self.hops + 1)}
        for pair in range(self.hops + 1):
            left, right, left_router, right_router = self.hosts_of(pair)
            for host, router_index, net in ((left, left_router, "10.1"), (right, right_router, "10.2")):
                router = f"p{router_index}"
                router_intf = intf(router)
                spec.hosts.append(host)
                spec.links.append(LinkSpec(host, f"{host}-eth0", router, router_intf))
                spec.addresses[(host, f"{host}-eth0")] = f"{net}.{pair}.1/24"
                spec.addresses[(router, router_intf)] = f"{net}.{pair}.254/24"
                spec.routes[host] = [("default", f"{net}.{pair}.254")]
                spec.egress[(host, f"{host}-eth0")] = EgressPlan(delay_ms=access.delay_ms)
                spec.egress[(router, router_intf)] = EgressPlan(delay_ms=access.delay_ms)
                subnets_at[router_index].append(f"{net}.{pair}.0/24")
        return subnets_at


def _add_routes(spec: NetSpec, n: int, subnets_at: dict[int, list[str]]) -> None:
    """Each router's and link node's routes to every host subnet: forward toward higher routers, else back."""
    for i in range(n + 1):
        routes = []
        for j, subnets in subnets_at.items():
            if j > i:
                routes += [(subnet, f"10.3.{i + 1}.2") for subnet in subnets]
            elif j < i:
                routes += [(subnet, f"10.4.{i}.1") for subnet in subnets]
        spec.routes[f"p{i}"] = routes
    for i in range(1, n + 1):
        routes = []
        for j, subnets in subnets_at.items():
            routes += [(subnet, f"10.4.{i}.2" if j >= i else f"10.3.{i}.1") for subnet in subnets]
        spec.routes[f"k{i}"] = routes
