"""The root qdisc counters parsed from the bytes of a netlink answer (the layout of linux/gen_stats.h)."""

from __future__ import annotations

import struct

from testbed.guest import qdiscstats as q


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + bytes(-length % 4)


def _message(*attrs: bytes) -> bytes:
    return b"".join(attrs)


BASIC = struct.pack("=QIxxxx", 123_456, 789)  # bytes, packets, the kernel's padding
QUEUE = struct.pack("=5I", 7, 10_500, 3, 0, 42)  # qlen, backlog, drops, requeues, overlimits
KIND = _attr(1, b"htb\0")


def test_the_counters_come_from_tca_stats2():
    nested = _attr(q.TCA_STATS_BASIC, BASIC) + _attr(q.TCA_STATS_QUEUE, QUEUE)
    data = _message(KIND, _attr(q.TCA_STATS2 | 0x8000, nested))  # the kernel may set the nested flag
    assert q.parse_stats(data, 0, len(data)) == (123_456, 789, 3, 42, 10_500, 7)


def test_packets_past_32_bits_come_from_tca_stats_pkt64():
    pkt64 = _attr(q.TCA_STATS_PKT64, struct.pack("=Q", 1 << 33))
    nested = _attr(q.TCA_STATS_BASIC, BASIC) + _attr(q.TCA_STATS_QUEUE, QUEUE) + pkt64
    data = _message(KIND, _attr(q.TCA_STATS2, nested))
    assert q.parse_stats(data, 0, len(data))[1] == 1 << 33


def test_a_message_without_stats_or_with_half_of_them_reads_none():
    assert q.parse_stats(KIND, 0, len(KIND)) is None
    half = _message(KIND, _attr(q.TCA_STATS2, _attr(q.TCA_STATS_BASIC, BASIC)))
    assert q.parse_stats(half, 0, len(half)) is None
