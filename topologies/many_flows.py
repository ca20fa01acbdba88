"""Many flows, one bottleneck: every flow between the same two hosts, each with its own base RTT.

::

    l0 ── rl ═══════ bottleneck ═══════ rr ── r0
    10.1.<i>.1      (HTB rate + drop-tail      10.2.<i>.1
    for flow i       queue, both directions)   for flow i

    l0-eth0 egress:  htb ─┬─ 1:1  no delay (ARP, anything unmatched)
                          ├─ 1:2  netem RTT_0 / 2   <- u32 dst 10.2.0.1
                          ├─ 1:3  netem RTT_1 / 2   <- u32 dst 10.2.1.1
                          ⋮          (r0-eth0: the same toward 10.1.<i>.1)

Paper 000 §3.2 (Figs 12-16): M up to 200 forward flows with base RTTs spread over [20 + 230/M,
250] ms, and 10 reverse flows. The dumbbell would spend two Mininet hosts per flow (422 nodes for
M = 200, minutes of setup under TCG); here a flow is an address pair instead of a host pair:
flow i (``pair`` i) sends from 10.1.<i>.1 on ``l0`` to 10.2.<i>.1 on ``r0`` (reverse flows the other
way), and its one-way delay is a per-destination delay class on each host's egress
(:func:`topologies.shaping.delay_class_specs`). Each flow's base RTT is measured (ping between
its two addresses) and calibrated like a dumbbell pair's.

The bottleneck, its queue and its loss (on the routers' egress toward the receiving host, after the
queue) are the dumbbell's. Flows share their two hosts, so the per-host options (SACK off, and the
route metrics for delayed ACKs off and the initial window) must be the same for every flow: use
the dumbbell to mix them.
"""

from __future__ import annotations

from typing import Literal

from topologies.dumbbell import Dumbbell, DumbbellParams
from topologies.netspec import Endpoint, LinkSpec, NetSpec
from topologies.shaping import DelayClass, EgressPlan

#: options applied per host: with one host per side they must agree across flows
HOST_WIDE_OPTIONS = ("sack", "delayed_ack", "initcwnd_segs")


class ManyFlowsParams(DumbbellParams):
    """The dumbbell's parameters; each flow's base RTT comes from the flow (``rtt_ms``/``rtt_max_ms``)."""

    name: Literal["many_flows"] = "many_flows"

    def check_flows(self, flows) -> list[tuple[int, tuple, str]]:
        problems = super().check_flows(flows)
        for option in HOST_WIDE_OPTIONS:
            first = getattr(flows[0], option) if flows else None
            for i, flow in enumerate(flows[1:], start=1):
                if getattr(flow, option) != first:
                    message = (f"all flows of many_flows share two hosts, so '{option}' must be the same for "
                               f"every flow (flow 0 has {first}); use the dumbbell to mix it")  # fmt: skip
                    problems.append((i, (option,), message))
        return problems


class ManyFlows(Dumbbell):
    """Flows 0..M-1 between ``l0`` and ``r0``, one address pair and one delay class each."""

    Params = ManyFlowsParams

    def endpoints(self, pair: int, direction: str) -> tuple[Endpoint, Endpoint]:
        left, right = Endpoint("l0", f"10.1.{pair}.1"), Endpoint("r0", f"10.2.{pair}.1")
        return (left, right) if direction == "forward" else (right, left)

    def delay_egress(self, pair: int) -> list[tuple[str, str, int]]:
        """The delay classes that carry pair ``pair``'s one-way delay: (node, interface, class index)."""
        return [("l0", "l0-eth0", pair), ("r0", "r0-eth0", pair)]

    def netspec(self) -> NetSpec:
        link = self.params.bottleneck
        pairs = range(len(self.pair_rtts_ms))
        spec = self.routers_and_bottleneck()
        spec.hosts = ["l0", "r0"]
        spec.links += [LinkSpec("l0", "l0-eth0", "rl", "rl-eth1"), LinkSpec("r0", "r0-eth0", "rr", "rr-eth1")]
        spec.addresses.update({("rl", "rl-eth1"): "10.1.255.254/16", ("rr", "rr-eth1"): "10.2.255.254/16"})
        for router in ("rl", "rr"):
            spec.egress[(router, f"{router}-eth1")] = EgressPlan.with_loss(link.loss_model)
        for host, net, peer in (("l0", "10.1", "10.2"), ("r0", "10.2", "10.1")):
            spec.addresses[(host, f"{host}-eth0")] = [f"{net}.{i}.1/16" for i in pairs]
            spec.routes[host] = [("default", f"{net}.255.254")]
            classes = tuple(DelayClass(f"{peer}.{i}.1", self.one_way_delay_ms(i)) for i in pairs)
            spec.egress[(host, f"{host}-eth0")] = EgressPlan(delay_classes=classes)
        return spec

