"""Per-connection accounting of TCP data segments in a capture, streamed record by record.

The testbed captures on the router next to each sender (``tcpdump -i any -Q in -s 128``), so a
connection's data is counted before the bottleneck queue can drop any of it: every segment the
sender put on the wire, first transmissions and retransmissions alike.

Definitions (per direction of a connection; the same as ``tcptrace -l -n``, so the numbers can be
cross-checked against it):

* **sent** ("actual data pkts/bytes"): every segment with a TCP payload, retransmissions included.
  The payload length comes from the IP header (total length - IP header - TCP header), not from
  the captured bytes: captures keep headers only.
* **retransmitted** ("rexmt data pkts/bytes"): the payload bytes of a segment that lie inside
  sequence ranges already seen in this direction; a segment counts as one retransmitted packet if
  any of its bytes were seen before. A partial overlap counts only the overlapping bytes.
* **unique** ("unique bytes sent"): payload bytes seen for the first time.
* **zero-window probes**: like tcptrace, a data segment sent while the other side's last
  advertised window was zero is a probe: counted as sent, neither retransmitted nor unique, and
  not remembered as seen. (Linux's own probes carry no data; this only matters when data the
  sender sent before it learnt of the zero window passes the capture point after the window
  update.) ``sent = retransmitted + unique + probe`` holds exactly.
* **first/last data time**: capture timestamps of the first and last data segment; their
  difference is the transfer time of paper 000 §3.1's goodput.

Sequence numbers are unwrapped to 64 bits relative to the initial sequence number (the SYN's, or the
first seen), always choosing the unwrapping closest to the highest sequence seen so far, so a
connection that sends more than 4 GiB (or starts near 2**32) is counted correctly.

One difference from tcptrace, on purpose: tcptrace also counts a retransmitted SYN or FIN as one
"rexmt data pkt" and one "rexmt data byte" (they occupy sequence space). Here only payload bytes
count, since a SYN carries no data and goodput is about data; with a lost SYN or FIN the two tools
differ by exactly one packet and one byte per retransmitted SYN/FIN.

Memory stays bounded: records are read one at a time and each direction keeps only the merged
ranges of sequence space seen (one range per hole still open, usually one in all).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.results.pcapfile import (
    TCP_ACK,
    TCP_CWR,
    TCP_ECE,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    PcapTruncated,
    Segment,
    parse_segment,
    read_records,
)

if TYPE_CHECKING:
    import pandas as pd
_SEQ_MOD = 1 << 32
_SEQ_HALF = 1 << 31


class SeqSpace:
    """The union of sequence ranges seen, as sorted disjoint half-open ranges merged when they touch."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, start: int, end: int) -> int:
        """Record ``[start, end)``; return how many of its bytes had been recorded before."""
        starts, ends = self.starts, self.ends
        if start >= end:
            return 0
        if not ends or start > ends[-1]:  # the common case: new data beyond everything seen
            starts.append(start)
            ends.append(end)
            return 0
        if start == ends[-1]:
            ends[-1] = end if end > ends[-1] else ends[-1]
            return 0
        # ranges that overlap or touch [start, end): indices lo..hi-1
        lo = bisect_left(ends, start)
        hi = bisect_right(starts, end)
        overlap = 0
        for i in range(lo, hi):
            overlap += max(0, min(end, ends[i]) - max(start, starts[i]))
        if lo < hi:
            start = min(start, starts[lo])
            end = max(end, ends[hi - 1])
        starts[lo:hi] = [start]
        ends[lo:hi] = [end]
        return overlap

    def __len__(self) -> int:
        return len(self.starts)


@dataclass
class DirectionStats:
    """The accounting of one direction (``src:sport -> dst:dport``) of a TCP connection."""

    src: str
    sport: int
    dst: str
    dport: int
    packets: int = 0
    data_pkts: int = 0
    data_bytes: int = 0
    rexmit_pkts: int = 0
    rexmit_bytes: int = 0
    unique_bytes: int = 0
    zwnd_probe_pkts: int = 0
    zwnd_probe_bytes: int = 0
    syn_count: int = 0
    fin_count: int = 0
    rst_count: int = 0
    #: ECN: segments with ECE (the receiver echoing a CE mark) and with CWR (the sender's answer), the
    #: handshake's (where they ask for ECN) not counted
    ece_count: int = 0
    cwr_count: int = 0
    first_time: float | None = None
    last_time: float | None = None
    first_data_time: float | None = None
    last_data_time: float | None = None
    isn: int | None = None
    # state, not results
    _base: int | None = field(default=None, repr=False)
    _highest: int = field(default=0, repr=False)
    _window_last: int | None = field(default=None, repr=False)
    _seen: SeqSpace = field(default_factory=SeqSpace, repr=False)

    @property
    def transfer_s(self) -> float | None:
        if self.first_data_time is None or self.last_data_time is None:
            return None
        return self.last_data_time - self.first_data_time

    def _unwrap(self, seq: int) -> int:
        relative = (seq - self._base) % _SEQ_MOD
        wraps = (self._highest - relative + _SEQ_HALF) // _SEQ_MOD
        return relative + wraps * _SEQ_MOD

    def result(self) -> dict:
        """The public counters as a plain dict (no state)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")} | {
            "transfer_s": self.transfer_s
        }


FlowKey = tuple[str, int, str, int]  # (src, sport, dst, dport) of one direction


@dataclass
class PcapAccounting:
    """Everything counted in one capture file: one :class:`DirectionStats` per direction seen."""

    path: Path
    linktype: int | None = None
    records: int = 0
    tcp_segments: int = 0
    directions: dict[FlowKey, DirectionStats] = field(default_factory=dict)
    problem: str | None = None  # set when the file was cut short: the counts cover the records before

    def direction(self, src: str, sport: int, dst: str, dport: int) -> DirectionStats | None:
        return self.directions.get((src, sport, dst, dport))

    def to_frame(self) -> pd.DataFrame:
        """One row per direction seen, with the counters of :class:`DirectionStats`."""
        import pandas as pd  # here: the runner reads captures in guests where numpy cannot run (first_bulk_times)

        rows = [d.result() for d in self.directions.values()]
        columns = [f.name for f in fields(DirectionStats) if not f.name.startswith("_")] + ["transfer_s"]
        return pd.DataFrame(rows, columns=columns)


def account_segment(stats: DirectionStats, reverse: DirectionStats | None, seg: Segment, ts: float) -> None:
    """Count one segment of ``stats``'s direction; ``reverse`` is the other direction, if seen yet."""
    stats.packets += 1
    if stats.first_time is None:
        stats.first_time = ts
    stats.last_time = ts
    flags = seg.flags
    syn = bool(flags & TCP_SYN)
    if syn:
        stats.syn_count += 1
    if flags & TCP_FIN:
        stats.fin_count += 1
    if flags & TCP_RST:
        stats.rst_count += 1
    if flags & TCP_ECE and not syn:
        stats.ece_count += 1
    if flags & TCP_CWR and not syn:
        stats.cwr_count += 1
    if stats._base is None or (syn and stats.isn is None and stats.data_pkts == 0):
        stats._base = seg.seq
        stats._highest = 0
        if syn:
            stats.isn = seg.seq
    payload = seg.payload
    if payload > 0:
        stats.data_pkts += 1
        stats.data_bytes += payload
        if stats.first_data_time is None:
            stats.first_data_time = ts
        stats.last_data_time = ts
        start = stats._unwrap(seg.seq) + (1 if syn else 0)  # a SYN's own sequence number carries no data
        end = start + payload
        if reverse is not None and reverse.packets > 0 and reverse._window_last == 0:
            stats.zwnd_probe_pkts += 1
            stats.zwnd_probe_bytes += payload
        else:
            overlap = stats._seen.add(start, end)
            if overlap:
                stats.rexmit_pkts += 1
                stats.rexmit_bytes += overlap
            stats.unique_bytes += payload - overlap
        if end > stats._highest:
            stats._highest = end
    elif not syn:
        position = stats._unwrap(seg.seq)
        if position > stats._highest and position - stats._highest < _SEQ_HALF:
            stats._highest = position
    if not flags & TCP_RST:
        # tcptrace's "effective window": the advertised window of segments with ACK or SYN, else 0
        stats._window_last = seg.window if flags & (TCP_ACK | TCP_SYN) else 0


def account_pcap(path: Path) -> PcapAccounting:
    """Stream ``path`` and count data segments per connection direction.

    Raises :class:`PcapError` when the file cannot be read at all (missing, not a pcap, unknown link
    type). A file cut short keeps the counts of the complete records before the cut and says so in
    ``problem``.
    """
    path = Path(path)
    result = PcapAccounting(path)
    opened = read_records(path)
    result.linktype = opened.linktype
    directions = result.directions
    try:
        for ts, origlen, buf in opened.records:
            result.records += 1
            seg = parse_segment(opened.linktype, buf, origlen)
            if seg is None:
                continue
            result.tcp_segments += 1
            key = (seg.src, seg.sport, seg.dst, seg.dport)
            stats = directions.get(key)
            if stats is None:
                stats = directions[key] = DirectionStats(seg.src, seg.sport, seg.dst, seg.dport)
            account_segment(stats, directions.get((seg.dst, seg.dport, seg.src, seg.sport)), seg, ts)
    except PcapTruncated as exc:
        result.problem = f"{exc}; counted the {result.records} complete records before it"
    return result


#: ``tcptrace -l -n`` labels and the :class:`DirectionStats` fields they mean (the module's definitions)
TCPTRACE_FIELDS = {
    "actual data pkts": "data_pkts",
    "actual data bytes": "data_bytes",
    "rexmt data pkts": "rexmit_pkts",
    "rexmt data bytes": "rexmit_bytes",
    "unique bytes sent": "unique_bytes",
    "data xmit time": "transfer_s",
}
TCPTRACE_LABELS = list(TCPTRACE_FIELDS)


def tcptrace_connection(output: str, port: int) -> dict[str, float]:
    """The left-hand (a->b) column of ``tcptrace -l -n``'s output for the connection whose first host
    uses ``port``: label -> number, for ``TCPTRACE_LABELS``."""
    for block in output.split("TCP connection ")[1:]:
        if not re.search(rf"host \w+:\s+[\d.]+:{port}\n", block):
            continue
        values = {}
        for label in TCPTRACE_LABELS:
            match = re.search(rf"{label}:\s+([\d.]+)", block)
            if match:
                values[label] = float(match.group(1))
        return values
    raise LookupError(f"tcptrace shows no connection from port {port}")
