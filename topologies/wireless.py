"""Wireless last hop: a wired path shared with wired cross traffic, then a lossy radio link to mobile hosts.

::

    l0 ──┐                                          ┌── r1   (wired pairs end at the base station)
    l1 ──┤                                          ├── ⋮
     ⋮   ├── ra ════ wired ════ bs ─ ─ ─ air ─ ─ ─ ap ──┬── r0   (mobile pairs end behind the radio)
    lN ──┘   (HTB + queue,        (HTB + queue    (delay + loss       └── ⋮
              both directions)    toward air)      both directions)

Paper 000 §3.4.1 (Fig. 26): TCP1 crosses a wired path and a last-hop 2 Mbit/s wireless link that
loses packets in both directions, with optional wired cross and reverse traffic; paper 001 §3.1
(Fig. 1): a mobile client or server (``direction`` forward: the mobile host receives; reverse: it
sends) behind a 2 Mbit/s radio link, with 9 wired Reno flows sharing the wired bottleneck.

Pairs follow the flows (as on the dumbbell): a ``path: mobile`` flow's pair ends at a mobile host
behind ``ap``, a ``path: wired`` flow's pair at a host of the base station ``bs``. Left hosts
``l{i}`` 10.1.{i}.1/24 sit behind router ``ra``; right hosts ``r{i}`` 10.2.{i}.1/24.

The radio link is three nodes so that every queue sits on a router and every loss after it: the base
station's egress toward the link node ``air`` is the forward radio queue (HTB at ``wireless.rate_mbit``
+ drop-tail), ``ap``'s egress toward ``air`` the reverse one (the mobile side's radio), and ``air``
carries the radio's propagation delay and its loss model on both of its egresses: after the queue,
in both directions, and never on a sending host (a drop there would be reported to the socket). A
timed two-state channel is one channel per direction. The wired link ``ra`` - ``bs`` is the shared
wired bottleneck when it has a rate (HTB + drop-tail both directions); unshaped otherwise.

Delays: a flow's ``rtt_ms`` is its whole base RTT (it includes ``wired.delay_ms`` and, on the
mobile path, ``wireless.delay_ms``). The radio's delay is on ``air``; the rest of the one-way
delay is one netem on each of the pair's hosts, which is what delay calibration adjusts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from topologies.base import StrictModel
from topologies.dumbbell import MAX_PAIRS, Dumbbell
from topologies.flowrules import Problem, by_flow, path_among
from topologies.lossmodel import probe_loss_pct
from topologies.netspec import Bottleneck, Endpoint, LinkSpec, NetSpec, Probe
from topologies.params import LinkParams, queue_packets
from topologies.shaping import EgressPlan

#: path -> what it is (a flow's ``path``)
PATHS = {"mobile": "over the radio link", "wired": "ends at the base station"}


class WirelessParams(StrictModel):
    """The shared wired link and the radio link (rate, delay, loss in both directions, queue)."""

    name: Literal["wireless"] = "wireless"
    wired: LinkParams
    wireless: LinkParams

    @model_validator(mode="after")
    def _links_are_valid(self) -> WirelessParams:
        if self.wireless.rate_mbit is None:
            raise ValueError("the wireless link needs rate_mbit")
        if self.wired.loss_model is not None:
            raise ValueError("loss on the wired link is not supported: the wireless topology loses on the radio link")
        return self

    def check_flows(self, flows) -> list[Problem]:
        rtts = []
        for i, flow in enumerate(flows):
            if flow.path not in PATHS:
                continue  # its RTT's minimum depends on the path: the path's problem first
            if flow.rtt_ms is None:
                rtts.append((i, ("rtt_ms",), "required field 'rtt_ms' is missing: each flow's base RTT (ms)"))
                continue
            minimum = 2 * (self.wired.delay_ms + (self.wireless.delay_ms if flow.path == "mobile" else 0))
            if flow.rtt_ms < minimum:
                message = (
                    f"rtt_ms {flow.rtt_ms:g} is shorter than the {flow.path} path's own round trip; "
                    f"valid: rtt_ms >= {minimum:g}"
                )
                rtts.append((i, ("rtt_ms",), message))
        problems = by_flow(path_among(flows, PATHS, "the wireless topology"), rtts)
        if flows and not any(flow.path == "mobile" for flow in flows):
            problems.append((0, ("path",), "no flow crosses the radio link: give at least one flow path: mobile"))
        return problems


class Wireless:
    """Wired pairs and mobile pairs; pair i belongs to the i-th flow instance."""

    Params = WirelessParams

    def __init__(self, params: WirelessParams, pairs: list[tuple[str, float]]):
        if not 1 <= len(pairs) <= MAX_PAIRS:
            raise ValueError(f"the wireless topology supports 1..{MAX_PAIRS} pairs, got {len(pairs)}")
        self.params = params
        self.paths = [path for path, _ in pairs]
        self.pair_rtts_ms = [rtt for _, rtt in pairs]

    @classmethod
    def from_scenario(cls, scenario) -> Wireless:
        return cls(scenario.topology, [(flow.path, rtt) for flow in scenario.flows for rtt in flow.rtts_ms()])

    #: pairs in flow order, as on the dumbbell
    flow_pairs = Dumbbell.flow_pairs

    def is_mobile(self, pair: int) -> bool:
        return self.paths[pair] == "mobile"

    def endpoints(self, pair: int, direction: str) -> tuple[Endpoint, Endpoint]:
        left, right = Endpoint(f"l{pair}", f"10.1.{pair}.1"), Endpoint(f"r{pair}", f"10.2.{pair}.1")
        return (left, right) if direction == "forward" else (right, left)

    def ingress_router(self, pair: int, direction: str) -> str:
        """Where the pair's data enters the network, before any queue: ``ra``, or ``ap`` / ``bs``."""
        if direction == "forward":
            return "ra"
        return "ap" if self.is_mobile(pair) else "bs"

    def base_rtt_ms(self, pair: int) -> float:
        return self.pair_rtts_ms[pair]

    def one_way_delay_ms(self, pair: int) -> float:
        """The netem delay on the pair's hosts: the one-way delay less the radio's own."""
        return self.pair_rtts_ms[pair] / 2 - (self.params.wireless.delay_ms if self.is_mobile(pair) else 0)

    def delay_egress(self, pair: int) -> list[tuple[str, str]]:
        return [(f"l{pair}", f"l{pair}-eth0"), (f"r{pair}", f"r{pair}-eth0")]

    @property
    def wired_queue_pkts(self) -> int | None:
        return queue_packets(self.params.wired, max(self.pair_rtts_ms))

    @property
    def queue_pkts(self) -> int | None:
        """The radio link's queue (rate x the longest mobile RTT when given in BDPs)."""
        mobile = [rtt for pair, rtt in enumerate(self.pair_rtts_ms) if self.is_mobile(pair)]
        return queue_packets(self.params.wireless, max(mobile or self.pair_rtts_ms))

    def probes(self) -> list[Probe]:
        """Over the first mobile pair: the path's slowest link, less the radio's loss; over the first
        wired pair too when the wired link is shaped."""
        wired, wireless = self.params.wired, self.params.wireless
        mobile = self.paths.index("mobile")
        rate = min(wireless.rate_mbit, wired.rate_mbit or wireless.rate_mbit)
        probes = [
            Probe(d, mobile, rate, self.queue_pkts, probe_loss_pct(wireless.loss_model)) for d in ("forward", "reverse")
        ]
        if wired.rate_mbit is not None and "wired" in self.paths:
            pair = self.paths.index("wired")
            probes += [Probe(d, pair, wired.rate_mbit, self.wired_queue_pkts) for d in ("forward", "reverse")]
        return probes

    def netspec(self) -> NetSpec:
        wired, wireless = self.params.wired, self.params.wireless
        spec = NetSpec(routers=["ra", "bs", "air", "ap"])
        spec.links += [
            LinkSpec("ra", "ra-eth0", "bs", "bs-eth0"),
            LinkSpec("bs", "bs-eth1", "air", "air-eth0"),
            LinkSpec("air", "air-eth1", "ap", "ap-eth0"),
        ]
        spec.addresses.update(
            {
                ("ra", "ra-eth0"): "10.0.0.1/30",
                ("bs", "bs-eth0"): "10.0.0.2/30",
                ("bs", "bs-eth1"): "10.0.1.1/30",
                ("air", "air-eth0"): "10.0.1.2/30",
                ("air", "air-eth1"): "10.0.2.1/30",
                ("ap", "ap-eth0"): "10.0.2.2/30",
            }
        )
        wired_queue, radio_queue = self.wired_queue_pkts, self.queue_pkts
        if wired.rate_mbit is not None:
            for router, direction in (("ra", "forward"), ("bs", "reverse")):
                spec.egress[(router, f"{router}-eth0")] = EgressPlan(
                    rate_mbit=wired.rate_mbit, queue_pkts=wired_queue, discipline=wired.queue
                )
                spec.bottlenecks.append(Bottleneck(router, f"{router}-eth0", wired.rate_mbit, wired_queue, direction))
        for router, intf, direction in (("bs", "bs-eth1", "forward"), ("ap", "ap-eth0", "reverse")):
            spec.egress[(router, intf)] = EgressPlan(
                rate_mbit=wireless.rate_mbit, queue_pkts=radio_queue, discipline=wireless.queue
            )
            spec.bottlenecks.append(Bottleneck(router, intf, wireless.rate_mbit, radio_queue, direction))
        for intf in ("air-eth0", "air-eth1"):
            spec.egress[("air", intf)] = EgressPlan.with_loss(wireless.loss_model, delay_ms=wireless.delay_ms)
        self._add_hosts(spec)
        mobile_nets = [f"10.2.{i}.0/24" for i in range(len(self.pair_rtts_ms)) if self.is_mobile(i)]
        spec.routes["ra"] = [("10.2.0.0/16", "10.0.0.2")]
        spec.routes["bs"] = [("10.1.0.0/16", "10.0.0.1")] + [(net, "10.0.1.2") for net in mobile_nets]
        spec.routes["air"] = [("10.1.0.0/16", "10.0.1.1")] + [(net, "10.0.2.2") for net in mobile_nets]
        spec.routes["ap"] = [("10.1.0.0/16", "10.0.2.1")]
        # each router captures what its own hosts send (transit traffic is captured where it entered)
        wired_nets = [f"10.2.{i}.0/24" for i in range(len(self.pair_rtts_ms)) if not self.is_mobile(i)]
        spec.capture_nodes = ["ra", "bs", "ap"]
        spec.capture_filters = {
            "ra": "tcp and src net 10.1.0.0/16",
            "ap": "tcp and (" + " or ".join(f"src net {n}" for n in mobile_nets) + ")",
        }
        if wired_nets:
            spec.capture_filters["bs"] = "tcp and (" + " or ".join(f"src net {n}" for n in wired_nets) + ")"
        spec.hosts.sort(key=lambda h: (h[0], int(h[1:])))
        return spec

    def _add_hosts(self, spec: NetSpec) -> None:
        """Pair i's hosts: l{i} on ``ra``, r{i} on the access point (a mobile pair) or the base station, each
        host's link delayed by the pair's one-way delay."""
        next_intf = {"ra": 1, "bs": 2, "ap": 1}
        for i in range(len(self.pair_rtts_ms)):
            one_way = self.one_way_delay_ms(i)
            right_router = "ap" if self.is_mobile(i) else "bs"
            for host, router, net in ((f"l{i}", "ra", "10.1"), (f"r{i}", right_router, "10.2")):
                router_intf = f"{router}-eth{next_intf[router]}"
                next_intf[router] += 1
                spec.hosts.append(host)
                spec.links.append(LinkSpec(host, f"{host}-eth0", router, router_intf))
                spec.addresses[(host, f"{host}-eth0")] = f"{net}.{i}.1/24"
                spec.addresses[(router, router_intf)] = f"{net}.{i}.254/24"
                spec.routes[host] = [("default", f"{net}.{i}.254")]
                spec.egress[(host, f"{host}-eth0")] = EgressPlan(delay_ms=one_way)
