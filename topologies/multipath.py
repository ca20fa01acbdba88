"""Multipath: 2..4 parallel paths of equal rate and different delays, packets sprayed round-robin.

::

                    ┌── m1 (path 1: path_links[0] links) ──┐
    l0 ──┐          ├── m2 (path 2: path_links[1] links) ──┤          ┌── r0
     ⋮   ├── rl ════┤            ⋮                         ├════ rr ──┤   ⋮
    lN ──┘          └── mP (path P)                      ──┘          └── rN

Paper 004: a sender spreads its packets over P parallel paths in turn, so segments arrive out of
order whenever the paths' delays differ; data only (ACKs return on the shortest path, Fig. 4) or
data and ACKs (Figs 3, 11). Each path is a chain of ``path_links[k]`` links of ``link.delay_ms``
each; every path has the rate ``link.rate_mbit``.

Spraying: the routers send everything toward the other side over path 1; a tc-BPF program on the
egress of ``rl``'s path-1 interface (and of ``rr``'s with ``spray: data_and_acks``) redirects TCP
and UDP packet n to path n mod P (``testbed/guest/bpf/spray.bpf.c``). ICMP is not sprayed, so ping
measures path 1 (the base RTT check); a UDP rate probe is sprayed and must see P x the rate.

Where delays sit: path 1's one-way delay (plus twice ``access.delay_ms``) is one netem on each
sending host's egress, as in the dumbbell (so per-pair calibration works); path node ``m{k}``
holds only what path k adds over path 1 (a netem on each of its two egresses). Each router's
egress toward ``m{k}`` is path k's HTB rate + drop-tail queue, forward (``rl``) and reverse
(``rr``). A path of several links is one propagation delay here: the store-and-forward time of
its extra links (one packet's transmission time per link, 8 ms per 1500 B at 1.5 Mbit/s) is not
emulated.

Addresses: hosts as in the dumbbell (``l{i}`` 10.1.{i}.1/24, ``r{i}`` 10.2.{i}.1/24); path k:
``rl`` 10.3.{k}.1/30 - ``m{k}`` 10.3.{k}.2/30 and ``m{k}`` 10.4.{k}.1/30 - ``rr`` 10.4.{k}.2/30.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from topologies.base import StrictModel
from topologies.flowrules import Problem, by_flow, no_path, rtt_from_links
from topologies.netspec import Bottleneck, Endpoint, LinkSpec, NetSpec, Probe, Sprayer
from topologies.params import LinkParams, queue_packets
from topologies.shaping import EgressPlan

MAX_PATHS = 4
MAX_PAIRS = 50
SPRAY_MODES = ("data", "data_and_acks")


class AccessDelay(StrictModel):
    delay_ms: float = Field(default=0.0, ge=0, le=10_000, description="one-way delay of each access link")


class MultipathParams(StrictModel):
    """``paths`` parallel paths; path k is ``path_links[k-1]`` links of ``link``."""

    name: Literal["multipath"] = "multipath"
    paths: int = Field(ge=2, le=MAX_PATHS, description="number of parallel paths in use (the first ones)")
    link: LinkParams = Field(description="every link of every path: rate_mbit, delay_ms per link, queue")
    path_links: list[int] = Field(
        default=[1, 2, 3, 4],
        min_length=2,
        max_length=MAX_PATHS,
        description="links per path; path 1 (ICMP, unsprayed traffic, ACKs with spray: data) must be the shortest",
    )
    spray: Literal["data", "data_and_acks"] = Field(
        default="data", description="data: data packets only, ACKs on path 1; data_and_acks: both directions"
    )
    access: AccessDelay = Field(default_factory=AccessDelay)

    @model_validator(mode="after")
    def _valid_paths(self) -> MultipathParams:
        if self.link.rate_mbit is None:
            raise ValueError("the multipath link needs rate_mbit (every path has this rate)")
        if self.link.loss_model is not None:
            raise ValueError("loss on the multipath links is not supported yet; leave loss_pct/loss out")
        if len(self.path_links) < self.paths:
            raise ValueError(f"paths {self.paths} needs {self.paths} entries in path_links, got {len(self.path_links)}")
        if any(not 1 <= n <= 8 for n in self.path_links):
            raise ValueError(f"path_links {self.path_links}: each path has 1..8 links")
        if self.path_links[0] != min(self.path_links[: self.paths]):
            raise ValueError(
                f"path_links {self.path_links}: path 1 must be the shortest of the paths in use "
                f"(ping and ACKs take it); e.g. {sorted(self.path_links)}"
            )
        return self

    def check_flows(self, flows) -> list[Problem]:
        return by_flow(
            rtt_from_links(
                flows, "the multipath topology's paths set the RTT (link delays and path_links); leave rtt_ms out"
            ),
            no_path(flows, "every multipath flow is sprayed over all paths; leave path out"),
        )


class Multipath:
    """Pairs (l<i>, r<i>) across ``paths`` parallel paths between routers rl and rr."""

    Params = MultipathParams

    def __init__(self, params: MultipathParams, pairs: int):
        if not 1 <= pairs <= MAX_PAIRS:
            raise ValueError(f"the multipath topology supports 1..{MAX_PAIRS} sender/receiver pairs, got {pairs}")
        self.params = params
        self.pairs = pairs

    @classmethod
    def from_scenario(cls, scenario) -> Multipath:
        return cls(scenario.topology, sum(flow.count for flow in scenario.flows))

    # -- what the runner asks of a topology ------------------------------------------------------

    def flow_pairs(self, flows) -> list[list[int]]:
        pairs, next_pair = [], 0
        for flow in flows:
            pairs.append(list(range(next_pair, next_pair + flow.count)))
            next_pair += flow.count
        return pairs

    def ingress_router(self, pair: int, direction: str) -> str:
        return "rl" if direction == "forward" else "rr"

    def endpoints(self, pair: int, direction: str) -> tuple[Endpoint, Endpoint]:
        left, right = Endpoint(f"l{pair}", f"10.1.{pair}.1"), Endpoint(f"r{pair}", f"10.2.{pair}.1")
        return (left, right) if direction == "forward" else (right, left)

    def path_delay_ms(self, k: int) -> float:
        """One-way propagation delay of path ``k`` (1-based) between the routers."""
        return self.params.path_links[k - 1] * self.params.link.delay_ms

    def one_way_delay_ms(self, pair: int) -> float:
        """The netem on the pair's hosts: both access links and path 1 (what delay calibration adjusts)."""
        return 2 * self.params.access.delay_ms + self.path_delay_ms(1)

    def base_rtt_ms(self, pair: int) -> float:
        """Round trip over path 1 (ping's path)."""
        return 2 * self.one_way_delay_ms(pair)

    def path_rtt_ms(self, k: int) -> float:
        return 2 * (2 * self.params.access.delay_ms + self.path_delay_ms(k))

    def setup_rtt_ms(self, pair: int) -> float:
        """The mean round trip of a connection's set-up packets (launch.release_lead_s): sprayed one
        by one, each takes any path forward, and any path back when ACKs are sprayed too (path 1
        otherwise). With 4 paths of 60 ms links the handshake alone took 422 ms against a 120 ms base
        RTT, and a client continued 5.5 base RTTs ahead sent its first data 1.05 s late."""
        paths = range(1, self.params.paths + 1)
        forward = sum(self.path_delay_ms(k) for k in paths) / len(paths)
        back = forward if self.params.spray == "data_and_acks" else self.path_delay_ms(1)
        return 4 * self.params.access.delay_ms + forward + back

    def delay_egress(self, pair: int) -> list[tuple[str, str]]:
        return [(f"l{pair}", f"l{pair}-eth0"), (f"r{pair}", f"r{pair}-eth0")]

    @property
    def queue_pkts(self) -> int | None:
        return queue_packets(self.params.link, max(self.path_rtt_ms(self.params.paths), 1e-3))

    def probes(self) -> list[Probe]:
        """One UDP probe per direction over pair 0: sprayed, it fills every path (P x the rate)."""
        rate, paths = self.params.link.rate_mbit, self.params.paths
        reverse_paths = paths if self.params.spray == "data_and_acks" else 1
        return [
            Probe("forward", 0, rate * paths, self.queue_pkts),
            Probe("reverse", 0, rate * reverse_paths, self.queue_pkts),
        ]

    def netspec(self) -> NetSpec:
        params, paths = self.params, self.params.paths
        rate, queue = params.link.rate_mbit, self.queue_pkts
        spec = NetSpec(routers=["rl", "rr"] + [f"m{k}" for k in range(1, paths + 1)], capture_nodes=["rl", "rr"])
        for k in range(1, paths + 1):
            node, left_intf, right_intf = f"m{k}", f"rl-eth{k - 1}", f"rr-eth{k - 1}"
            spec.links += [
                LinkSpec("rl", left_intf, node, f"{node}-eth0"),
                LinkSpec(node, f"{node}-eth1", "rr", right_intf),
            ]
            spec.addresses.update(
                {
                    ("rl", left_intf): f"10.3.{k}.1/30",
                    (node, f"{node}-eth0"): f"10.3.{k}.2/30",
                    (node, f"{node}-eth1"): f"10.4.{k}.1/30",
                    ("rr", right_intf): f"10.4.{k}.2/30",
                }
            )
            spec.routes[node] = [("10.2.0.0/16", f"10.4.{k}.2"), ("10.1.0.0/16", f"10.3.{k}.1")]
            for router, intf, direction in (("rl", left_intf, "forward"), ("rr", right_intf, "reverse")):
                spec.egress[(router, intf)] = EgressPlan(
                    rate_mbit=rate, queue_pkts=queue, discipline=self.params.link.queue
                )
                spec.bottlenecks.append(Bottleneck(router, intf, rate, queue, direction))
            extra = self.path_delay_ms(k) - self.path_delay_ms(1)
            if extra > 0:
                for intf in ("eth0", "eth1"):
                    spec.egress[(node, f"{node}-{intf}")] = EgressPlan(delay_ms=extra)
        spec.routes["rl"] = [("10.2.0.0/16", "10.3.1.2")]
        spec.routes["rr"] = [("10.1.0.0/16", "10.4.1.1")]
        spec.sprayers.append(
            Sprayer("rl", "rl-eth0", tuple((f"rl-eth{k - 1}", f"10.3.{k}.2") for k in range(2, paths + 1)), "forward")
        )
        if params.spray == "data_and_acks":
            spec.sprayers.append(
                Sprayer(
                    "rr", "rr-eth0", tuple((f"rr-eth{k - 1}", f"10.4.{k}.1") for k in range(2, paths + 1)), "reverse"
                )
            )
        for i in range(self.pairs):
            for side, router, net in (("l", "rl", "10.1"), ("r", "rr", "10.2")):
                host, router_intf = f"{side}{i}", f"{router}-eth{paths + i}"
                spec.hosts.append(host)
                spec.links.append(LinkSpec(host, f"{host}-eth0", router, router_intf))
                spec.addresses[(host, f"{host}-eth0")] = f"{net}.{i}.1/24"
                spec.addresses[(router, router_intf)] = f"{net}.{i}.254/24"
                spec.routes[host] = [("default", f"{net}.{i}.254")]
                spec.egress[(host, f"{host}-eth0")] = EgressPlan(delay_ms=self.one_way_delay_ms(i))
        spec.hosts.sort(key=lambda h: (h[0], int(h[1:])))
        return spec
