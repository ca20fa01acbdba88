"""Around the traffic: per-flow options on the hosts before it, and what is read after it (qdisc
statistics, sysctls, loss channels, sprayers, iperf3's own verdict per connection)."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.guest import fidelity, lossbpf, spray
from testbed.guest.netnsutil import iproute
from testbed.guest.netnsutil import read_sysctls as read_sysctls_in
from testbed.guest.network import Network
from testbed.plan.connections import Connection
from testbed.results import provenance, rundir
from testbed.scenario.points import RunSpec
from testbed.scenario.schema import Scenario
from topologies.lossmodel import FourStateLoss, GilbertElliottLoss, packet_chain, timeline
from topologies.shaping import LOSSY_NETEM

#: per-flow switches set as a sysctl on the flow's hosts (sender and receiver) when the flow turns them
#: off: the flow's option -> (the options' key listing those hosts, the sysctl, its value off, the kernel's
#: default, which a kept network gets back). Each is per network namespace since Linux 4.15.
SYSCTL_SWITCHES = {
    "sack": ("sack_off", "net.ipv4.tcp_sack", 0, 1),
    "rack": ("rack_off", "net.ipv4.tcp_recovery", 0, 1),
    "tlp": ("tlp_off", "net.ipv4.tcp_early_retrans", 0, 3),
    "frto": ("frto_off", "net.ipv4.tcp_frto", 0, 2),
}


def flow_options(topology, scenario: Scenario) -> dict:
    """Per-flow TCP options, as set on the flow's hosts: delayed ACKs off (route ``quickack`` on the
    receiver), SACK, RACK, TLP or F-RTO off (:data:`SYSCTL_SWITCHES`, on sender and receiver), ECN asked
    for (``net.ipv4.tcp_ecn=1`` on both), initial window (route ``initcwnd`` on the sender). A host is
    shared by the flows of one pair: they get the union."""
    routes: dict[str, dict[str, int]] = {}
    off: dict[str, set[str]] = {key: set() for key, *_ in SYSCTL_SWITCHES.values()}
    ecn: set[str] = set()
    for flow, pairs in zip(scenario.flows, topology.flow_pairs(scenario.flows), strict=True):
        for pair in pairs:
            sender, receiver = (e.node for e in topology.endpoints(pair, flow.direction))
            if not flow.delayed_ack:
                routes.setdefault(receiver, {})["quickack"] = 1
            if flow.initcwnd_segs:
                routes.setdefault(sender, {})["initcwnd"] = flow.initcwnd_segs
            for option, (key, *_) in SYSCTL_SWITCHES.items():
                if not getattr(flow, option):
                    off[key].update((sender, receiver))
            if flow.ecn:
                ecn.update((sender, receiver))
    return {
        "route_metrics": dict(sorted(routes.items())),
        **{key: sorted(nodes) for key, nodes in off.items()},
        "ecn_on": sorted(ecn),
    }


def apply_flow_options(net: Network, options: dict, previous: dict | None = None) -> dict:
    """Set :func:`flow_options` on the hosts; returns them (for the manifest).

    ``previous``: the options the run before set on this (kept) network; what it set and these do not
    is undone (routes back to no metrics, switches back to the kernel's defaults), so that one network
    serves runs with different options."""
    previous = previous or {}
    for node in sorted(set(options["route_metrics"]) | set(previous.get("route_metrics", {}))):
        metrics = options["route_metrics"].get(node)
        if metrics == previous.get("route_metrics", {}).get(node):
            continue
        with iproute(net.netns_path(node)) as ns:
            for dst, gateway in net.spec.routes.get(node, []):
                # a replaced route keeps no metric it is not given: without any, the defaults are back
                extra = {"metrics": metrics} if metrics else {}
                ns.route("replace", dst="0.0.0.0/0" if dst == "default" else dst, gateway=gateway, **extra)
    for key, sysctl, off_value, default in SYSCTL_SWITCHES.values():
        now, before = set(options.get(key, [])), set(previous.get(key, []))
        for node in sorted(now - before):
            net.cmd(node, f"sysctl -qw {sysctl}={off_value}")
        for node in sorted(before - now):
            net.cmd(node, f"sysctl -qw {sysctl}={default}")
    now, before = set(options["ecn_on"]), set(previous.get("ecn_on", []))
    for node in sorted(now - before):
        net.cmd(node, "sysctl -qw net.ipv4.tcp_ecn=1")
    for node in sorted(before - now):
        net.cmd(node, f"sysctl -qw net.ipv4.tcp_ecn={ECN_DEFAULT}")
    return options


#: the kernel's default net.ipv4.tcp_ecn: ECN when the peer asks for it, never asked for
ECN_DEFAULT = 2


def tc_stats(net: Network) -> dict:
    """``tc -s -j qdisc show`` of every interface as ``{"node/intf": [qdisc, ...]}``; one call per node,
    all nodes at once (a shell round trip costs ~0.2 s in a TCG guest; a 60-node topology has 120
    interfaces)."""
    stats = {}
    for node, out in net.cmd_all("tc -s -j qdisc show").items():
        try:
            qdiscs = json.loads(out)
        except ValueError:
            qdiscs = None
        for intf in net.spec.interfaces(node):
            if qdiscs is None:
                stats[f"{node}/{intf}"] = {"unparsed": out}
            else:
                stats[f"{node}/{intf}"] = [q for q in qdiscs if q.get("dev") == intf]
    return stats


def read_sysctls(net: Network, node: str) -> dict:
    # read in the node's namespace by this process: a `sysctl` process per key costs ~0.1 s under TCG
    return read_sysctls_in(net.netns_path(node), provenance.SYSCTLS)


def load_loss_channels(net: Network, spec: RunSpec, horizon_s: float) -> list[lossbpf.Channel]:
    """Load every timed two-state loss channel of the topology with its timeline from the run's seed.

    Channel k (interfaces in sorted order) uses stream k of the seed: independent channels, the
    same ones again for the same seed."""
    timed = sorted((key, plan.timed_loss) for key, plan in net.spec.egress.items() if plan.timed_loss is not None)
    channels = []
    for stream, ((node, intf), model) in enumerate(timed):
        channel = lossbpf.Channel(node, intf, net.netns_path(node), model, stream)
        channel.load(spec.seed, timeline(model, spec.seed, horizon_s, stream))
        channels.append(channel)
    return channels


def random_sources(egress: dict, seed: int) -> list[dict]:
    """Every random source of a run and what it is drawn from (the manifest's ``random_sources``): each
    timed or seeded-Bernoulli loss channel from the run's seed (its stream, as :func:`load_loss_channels`
    numbers them, and the draws' seed), netem's per-packet losses from nothing reproducible (Debian 12's
    netem takes no seed), and the schedules, which draw nothing: flows' start and stop times, ON/OFF
    periods and request arrivals are fixed by the scenario, and multipath spraying is round-robin. So two
    runs of one seed share every source but netem's."""
    timed = sorted(key for key, plan in egress.items() if plan.timed_loss is not None)
    sources = [
        {
            "source": f"loss {node}/{intf}",
            "drawn_from": f"run seed {seed}, stream {stream}",
            "draw_seed": lossbpf.draw_seed(seed, stream),
        }
        for stream, (node, intf) in enumerate(timed)
    ]
    sources += [
        {
            "source": f"netem loss {node}/{intf}",
            "drawn_from": None,
            "why": "netem takes no seed here (Debian 12's iproute2): not shared between runs of one seed",
        }
        for (node, intf), plan in sorted(egress.items())
        if plan.is_lossy
    ]
    sources.append(
        {
            "source": "schedules",
            "drawn_from": None,
            "why": "start, stop, ON/OFF and request times are fixed by the scenario; spraying is "
            "round-robin: nothing is drawn",
        }
    )
    return sources


def read_loss_channels(channels: list[lossbpf.Channel], raw: Path, report: fidelity.FidelityReport) -> list[dict]:
    """Write each channel's realized timeline to raw/loss-<node>-<intf>.json; summaries for the manifest.
    Each channel is cleared once read (disarmed, counters zero), as new for the next run on its network."""
    summaries = []
    for channel in channels:
        data = channel.read()
        channel.clear()
        rundir.write_json_atomic(raw / f"loss-{channel.node}-{channel.ifname}.json", data)
        for kind, total in data["per_state"].items():
            report.checks.append(
                fidelity.loss_check(
                    f"loss {kind} {channel.node}/{channel.ifname}",
                    total["seen"],
                    total["dropped"],
                    total["configured_loss_pct"],
                )
            )
        summaries.append({key: data[key] for key in ("node", "interface", "stream", "packets_seen", "per_state")})
    return summaries


def netem_loss_checks(spec, tc_stats: dict, before: dict | None) -> list[fidelity.Check]:
    """The realized loss of every netem loss (a link's ``loss_pct``, Gilbert-Elliott, 4-state) over the run
    against its configured stationary probability (:func:`fidelity.loss_check`, as for the BPF channel's
    states): the lossy netem's drops among the packets it took (sent + dropped), less where its counters
    stood before the run on a kept network (``before``). Bernoulli within binomial spreads; the chains'
    losses come in bursts, so their spread is the chain's own (:func:`fidelity.chain_loss`)."""
    checks = []
    for (node, intf), plan in sorted(spec.egress.items()):
        expected = _expected_netem_loss(plan)
        if expected is None:
            continue
        configured_pct, variance = expected
        now, then = _lossy_netem(tc_stats, node, intf), _lossy_netem(before or {}, node, intf)
        if now is None:
            checks.append(
                fidelity.Check(
                    f"loss netem {node}/{intf}",
                    False,
                    None,
                    configured_pct,
                    f"no netem {LOSSY_NETEM} in the interface's qdisc statistics",
                )
            )
            continue
        dropped = now.get("drops", 0) - (then or {}).get("drops", 0)
        sent = now.get("packets", 0) - (then or {}).get("packets", 0)
        checks.append(
            fidelity.loss_check(f"loss netem {node}/{intf}", sent + dropped, dropped, configured_pct, variance)
        )
    return checks


def _expected_netem_loss(plan) -> tuple[float, float | None] | None:
    """(configured stationary loss %, per-packet variance or None for binomial) of an egress's netem loss;
    None where it has none, or a chain too slow to judge."""
    if plan.loss_pct and plan.loss_model is None:
        return plan.loss_pct, None
    if not isinstance(plan.loss_model, GilbertElliottLoss | FourStateLoss):
        return None  # the timed channel is checked per state by its own counters (read_loss_channels)
    settled = fidelity.chain_loss(*packet_chain(plan.loss_model))
    return None if settled is None else (100 * settled[0], settled[1])


def _lossy_netem(tc_stats: dict, node: str, intf: str) -> dict | None:
    qdiscs = tc_stats.get(f"{node}/{intf}") or []
    return next(
        (q for q in qdiscs if isinstance(q, dict) and q.get("kind") == "netem" and q.get("handle") == LOSSY_NETEM), None
    )


def read_sprayers(sprayers, before: list[list[int]], tc_stats: dict, report: fidelity.FidelityReport) -> list[dict]:
    """Packets each sprayer put on each path during traffic (its own counters) and what each path's
    queue sent over the whole run (tc); the check: every path carried traffic, in equal turns."""
    records = []
    for (sprayer, maps), first in zip(sprayers, before, strict=True):
        counts = [end - start for end, start in zip(spray.sent(maps, len(first)), first, strict=True)]
        interfaces = [sprayer.intf] + [intf for intf, _ in sprayer.paths]
        queue_sent = []
        for intf in interfaces:
            qdiscs = tc_stats.get(f"{sprayer.node}/{intf}") or []
            roots = [q for q in qdiscs if isinstance(q, dict) and q.get("root")]
            queue_sent.append(roots[0].get("packets") if roots else None)
        ok = min(counts) > 0 and max(counts) - min(counts) <= 1 and all(n for n in queue_sent)
        detail = (
            f"{sprayer.direction} packets per path during traffic {counts}, sent by each path's queue "
            f"(whole run) {queue_sent}"
        )
        report.checks.append(fidelity.Check(f"spray {sprayer.node}", ok, float(sum(counts)), None, detail))
        records.append(
            {
                "node": sprayer.node,
                "direction": sprayer.direction,
                "interfaces": interfaces,
                "sprayed_packets": counts,
                "queue_sent_packets": queue_sent,
            }
        )
    return records


def connection_failures(connections: list[Connection], clients: dict, raw: Path) -> list[str]:
    failures = []
    for c in connections:
        proc = clients.get(c.id)
        text = (raw / f"iperf3-{c.id}-client.json").read_text(errors="replace")
        error = None
        try:
            error = json.loads(text).get("error")
        except ValueError:
            error = f"output is not JSON: {text.strip()[:200]!r}"
        if proc is not None and proc.returncode != 0 or error:
            failures.append(
                f"connection {c.id} ({c.cc} {c.sender}->{c.receiver}) failed: iperf3 exit "
                f"{proc.returncode if proc else 'not started'}: {error or 'no error text'}"
            )
    return failures
