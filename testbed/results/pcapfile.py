"""Reading a capture file: pcap or pcapng records, and the TCP segment inside each.

A run's captures are read twice: by the runner in the guest, to check when each flow's data really
began (:func:`first_bulk_times`, reading only as far as it must), and by the analysis, to count
every segment (``analysis.raw.pcap``). Both read through this module, which needs only the standard
library (numpy cannot run in every guest). Hand-written rather than dpkt or scapy: those decode
every layer into objects, ten times slower on a million records, and the analysis needs only the
IP and TCP header fields.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: link-layer header types we decode (pcap LINKTYPE_* values)
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
#: a record longer than this is not a packet: the file is corrupt from here on
_MAX_RECORD = 1 << 18


TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
#: ECN (RFC 3168): the receiver echoes a CE mark with ECE until the sender answers with CWR
TCP_ECE, TCP_CWR = 0x40, 0x80


class PcapError(Exception):
    """The capture cannot be read (not a pcap, unknown link type)."""


class PcapTruncated(Exception):
    """The capture ends inside a record; everything before it was read."""

    def __init__(self, record: int, offset: int, detail: str):
        self.record = record
        self.offset = offset
        super().__init__(f"cut short in record {record} (at byte {offset}): {detail}")


@dataclass
class PcapRecords:
    """An open capture: its link type and a one-pass iterator of ``(timestamp_s, origlen, bytes)``."""

    linktype: int
    records: Iterator[tuple[float, int, bytes]]


def read_records(path: Path) -> PcapRecords:
    """Open a pcap (or pcapng) file to stream it; iterating raises :class:`PcapTruncated` at a cut record."""
    f = open(path, "rb")  # noqa: SIM115 - closed by the generator
    head = f.read(24)
    if head[:4] == _PCAPNG_MAGIC:
        f.close()
        return _read_pcapng(path)
    if len(head) < 24 or head[:4] not in _PCAP_MAGICS:
        f.close()
        raise PcapError(
            "not a pcap file (no pcap magic number)" if len(head) >= 4 else "empty or too short for a pcap header"
        )
    endian, resolution = _PCAP_MAGICS[head[:4]]
    linktype = struct.unpack(endian + "I", head[20:24])[0] & 0xFFFF
    try:
        _network_offset(linktype, b"")  # fail now on a link type we cannot decode
    except PcapError:
        f.close()
        raise
    return PcapRecords(linktype, _iter_pcap(f, endian, resolution))


def _iter_pcap(f, endian: str, resolution: float) -> Iterator[tuple[float, int, bytes]]:
    header = struct.Struct(endian + "IIII")
    offset = 24
    record = 0
    with f:
        while True:
            raw = f.read(16)
            if not raw:
                return
            record += 1
            if len(raw) < 16:
                raise PcapTruncated(record, offset, f"record header has {len(raw)} of 16 bytes")
            sec, frac, caplen, origlen = header.unpack(raw)
            if caplen > _MAX_RECORD:
                raise PcapTruncated(record, offset, f"implausible record length {caplen} (corrupt file)")
            data = f.read(caplen)
            if len(data) < caplen:
                raise PcapTruncated(record, offset, f"record has {len(data)} of {caplen} captured bytes")
            offset += 16 + caplen
            yield sec + frac * resolution, origlen, data


def _read_pcapng(path: Path) -> PcapRecords:
    import dpkt  # only pcapng needs it; plain pcap is read above without it

    f = open(path, "rb")  # noqa: SIM115 - closed by the generator
    try:
        reader = dpkt.pcapng.Reader(f)
        _network_offset(reader.datalink(), b"")
    except (ValueError, dpkt.dpkt.Error) as exc:
        f.close()
        raise PcapError(f"unreadable pcapng: {exc}") from exc
    except PcapError:
        f.close()
        raise

    def records() -> Iterator[tuple[float, int, bytes]]:
        count = 0
        with f:
            try:
                for ts, buf in reader:
                    count += 1
                    yield float(ts), len(buf), buf
            except (dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError, struct.error, ValueError) as exc:
                raise PcapTruncated(count + 1, f.tell(), f"unreadable pcapng block ({exc})") from exc

    return PcapRecords(reader.datalink(), records())


@dataclass(frozen=True)
class Segment:
    """The fields of one TCP segment the accounting needs."""

    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    window: int
    payload: int


_addr_cache: dict[bytes, str] = {}


def _addr(raw: bytes) -> str:
    text = _addr_cache.get(raw)
    if text is None:
        text = socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)
        _addr_cache[raw] = text
    return text


def _network_offset(linktype: int, buf: bytes) -> int | None:
    """Offset of the IP header in a record, or None when the record carries no IP."""
    if linktype == LINKTYPE_LINUX_SLL:
        if len(buf) < 16:
            return None
        proto = buf[14] << 8 | buf[15]
        return 16 if proto in (0x0800, 0x86DD) else None
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(buf) < 20:
            return None
        proto = buf[0] << 8 | buf[1]
        return 20 if proto in (0x0800, 0x86DD) else None
    if linktype == LINKTYPE_ETHERNET:
        offset = 12
        while len(buf) >= offset + 2:
            ethertype = buf[offset] << 8 | buf[offset + 1]
            if ethertype in (0x8100, 0x88A8):  # VLAN tags
                offset += 4
                continue
            return offset + 2 if ethertype in (0x0800, 0x86DD) else None
        return None
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        return 0
    if linktype == LINKTYPE_NULL:
        return 4
    raise PcapError(f"link type {linktype} is not supported (supported: Ethernet, Linux cooked v1/v2, raw IP)")


def parse_segment(linktype: int, buf: bytes, origlen: int | None = None) -> Segment | None:
    """The TCP segment in one captured record, or None (not TCP, a later fragment, headers cut off)."""
    off = _network_offset(linktype, buf)
    if off is None or len(buf) < off + 20:
        return None
    version = buf[off] >> 4
    if version == 4:
        ihl = (buf[off] & 0x0F) * 4
        if buf[off + 9] != 6 or ihl < 20:
            return None
        if (buf[off + 6] << 8 | buf[off + 7]) & 0x1FFF:  # not the first fragment
            return None
        total = buf[off + 2] << 8 | buf[off + 3]
        if total == 0 and origlen is not None:  # segmentation offload: the length lives in the frame only
            total = origlen - off
        src, dst = _addr(buf[off + 12 : off + 16]), _addr(buf[off + 16 : off + 20])
        tcp = off + ihl
        ip_payload = total - ihl
    elif version == 6:
        if len(buf) < off + 40:
            return None
        ip_payload = buf[off + 4] << 8 | buf[off + 5]
        next_header = buf[off + 6]
        src, dst = _addr(buf[off + 8 : off + 24]), _addr(buf[off + 24 : off + 40])
        tcp = off + 40
        while next_header in (0, 43, 60):  # hop-by-hop, routing, destination options
            if len(buf) < tcp + 2:
                return None
            ext = (buf[tcp + 1] + 1) * 8
            next_header = buf[tcp]
            tcp += ext
            ip_payload -= ext
        if next_header != 6:
            return None
    else:
        return None
    if len(buf) < tcp + 20:
        return None
    sport, dport, seq, ack, doff_byte, flags, window = struct.unpack_from("!HHIIBBH", buf, tcp)
    payload = ip_payload - (doff_byte >> 4) * 4
    return Segment(src, dst, sport, dport, seq, ack, flags, window, max(payload, 0))


def setup_retransmission_s(path: Path, setups: dict[tuple[str, int], tuple[int, float]]) -> tuple[dict, str | None]:
    """How long each connection's set-up waited on segments sent again, before its data began.

    ``setups``: data sender (address, client port) -> (its server's port, when its data began). Its
    set-up is what that address sent to the server's port before then, on every connection it opened
    in this capture: iperf3's control connection and the data connection's SYN and cookie. A set-up
    segment sent again (the same SYN, or the same sequence number with payload) waited one
    retransmission timeout or more: the time from its first copy to its last, the union over the
    segments, is returned per sender. A capture on the sender's side of a lossy link sees the copies
    of what that link lost (a lost answer, the server's own copy, is lost before the capture)."""
    by_client = {(address, server_port): (address, port) for (address, port), (server_port, _) in setups.items()}
    first_copy: dict[tuple, float] = {}
    opened: set[tuple[str, int]] = set()
    spans: dict[tuple[str, int], list[tuple[float, float]]] = {key: [] for key in setups}
    latest = max((until for _, until in setups.values()), default=0.0)
    try:
        capture = read_records(path)
        for ts, origlen, buf in capture.records:
            if ts > latest:
                break
            segment = parse_segment(capture.linktype, buf, origlen)
            key = None if segment is None else by_client.get((segment.src, segment.dport))
            if key is None or ts > setups[key][1] or not (segment.flags & TCP_SYN or segment.payload):
                continue
            identity = (segment.src, segment.sport, segment.seq, segment.flags & TCP_SYN)
            if segment.flags & TCP_SYN and identity not in first_copy:
                # a new connection from that port: the copies of an old one's segments are not its
                first_copy = {k: v for k, v in first_copy.items() if k[:2] != identity[:2]}
                opened.add(identity[:2])
            if identity[:2] not in opened:  # the run before's orphaned socket on the same port (a kept network)
                continue
            if identity in first_copy:
                spans[key].append((first_copy[identity], ts))
            else:
                first_copy[identity] = ts
    except (OSError, PcapError, PcapTruncated) as exc:
        return {key: _union_s(s) for key, s in spans.items() if s}, f"{path.name}: {exc}"
    return {key: _union_s(s) for key, s in spans.items() if s}, None


def _union_s(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


def first_bulk_times(path: Path, senders: set[tuple[str, int]], min_payload: int) -> tuple[dict, str | None]:
    """When each sender (address, port) first sent a segment of more than ``min_payload`` bytes on
    the connection it opened in this capture (after its SYN): on a network kept from the run before,
    that run's connection on the same ports may still retransmit a segment or two once its process
    has ended (an orphaned socket, until the receiver answers with a reset), and it is not this run's.

    Reads the capture only as far as it must (until every sender is found), so that a run can
    check its own start times in a slow guest. Returns the times found and the problem that
    stopped the reading early, if any (a capture cut short: what came before it counts)."""
    found: dict[tuple[str, int], float] = {}
    opened: set[tuple[str, int]] = set()
    try:
        capture = read_records(path)
        for ts, origlen, buf in capture.records:
            segment = parse_segment(capture.linktype, buf, origlen)
            if segment is None:
                continue
            key = (segment.src, segment.sport)
            if segment.flags & TCP_SYN:
                opened.add(key)
            if segment.payload <= min_payload or key not in opened:
                continue
            if key in senders and key not in found:
                found[key] = ts
                if len(found) == len(senders):
                    break
    except (OSError, PcapError, PcapTruncated) as exc:
        return found, f"{path.name}: {exc}"
    return found, None
