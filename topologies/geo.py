"""GEO satellite: N pairs share a long, lossy satellite link (one channel per direction for every flow).

::

    l0 ──┐                                                   ┌── r0
     ⋮   ├── rl ═══ (HTB + queue) ─ ─ sat ─ ─ (HTB + queue) ═══ rr ──┤   ⋮
    lN ──┘          uplink queue    (275 ms + loss,   downlink queue  └── rN
                                     both directions)

Paper 000 §3.4.2 (Figs 31-32): 10 Mbit/s, one-way 275 ms, forward RTT 590 ms, 20 forward and
10 reverse flows, the two-state channel in both directions; paper 001 §3.3 (Figs 9-10): 1.3 Mbit/s,
RTT 600 ms, 10 flows in groups of Westwood and Reno, Bernoulli or bursty loss in both directions.

The satellite link is the node ``sat``: the routers' egress toward it are the link's queues (HTB at
``satellite.rate_mbit`` + drop-tail, ``rl`` forward, ``rr`` reverse) and ``sat`` holds the
satellite's propagation delay and its loss model on both of its egresses, after the queues. Unlike
the dumbbell (one loss channel per receiving host), every flow crosses the same channel: a Bad state
hits all of them at once, as on one satellite link.

Each flow's base RTT is its ``rtt_ms``, or, when not given, ``2 x satellite.delay_ms +
ground_rtt_ms`` (590 ms for paper 000). The satellite's delay sits on ``sat``; the rest of each
one-way delay is a netem on the pair's hosts (what delay calibration adjusts). Hosts, addresses
and pairs are the dumbbell's; the links are ``rl`` 10.0.0.1/30 - ``sat`` 10.0.0.2/30 and ``sat``
10.0.1.1/30 - ``rr`` 10.0.1.2/30.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from topologies.base import StrictModel
from topologies.dumbbell import Dumbbell
from topologies.flowrules import Problem, no_path
from topologies.netspec import LinkSpec, NetSpec
from topologies.params import LinkParams
from topologies.shaping import EgressPlan


class GeoParams(StrictModel):
    """The satellite link and the terrestrial part of the flows' RTT."""

    name: Literal["geo"] = "geo"
    satellite: LinkParams = Field(description="rate_mbit (required), one-way delay_ms, loss, queue")
    ground_rtt_ms: float = Field(
        default=40.0,
        ge=0,
        le=10_000,
        description="each flow's RTT beyond the satellite's round trip, when the flow gives no rtt_ms",
    )

    @model_validator(mode="after")
    def _satellite_has_rate(self) -> GeoParams:
        if self.satellite.rate_mbit is None:
            raise ValueError("the GEO topology's satellite link needs rate_mbit")
        return self

    @property
    def bottleneck(self) -> LinkParams:
        """The satellite link is the bottleneck (the dumbbell's code and the scenario checks read this)."""
        return self.satellite

    def default_rtt_ms(self) -> float:
        return 2 * self.satellite.delay_ms + self.ground_rtt_ms

    def check_flows(self, flows) -> list[Problem]:
        return no_path(flows, "the GEO topology has one path; leave path out")


class Geo(Dumbbell):
    """The dumbbell's pairs across the satellite link node ``sat``."""

    Params = GeoParams

    @classmethod
    def from_scenario(cls, scenario) -> Geo:
        default = scenario.topology.default_rtt_ms()
        return cls(scenario.topology, [default if rtt is None else rtt for f in scenario.flows for rtt in f.rtts_ms()])

    def one_way_delay_ms(self, pair: int) -> float:
        """The netem delay on the pair's hosts: the one-way delay less the satellite's own."""
        return self.pair_rtts_ms[pair] / 2 - self.params.satellite.delay_ms

    def netspec(self) -> NetSpec:
        spec = super().netspec()
        satellite = self.params.satellite
        spec.routers.append("sat")
        spec.links = [LinkSpec("rl", "rl-eth0", "sat", "sat-eth0"), LinkSpec("sat", "sat-eth1", "rr", "rr-eth0")] + [
            link for link in spec.links if {link.node1, link.node2} != {"rl", "rr"}
        ]
        spec.addresses.update(
            {("sat", "sat-eth0"): "10.0.0.2/30", ("sat", "sat-eth1"): "10.0.1.1/30", ("rr", "rr-eth0"): "10.0.1.2/30"}
        )
        spec.routes["rr"] = [("10.1.0.0/16", "10.0.1.1")]
        spec.routes["sat"] = [("10.1.0.0/16", "10.0.0.1"), ("10.2.0.0/16", "10.0.1.2")]
        # the loss moves from the routers' host side (per host) onto the satellite (one channel per direction)
        for key in list(spec.egress):
            if key[0] in ("rl", "rr") and key[1] != f"{key[0]}-eth0":
                spec.egress[key] = EgressPlan()
        for intf in ("sat-eth0", "sat-eth1"):
            spec.egress[("sat", intf)] = EgressPlan.with_loss(satellite.loss_model, delay_ms=satellite.delay_ms)
        return spec
