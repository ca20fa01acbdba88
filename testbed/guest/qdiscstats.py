"""One interface's root qdisc counters, read with one small netlink request and a few ``struct`` reads.

Why not pyroute2 here, which builds and changes every qdisc of the testbed: the queue sampler
(:mod:`testbed.guest.queues`) reads every bottleneck ten times a second during traffic. pyroute2
answers a read with a qdisc dump of the whole node and decodes every attribute of every message
(HTB's and netem's options included) into Python objects: 0.6-0.7 ms of CPU per node and tick on
a host, enough under TCG to keep a 6-hop parking lot's guest at 94-98 % CPU. Here the kernel is
asked for the root qdisc of one interface (``RTM_GETQDISC`` with ``NLM_F_ECHO``: without it, the
kernel sends the answer only to the ``RTNLGRP_TC`` multicast group) and only ``TCA_STATS2`` is
read: 3.5 us per read on the same host.
"""

from __future__ import annotations

import os
import socket
import struct

from testbed.guest.netnsutil import entered

NETLINK_ROUTE = 0
NLMSG_ERROR = 2
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_ECHO = 0x1, 0x8
TC_H_ROOT = 0xFFFFFFFF
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_APP, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 4, 3, 8
#: the queue discipline's own leaf under HTB's shaped class (topologies.shaping.leaf_spec): 10:
LEAF_HANDLE = 0x10 << 16
#: where a discipline's extended statistics (``TCA_STATS_APP``, the kernel's ``tc_*_xstats`` of
#: pkt_sched.h) keep its ECN marks and, where it has one, the queueing delay in microseconds
#: (codel: the last dequeued packet's sojourn; pie: its current delay estimate). fq_codel's begin
#: with a type word (0: the qdisc's own); cake's are nested per tin and not read.
XSTATS_OFFSETS = {"codel": (24, 12), "fq_codel": (12, None), "pie": (36, 8), "red": (12, None)}
NLA_TYPE_MASK = 0x3FFF  # without the nested and byte-order flags

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_ATTR = struct.Struct("=HH")  # nlattr: length, type


class QdiscStatsError(OSError):
    """The kernel refused the read (the interface or its qdisc is gone) or answered something else."""


def _align(length: int) -> int:
    return (length + 3) & ~3


def _attributes(data: bytes, start: int, end: int):
    """(type, payload start, payload end) of each netlink attribute in ``data[start:end]``."""
    while start + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, start)
        if length < _ATTR.size:
            return
        yield kind & NLA_TYPE_MASK, start + _ATTR.size, start + length
        start += _align(length)


def parse_stats(data: bytes, start: int, end: int) -> tuple[int, int, int, int, int, int] | None:
    """(bytes, packets, drops, overlimits, backlog bytes, backlog packets) from a qdisc message's
    attributes, or None when it carries no ``TCA_STATS2``."""
    for kind, lo, hi in _attributes(data, start, end):
        if kind != TCA_STATS2:
            continue
        basic = queue = packets64 = None
        for inner, a, _b in _attributes(data, lo, hi):
            if inner == TCA_STATS_BASIC:
                basic = struct.unpack_from("=QI", data, a)
            elif inner == TCA_STATS_QUEUE:
                queue = struct.unpack_from("=5I", data, a)  # qlen, backlog, drops, requeues, overlimits
            elif inner == TCA_STATS_PKT64:
                packets64 = struct.unpack_from("=Q", data, a)[0]  # sent when packets outgrow 32 bits
        if basic is None or queue is None:
            return None
        packets = packets64 if packets64 is not None else basic[1]
        return basic[0], packets, queue[2], queue[4], queue[1], queue[0]
    return None


def parse_marks(data: bytes, start: int, end: int) -> tuple[str, int | None, float | None]:
    """(kind, ECN marks, queueing delay in ms) from a qdisc message's ``TCA_KIND`` and extended
    statistics (:data:`XSTATS_OFFSETS`); None where the discipline does not say."""
    kind, app = "", None
    for attr, lo, hi in _attributes(data, start, end):
        if attr == TCA_KIND:
            kind = data[lo:hi].rstrip(b"\0").decode()
        elif attr == TCA_STATS2:
            app = next(((a, b) for inner, a, b in _attributes(data, lo, hi) if inner == TCA_STATS_APP), None)
    if kind not in XSTATS_OFFSETS or app is None:
        return kind, None, None
    marks_at, delay_at = XSTATS_OFFSETS[kind]
    lo, hi = app
    if kind == "fq_codel" and struct.unpack_from("=I", data, lo)[0] != 0:
        return kind, None, None  # a class's statistics, not the qdisc's
    if lo + marks_at + 4 > hi:
        return kind, None, None
    marks = struct.unpack_from("=I", data, lo + marks_at)[0]
    delay = struct.unpack_from("=I", data, lo + delay_at)[0] / 1000 if delay_at is not None else None
    return kind, marks, delay


class RootQdiscReader:
    """Reads root qdiscs in one network namespace over a netlink socket opened there once."""

    def __init__(self, netns_path: str):
        self.netns_path = netns_path
        with entered(netns_path):  # a netlink socket belongs to the namespace it is made in
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self._sock.bind((0, 0))
        self._seq = 0

    def index(self, intf: str) -> int:
        """The index of interface ``intf`` in this namespace."""
        with entered(self.netns_path):  # if_nametoindex asks the namespace its thread is in
            return socket.if_nametoindex(intf)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RootQdiscReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, ifindex: int) -> tuple[int, int, int, int, int, int] | None:
        """The counters of ``ifindex``'s root qdisc (see :func:`parse_stats`)."""
        data, length = self._get(ifindex, 0, TC_H_ROOT, "root qdisc")
        return parse_stats(data, _HEADER.size + _TCMSG.size, length)

    def read_leaf(self, ifindex: int, handle: int = LEAF_HANDLE) -> tuple[str, int | None, float | None]:
        """The ECN marks and queueing delay of the qdisc ``handle`` on ``ifindex`` (see :func:`parse_marks`)."""
        data, length = self._get(ifindex, handle, 0, f"qdisc {handle >> 16:x}:")
        return parse_marks(data, _HEADER.size + _TCMSG.size, length)

    def _get(self, ifindex: int, handle: int, parent: int, what: str) -> tuple[bytes, int]:
        """One ``RTM_GETQDISC``: the root qdisc (``parent`` TC_H_ROOT) or the one with ``handle``."""
        self._seq += 1
        body = _TCMSG.pack(socket.AF_UNSPEC, ifindex, handle, parent, 0)
        header = _HEADER.pack(_HEADER.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ECHO, self._seq, 0)
        self._sock.send(header + body)
        while True:
            data = self._sock.recv(65536)
            length, kind, _flags, seq, _port = _HEADER.unpack_from(data)
            if seq == self._seq:
                break  # anything else on the socket is not this read's answer
        if kind == NLMSG_ERROR:
            error = -struct.unpack_from("=i", data, _HEADER.size)[0]
            raise QdiscStatsError(error, f"{what} of interface {ifindex}: {os.strerror(error)}")
        if kind != RTM_NEWQDISC:
            raise QdiscStatsError(f"{what} of interface {ifindex}: netlink answered type {kind}")
        return data, length
