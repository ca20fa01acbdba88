"""Many flows, one bottleneck: every flow between the same two hosts, each with its own base RTT.

::

    l0 ── dl ── rl ═══════ bottleneck ═══════ rr ── r0
    10.1.<i>.1  │       (HTB rate + drop-tail         10.2.<i>.1
    for flow i  │        queue, both directions)      for flow i
                │
    dl: the delay node. Both of its egresses: fq + tc-BPF (earliest departure time):
        dl-eth1 (toward rl): packets to 10.2.<i>.1 leave RTT_i / 2 after they came in
        dl-eth0 (toward l0): packets to 10.1.<i>.1 the same

Paper 000 §3.2 (Figs 12-16): M up to 200 forward flows with base RTTs spread over [20 + 230/M,
250] ms, and 10 reverse flows. The dumbbell would spend two Mininet hosts per flow (422 nodes for
M = 200, minutes of setup under TCG); here a flow is an address pair instead of a host pair:
flow i (``pair`` i) sends from 10.1.<i>.1 on ``l0`` to 10.2.<i>.1 on ``r0`` (reverse flows the other
way). Its base RTT is a per-destination delay in each direction on ``dl``, a forwarding node
between ``l0`` and the left router (:data:`topologies.shaping.EDT_PROGRAM`: one fq qdisc and one
map per interface, however many flows; not on ``l0`` itself, where fq would hold packets still
charged to their sockets). Each flow's base RTT is measured (ping between its two addresses) and
calibrated like a dumbbell pair's.

The bottleneck, its queue and its loss (on the routers' egress toward the receiving side, after
the queue) are the dumbbell's. Flows share their two hosts, so the per-host options (SACK off, ECN,
and the route metrics for delayed ACKs off and the initial window) must be the same for every flow:
use the dumbbell to mix them.
"""

from __future__ import annotations

from typing import Literal

from topologies.dumbbell import Dumbbell, DumbbellParams
from topologies.flowrules import Problem
from topologies.netspec import Endpoint, LinkSpec, NetSpec
from topologies.shaping import DelayClass, EgressPlan

#: options applied per host: with one host per side they must agree across flows
HOST_WIDE_OPTIONS = ("sack", "rack", "tlp", "frto", "delayed_ack", "initcwnd_segs", "ecn")


class ManyFlowsParams(DumbbellParams):
    """The dumbbell's parameters; each flow's base RTT comes from the flow (``rtt_ms``/``rtt_max_ms``)."""

    name: Literal["many_flows"] = "many_flows"

    def check_flows(self, flows) -> list[Problem]:
        problems = super().check_flows(flows)
        for option in HOST_WIDE_OPTIONS:
            first = getattr(flows[0], option) if flows else None
            for i, flow in enumerate(flows[1:], start=1):
                if getattr(flow, option) != first:
                    message = (
                        f"all flows of many_flows share two hosts, so '{option}' must be the same for "
                        f"every flow (flow 0 has {first}); use the dumbbell to mix it"
                    )
                    problems.append((i, (option,), message))
        return problems


class ManyFlows(Dumbbell):
    """Flows 0..M-1 between ``l0`` and ``r0``, one address pair and one delay (per destination, on ``dl``) each."""

    Params = ManyFlowsParams

    def endpoints(self, pair: int, direction: str) -> tuple[Endpoint, Endpoint]:
        left, right = Endpoint("l0", f"10.1.{pair}.1"), Endpoint("r0", f"10.2.{pair}.1")
        return (left, right) if direction == "forward" else (right, left)

    def delay_egress(self, pair: int) -> list[tuple[str, str, str]]:
        """Where pair ``pair``'s one-way delays are: (node, interface, destination address)."""
        return [("dl", "dl-eth1", f"10.2.{pair}.1"), ("dl", "dl-eth0", f"10.1.{pair}.1")]

    def netspec(self) -> NetSpec:
        link = self.params.bottleneck
        pairs = range(len(self.pair_rtts_ms))
        spec = self.routers_and_bottleneck()
        spec.hosts = ["l0", "r0"]
        spec.routers.insert(0, "dl")
        spec.links += [
            LinkSpec("l0", "l0-eth0", "dl", "dl-eth0"),
            LinkSpec("dl", "dl-eth1", "rl", "rl-eth1"),
            LinkSpec("r0", "r0-eth0", "rr", "rr-eth1"),
        ]
        spec.addresses.update(
            {
                ("dl", "dl-eth0"): "10.1.255.254/16",
                ("dl", "dl-eth1"): "10.3.0.1/30",
                ("rl", "rl-eth1"): "10.3.0.2/30",
                ("rr", "rr-eth1"): "10.2.255.254/16",
            }
        )
        spec.routes["dl"] = [("default", "10.3.0.2")]
        spec.routes["rl"].append(("10.1.0.0/16", "10.3.0.1"))
        for router in ("rl", "rr"):
            spec.egress[(router, f"{router}-eth1")] = EgressPlan.with_loss(link.loss_model)
        for host, net in (("l0", "10.1"), ("r0", "10.2")):
            spec.addresses[(host, f"{host}-eth0")] = [f"{net}.{i}.1/16" for i in pairs]
            spec.routes[host] = [("default", f"{net}.255.254")]
        for intf, net in (("dl-eth0", "10.1"), ("dl-eth1", "10.2")):
            classes = tuple(DelayClass(f"{net}.{i}.1", self.one_way_delay_ms(i)) for i in pairs)
            spec.egress[("dl", intf)] = EgressPlan(delay_classes=classes)
        return spec
