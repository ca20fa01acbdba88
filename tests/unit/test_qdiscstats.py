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


def _leaf(kind: bytes, xstats: bytes) -> bytes:
    nested = _attr(q.TCA_STATS_BASIC, BASIC) + _attr(q.TCA_STATS_QUEUE, QUEUE) + _attr(q.TCA_STATS_APP, xstats)
    return _message(_attr(q.TCA_KIND, kind + b"\0"), _attr(q.TCA_STATS2, nested))


def test_an_aqm_leaf_gives_its_ecn_marks_and_where_it_has_one_its_delay():
    # tc_codel_xstats: maxpacket, count, lastcount, ldelay (us), drop_next, drop_overlimit, ecn_mark, dropping, ce_mark
    codel = _leaf(b"codel", struct.pack("=IIIIiIIII", 1514, 3, 2, 7_250, 0, 0, 41, 1, 0))
    assert q.parse_marks(codel, 0, len(codel)) == ("codel", 41, 7.25)
    # tc_fq_codel_xstats: type 0 (the qdisc), maxpacket, drop_overlimit, ecn_mark, ...
    fq_codel = _leaf(b"fq_codel", struct.pack("=10I", 0, 1514, 0, 17, 5, 1, 2, 0, 90_000, 0))
    assert q.parse_marks(fq_codel, 0, len(fq_codel)) == ("fq_codel", 17, None)
    # tc_pie_xstats: prob (u64), delay (us), avg_dq_rate, dq_rate_estimating, packets_in, dropped, overlimit,
    # maxq, ecn_mark
    pie = _leaf(b"pie", struct.pack("=QIIIIIIII", 1 << 40, 16_000, 1000, 0, 900, 12, 0, 60, 8))
    assert q.parse_marks(pie, 0, len(pie)) == ("pie", 8, 16.0)
    red = _leaf(b"red", struct.pack("=4I", 30, 4, 0, 25))  # early, pdrop, other, marked
    assert q.parse_marks(red, 0, len(red)) == ("red", 25, None)


def test_a_leaf_without_marks_it_can_read_gives_none():
    pfifo = _leaf(b"pfifo", b"")
    assert q.parse_marks(pfifo, 0, len(pfifo)) == ("pfifo", None, None)
    a_class = _leaf(b"fq_codel", struct.pack("=10I", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0))  # type 1: a flow's stats
    assert q.parse_marks(a_class, 0, len(a_class)) == ("fq_codel", None, None)
