"""A run's drop check: the packets the bottleneck queues dropped against the retransmissions the
captures saw (a fidelity check made from the analysis: a loss the sender did not see, or a
retransmission with no loss to explain it, says the run measured something else).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.raw.loaders import (
    LoadError,
    leaf_qdiscs,
    load_tc_stats,
    load_udp_probe,
    udp_probe_files,
)
from analysis.runs import metrics

DROP_CHECK_COLUMNS = [
    "bottleneck",
    "direction",
    "queue_drops",
    "udp_probe_lost",
    "netem_drops",
    "tcp_retrans_pkts",
    "difference",
    "verdict",
]


#: retransmitted segments and queue drops agree when they differ by at most this many or this fraction
DROP_TOLERANCE_PKTS = 2


DROP_TOLERANCE_FRACTION = 0.05


def drop_checks(raw: Path, manifest: dict, flows: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """Post-run check: bottleneck queue drops (tc -s) vs retransmitted segments (capture).

    Every packet the bottleneck queue drops is a packet the sender has to send again, so, without
    random loss, queue drops = UDP probe packets lost (the probe ran before TCP, through the same
    queue) + TCP retransmitted segments. Spurious retransmissions (after an RTO) make the second
    larger; losses not repaired before the end of the run make it smaller.
    """
    bottlenecks = (manifest.get("topology") or {}).get("bottlenecks") or []
    if not bottlenecks:
        return pd.DataFrame(columns=DROP_CHECK_COLUMNS)
    try:
        tc = load_tc_stats(raw / "tc-stats.json", before=raw / "tc-stats-before.json")
    except LoadError as exc:
        problems.append(str(exc))
        tc = None
    rows = []
    directions = set(flows["direction"].dropna()) if not flows.empty else set()
    for bottleneck in bottlenecks:
        node, intf, direction = bottleneck.get("node"), bottleneck.get("intf"), bottleneck.get("direction")
        if directions and direction not in directions:
            continue
        queue_drops = netem_drops = math.nan
        if tc is not None:
            leaves = leaf_qdiscs(tc)
            here = leaves[(leaves["node"] == node) & (leaves["intf"] == intf)]
            if not here.empty:
                queue_drops = float(here["drops"].sum())
            netem = leaves[leaves["kind"] == "netem"]
            netem_drops = float(netem["drops"].sum()) if not netem.empty else 0.0
        probe_lost = math.nan
        files = udp_probe_files(raw, direction)
        for path in files:
            try:
                lost = load_udp_probe(path).get("lost_packets")
            except LoadError as exc:
                problems.append(str(exc))
                continue
            if lost is not None:
                probe_lost = float(lost)
                break
        mine = flows[flows["direction"] == direction] if not flows.empty else flows
        retrans = metrics.sum_or_nan(mine["retrans_pkts"]) if not mine.empty else math.nan
        difference, verdict = _drop_verdict(queue_drops, probe_lost, netem_drops, retrans, bool(files))
        rows.append(
            {
                "bottleneck": f"{node}/{intf}",
                "direction": direction,
                "queue_drops": queue_drops,
                "udp_probe_lost": probe_lost,
                "netem_drops": netem_drops,
                "tcp_retrans_pkts": retrans,
                "difference": difference,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows, columns=DROP_CHECK_COLUMNS)


def _drop_verdict(
    queue_drops: float, probe_lost: float, netem_drops: float, retrans: float, probe_ran: bool
) -> tuple[float, str]:
    if math.isnan(queue_drops) or math.isnan(retrans):
        return math.nan, "n/a: " + (
            "no tc stats for this queue" if math.isnan(queue_drops) else "retransmissions unknown"
        )
    if math.isnan(probe_lost):
        if probe_ran:
            return math.nan, "n/a: the UDP probe's loss is unknown"
        probe_lost = 0.0
    expected = queue_drops - probe_lost
    difference = retrans - expected
    if netem_drops and not math.isnan(netem_drops):
        return difference, (
            f"not compared: random loss (netem dropped {netem_drops:g} packets, both directions) also causes "
            "retransmissions"
        )
    tolerance = max(DROP_TOLERANCE_PKTS, DROP_TOLERANCE_FRACTION * max(expected, retrans))
    if abs(difference) <= tolerance:
        return difference, "consistent: every queue drop was retransmitted once"
    if difference > 0:
        return difference, "more retransmissions than drops (spurious retransmissions, e.g. after a timeout)"
    return (
        difference,
        "more drops than retransmissions (losses not repaired before the end, or drops of other traffic)",
    )
