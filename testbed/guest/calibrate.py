"""Delay calibration before traffic: each pair's idle RTT measured with ping, and its netem delay
corrected for the emulator's own latency, so that the base RTT is the one the scenario asked for."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from testbed.guest import fidelity
from testbed.guest.network import Network
from testbed.guest.shaping import set_delay, set_delays
from testbed.plan.connections import Connection

PING_COUNT = 10


#: seconds between pings (10 in a second: the min over more samples reads the emulator's least latency)
PING_INTERVAL_S = 0.1


#: a network calibrated before is only checked: this many pings this far apart (s) per round (root may
#: ping faster than every 0.2 s); a round that misses is repeated as after a calibration
CHECK_PING_COUNT = 5
CHECK_PING_INTERVAL_S = 0.05


#: a pair whose idle RTT misses the configured one by more than this gets its netem delay corrected
CALIBRATION_THRESHOLD_MS = 0.25


#: an excess above this is no emulator latency (1.5-4 ms per round trip under TCG) but a stall: once,
#: the first round after a network came up read 331 ms against 124 ms and lowered a 62 ms delay to 0
MAX_EXCESS_MS = 20.0
#: the least one-way delay a correction sets
MIN_DELAY_MS = 0.001


#: at most this many rounds of measure-and-correct per pair
CALIBRATION_ROUNDS = 3


#: a pair whose base RTT check would fail is measured again this many more rounds at most (its lowest counts)
RTT_RECHECK_ROUNDS = 2


def ping_pairs(
    net: Network, connections: list[Connection], count: int = PING_COUNT, interval_s: float = PING_INTERVAL_S
) -> dict[int, str]:
    """ping output per topology pair (sender to receiver of its first connection), all pairs at once.

    Started from each sender's shell in the background (a fork there costs far less than a process
    started from the runner, which matters with hundreds of pairs under TCG), from the sender's
    address: on a host with one address per flow, that selects the flow's path."""
    first: dict[int, Connection] = {}
    for c in connections:
        first.setdefault(c.pair, c)
    # -w: ping sends until `count` replies came (or the deadline): on a lossy path a lost ping costs one
    # more request, not two round trips of waiting after the last one, and the check always has `count`
    # replies (-W waited so, with fewer; 10 s when no reply came). The deadline covers twice the
    # requests' time and three base RTTs: a broken path costs that, then its check fails.
    ping = f"ping -n -q -c {count} -i {interval_s}"
    with tempfile.TemporaryDirectory(prefix="cc-testbed-ping-") as tmp:
        scripts: dict[str, list[str]] = {}
        for pair, c in first.items():
            deadline_s = math.ceil(2 * count * interval_s + 3 * c.base_rtt_ms / 1000) + 1
            line = f"{ping} -w {deadline_s} -I {c.sender_ip} {c.receiver_ip} > {tmp}/{pair}.txt 2>&1 &"
            scripts.setdefault(c.sender, []).append(line)
        for node, lines in scripts.items():  # a script, not one long line: a shell's tty takes 4095 bytes a line
            Path(tmp, f"{node}.sh").write_text("\n".join([*lines, "wait", ""]))
        net.cmd_each({node: f"sh {tmp}/{node}.sh" for node in scripts})
        return {pair: Path(tmp, f"{pair}.txt").read_text(errors="replace") for pair in first}


#: the calibrated delays of each network shape this process has calibrated: shape key -> pair -> record.
#: The emulator's own latency depends on the path (its netem stages, its hops) and the machine, not on
#: the algorithm or the seed, so the runs of one point and its siblings (one guest boot) calibrate once.
_CALIBRATED: dict[str, dict[int, dict]] = {}


def calibrate_delays(
    net: Network, topology, connections: list[Connection], shape: str | None = None, delays_set: bool = False
) -> tuple[list[dict], dict[int, str]]:
    """Correct each pair's netem delay for the emulator's own latency, measured idle; a ``shape``
    (the network's description) calibrated before in this process gets its delays again and is only
    checked (:func:`reuse_calibration`; ``delays_set``: the network was kept from a run that set them).

    Forwarding and netem's timers add latency of their own (about 1.5-4 ms per round trip in a
    TCG guest, depending on the netem stages on the path; ~0.05 ms with KVM): the pair's one-way
    delay is lowered by half that excess. The excess varies from one round of pings to the next
    (a busy moment adds 2 ms to every ping of a round), and it only ever adds, so the estimate is
    the smallest excess seen so far: a round that reads high changes nothing, one that reads lower
    lowers the delay and is measured again (up to CALIBRATION_ROUNDS rounds).

    Returns the record per pair and, per pair, the ping output for its fidelity check: of the rounds
    measured at the pair's final delay, the one with the lowest minimum (the base RTT is the least
    latency the path shows). A pair changed in the last round is pinged once more for it, and a pair
    whose check would miss its tolerance (a TCG stall delays every ping of a round: 261.9 ms against
    250 once, after rounds of 252.5 and 249.7) gets up to RTT_RECHECK_ROUNDS more rounds.
    """
    if shape is not None and shape in _CALIBRATED:
        return reuse_calibration(net, topology, connections, _CALIBRATED[shape], delays_set)
    adjustable = hasattr(topology, "delay_egress")
    records: dict[int, dict] = {}
    at_final: dict[int, list[str]] = {}  # per pair, the ping outputs measured at its current delay
    pending = connections
    for _ in range(CALIBRATION_ROUNDS if adjustable else 1):
        changed = _calibration_round(net, topology, pending, records, at_final, adjustable)
        pending = [c for c in connections if c.pair in changed]
        if not pending:
            break
    _recheck(net, topology, connections, pending, at_final)
    for pair, record in records.items():
        record["check_rounds"] = len(at_final[pair])
    if shape is not None:
        _CALIBRATED[shape] = {pair: dict(record) for pair, record in records.items()}
    return [records[pair] for pair in sorted(records)], {pair: lowest_ping(outs) for pair, outs in at_final.items()}


def reuse_calibration(
    net: Network, topology, connections: list[Connection], calibrated: dict[int, dict], delays_set: bool = False
) -> tuple[list[dict], dict[int, str]]:
    """Set the delays an earlier run of the same shape calibrated (unless ``delays_set``), then measure
    each pair's base RTT for its check (rounds again for a pair that misses its tolerance, as after a
    calibration)."""
    per_destination: dict[tuple[str, str], dict[str, float]] = {}
    for pair, record in calibrated.items():
        if delays_set or record["one_way_netem_delay_ms"] == topology.one_way_delay_ms(pair):
            continue
        for node, intf, *dst in topology.delay_egress(pair):
            if dst:
                per_destination.setdefault((node, intf), {})[dst[0]] = record["one_way_netem_delay_ms"]
            else:
                set_delay(net.netns_path(node), intf, record["one_way_netem_delay_ms"])
    for (node, intf), delays in per_destination.items():
        set_delays(net.netns_path(node), intf, delays)
    at_final: dict[int, list[str]] = {}
    _recheck(
        net,
        topology,
        connections,
        connections,
        at_final,
        pings={"count": CHECK_PING_COUNT, "interval_s": CHECK_PING_INTERVAL_S},
    )
    records = [
        {**calibrated[pair], "reused": True, "check_rounds": len(at_final.get(pair, []))} for pair in sorted(calibrated)
    ]
    return records, {pair: lowest_ping(outs) for pair, outs in at_final.items()}


def _calibration_round(
    net: Network,
    topology,
    pending: list[Connection],
    records: dict[int, dict],
    at_final: dict[int, list[str]],
    adjustable: bool,
) -> set[int]:
    """One round of pings for the pairs of ``pending``; corrects the delays that read off and returns
    the pairs it changed (their pings so far no longer count for the check)."""
    changed = set()
    per_destination: dict[tuple[str, str], dict[str, float]] = {}  # set together, one bpftool per interface
    for pair, out in ping_pairs(net, pending).items():
        at_final.setdefault(pair, []).append(out)
        configured, nominal = topology.base_rtt_ms(pair), topology.one_way_delay_ms(pair)
        summary = fidelity.parse_ping(out)
        if summary is None or not adjustable or configured <= 0:
            continue
        record = records.setdefault(
            pair,
            {
                "pair": pair,
                "configured_rtt_ms": configured,
                "measured_min_rtt_ms": [],
                "one_way_netem_delay_ms": nominal,
                "excess_ms": None,
            },
        )
        applied = record["one_way_netem_delay_ms"]
        record["measured_min_rtt_ms"].append(summary["min_ms"])
        excess = summary["min_ms"] - (configured + 2 * (applied - nominal))
        if excess > MAX_EXCESS_MS:  # a stall of the emulator, not its latency: measured again, nothing corrected
            at_final[pair].pop()
            changed.add(pair)
            continue
        record["excess_ms"] = round(excess if record["excess_ms"] is None else min(record["excess_ms"], excess), 3)
        # never 0: a netem of delay 0 is an empty plan, which `set_delay` would not install
        target = max(MIN_DELAY_MS, nominal - record["excess_ms"] / 2)
        if abs(summary["min_ms"] - configured) <= CALIBRATION_THRESHOLD_MS or abs(target - applied) < 0.01:
            continue
        for node, intf, *dst in topology.delay_egress(pair):
            if dst:
                per_destination.setdefault((node, intf), {})[dst[0]] = target
            else:
                set_delay(net.netns_path(node), intf, target)
        record["one_way_netem_delay_ms"] = round(target, 3)
        at_final[pair] = []
        changed.add(pair)
    for (node, intf), delays in per_destination.items():
        set_delays(net.netns_path(node), intf, delays)
    return changed


def _recheck(
    net: Network,
    topology,
    connections: list[Connection],
    pending: list[Connection],
    at_final: dict[int, list[str]],
    pings: dict | None = None,
) -> None:
    """Ping the pairs changed in the last round once more, then the pairs whose check would miss its
    tolerance again, up to RTT_RECHECK_ROUNDS times (their lowest round counts)."""
    for recheck in range(RTT_RECHECK_ROUNDS + 1):
        for pair, out in (ping_pairs(net, pending, **(pings or {})) if pending else {}).items():
            at_final.setdefault(pair, []).append(out)
        missing = {
            pair
            for pair, outs in at_final.items()
            if not fidelity.rtt_check("", lowest_ping(outs), topology.base_rtt_ms(pair)).ok
        }
        if not missing or recheck == RTT_RECHECK_ROUNDS:
            break
        pending = [c for c in connections if c.pair in missing]


def lowest_ping(outputs: list[str]) -> str:
    """The ping output with the lowest minimum RTT (one without replies only if no other has any)."""

    def minimum(out: str) -> float:
        summary = fidelity.parse_ping(out)
        return float("inf") if summary is None else summary["min_ms"]

    return min(outputs, key=minimum)
