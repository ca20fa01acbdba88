"""The fast path of the pcap accounting: the same numbers as ``pcap.account_pcap``, computed on
columns (numpy) instead of record by record (issue 6).

``account_pcap_fast(path)`` maps the capture and reads it in windows of ``CHUNK_BYTES`` (each
released from memory once counted), finds the records of each
chunk without walking them one by one in Python, keeps a few columns per TCP segment (time, addresses,
ports, sequence number, flags, window, payload length: about 40 bytes a segment, against the 100 to
150 bytes a segment takes in the file) and accounts each direction of each connection with array
operations:

* **record boundaries**: every record header starts with its seconds timestamp, whose upper 16 bits
  are the same for the whole capture (an 18-hour window); the 4-byte words of the chunk at each of
  the four alignments that carry those bits, and whose captured and original lengths are plausible,
  are candidate headers. The records are the chain of candidates from the chunk's first record, each
  pointing at the next by its length; the chain must tile the chunk exactly (else the chunk is
  walked record by record, as ``pcap.read_records`` does).
* **accounting**, for a direction whose data the capture point saw in order, as it does next to the
  sender: the sequence space seen so far is then one range, [first byte, highest byte sent), so the
  retransmitted bytes of a segment are its overlap with that range (a running maximum of the
  segments' ends), which is what ``pcap.SeqSpace`` counts. A direction with gaps (data that
  crossed a drop before this capture point) goes through ``pcap.SeqSpace`` segment by segment.

Whatever does not fit those assumptions is handed to the exact record-by-record code, so the
numbers are always those of ``pcap.account_pcap``: the whole file when it is pcapng, IPv6, VLAN-tagged
or of another link type; one connection when the other side advertised a zero window (tcptrace's
zero-window probes) or a direction spans more than 2 GiB of sequence space (wrap-around).
"""

from __future__ import annotations

import mmap
import socket
import struct
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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
    SeqSpace,
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
_COLUMNS = ("ts", "src", "dst", "sport", "dport", "seq", "flags", "window", "payload")


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
    snaplen = struct.unpack(endian + "I", head[16:20])[0]
    if linktype not in _LINK:
        return account_pcap(path)
    try:
        columns, records, problem = _read_columns(path, endian, resolution, linktype, snaplen, chunk_bytes)
    except _NotFast:
        return account_pcap(path)
    result = PcapAccounting(path, linktype=linktype, records=records, tcp_segments=len(columns["ts"]),
                            problem=problem)  # fmt: skip
    _account(columns, result)
    return result


# --------------------------------------------------------------------------------------- reading


def _windows(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each offset of ``at``, as a (len(at), width) array: one gather."""
    return sliding_window_view(buf, width)[at] if len(buf) >= width else np.zeros((0, width), np.uint8)


def _u32(buf: np.ndarray, at: np.ndarray, little: bool) -> np.ndarray:
    return _windows(buf, at, 4).view("<u4" if little else ">u4").ravel().astype(np.uint32)


def _offsets_serial(buf: np.ndarray, start: int, little: bool) -> tuple[np.ndarray, int]:
    """Record starts from ``start`` by walking the headers; also the offset where the next (incomplete)
    record starts. A record longer than ``_MAX_RECORD`` is not a record: the walk stops there."""
    raw = buf.tobytes()
    unpack = struct.Struct("<I" if little else ">I").unpack_from
    out, at, end = [], start, len(raw)
    while at + 16 <= end:
        caplen = unpack(raw, at + 8)[0]
        if caplen > _MAX_RECORD or at + 16 + caplen > end:
            break
        out.append(at)
        at += 16 + caplen
    return np.array(out, dtype=np.int64), at


def _offsets(buf: np.ndarray, start: int, little: bool, snaplen: int) -> tuple[np.ndarray, int]:
    """Record starts in ``buf`` from ``start`` (module doc), and where the next incomplete record starts."""
    n = len(buf)
    if start + 16 > n:
        return np.zeros(0, dtype=np.int64), start
    hi = int(_u32(buf, np.array([start]), little)[0]) >> 16
    # the upper half of the seconds field: bytes 2-3 of a little-endian header, 0-1 of a big-endian one
    half = np.dtype("<u2" if little else ">u2")
    shift = 2 if little else 0
    candidates = []
    for align in range(2):
        words = (n - align) // 2
        view = buf[align : align + 2 * words].view(half)
        candidates.append(np.flatnonzero(view == hi) * 2 + align - shift)
    c = np.sort(np.concatenate(candidates))
    c = c[(c >= start) & (c + 16 <= n)]
    header = _windows(buf, c + 8, 8).view("<u4" if little else ">u4").astype(np.int64)
    caplen, origlen = header[:, 0], header[:, 1]
    limit = min(max(snaplen, 1), _MAX_RECORD) if snaplen else _MAX_RECORD
    plausible = (caplen >= 1) & (caplen <= limit) & (origlen >= caplen)
    c, caplen = c[plausible], caplen[plausible]
    if not len(c) or c[0] != start:
        return _offsets_serial(buf, start, little)
    following = c + 16 + caplen
    j = np.searchsorted(c, following)
    linked = j < len(c)
    linked[linked] = c[j[linked]] == following[linked]
    # the records are the candidates each record points at: drop candidates nobody points at, twice
    # (a false candidate pointing at another), then check that what is left tiles the chunk
    keep = np.ones(len(c), dtype=bool)
    for _ in range(2):
        pointed = np.zeros(len(c), dtype=bool)
        pointed[j[linked & keep]] = True
        pointed[0] = True
        keep = pointed
    kept = np.flatnonzero(keep)
    if len(kept) and (c[kept[1:]] == following[kept[:-1]]).all():
        chain = kept
    else:  # walk the links from the first record
        chain_next = np.where(linked, j, -1).tolist()
        walk, k = [], 0
        while k != -1:
            walk.append(k)
            k = chain_next[k]
        chain = np.array(walk, dtype=np.int64)
    records = c[chain]
    ends = following[chain]
    complete = ends <= n
    records, last_end = records[complete], (int(ends[complete][-1]) if complete.any() else start)
    # the chain must stop only where no complete record follows
    if last_end + 16 <= n:
        tail_caplen = int(_u32(buf, np.array([last_end]), little)[0])
        if tail_caplen <= _MAX_RECORD and last_end + 16 + tail_caplen <= n:
            return _offsets_serial(buf, start, little)
    return records, last_end


def _read_columns(path: Path, endian: str, resolution: float, linktype: int, snaplen: int, chunk_bytes: int):
    little = endian == "<"
    net_offset, proto_at = _LINK[linktype]
    parts: dict[str, list] = {name: [] for name in _COLUMNS}
    records, problem = 0, None
    file_offset = 24  # of buf[0]
    size = path.stat().st_size
    leftover = np.zeros(0, dtype=np.uint8)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        whole = np.frombuffer(mapped, dtype=np.uint8)
        position = 24  # of the next byte not yet looked at
        while True:
            # a window of the mapped file (no copy); the few bytes of a record cut by the previous
            # window's end are the only copy
            fresh_end = min(position + chunk_bytes, size)
            if len(leftover):
                buf = np.concatenate([leftover, whole[position:fresh_end]])
            else:
                buf = whole[position:fresh_end]
            at, next_start = _offsets(buf, 0, little, snaplen)
            if len(at):
                records += len(at)
                _columns_of(buf, at, little, resolution, linktype, net_offset, proto_at, parts)
            leftover = buf[next_start:].copy()
            file_offset += next_start
            done = fresh_end >= size
            corrupt = len(leftover) >= 16 and int(_u32(leftover, np.array([8]), little)[0]) > _MAX_RECORD
            # pages already counted leave the process's memory (the file stays in the page cache)
            release = (fresh_end // mmap.PAGESIZE) * mmap.PAGESIZE
            if release and hasattr(mapped, "madvise"):
                mapped.madvise(mmap.MADV_DONTNEED, 0, release)
            position = fresh_end
            if done or corrupt:
                break
        del whole, buf
    if len(leftover):
        if len(leftover) < 16:
            detail = f"record header has {len(leftover)} of 16 bytes"
        else:
            caplen = int(_u32(leftover, np.array([8]), little)[0])
            if caplen > _MAX_RECORD:
                detail = f"implausible record length {caplen} (corrupt file)"
            else:
                detail = f"record has {len(leftover) - 16} of {caplen} captured bytes"
        problem = f"{PcapTruncated(records + 1, file_offset, detail)}; counted the {records} complete records before it"
    columns = {name: (np.concatenate(values) if values else np.zeros(0)) for name, values in parts.items()}
    return columns, records, problem


def _columns_of(buf, at, little, resolution, linktype, net_offset, proto_at, parts) -> None:
    """Append the TCP segments of the records at ``at`` to ``parts`` (what ``pcap.parse_segment`` keeps)."""
    header = _windows(buf, at, 16).view("<u4" if little else ">u4").astype(np.int64)
    caplen, origlen = header[:, 2], header[:, 3]
    data = at + 16
    if proto_at is not None:
        has_link = caplen >= proto_at + 2
        proto = np.zeros(len(at), dtype=np.uint32)
        proto[has_link] = _windows(buf, data[has_link] + proto_at, 2).view(">u2").ravel()
        if ((proto == 0x86DD) | (proto == 0x8100) | (proto == 0x88A8)).any():
            raise _NotFast("IPv6 or VLAN")
        ip = has_link & (proto == 0x0800)
    else:
        ip = caplen > net_offset
        if ip.any() and (buf[data[ip] + net_offset] >> 4 == 6).any():
            raise _NotFast("IPv6")
    ip &= caplen >= net_offset + 20
    header, data, caplen, origlen = header[ip], data[ip], caplen[ip], origlen[ip]
    net = data + net_offset
    ip_header = _windows(buf, net, 20)
    ihl = (ip_header[:, 0] & 0x0F).astype(np.int64) * 4
    fragment = ip_header[:, 6:8].copy().view(">u2").ravel() & 0x1FFF
    tcp_ok = (ip_header[:, 0] >> 4 == 4) & (ip_header[:, 9] == 6) & (ihl >= 20) & (fragment == 0)
    tcp_ok &= caplen >= net_offset + ihl + 20
    header, net, ihl, origlen, ip_header = header[tcp_ok], net[tcp_ok], ihl[tcp_ok], origlen[tcp_ok], ip_header[tcp_ok]
    total = ip_header[:, 2:4].copy().view(">u2").ravel().astype(np.int64)
    total = np.where(total == 0, origlen - net_offset, total)  # segmentation offload
    tcp = _windows(buf, net + ihl, 16)
    doff = (tcp[:, 12] >> 4).astype(np.int64) * 4
    ports = tcp[:, 0:4].copy().view(">u2")
    parts["ts"].append(header[:, 0].astype(np.float64) + header[:, 1].astype(np.float64) * resolution)
    addresses = ip_header[:, 12:20].copy().view(">u4")
    parts["src"].append(addresses[:, 0].astype(np.uint32))
    parts["dst"].append(addresses[:, 1].astype(np.uint32))
    parts["sport"].append(ports[:, 0].astype(np.uint32))
    parts["dport"].append(ports[:, 1].astype(np.uint32))
    parts["seq"].append(tcp[:, 4:8].copy().view(">u4").ravel().astype(np.int64))
    parts["flags"].append(tcp[:, 13].astype(np.uint32))
    parts["window"].append(tcp[:, 14:16].copy().view(">u2").ravel().astype(np.uint32))
    parts["payload"].append(np.maximum(total - ihl - doff, 0))


# ------------------------------------------------------------------------------------ accounting


def _address(value: int) -> str:
    return socket.inet_ntoa(struct.pack(">I", value))


def _account(columns: dict, result: PcapAccounting) -> None:
    if not len(columns["ts"]):
        return
    src, dst, sport, dport = (columns[k].astype(np.uint64) for k in ("src", "dst", "sport", "dport"))
    direction_key = (src << np.uint64(32) | dst, sport << np.uint64(16) | dport)
    # one id per direction: sort by (addresses, ports), then split where either changes
    order = np.lexsort((direction_key[1], direction_key[0]))
    a, p = direction_key[0][order], direction_key[1][order]
    boundary = np.concatenate([[True], (a[1:] != a[:-1]) | (p[1:] != p[:-1])])
    direction_of = np.empty(len(order), dtype=np.int64)
    direction_of[order] = np.cumsum(boundary) - 1
    keys = {}
    for d, row in enumerate(order[boundary].tolist()):
        keys[d] = (int(columns["src"][row]), int(columns["sport"][row]), int(columns["dst"][row]),
                   int(columns["dport"][row]))  # fmt: skip
    by_key = {key: d for d, key in keys.items()}
    # the rows of each direction, in file order (a stable sort keeps it)
    grouped = np.argsort(direction_of, kind="stable")
    groups = np.split(grouped, np.flatnonzero(np.diff(direction_of[grouped])) + 1)
    rows_of = {int(direction_of[g[0]]): g for g in groups}
    exact: set[int] = set()
    stats: dict[int, DirectionStats] = {}
    for d in range(len(keys)):
        reverse = by_key.get((keys[d][2], keys[d][3], keys[d][0], keys[d][1]))
        try:
            stats[d] = _direction(columns, rows_of[d], keys[d], rows_of.get(reverse))
        except _NotFast:
            exact |= {d} | ({reverse} if reverse is not None else set())
    # connections the columns cannot account: every segment of both directions, in file order
    if exact:
        rows = np.sort(np.concatenate([rows_of[d] for d in exact]))
        replay: dict[tuple, DirectionStats] = {}
        for row in rows.tolist():
            d = int(direction_of[row])
            s_ip, s_port, d_ip, d_port = keys[d]
            key = (_address(s_ip), s_port, _address(d_ip), d_port)
            own = replay.get(key) or replay.setdefault(key, DirectionStats(*key[:2], *key[2:]))
            seg = Segment(key[0], key[2], s_port, d_port, int(columns["seq"][row]), 0, int(columns["flags"][row]),
                          int(columns["window"][row]), int(columns["payload"][row]))  # fmt: skip
            account_segment(own, replay.get((key[2], key[3], key[0], key[1])), seg, float(columns["ts"][row]))
        for d in exact:
            s_ip, s_port, d_ip, d_port = keys[d]
            stats[d] = replay[(_address(s_ip), s_port, _address(d_ip), d_port)]
    # the same order of directions as the streaming path: by first appearance
    for d in sorted(stats, key=lambda d: int(rows_of[d][0])):
        s = stats[d]
        result.directions[(s.src, s.sport, s.dst, s.dport)] = s


def _direction(columns: dict, rows: np.ndarray, key: tuple, reverse_rows: np.ndarray | None) -> DirectionStats:
    """One direction's counters by the module's rule; raises _NotFast where it does not hold."""
    if reverse_rows is not None:
        flags_r = columns["flags"][reverse_rows]
        live = (flags_r & TCP_RST) == 0
        effective = np.where((flags_r & (TCP_ACK | TCP_SYN)) != 0, columns["window"][reverse_rows], 0)
        if (live & (effective == 0)).any():
            raise _NotFast("zero window on the other side: tcptrace's probes")
    ts, seq = columns["ts"][rows], columns["seq"][rows]
    flags, payload = columns["flags"][rows], columns["payload"][rows]
    syn = (flags & TCP_SYN) != 0
    data = payload > 0
    stats = DirectionStats(_address(key[0]), key[1], _address(key[2]), key[3])
    stats.packets = len(rows)
    stats.first_time, stats.last_time = float(ts[0]), float(ts[-1])
    stats.syn_count = int(syn.sum())
    stats.fin_count = int(((flags & TCP_FIN) != 0).sum())
    stats.rst_count = int(((flags & TCP_RST) != 0).sum())
    base = int(seq[0])
    first_syn = int(np.argmax(syn)) if syn.any() else None
    if first_syn is not None and not data[:first_syn].any():
        base = int(seq[first_syn])
        stats.isn = base
    relative = (seq - base) % (1 << 32)
    if first_syn is not None and stats.isn is not None:
        relative = relative[first_syn:]  # positions before the SYN's reset are not used
    if len(relative) and relative.max() >= _HALF:
        raise _NotFast("sequence space beyond 2 GiB or behind the base")
    if not data.any():
        return stats
    d_rel = ((seq[data] - base) % (1 << 32)) + syn[data]
    d_len = payload[data]
    d_end = d_rel + d_len
    if d_end.max() >= _HALF:
        raise _NotFast("sequence space beyond 2 GiB")
    previous_end = np.maximum.accumulate(d_end)
    previous_end = np.concatenate([[d_rel[0]], previous_end[:-1]])
    if (d_rel < d_rel[0]).any() or (d_rel > previous_end).any():
        # a gap (data this capture point saw out of order): the ranges seen, segment by segment
        seen = SeqSpace()
        overlap = np.array([seen.add(a, b) for a, b in zip(d_rel.tolist(), d_end.tolist(), strict=True)])
    else:
        overlap = np.clip(np.minimum(d_end, previous_end) - d_rel, 0, None)
    stats.data_pkts = int(data.sum())
    stats.data_bytes = int(d_len.sum())
    stats.rexmit_pkts = int((overlap > 0).sum())
    stats.rexmit_bytes = int(overlap.sum())
    stats.unique_bytes = stats.data_bytes - stats.rexmit_bytes
    data_ts = ts[data]
    stats.first_data_time, stats.last_data_time = float(data_ts[0]), float(data_ts[-1])
    return stats
