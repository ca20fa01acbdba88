"""The fast path of the pcap accounting: the same numbers as ``pcap.account_pcap``, computed on
columns instead of record by record (issue 6).

``account_pcap_fast(path)`` maps the capture and reads it in windows of ``CHUNK_BYTES``:

* **reading**: one compiled pass (numba) walks the records of a window, decodes the link, IPv4 and
  TCP headers, and keeps a few columns per TCP segment: time, direction id, sequence number, flags,
  window, payload length (31 bytes a segment, against the 100 to 150 bytes it takes in the file).
  The direction ids come from a hash table of (addresses, ports) filled in order of first appearance.
  numba, because a walk over variable-length records is a loop that numpy cannot express (an earlier
  numpy version guessed record headers from their timestamps and took 3.7 times tcptrace's time).
* **accounting**: per direction, one compiled pass over its rows for the counters and the
  retransmitted bytes: each data segment's overlap with the sequence ranges seen before it, which
  is ``pcap.SeqSpace`` compiled (in the usual case one range, [first byte, highest byte sent), plus
  one per hole a drop before the capture point left open).
* **memory**: the columns (31 bytes a segment) and one window of the file: the windows are views
  of the mapping (no copy), and the pages already read are released.

Whatever does not fit those assumptions is handed to the exact record-by-record code, so the
numbers are always those of ``pcap.account_pcap``: the whole file when it is pcapng, IPv6, VLAN-tagged,
of another link type or has more than 32768 connection directions; one connection when the other
side advertised a zero window (tcptrace's zero-window probes) or a direction spans more than 2 GiB
of sequence space (wrap-around).
"""

from __future__ import annotations

import mmap
import socket
import struct
from pathlib import Path

import numba
import numpy as np

from analysis.pcap import (
    _PCAP_MAGICS,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    TCP_ACK,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    DirectionStats,
    PcapAccounting,
    PcapTruncated,
    Segment,
    account_pcap,
    account_segment,
)

CHUNK_BYTES = 32 << 20
#: offset of the IP header after the record header, and where the link layer says what it carries
_LINK = {
    LINKTYPE_LINUX_SLL: (16, 14),
    LINKTYPE_LINUX_SLL2: (20, 0),
    LINKTYPE_ETHERNET: (14, 12),
    LINKTYPE_RAW: (0, None),
    LINKTYPE_IPV4: (0, None),
    LINKTYPE_NULL: (4, None),
}
_MAX_RECORD = 1 << 18
_HALF = 1 << 31
#: the columns kept per TCP segment: 31 bytes (the file spends 100 to 150 on it)
_COLUMNS = (("ts", np.float64), ("direction", np.int32), ("seq", np.int64), ("flags", np.uint8),
            ("window", np.uint16), ("payload", np.int64))  # fmt: skip
#: connections' directions the fast path tracks (more go to the record-by-record code)
_MAX_DIRECTIONS = 1 << 15
_NOT_FAST, _CORRUPT = 1, 2


class _NotFast(Exception):
    """Something the fast path leaves to the exact record-by-record code."""


def account_pcap_fast(path: Path, chunk_bytes: int = CHUNK_BYTES) -> PcapAccounting:
    """``pcap.account_pcap``'s result, computed on columns (module doc)."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:4] not in _PCAP_MAGICS:
        return account_pcap(path)  # pcapng, or the streaming path's own error for a bad file
    endian, resolution = _PCAP_MAGICS[head[:4]]
    linktype = struct.unpack(endian + "I", head[20:24])[0] & 0xFFFF
    if linktype not in _LINK:
        return account_pcap(path)
    try:
        columns, keys, records, problem = _read_columns(path, endian, resolution, linktype, chunk_bytes)
    except _NotFast:
        return account_pcap(path)
    result = PcapAccounting(path, linktype=linktype, records=records, tcp_segments=len(columns["ts"]),
                            problem=problem)  # fmt: skip
    _account(columns, keys, result)
    return result


# --------------------------------------------------------------------------------------- reading


@numba.njit(cache=True, inline="always")
def _be16(buf, i):
    return (np.int64(buf[i]) << 8) | np.int64(buf[i + 1])


@numba.njit(cache=True, inline="always")
def _be32(buf, i):
    return (np.int64(buf[i]) << 24) | (np.int64(buf[i + 1]) << 16) | (np.int64(buf[i + 2]) << 8) | np.int64(buf[i + 3])


@numba.njit(cache=True, inline="always")
def _word(buf, i, little):
    if little:
        low = np.int64(buf[i]) | (np.int64(buf[i + 1]) << 8)
        return low | (np.int64(buf[i + 2]) << 16) | (np.int64(buf[i + 3]) << 24)
    return _be32(buf, i)


@numba.njit(cache=True)
def _scan(buf, little, net_offset, proto_at, resolution, table, keys, directions, segments, ts, direction, seq, flags,
          window, payload):  # fmt: skip
    """Walk the records of ``buf`` from its start and write each IPv4 TCP segment's columns (what
    ``pcap.parse_segment`` keeps) into the output arrays from row ``segments`` on. ``direction`` is
    the segment's direction id in ``keys`` (src, dst, sport << 16 | dport), found through the
    open-addressing ``table``; ids are given in order of first appearance. Returns (records, rows
    written so far, offset of the first record not complete in ``buf``, status, directions): status
    _NOT_FAST for IPv6, VLAN tags or too many directions, _CORRUPT for an implausible record length
    (the offset is that record's)."""
    n = len(buf)
    slots = len(table) - 1
    at = 0
    records = 0
    while at + 16 <= n:
        caplen = _word(buf, at + 8, little)
        if caplen > _MAX_RECORD:
            return records, segments, at, _CORRUPT, directions
        if at + 16 + caplen > n:
            break
        origlen = _word(buf, at + 12, little)
        data = at + 16
        header = at
        at = data + caplen
        records += 1
        if proto_at >= 0:
            if caplen < proto_at + 2:
                continue
            proto = _be16(buf, data + proto_at)
            if proto == 0x86DD or proto == 0x8100 or proto == 0x88A8:
                return records, segments, at, _NOT_FAST, directions
            if proto != 0x0800:
                continue
        elif caplen > net_offset and buf[data + net_offset] >> 4 == 6:
            return records, segments, at, _NOT_FAST, directions
        if caplen < net_offset + 20:
            continue
        net = data + net_offset
        ihl = np.int64(buf[net] & 0x0F) * 4
        if buf[net] >> 4 != 4 or buf[net + 9] != 6 or ihl < 20 or _be16(buf, net + 6) & 0x1FFF:
            continue
        if caplen < net_offset + ihl + 20:
            continue
        total = _be16(buf, net + 2)
        if total == 0:  # segmentation offload: the length lives in the frame only
            total = origlen - net_offset
        tcp = net + ihl
        src, dst = _be32(buf, net + 12), _be32(buf, net + 16)
        ports = (_be16(buf, tcp) << 16) | _be16(buf, tcp + 2)
        slot = ((src * 0x9E3779B1) ^ (dst * 0x85EBCA77) ^ (ports * 0xC2B2AE3D)) & slots
        while True:
            d = table[slot]
            if d < 0:
                if directions == len(keys):
                    return records, segments, at, _NOT_FAST, directions
                d = directions
                keys[d, 0] = src
                keys[d, 1] = dst
                keys[d, 2] = ports
                table[slot] = d
                directions += 1
                break
            if keys[d, 0] == src and keys[d, 1] == dst and keys[d, 2] == ports:
                break
            slot = (slot + 1) & slots
        ts[segments] = np.float64(_word(buf, header, little)) + np.float64(_word(buf, header + 4, little)) * resolution
        direction[segments] = d
        seq[segments] = _be32(buf, tcp + 4)
        flags[segments] = buf[tcp + 13]
        window[segments] = _be16(buf, tcp + 14)
        payload[segments] = max(total - ihl - (np.int64(buf[tcp + 12]) >> 4) * 4, 0)
        segments += 1
    return records, segments, at, 0, directions


@numba.njit(cache=True)
def _group(direction, count):
    """The rows of each direction in file order (a counting sort): rows[bounds[d]:bounds[d + 1]]."""
    bounds = np.zeros(count + 1, np.int64)
    for d in direction:
        bounds[d + 1] += 1
    bounds = np.cumsum(bounds)
    fill = bounds[:-1].copy()
    rows = np.empty(len(direction), np.int64)
    for i in range(len(direction)):
        d = direction[i]
        rows[fill[d]] = i
        fill[d] += 1
    return rows, bounds


def _read_columns(path: Path, endian: str, resolution: float, linktype: int, chunk_bytes: int):
    """The TCP segments' columns, the directions' keys, the number of records and the problem, if any."""
    little = endian == "<"
    net_offset, proto_at = _LINK[linktype]
    table = np.full(2 * _MAX_DIRECTIONS, -1, dtype=np.int32)
    keys = np.zeros((_MAX_DIRECTIONS, 3), dtype=np.int64)
    directions = 0
    records, status, segments = 0, 0, 0
    size = path.stat().st_size
    position = 24  # of the first record not read yet
    # room for every segment the file could hold (a TCP segment takes at least 16 + 20 + 20 bytes of it);
    # memory is taken only as rows are written
    capacity = (size - position) // 56 + 1
    columns = {name: np.empty(capacity, dtype=dtype) for name, dtype in _COLUMNS}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        whole = np.frombuffer(mapped, dtype=np.uint8)
        buf = whole[:0]  # the window: a view, dropped before the mapping closes
        span = chunk_bytes
        while position < size:
            # a window of the mapped file, from the first record not read (no copy)
            end = min(position + span, size)
            buf = whole[position:end]
            counted, segments, next_start, status, directions = _scan(
                buf, little, net_offset, -1 if proto_at is None else proto_at, resolution, table, keys, directions,
                segments, *columns.values(),
            )  # fmt: skip
            if status == _NOT_FAST:
                raise _NotFast("IPv6, VLAN tags or too many connections")
            records += counted
            position += next_start
            if end >= size or status == _CORRUPT:
                break
            span = chunk_bytes if next_start else 2 * span  # a record longer than the window: widen it
            # pages already read leave the process's memory (the file stays in the page cache)
            release = (position // mmap.PAGESIZE) * mmap.PAGESIZE
            if release and hasattr(mapped, "madvise"):
                mapped.madvise(mmap.MADV_DONTNEED, 0, release)
        tail = whole[position:size].tobytes()
        del whole, buf
    problem = None
    if tail:
        if len(tail) < 16:
            detail = f"record header has {len(tail)} of 16 bytes"
        else:
            caplen = struct.unpack(endian + "I", tail[8:12])[0]
            if caplen > _MAX_RECORD:
                detail = f"implausible record length {caplen} (corrupt file)"
            else:
                detail = f"record has {len(tail) - 16} of {caplen} captured bytes"
        problem = f"{PcapTruncated(records + 1, position, detail)}; counted the {records} complete records before it"
    return {name: column[:segments] for name, column in columns.items()}, keys[:directions].copy(), records, problem


# ------------------------------------------------------------------------------------ accounting


def _address(value: int) -> str:
    return socket.inet_ntoa(struct.pack(">I", value))


def _account(columns: dict, keys: np.ndarray, result: PcapAccounting) -> None:
    if not len(columns["ts"]):
        return
    rows, bounds = _group(columns["direction"], len(keys))
    rows_of = {d: rows[bounds[d] : bounds[d + 1]] for d in range(len(keys))}
    flow = {d: (int(src), int(ports) >> 16, int(dst), int(ports) & 0xFFFF) for d, (src, dst, ports) in enumerate(keys)}
    by_key = {key: d for d, key in flow.items()}
    exact: set[int] = set()
    stats: dict[int, DirectionStats] = {}
    for d, key in flow.items():
        reverse = by_key.get((key[2], key[3], key[0], key[1]))
        try:
            stats[d] = _direction(columns, rows_of[d], key, None if reverse is None else rows_of[reverse])
        except _NotFast:
            exact |= {d} | ({reverse} if reverse is not None else set())
    # connections the columns cannot account: every segment of both directions, in file order
    if exact:
        replay: dict[tuple, DirectionStats] = {}
        for row in np.sort(np.concatenate([rows_of[d] for d in exact])).tolist():
            d = int(columns["direction"][row])
            s_ip, s_port, d_ip, d_port = flow[d]
            key = (_address(s_ip), s_port, _address(d_ip), d_port)
            own = replay.get(key) or replay.setdefault(key, DirectionStats(*key))
            seg = Segment(key[0], key[2], s_port, d_port, int(columns["seq"][row]), 0, int(columns["flags"][row]),
                          int(columns["window"][row]), int(columns["payload"][row]))  # fmt: skip
            account_segment(own, replay.get((key[2], key[3], key[0], key[1])), seg, float(columns["ts"][row]))
        for d in exact:
            s_ip, s_port, d_ip, d_port = flow[d]
            stats[d] = replay[(_address(s_ip), s_port, _address(d_ip), d_port)]
    # the same order of directions as the streaming path: by first appearance (the ids' order)
    for d in sorted(stats):
        s = stats[d]
        result.directions[(s.src, s.sport, s.dst, s.dport)] = s


@numba.njit(cache=True)
def _overlaps(starts_in, ends_in):
    """For each range [starts_in[i], ends_in[i]) in turn, how many of its bytes earlier ranges covered:
    ``pcap.SeqSpace.add`` compiled (the union seen so far as sorted disjoint ranges, merged when they
    touch; one range per hole still open, usually one in all)."""
    out = np.zeros(len(starts_in), np.int64)
    starts = np.empty(16, np.int64)
    ends = np.empty(16, np.int64)
    k = 0
    for i in range(len(starts_in)):
        start, end = starts_in[i], ends_in[i]
        if start >= end:
            continue
        if k and start == ends[k - 1]:  # the common case: new data right after everything seen
            ends[k - 1] = max(end, ends[k - 1])
            continue
        if k and start < ends[k - 1]:
            lo = np.searchsorted(ends[:k], start, "left")
            hi = np.searchsorted(starts[:k], end, "right")
        else:
            lo = hi = k  # beyond everything seen (or the first range): a new range at the end
        overlap = 0
        for j in range(lo, hi):
            overlap += max(0, min(end, ends[j]) - max(start, starts[j]))
        out[i] = overlap
        if lo < hi:
            start, end = min(start, starts[lo]), max(end, ends[hi - 1])
        # ranges lo..hi-1 become the one range [start, end)
        if lo == hi:
            if k == len(starts):
                starts = np.concatenate((starts, np.empty(k, np.int64)))
                ends = np.concatenate((ends, np.empty(k, np.int64)))
            starts[lo + 1 : k + 1] = starts[lo:k].copy()
            ends[lo + 1 : k + 1] = ends[lo:k].copy()
            k += 1
        elif hi - lo > 1:
            gone = hi - lo - 1
            starts[lo + 1 : k - gone] = starts[hi:k].copy()
            ends[lo + 1 : k - gone] = ends[hi:k].copy()
            k -= gone
        starts[lo], ends[lo] = start, end
    return out


@numba.njit(cache=True)
def _counts(ts, seq, flags, window, payload, rows, reverse_rows, has_reverse):
    """One direction's counters in one compiled pass over its rows (``_direction``): a status
    (0, or _NOT_FAST where the columns cannot account it), then packets, SYN, FIN and RST counts, the
    ISN (-1: none), data packets and bytes, retransmitted packets and bytes, and the first and last
    time of any segment and of a data segment."""
    if has_reverse:  # tcptrace's zero-window probes: the other side closed its window
        for r in reverse_rows:
            f = flags[r]
            if f & TCP_RST == 0 and (f & (TCP_ACK | TCP_SYN) == 0 or window[r] == 0):
                return (_NOT_FAST, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)
    n = len(rows)
    syns = fins = rsts = n_data = 0
    first_syn = -1
    data_before_syn = False
    for i in range(n):
        f = flags[rows[i]]
        if f & TCP_SYN:
            syns += 1
            if first_syn < 0:
                first_syn = i
        if f & TCP_FIN:
            fins += 1
        if f & TCP_RST:
            rsts += 1
        if payload[rows[i]] > 0:
            n_data += 1
            if first_syn < 0:
                data_before_syn = True
    base = seq[rows[0]]
    isn = -1
    begin = 0
    if first_syn >= 0 and not data_before_syn:
        base = seq[rows[first_syn]]
        isn = base
        begin = first_syn
    for i in range(begin, n):
        if (seq[rows[i]] - base) % (1 << 32) >= _HALF:
            return (_NOT_FAST, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)
    first_ts, last_ts = ts[rows[0]], ts[rows[n - 1]]
    if n_data == 0:
        return (0, n, syns, fins, rsts, isn, 0, 0, 0, 0, first_ts, last_ts, 0.0, 0.0)
    starts = np.empty(n_data, np.int64)
    ends = np.empty(n_data, np.int64)
    k = 0
    data_bytes = 0
    first_data = last_data = 0.0
    for i in range(n):
        row = rows[i]
        length = payload[row]
        if length <= 0:
            continue
        start = (seq[row] - base) % (1 << 32) + (1 if flags[row] & TCP_SYN else 0)
        if start + length >= _HALF:
            return (_NOT_FAST, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)
        starts[k], ends[k] = start, start + length
        if k == 0:
            first_data = ts[row]
        last_data = ts[row]
        data_bytes += length
        k += 1
    overlap = _overlaps(starts, ends)
    rexmit_pkts = 0
    for v in overlap:
        if v > 0:
            rexmit_pkts += 1
    return (0, n, syns, fins, rsts, isn, n_data, data_bytes, rexmit_pkts, overlap.sum(), first_ts, last_ts,
            first_data, last_data)


def _direction(columns: dict, rows: np.ndarray, key: tuple, reverse_rows: np.ndarray | None) -> DirectionStats:
    """One direction's counters by the module's rule; raises _NotFast where it does not hold."""
    (status, packets, syns, fins, rsts, isn, data_pkts, data_bytes, rexmit_pkts, rexmit_bytes, first, last,
     first_data, last_data) = _counts(columns["ts"], columns["seq"], columns["flags"], columns["window"],
                                      columns["payload"], rows, rows if reverse_rows is None else reverse_rows,
                                      reverse_rows is not None)  # fmt: skip
    if status == _NOT_FAST:
        raise _NotFast("zero window on the other side (tcptrace's probes), or sequence space beyond 2 GiB")
    stats = DirectionStats(_address(key[0]), key[1], _address(key[2]), key[3])
    stats.packets, stats.syn_count, stats.fin_count, stats.rst_count = packets, syns, fins, rsts
    stats.first_time, stats.last_time = float(first), float(last)
    stats.isn = None if isn < 0 else int(isn)
    if data_pkts:
        stats.data_pkts, stats.data_bytes = int(data_pkts), int(data_bytes)
        stats.rexmit_pkts, stats.rexmit_bytes = int(rexmit_pkts), int(rexmit_bytes)
        stats.unique_bytes = stats.data_bytes - stats.rexmit_bytes
        stats.first_data_time, stats.last_data_time = float(first_data), float(last_data)
    return stats
