"""The papers' metrics, as pure functions (the statistics across seeds are analysis/verdicts/stats.py's).

Units are in the names: ``_bytes``, ``_s``, ``_mbit`` (Mbit/s, 10**6 bit/s). A missing input (None or
NaN) gives NaN, never a made-up number; NaN is written as an empty cell and shown as "n/a".

Two goodputs are used everywhere and always labelled:

* **sender goodput** (the papers' definition, paper 000 §3.1): (sent - retransmitted) / transfer
  time, counted from the capture on the router next to the sender (pcap.py);
* **receiver goodput**: bytes the iperf3 server read / the server's test time (iperf3 server JSON).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd


def number_or_nan(value) -> float:
    """A float, NaN for None/NaN/non-numbers (the statistics read numbers through it too)."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


BITS_PER_BYTE = 8
BITS_PER_MBIT = 1e6


def goodput_mbit(sent_bytes, retransmitted_bytes, transfer_s) -> float:
    """Sender goodput, paper 000 §3.1: ``(sent data - retransmitted data) / transfer time``, in Mbit/s.

    ``sent_bytes`` counts every data segment the sender transmitted (retransmissions included),
    ``retransmitted_bytes`` the bytes sent again, ``transfer_s`` the time from the connection's first to
    its last data segment. NaN when the transfer time is not positive (no or one data segment).
    """
    sent, retransmitted, seconds = (
        number_or_nan(sent_bytes),
        number_or_nan(retransmitted_bytes),
        number_or_nan(transfer_s),
    )
    if not seconds > 0:
        return math.nan
    return (sent - retransmitted) * BITS_PER_BYTE / seconds / BITS_PER_MBIT


def receiver_goodput_mbit(received_bytes, seconds) -> float:
    """Receiver goodput: bytes the receiving application read / its test time (iperf3 server), in Mbit/s."""
    received, duration = number_or_nan(received_bytes), number_or_nan(seconds)
    if not duration > 0:
        return math.nan
    return received * BITS_PER_BYTE / duration / BITS_PER_MBIT


def retransmission_ratio(retransmitted_bytes, sent_bytes) -> float:
    """Retransmission ratio = retransmitted / sent bytes (a fraction; paper 000 §4 and SCENARIOS.md).

    NaN when nothing was sent.
    """
    retransmitted, sent = number_or_nan(retransmitted_bytes), number_or_nan(sent_bytes)
    if not sent > 0:
        return math.nan
    return retransmitted / sent


def jain_index(goodputs: Iterable) -> float:
    """Jain fairness index, paper 000 §3.2: ``J = (sum b_i)**2 / (n * sum b_i**2)``, b_i the goodput of
    flow i.

    1 when all flows get the same share, 1/n when one flow takes everything. NaN for no flows, when any
    b_i is missing, or when every b_i is zero (the index is undefined).
    """
    values = np.array([number_or_nan(v) for v in goodputs], dtype=float)
    if values.size == 0 or np.isnan(values).any():
        return math.nan
    if (values < 0).any():
        raise ValueError("goodputs must not be negative")
    square_sum = float(np.sum(values**2))
    if square_sum == 0:
        return math.nan
    return float(np.sum(values) ** 2 / (values.size * square_sum))


def interval_boundaries(start_s: float, stop_s: float, width_s: float) -> list[float]:
    """``start, start + width, ...`` up to ``stop`` (the last interval is cut at ``stop``)."""
    if not width_s > 0:
        raise ValueError("interval width must be positive")
    count = max(1, math.ceil((stop_s - start_s) / width_s - 1e-9))
    edges = [start_s + i * width_s for i in range(count)]
    return edges + [stop_s]


def split_into_intervals(samples: pd.DataFrame, boundaries: Sequence[float]) -> pd.DataFrame:
    """Per-interval goodput from a series of byte counts over time spans (e.g. iperf3's intervals).

    ``samples`` has ``t_start_s``, ``t_end_s``, ``bytes``: ``bytes`` moved during [t_start, t_end).
    ``boundaries`` b_0 < b_1 < ... < b_k delimit intervals [b_i, b_i+1). A sample that straddles a
    boundary is split in proportion to the time it spends on each side (its rate is taken as constant
    within the sample); a sample of zero duration goes to the interval that contains it.

    Returns one row per interval: ``t_start_s``, ``t_end_s``, ``bytes``, ``covered_s`` (how much of the
    interval samples cover) and ``goodput_mbit`` = bytes / interval length (as paper 000 §3.1 reports
    goodput per 250 s interval). An interval no sample covers has NaN bytes and goodput (no data), not 0.
    """
    edges = np.asarray(boundaries, dtype=float)
    if edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError("boundaries must be at least two increasing times")
    count = edges.size - 1
    moved = np.zeros(count)
    covered = np.zeros(count)
    touched = np.zeros(count, dtype=bool)
    for start, end, amount in samples[["t_start_s", "t_end_s", "bytes"]].itertuples(index=False):
        if any(math.isnan(number_or_nan(x)) for x in (start, end, amount)):
            continue
        if end <= start:
            i = int(np.searchsorted(edges, start, side="right")) - 1
            if 0 <= i < count:
                moved[i] += amount
                touched[i] = True
            continue
        first = max(0, int(np.searchsorted(edges, start, side="right")) - 1)
        last = min(count - 1, int(np.searchsorted(edges, end, side="left")) - 1)
        for i in range(first, last + 1):
            overlap = min(end, edges[i + 1]) - max(start, edges[i])
            if overlap <= 0:
                continue
            moved[i] += amount * overlap / (end - start)
            covered[i] += overlap
            touched[i] = True
    width = np.diff(edges)
    moved_or_nan = np.where(touched, moved, np.nan)
    return pd.DataFrame(
        {
            "t_start_s": edges[:-1],
            "t_end_s": edges[1:],
            "bytes": moved_or_nan,
            "covered_s": covered,
            "goodput_mbit": moved_or_nan * BITS_PER_BYTE / width / BITS_PER_MBIT,
        }
    )


def group_metric(flows: pd.DataFrame, metric: str) -> float:
    """One metric of a group of flows (rows of ``flow_totals``) in one run: ``goodput`` the mean sender
    goodput (paper 000 §3.1), ``total_goodput`` the sum (000 §3.2), ``jain`` Jain's index (two flows
    or more, else NaN), ``retrans_ratio`` retransmitted / sent bytes and ``recv_goodput`` the mean
    receiver goodput (bytes the receiving application read / its time: paper 004's "end-to-end
    throughput [...] at the transport layer level"). NaN when a goodput is missing."""
    goodputs = flows["recv_goodput_mbit" if metric == "recv_goodput" else "goodput_mbit"]
    if goodputs.empty or goodputs.isna().any():
        return math.nan
    if metric in ("goodput", "recv_goodput"):
        return float(goodputs.mean())
    if metric == "total_goodput":
        return float(goodputs.sum())
    if metric == "jain":
        return jain_index(goodputs) if len(flows) > 1 else math.nan
    if metric == "retrans_ratio":
        return retransmission_ratio(flows["retrans_bytes"].sum(), flows["sent_bytes"].sum())
    raise ValueError(f"unknown metric {metric!r}; valid: goodput, recv_goodput, total_goodput, jain, retrans_ratio")


# ----------------------------------------------------------------------------------- flows of a run


def sum_or_nan(series: pd.Series) -> float:
    """Sum, or NaN when any term is missing (a partial sum would be a made-up number)."""
    values = pd.to_numeric(series, errors="coerce")
    return math.nan if values.empty or values.isna().any() else float(values.sum())


def flow_totals(connections: pd.DataFrame) -> pd.DataFrame:
    """One row per flow (scenario ``flow`` x ``replica``) from the per-connection rows of a run.

    A flow with several ON periods is one connection per period; its goodput adds the connections'
    bytes and transfer times, i.e. its rate while it was ON: ``(sum sent - sum retransmitted) / sum
    transfer time`` (paper 000 §3.1 per flow). Receiver goodput likewise from the iperf3 servers'
    bytes and times. A flow with one connection gets that connection's numbers exactly. Any missing
    term makes the flow's value NaN.
    """
    needed = [
        "flow",
        "replica",
        "cc",
        "direction",
        "sent_bytes",
        "retrans_bytes",
        "transfer_s",
        "recv_bytes",
        "recv_s",
    ]
    missing = [c for c in needed if c not in connections.columns]
    if missing:
        raise ValueError(f"connections lack columns {missing}")
    rows = []
    for (flow, replica), group in connections.groupby(["flow", "replica"], sort=True, dropna=False):
        sent, retransmitted = sum_or_nan(group["sent_bytes"]), sum_or_nan(group["retrans_bytes"])
        transfer = sum_or_nan(group["transfer_s"])
        received, received_s = sum_or_nan(group["recv_bytes"]), sum_or_nan(group["recv_s"])
        rows.append(
            {
                "flow": flow,
                "replica": replica,
                "cc": group["cc"].iloc[0],
                "direction": group["direction"].iloc[0],
                "connections": len(group),
                "sent_bytes": sent,
                "retrans_bytes": retransmitted,
                "transfer_s": transfer,
                "goodput_mbit": goodput_mbit(sent, retransmitted, transfer),
                "recv_goodput_mbit": receiver_goodput_mbit(received, received_s),
                "retrans_ratio": retransmission_ratio(retransmitted, sent),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "flow",
            "replica",
            "cc",
            "direction",
            "connections",
            "sent_bytes",
            "retrans_bytes",
            "transfer_s",
            "goodput_mbit",
            "recv_goodput_mbit",
            "retrans_ratio",
        ],
    )


def jain_by_direction(flows: pd.DataFrame) -> dict[str, float]:
    """Jain index over the flows of each direction that has more than one flow (paper 000 §3.2 takes the
    M forward flows; reverse background flows are a population of their own)."""
    result = {}
    for direction, group in flows.groupby("direction", sort=True):
        if len(group) > 1:
            result[str(direction)] = jain_index(group["goodput_mbit"])
    return result


# ------------------------------------------------------------- Westwood+ estimate (module trace)

#: an Ethernet frame carrying one full-sized segment (MTU 1500 + 14 bytes of MAC header), which is what
#: the bottleneck's HTB rate limits
ETHERNET_FRAME_BYTES = 1514
#: the segments the papers' ssthresh is rounded to at least (kernel-patch min_cwnd_segs, paper 000 §2.1)
MIN_CWND_SEGS = 2


def _time_column(frame: pd.DataFrame) -> str:
    """``t_s`` (seconds since the run's t0) when the frame has it, else the trace's ``t_mono_s``."""
    return "t_s" if "t_s" in frame.columns else "t_mono_s"


def tcp_goodput_limit_mbit(rate_mbit, mss_bytes: float = 1448) -> float:
    """The most TCP payload a link of ``rate_mbit`` carries: ``rate * mss / 1514`` in Mbit/s (a full
    segment travels in a 1514-byte Ethernet frame; 1448 payload bytes with the timestamp option)."""
    return number_or_nan(rate_mbit) * mss_bytes / ETHERNET_FRAME_BYTES


def mean_estimate_mbit(samples: pd.DataFrame, after_s: float = -math.inf) -> float:
    """Mean of the filtered bandwidth estimate ``est_Bps`` over the samples at or after ``after_s``, in Mbit/s
    (a plain mean over samples, one per sampling window). NaN when no sample is that late."""
    if samples.empty or "est_Bps" not in samples.columns:
        return math.nan
    late = samples.loc[samples[_time_column(samples)] >= after_s, "est_Bps"]
    late = pd.to_numeric(late, errors="coerce").dropna()
    if late.empty:
        return math.nan
    return float(late.mean()) * BITS_PER_BYTE / BITS_PER_MBIT


def estimate_vs_goodput(samples: pd.DataFrame, goodput_mbit, after_s: float) -> float:
    """Relative error of Westwood+'s filtered bandwidth estimate against a goodput (a fraction).

    ``(E - G) / G`` with E = the mean of ``est_Bps`` over the samples with time >= ``after_s``
    (:func:`mean_estimate_mbit`, Mbit/s) and G = ``goodput_mbit``. Time is ``t_s`` when ``samples`` has
    it, else ``t_mono_s``. Positive: the estimate is above the goodput. NaN when no sample is that late
    or G is missing or not positive.
    """
    goodput = number_or_nan(goodput_mbit)
    estimate = mean_estimate_mbit(samples, after_s)
    if not goodput > 0 or math.isnan(estimate):
        return math.nan
    return (estimate - goodput) / goodput


PAPER_SSTHRESH_CHECK_COLUMNS = [
    "t_s",
    "sport",
    "kind",
    "ssthresh_after",
    "expected",
    "diff_segments",
    "est_Bps",
    "rtt_min_us",
]


def paper_ssthresh_check(
    events: pd.DataFrame, samples: pd.DataFrame, mss_bytes: float, min_cwnd_segs: float = MIN_CWND_SEGS
) -> pd.DataFrame:
    """Did westwood_paper set ssthresh as paper 000 §2.1 b and c say? One row per ``recovery`` (3 DUPACKs)
    and ``loss`` (coarse timeout) event of variant ``paper``.

    ``expected = max(min_cwnd_segs, est_Bps * rtt_min_us / 1e6 / mss_bytes)``, BWE * RTT_min in segments,
    with the event's own ``est_Bps`` and ``rtt_min_us``; where an event lacks one of them, the last sample
    of the same connection (``sport``) at or before it gives it (else ``expected`` is NaN). RTT_min 0 (the
    event's "no RTT sample yet") gives ``min_cwnd_segs``, as in the module.
    ``diff_segments = ssthresh_after - expected``: the module divides in integers (truncating), so a
    correct ssthresh has ``-1 < diff_segments <= 0``.
    Columns: :data:`PAPER_SSTHRESH_CHECK_COLUMNS` (``t_s``: the events' ``t_s``, else ``t_mono_s``).
    """
    if events.empty or not {"variant", "kind"} <= set(events.columns):
        return pd.DataFrame(columns=PAPER_SSTHRESH_CHECK_COLUMNS)
    chosen = events[(events["variant"] == "paper") & events["kind"].isin(["recovery", "loss"])]
    time_column = _time_column(events)
    sample_time = _time_column(samples) if not samples.empty else None
    rows = []
    for event in chosen.to_dict("records"):
        t_s = number_or_nan(event.get(time_column))
        estimate, rtt_min = number_or_nan(event.get("est_Bps")), number_or_nan(event.get("rtt_min_us"))
        if (math.isnan(estimate) or math.isnan(rtt_min)) and sample_time is not None:
            earlier = samples[samples[sample_time] <= t_s]
            if "sport" in samples.columns:
                earlier = earlier[earlier["sport"] == event.get("sport")]
            if not earlier.empty:
                last = earlier.iloc[-1]
                estimate = number_or_nan(last.get("est_Bps")) if math.isnan(estimate) else estimate
                rtt_min = number_or_nan(last.get("rtt_min_us")) if math.isnan(rtt_min) else rtt_min
        if not rtt_min > 0 and not math.isnan(rtt_min):  # no RTT sample yet (0): the module's floor
            expected = float(min_cwnd_segs)
        elif math.isnan(estimate) or math.isnan(rtt_min):
            expected = math.nan
        else:
            expected = max(float(min_cwnd_segs), estimate * rtt_min / 1e6 / mss_bytes)
        ssthresh = number_or_nan(event.get("ssthresh_after"))
        rows.append(
            {
                "t_s": t_s,
                "sport": event.get("sport"),
                "kind": event.get("kind"),
                "ssthresh_after": ssthresh,
                "expected": expected,
                "diff_segments": ssthresh - expected,
                "est_Bps": estimate,
                "rtt_min_us": rtt_min,
            }
        )
    return pd.DataFrame(rows, columns=PAPER_SSTHRESH_CHECK_COLUMNS)
