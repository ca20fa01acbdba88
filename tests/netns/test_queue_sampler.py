"""The queue sampler on the host kernel's HTB: what it reads over netlink is the queue the traffic builds."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from testbed.guest import queues
from testbed.guest.qdiscstats import QdiscStatsError, RootQdiscReader

RATE_BIT_S = 1_000_000
PACKETS, PAYLOAD = 400, 1000  # 400 datagrams into a queue of 100 at 1 Mbit/s: ~0.8 s of backlog, and drops


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def shaped_pair(clean_kernel):
    """Namespaces qsa and qsb joined by a veth; qsa's end shaped by HTB at RATE_BIT_S over a pfifo of 100."""
    try:
        for ns in ("qsa", "qsb"):
            _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", "qs0", "netns", "qsa", "type", "veth", "peer", "name", "qs1", "netns", "qsb")
        for ns, intf, addr in (("qsa", "qs0", "10.77.0.1/24"), ("qsb", "qs1", "10.77.0.2/24")):
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", intf)
            _sh("ip", "-n", ns, "link", "set", intf, "up")
        _sh("tc", "-n", "qsa", "qdisc", "add", "dev", "qs0", "root", "handle", "1:", "htb", "default", "1")
        _sh(
            "tc",
            "-n",
            "qsa",
            "class",
            "add",
            "dev",
            "qs0",
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            str(RATE_BIT_S),
            "burst",
            "1600",
        )
        _sh("tc", "-n", "qsa", "qdisc", "add", "dev", "qs0", "parent", "1:1", "pfifo", "limit", "100")
        yield "/var/run/netns/qsa"
    finally:
        for ns in ("qsa", "qsb"):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _flood() -> None:
    """PACKETS datagrams from qsa to qsb, as fast as the socket takes them (its send buffer forced
    large: a default one holds the sender back before the queue's limit, and nothing is dropped)."""
    code = (
        f"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"s.setsockopt(socket.SOL_SOCKET, 32, 1 << 22)  # SO_SNDBUFFORCE\n"
        f"for _ in range({PACKETS}): s.sendto(bytes({PAYLOAD}), ('10.77.0.2', 9))"
    )
    _sh("ip", "netns", "exec", "qsa", sys.executable, "-c", code)


def test_the_reader_sees_the_backlog_and_the_drops(shaped_pair):
    with RootQdiscReader(shaped_pair) as reader:
        index = reader.index("qs0")
        before = reader.read(index)
        _flood()
        sent, packets, drops, _overlimits, backlog_bytes, backlog_pkts = reader.read(index)
    assert before is not None and before[4] == 0
    assert backlog_pkts > 50 and backlog_bytes >= backlog_pkts * PAYLOAD
    assert drops > 0 and packets > 0 and sent > before[0]


def test_a_missing_interface_is_an_error_that_names_it(shaped_pair):
    with RootQdiscReader(shaped_pair) as reader, pytest.raises(QdiscStatsError, match="interface 99999"):
        reader.read(99999)


def test_the_sampled_dequeue_rate_is_the_shaped_rate(shaped_pair):
    sampler = queues.QueueSampler([("a", "qs0")], lambda node: shaped_pair, hz=20)
    sampler.start()
    _flood()
    time.sleep(1.0)
    samples = sampler.stop()
    assert sampler.error is None
    pairs = zip(samples, samples[1:], strict=False)
    busy = [(s0, s1) for s0, s1 in pairs if s0.backlog_pkts > 0 and s1.backlog_pkts > 0]
    assert len(busy) >= 10, f"{len(samples)} samples, {len(busy)} backlogged intervals"
    seconds = sum(s1.t_s - s0.t_s for s0, s1 in busy)
    rate = sum(s1.bytes - s0.bytes for s0, s1 in busy) * 8 / seconds
    assert rate == pytest.approx(RATE_BIT_S, rel=0.15)
