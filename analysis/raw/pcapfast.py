"""The fast path of the pcap accounting: the same numbers as ``pcap.account_pcap``, counted in one
compiled pass instead of record by record (issue 6).

``account_pcap_fast(path)`` maps the capture and reads it in windows of ``CHUNK_BYTES``:

* **one pass** (numba) walks the records of a window, decodes the link, IPv4 and TCP headers, finds
  each segment's direction (a hash table of addresses and ports, ids in order of first appearance)
  and counts the segment in that direction's row of a few arrays: packets, SYN/FIN/RST, the ISN,
  data packets and bytes, first and last times, and the retransmitted bytes, i.e. each data
  segment's overlap with the sequence space seen before it (``pcap.SeqSpace``, kept as the range
  [lowest, highest byte seen) less the holes that drops before the capture point left open; data
  right after everything seen, the usual case, costs one comparison). numba, because a walk over
  variable-length records is a loop that numpy cannot express (an earlier numpy version guessed record
  headers from their timestamps and took 3.7 times tcptrace's time); and one pass with no columns,
  because writing 31 bytes of columns a segment and reading them back per direction took longer
  than the walk itself (54 against 31 ms on the bench's 1.1 M-packet capture).
* **memory**: one window of the file (a view of the mapping: no copy; pages already read are
  released) and one row per direction.

Whatever does not fit those assumptions is handed to the exact record-by-record code, so the
numbers are always those of ``pcap.account_pcap``: the whole file when it is pcapng, IPv6, VLAN-tagged,
of another link type or has more than 32768 connection directions; one connection (a second pass
keeps the columns of its segments and replays them through ``pcap.account_segment``) when the other
side advertised a zero window (tcptrace's zero-window probes), a direction spans more than 2 GiB of
sequence space (wrap-around) or has more than 16 holes open at once.

Past 500 lines because the compiled scanner and the record layouts it assumes are checked against each
other here, one file, beside the fallbacks they hand off to.
"""

from __future__ import annotations

import mmap
import socket
import struct
from pathlib import Path

import numba
import numpy as np

from analysis.raw.pcap import DirectionStats, PcapAccounting, account_pcap, account_segment
from testbed.results.pcapfile import (
    _PCAP_MAGICS,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    TCP_ACK,
    TCP_CWR,
    TCP_ECE,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    PcapTruncated,
    Segment,
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
#: the columns the second pass keeps per TCP segment of a connection counted exactly (module doc)
_COLUMNS = (
    ("ts", np.float64),
    ("direction", np.int32),
    ("seq", np.int64),
    ("flags", np.uint8),
    ("window", np.uint16),
    ("payload", np.int64),
)
#: connections' directions the fast path tracks (more go to the record-by-record code)
_MAX_DIRECTIONS = 1 << 15
_NOT_FAST, _CORRUPT = 1, 2


class _NotFast(Exception):
    """Something the fast path leaves to the exact record-by-record code."""


def account_pcap_fast(path: Path, chunk_bytes: int = CHUNK_BYTES) -> PcapAccounting:
    """``pcap.account_pcap``'s result, counted in one compiled pass (module doc)."""
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
        arrays, keys, records, problem = _read(path, endian, resolution, linktype, chunk_bytes)
    except _NotFast:
        return account_pcap(path)
    segments = int(arrays["acc"][:, _PACKETS].sum())
    result = PcapAccounting(path, linktype=linktype, records=records, tcp_segments=segments, problem=problem)
    _account(path, arrays, keys, result, lambda keep: _read(path, endian, resolution, linktype, chunk_bytes, keep)[0])
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
def _scan(
    buf,
    little,
    net_offset,
    proto_at,
    resolution,
    table,
    keys,
    directions,
    account,
    acc,
    times,
    hole_starts,
    hole_ends,
    keep,
    segments,
    ts,
    direction,
    seq,
    flags,
    window,
    payload,
):
    """Walk the records of ``buf`` from its start. Each IPv4 TCP segment gets its direction id in ``keys``
    (src, dst, sport << 16 | dport), found through the open-addressing ``table``; ids are given in order
    of first appearance. With ``account``, the segment is counted in its direction's row of ``acc``,
    ``times`` and the hole lists; else, if ``keep[id]``, its columns (what
    ``pcap.parse_segment`` keeps) are written from row ``segments`` on. Returns (records, rows written
    so far, offset of the first record not complete in ``buf``, status, directions): status _NOT_FAST
    for IPv6, VLAN tags or too many directions, _CORRUPT for an implausible record length (the offset
    is that record's). Over 60 lines because it is one compiled loop over every record: numba inlines
    nothing across the per-record work a split would put behind a call."""
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
                if account:
                    acc[d, :] = 0
                    acc[d, _BASE] = acc[d, _ISN] = acc[d, _LOW] = -1
                break
            if keys[d, 0] == src and keys[d, 1] == dst and keys[d, 2] == ports:
                break
            slot = (slot + 1) & slots
        time = np.float64(_word(buf, header, little)) + np.float64(_word(buf, header + 4, little)) * resolution
        length = max(total - ihl - (np.int64(buf[tcp + 12]) >> 4) * 4, 0)
        if not account:
            if keep[d]:
                ts[segments] = time
                direction[segments] = d
                seq[segments] = _be32(buf, tcp + 4)
                flags[segments] = buf[tcp + 13]
                window[segments] = _be16(buf, tcp + 14)
                payload[segments] = length
                segments += 1
            continue
        # pcap.account_segment, for what the online accounting can count (module doc). Written out here:
        # numba's inlined helpers made this pass three times slower.
        number, bits = _be32(buf, tcp + 4), np.int64(buf[tcp + 13])
        acc[d, _PACKETS] += 1
        if acc[d, _PACKETS] == 1:
            times[d, _FIRST] = time
        times[d, _LAST] = time
        syn = bits & TCP_SYN
        if syn:
            acc[d, _SYNS] += 1
        if bits & TCP_FIN:
            acc[d, _FINS] += 1
        if bits & TCP_RST:
            acc[d, _RSTS] += 1
        elif bits & (TCP_ACK | TCP_SYN) == 0 or _be16(buf, tcp + 14) == 0:
            acc[d, _ZERO_WINDOW] = 1  # the other direction's data may be tcptrace's zero-window probes
        if bits & TCP_ECE and not syn:
            acc[d, _ECE] += 1
        if bits & TCP_CWR and not syn:
            acc[d, _CWR] += 1
        if acc[d, _BASE] < 0 or (syn and acc[d, _ISN] < 0 and acc[d, _DATA_PKTS] == 0):
            acc[d, _BASE] = number
            if syn:
                acc[d, _ISN] = number
        relative = (number - acc[d, _BASE]) % (1 << 32)
        if relative >= _HALF:
            acc[d, _STATUS] = _NOT_FAST
        if length <= 0:
            continue
        acc[d, _DATA_PKTS] += 1
        acc[d, _DATA_BYTES] += length
        if acc[d, _DATA_PKTS] == 1:
            times[d, _FIRST_DATA] = time
        times[d, _LAST_DATA] = time
        start = relative + (1 if syn else 0)  # a SYN's own sequence number carries no data
        if start + length >= _HALF:
            acc[d, _STATUS] = _NOT_FAST
        if acc[d, _STATUS] != 0:
            continue
        if acc[d, _LOW] < 0:  # the first data
            acc[d, _LOW], acc[d, _HIGH] = start, start + length
        elif start == acc[d, _HIGH]:  # the common case: new data right after everything seen
            acc[d, _HIGH] = start + length
        else:
            overlap = _seen_add(acc, hole_starts, hole_ends, d, start, start + length)
            if overlap < 0:
                acc[d, _STATUS] = _NOT_FAST
            elif overlap > 0:
                acc[d, _REXMIT_PKTS] += 1
                acc[d, _REXMIT_BYTES] += overlap
    return records, segments, at, 0, directions


# the accounting of one direction, online: its row of ``acc`` (int64) ...
(
    _PACKETS,
    _SYNS,
    _FINS,
    _RSTS,
    _BASE,
    _ISN,
    _DATA_PKTS,
    _DATA_BYTES,
    _REXMIT_PKTS,
    _REXMIT_BYTES,
    _LOW,
    _HIGH,
    _HOLES,
    _STATUS,
    _ZERO_WINDOW,
    _ECE,
    _CWR,
) = range(17)
_ACC_COLUMNS = 17
# ... and of ``times`` (float64)
_FIRST, _LAST, _FIRST_DATA, _LAST_DATA = range(4)
#: sequence-space holes a direction may have open at once (drops before the capture point that are not
#: repaired yet); more go to the exact record-by-record code
_MAX_HOLES = 16


@numba.njit(cache=True)
def _seen_add(acc, hole_starts, hole_ends, d, start, end):
    """``pcap.SeqSpace.add`` on direction ``d``'s sequence space, kept as its hull [low, high) less its
    holes (sorted, disjoint, at most _MAX_HOLES): how many bytes of [start, end) were seen before, or -1
    when the holes would overflow. Not for the first data, nor for data right after all seen (``_scan``
    does those itself: a call per segment would cost more than the rest of the pass)."""
    low, high, holes = acc[d, _LOW], acc[d, _HIGH], acc[d, _HOLES]
    if start > high:  # beyond everything seen: what lies between is a hole
        if holes == _MAX_HOLES:
            return -1
        hole_starts[d, holes], hole_ends[d, holes] = high, start
        acc[d, _HOLES] = holes + 1
        acc[d, _HIGH] = end
        return 0
    overlap = max(0, min(end, high) - max(start, low))
    acc[d, _LOW] = min(low, start)
    acc[d, _HIGH] = max(high, end)
    if end < low:  # entirely before everything seen: the gap up to it becomes the first hole
        if holes == _MAX_HOLES:
            return -1
        for k in range(holes, 0, -1):
            hole_starts[d, k], hole_ends[d, k] = hole_starts[d, k - 1], hole_ends[d, k - 1]
        hole_starts[d, 0], hole_ends[d, 0] = end, low
        acc[d, _HOLES] = holes + 1
        return overlap
    kept = 0  # holes left, compacted in place (no arrays made here: this runs once per segment)
    for k in range(holes):
        a, b = hole_starts[d, k], hole_ends[d, k]
        overlap -= max(0, min(end, b) - max(start, a))
        if a < start and b > end:  # the new range splits this hole: it touches no other
            if holes == _MAX_HOLES:
                return -1
            for j in range(holes, k + 1, -1):
                hole_starts[d, j], hole_ends[d, j] = hole_starts[d, j - 1], hole_ends[d, j - 1]
            hole_ends[d, k] = start
            hole_starts[d, k + 1], hole_ends[d, k + 1] = end, b
            acc[d, _HOLES] = holes + 1
            return overlap
        if a < start:  # what is left of the hole below the new range
            hole_starts[d, kept], hole_ends[d, kept] = a, min(b, start)
            kept += 1
        elif b > end:  # or above it
            hole_starts[d, kept], hole_ends[d, kept] = max(a, end), b
            kept += 1
    acc[d, _HOLES] = kept
    return overlap


def _read(path: Path, endian: str, resolution: float, linktype: int, chunk_bytes: int, keep: np.ndarray | None = None):
    """One pass over the file (module doc). Without ``keep``: the directions' accounting; with it, the
    columns of the segments of the directions it marks. Returns a dict of the arrays filled, the
    directions' keys, the number of records and the problem, if any."""
    little = endian == "<"
    net_offset, proto_at = _LINK[linktype]
    table = np.full(2 * _MAX_DIRECTIONS, -1, dtype=np.int32)
    keys = np.zeros((_MAX_DIRECTIONS, 3), dtype=np.int64)
    directions = 0
    records, status, segments = 0, 0, 0
    size = path.stat().st_size
    position = 24  # of the first record not read yet
    account = keep is None
    # memory is taken only as rows are written (np.empty maps pages on first touch)
    acc = np.empty((_MAX_DIRECTIONS if account else 0, _ACC_COLUMNS), np.int64)
    times = np.empty((_MAX_DIRECTIONS if account else 0, 4), np.float64)
    holes = [np.empty((_MAX_DIRECTIONS if account else 0, _MAX_HOLES), np.int64) for _ in range(2)]
    # room for every segment the file could hold (a TCP segment takes at least 16 + 20 + 20 bytes of it)
    capacity = 0 if account else (size - position) // 56 + 1
    columns = {name: np.empty(capacity, dtype=dtype) for name, dtype in _COLUMNS}
    keep = np.zeros(0, np.uint8) if keep is None else keep
    # what _scan reads the records with, and the directions' table and keys it fills
    link = (little, net_offset, -1 if proto_at is None else proto_at, resolution, table, keys)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        whole = np.frombuffer(mapped, dtype=np.uint8)
        buf = whole[:0]  # the window: a view, dropped before the mapping closes
        span = chunk_bytes
        while position < size:
            # a window of the mapped file, from the first record not read (no copy)
            end = min(position + span, size)
            buf = whole[position:end]
            found = (directions, account, acc, times, *holes, keep, segments, *columns.values())
            counted, segments, next_start, status, directions = _scan(buf, *link, *found)
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
    problem = _tail_problem(tail, endian, records, position) if tail else None
    if account:
        arrays = {"acc": acc[:directions], "times": times[:directions]}
    else:
        arrays = {name: column[:segments] for name, column in columns.items()}
    return arrays, keys[:directions].copy(), records, problem


def _tail_problem(tail: bytes, endian: str, records: int, position: int) -> str:
    """What is wrong with the bytes left after the last complete record (a capture cut short)."""
    if len(tail) < 16:
        detail = f"record header has {len(tail)} of 16 bytes"
    else:
        caplen = struct.unpack(endian + "I", tail[8:12])[0]
        if caplen > _MAX_RECORD:
            detail = f"implausible record length {caplen} (corrupt file)"
        else:
            detail = f"record has {len(tail) - 16} of {caplen} captured bytes"
    return f"{PcapTruncated(records + 1, position, detail)}; counted the {records} complete records before it"


# ------------------------------------------------------------------------------------ accounting


def _address(value: int) -> str:
    return socket.inet_ntoa(struct.pack(">I", value))


def _stats(key: tuple, acc: np.ndarray, times: np.ndarray) -> DirectionStats:
    """One direction's DirectionStats from its row of the online accounting."""
    stats = DirectionStats(_address(key[0]), key[1], _address(key[2]), key[3])
    stats.packets, stats.syn_count, stats.fin_count, stats.rst_count = (int(v) for v in acc[_PACKETS:_BASE])
    stats.first_time, stats.last_time = float(times[_FIRST]), float(times[_LAST])
    stats.isn = None if acc[_ISN] < 0 else int(acc[_ISN])
    stats.ece_count, stats.cwr_count = int(acc[_ECE]), int(acc[_CWR])
    if acc[_DATA_PKTS]:
        stats.data_pkts, stats.data_bytes = int(acc[_DATA_PKTS]), int(acc[_DATA_BYTES])
        stats.rexmit_pkts, stats.rexmit_bytes = int(acc[_REXMIT_PKTS]), int(acc[_REXMIT_BYTES])
        stats.unique_bytes = stats.data_bytes - stats.rexmit_bytes
        stats.first_data_time, stats.last_data_time = float(times[_FIRST_DATA]), float(times[_LAST_DATA])
    return stats


def _account(path: Path, arrays: dict, keys: np.ndarray, result: PcapAccounting, read_again) -> None:
    """The directions' DirectionStats, in order of first appearance (as the streaming path has them).

    A connection the online accounting cannot count (a direction marked _NOT_FAST, or one whose other
    side's segments make zero-window probes of its data) is counted by ``pcap.account_segment`` from the
    columns of a second pass (``read_again(keep)``) over both its directions, in file order."""
    acc, times = arrays["acc"], arrays["times"]
    flow = {d: (int(src), int(ports) >> 16, int(dst), int(ports) & 0xFFFF) for d, (src, dst, ports) in enumerate(keys)}
    by_key = {key: d for d, key in flow.items()}
    exact: set[int] = set()
    for d, key in flow.items():
        reverse = by_key.get((key[2], key[3], key[0], key[1]))
        if acc[d, _STATUS] != 0 or (reverse is not None and acc[reverse, _ZERO_WINDOW]):
            exact |= {d} | ({reverse} if reverse is not None else set())
    stats = {d: _stats(key, acc[d], times[d]) for d, key in flow.items() if d not in exact}
    if exact:
        keep = np.zeros(len(keys), np.uint8)
        keep[sorted(exact)] = 1
        columns = read_again(keep)
        replay: dict[tuple, DirectionStats] = {}
        for row in range(len(columns["ts"])):
            d = int(columns["direction"][row])
            s_ip, s_port, d_ip, d_port = flow[d]
            key = (_address(s_ip), s_port, _address(d_ip), d_port)
            own = replay.get(key) or replay.setdefault(key, DirectionStats(*key))
            seg = Segment(
                key[0],
                key[2],
                s_port,
                d_port,
                int(columns["seq"][row]),
                0,
                int(columns["flags"][row]),
                int(columns["window"][row]),
                int(columns["payload"][row]),
            )
            account_segment(own, replay.get((key[2], key[3], key[0], key[1])), seg, float(columns["ts"][row]))
        for d in exact:
            s_ip, s_port, d_ip, d_port = flow[d]
            stats[d] = replay[(_address(s_ip), s_port, _address(d_ip), d_port)]
    for d in sorted(stats):
        s = stats[d]
        result.directions[(s.src, s.sport, s.dst, s.dport)] = s
