"""Dumbbell: N sender/receiver pairs behind two routers that share one bottleneck link.

::

    l0 ──┐                                     ┌── r0
    l1 ──┤                                     ├── r1
     ⋮   ├── rl ═══════ bottleneck ═══════ rr ──┤   ⋮
    lN ──┘    (HTB rate + drop-tail queue,     └── rN
               in both directions)

Naming: left hosts ``l0..l{N-1}`` (10.1.<i>.1/24), right hosts ``r0..r{N-1}`` (10.2.<i>.1/24),
routers ``rl`` and ``rr`` (bottleneck 10.0.0.1/30 - 10.0.0.2/30); interfaces ``{node}-eth{n}``,
``eth0`` of a router is its bottleneck side. Pair i is (l<i>, r<i>); a forward flow sends left
to right, a reverse flow right to left, so reverse traffic shares the bottleneck's reverse
direction with the forward flows' ACKs (ACK compression, paper 000 §3.1).

Delays: a flow's whole one-way propagation delay (RTT_i / 2, which includes the bottleneck's own
``delay_ms``) is one netem on its sending host's egress, in each direction. With a single queue
on the path, where the propagation delay sits does not change the dynamics, and one netem stage
per direction keeps the emulated RTT exact under TCG (each netem stage adds ~0.5 ms there).
netem is never on the bottleneck interface, whose HTB class and pfifo form the drop-tail queue
of ``queue_pkts`` (MACHINE.md: netem's limit also counts packets held for delay). The
bottleneck's loss (any model of :mod:`topologies.lossmodel`) sits on the router's egress toward
the receiving hosts: after the queue, in both directions of the bottleneck. A timed two-state
channel there is one independent channel per receiving host and direction (each its own stream of
the run's seed).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from topologies.flowrules import Problem, by_flow, no_path, rtt_given
from topologies.lossmodel import probe_loss_pct
from topologies.netspec import Bottleneck, Endpoint, LinkSpec, NetSpec, Probe
from topologies.params import LinkParams, StrictModel, queue_packets
from topologies.shaping import EgressPlan

MAX_PAIRS = 250


class DumbbellParams(StrictModel):
    """Parameters of the dumbbell; each flow's base RTT comes from the flow (``rtt_ms``)."""

    name: Literal["dumbbell"] = "dumbbell"
    bottleneck: LinkParams

    @model_validator(mode="after")
    def _bottleneck_has_rate(self) -> DumbbellParams:
        if self.bottleneck.rate_mbit is None:
            raise ValueError("the dumbbell's bottleneck needs rate_mbit")
        return self

    def check_flows(self, flows) -> list[Problem]:
        """Every dumbbell flow has its own base RTT and no path choice."""
        return by_flow(
            rtt_given(
                flows, "required field 'rtt_ms' is missing: the dumbbell needs each flow's base RTT (milliseconds)"
            ),
            no_path(flows, "the dumbbell has one path; leave path out"),
        )


class Dumbbell:
    """N pairs across one bottleneck; pair i has base RTT ``pair_rtts_ms[i]``."""

    Params = DumbbellParams

    def __init__(self, params: DumbbellParams, pair_rtts_ms: list[float]):
        if not 1 <= len(pair_rtts_ms) <= MAX_PAIRS:
            raise ValueError(f"the dumbbell supports 1..{MAX_PAIRS} sender/receiver pairs, got {len(pair_rtts_ms)}")
        bottleneck_ms = params.bottleneck.delay_ms
        for i, rtt in enumerate(pair_rtts_ms):
            if rtt < 2 * bottleneck_ms:
                raise ValueError(
                    f"pair {i}: base RTT {rtt} ms is shorter than twice the bottleneck delay "
                    f"({bottleneck_ms} ms one way); valid: rtt_ms >= {2 * bottleneck_ms}"
                )
        self.params = params
        self.pair_rtts_ms = list(pair_rtts_ms)

    @classmethod
    def from_scenario(cls, scenario) -> Dumbbell:
        """One sender/receiver pair per flow instance, with that flow's base RTT."""
        return cls(scenario.topology, [rtt for flow in scenario.flows for rtt in flow.rtts_ms()])

    def flow_pairs(self, flows) -> list[list[int]]:
        """The pair of each instance (``count``) of each flow: pairs in flow order."""
        pairs, next_pair = [], 0
        for flow in flows:
            pairs.append(list(range(next_pair, next_pair + flow.count)))
            next_pair += flow.count
        return pairs

    def ingress_router(self, pair: int, direction: str) -> str:
        """The router where a flow's data packets enter the network (captured there, before any queue)."""
        return "rl" if direction == "forward" else "rr"

    def probes(self) -> list[Probe]:
        """One UDP rate probe per bottleneck direction, sent over the first pair."""
        return [
            Probe(b.direction, 0, b.rate_mbit, b.queue_pkts, probe_loss_pct(self.params.bottleneck.loss_model))
            for b in self.netspec().bottlenecks
        ]

    @property
    def queue_pkts(self) -> int | None:
        return queue_packets(self.params.bottleneck, max(self.pair_rtts_ms))

    def one_way_delay_ms(self, pair: int) -> float:
        return self.pair_rtts_ms[pair] / 2

    def delay_egress(self, pair: int) -> list[tuple[str, str]]:
        """The interfaces whose netem carries pair ``pair``'s one-way delay (one per direction)."""
        return [(f"l{pair}", f"l{pair}-eth0"), (f"r{pair}", f"r{pair}-eth0")]

    def endpoints(self, pair: int, direction: str) -> tuple[Endpoint, Endpoint]:
        """(sender, receiver) of a flow on pair ``pair``."""
        left, right = Endpoint(f"l{pair}", f"10.1.{pair}.1"), Endpoint(f"r{pair}", f"10.2.{pair}.1")
        return (left, right) if direction == "forward" else (right, left)

    def base_rtt_ms(self, pair: int) -> float:
        return self.pair_rtts_ms[pair]

    def routers_and_bottleneck(self) -> NetSpec:
        """The two routers and the bottleneck between them (HTB + queue on each router's eth0)."""
        link = self.params.bottleneck
        spec = NetSpec(routers=["rl", "rr"], capture_nodes=["rl", "rr"])
        spec.links.append(LinkSpec("rl", "rl-eth0", "rr", "rr-eth0"))
        spec.addresses[("rl", "rl-eth0")] = "10.0.0.1/30"
        spec.addresses[("rr", "rr-eth0")] = "10.0.0.2/30"
        spec.routes["rl"] = [("10.2.0.0/16", "10.0.0.2")]
        spec.routes["rr"] = [("10.1.0.0/16", "10.0.0.1")]
        queue = self.queue_pkts
        for router, direction in (("rl", "forward"), ("rr", "reverse")):
            spec.egress[(router, f"{router}-eth0")] = EgressPlan(
                rate_mbit=link.rate_mbit, queue_pkts=queue, discipline=link.queue
            )
            spec.bottlenecks.append(Bottleneck(router, f"{router}-eth0", link.rate_mbit, queue, direction))
        return spec

    def netspec(self) -> NetSpec:
        link = self.params.bottleneck
        spec = self.routers_and_bottleneck()
        for i in range(len(self.pair_rtts_ms)):
            one_way = self.one_way_delay_ms(i)
            for side, router in (("l", "rl"), ("r", "rr")):
                host, net = f"{side}{i}", ("10.1" if side == "l" else "10.2")
                spec.hosts.append(host)
                spec.links.append(LinkSpec(host, f"{host}-eth0", router, f"{router}-eth{i + 1}"))
                spec.addresses[(host, f"{host}-eth0")] = f"{net}.{i}.1/24"
                spec.addresses[(router, f"{router}-eth{i + 1}")] = f"{net}.{i}.254/24"
                spec.routes[host] = [("default", f"{net}.{i}.254")]
                spec.egress[(host, f"{host}-eth0")] = EgressPlan(delay_ms=one_way)
                spec.egress[(router, f"{router}-eth{i + 1}")] = EgressPlan.with_loss(link.loss_model)
        spec.hosts.sort(key=lambda h: (h[0], int(h[1:])))
        return spec
