"""analysis.raw.pcap: per-connection data-segment accounting, on synthetic captures and on the real fixture."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
from pathlib import Path

import dpkt
import pytest

from analysis.raw.pcap import SeqSpace
from analysis.raw.pcap import account_pcap as streaming_account_pcap
from analysis.raw.pcapfast import account_pcap_fast
from testbed.results.pcapfile import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    PcapError,
    first_bulk_times,
    parse_segment,
    setup_retransmission_s,
)
from tests.conftest import tcptrace_connection

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run-westwood"
SENDER, RECEIVER = ("10.1.0.1", 40000), ("10.2.0.1", 5201)
ACK, SYN, PSH, FIN = dpkt.tcp.TH_ACK, dpkt.tcp.TH_SYN, dpkt.tcp.TH_PUSH, dpkt.tcp.TH_FIN


def account_pcap(path, **kw):
    """Both accountings, the record-by-record one and the columnar fast path (analysis/raw/pcapfast.py):
    they must agree exactly on every capture these tests make."""
    slow = streaming_account_pcap(path)
    fast = account_pcap_fast(path, **kw)
    assert (fast.records, fast.tcp_segments, fast.linktype, fast.problem) == (
        slow.records,
        slow.tcp_segments,
        slow.linktype,
        slow.problem,
    )
    assert fast.to_frame().equals(slow.to_frame()), (fast.to_frame(), slow.to_frame())
    return slow


def segment(src, dst, seq, payload=0, flags=ACK, ack=1, window=1000, snap=None, linktype=LINKTYPE_LINUX_SLL) -> bytes:
    """One captured frame; ``snap`` cuts it like tcpdump -s (the IP header keeps the full length)."""
    tcp = dpkt.tcp.TCP(
        sport=src[1], dport=dst[1], seq=seq % 2**32, ack=ack, flags=flags, win=window, data=b"d" * payload
    )
    ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(dst[0]), p=6, ttl=64, data=tcp)
    if linktype == LINKTYPE_LINUX_SLL:
        frame = struct.pack("!HHH8sH", 0, 1, 6, b"\0" * 8, 0x0800) + bytes(ip)
    else:
        frame = bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=0x0800, data=ip))
    return frame[:snap] if snap else frame


def write_pcap(path: Path, frames: list[bytes], linktype=LINKTYPE_LINUX_SLL, start=1000.0, step=0.01) -> Path:
    with open(path, "wb") as f:
        writer = dpkt.pcap.Writer(f, snaplen=65535, linktype=linktype)
        for i, frame in enumerate(frames):
            writer.writepkt(frame, ts=start + i * step)
    return path


def handshake(isn: int) -> list[bytes]:
    return [
        segment(SENDER, RECEIVER, isn, flags=SYN, ack=0),
        segment(RECEIVER, SENDER, 7, flags=SYN | ACK, ack=isn + 1),
    ]


def data(isn: int, offset: int, length: int, **kw) -> bytes:
    """A data segment carrying stream bytes [offset, offset+length) (offset 0 = first byte after the SYN)."""
    return segment(SENDER, RECEIVER, isn + 1 + offset, payload=length, flags=ACK | PSH, **kw)


def sender_stats(path: Path):
    stats = account_pcap(path).direction(*SENDER, *RECEIVER)
    assert stats is not None
    return stats


def test_in_order_transfer_counts_every_byte_once(tmp_path):
    isn = 1000
    frames = handshake(isn) + [data(isn, 0, 1000), data(isn, 1000, 1000), data(isn, 2000, 500)]
    stats = sender_stats(write_pcap(tmp_path / "a.pcap", frames, step=0.5))
    assert (stats.data_pkts, stats.data_bytes) == (3, 2500)
    assert (stats.rexmit_pkts, stats.rexmit_bytes, stats.unique_bytes) == (0, 0, 2500)
    # first data segment is record 2 (t=1001.0), last is record 4 (t=1002.0)
    assert stats.first_data_time == pytest.approx(1001.0)
    assert stats.transfer_s == pytest.approx(1.0)
    assert stats.isn == isn
    assert stats.syn_count == 1


def test_a_retransmitted_segment_counts_as_sent_and_retransmitted(tmp_path):
    isn = 5
    frames = handshake(isn) + [
        data(isn, 0, 1000),
        data(isn, 1000, 1000),
        data(isn, 2000, 1000),
        data(isn, 1000, 1000),
    ]
    stats = sender_stats(write_pcap(tmp_path / "r.pcap", frames))
    assert (stats.data_pkts, stats.data_bytes) == (4, 4000)
    assert (stats.rexmit_pkts, stats.rexmit_bytes) == (1, 1000)
    assert stats.unique_bytes == 3000
    assert stats.data_bytes == stats.rexmit_bytes + stats.unique_bytes


def test_partial_overlap_counts_only_the_overlapping_bytes(tmp_path):
    isn = 77
    frames = handshake(isn) + [
        data(isn, 0, 1000),
        data(isn, 1000, 1000),
        data(isn, 1500, 1000),  # 500 bytes resent, 500 new
        data(isn, 3000, 500),  # leaves a hole at [2500, 3000)
        data(isn, 2400, 700),  # 100 old + 500 hole + 100 old: one retransmitted packet, 200 bytes
    ]
    stats = sender_stats(write_pcap(tmp_path / "p.pcap", frames))
    assert stats.data_bytes == 4200
    assert (stats.rexmit_pkts, stats.rexmit_bytes) == (2, 700)
    assert stats.unique_bytes == 3500  # stream bytes [0, 3500), each once


def test_sequence_numbers_wrap_relative_to_the_isn(tmp_path):
    isn = 2**32 - 1500  # the second segment crosses 2**32
    frames = handshake(isn) + [
        data(isn, 0, 1000),
        data(isn, 1000, 1000),
        data(isn, 2000, 1000),
        data(isn, 1000, 1000),
    ]
    stats = sender_stats(write_pcap(tmp_path / "w.pcap", frames))
    assert stats.unique_bytes == 3000
    assert (stats.rexmit_pkts, stats.rexmit_bytes) == (1, 1000)


def test_many_wraps_of_a_long_transfer_are_new_data(tmp_path):
    """A 4 GiB+ stream revisits every 32-bit sequence number: still new data, not retransmissions."""
    isn, size = 123, 2**30
    offsets = [
        0,
        1 * size,
        2 * size,
        3 * size,
        4 * size,
        5 * size,
    ]  # 5 GiB of stream, one (large) segment each
    frames = handshake(isn) + [data(isn, o, 1000) for o in offsets] + [data(isn, 4 * size, 1000)]
    stats = sender_stats(write_pcap(tmp_path / "big.pcap", frames))
    assert stats.unique_bytes == 6000
    assert (stats.rexmit_pkts, stats.rexmit_bytes) == (1, 1000)


def test_payload_length_comes_from_the_ip_header_not_the_snap_length(tmp_path):
    isn = 9
    frames = handshake(isn) + [data(isn, 0, 1448, snap=96), data(isn, 1448, 1448, snap=96)]
    stats = sender_stats(write_pcap(tmp_path / "s.pcap", frames))
    assert stats.data_bytes == 2896


def test_segments_sent_into_a_zero_window_are_probes_like_tcptrace(tmp_path):
    isn = 40
    frames = handshake(isn) + [
        data(isn, 0, 1000),
        segment(RECEIVER, SENDER, 8, ack=isn + 1001, window=0),
        data(isn, 1000, 1),  # a probe: neither retransmitted nor unique
        segment(RECEIVER, SENDER, 8, ack=isn + 1001, window=500),
        data(isn, 1000, 500),
    ]
    stats = sender_stats(write_pcap(tmp_path / "z.pcap", frames))
    assert (stats.zwnd_probe_pkts, stats.zwnd_probe_bytes) == (1, 1)
    assert stats.data_bytes == 1501
    assert stats.rexmit_bytes == 0
    assert stats.unique_bytes == 1500


def test_ethernet_captures_are_decoded_too(tmp_path):
    isn = 1
    frames = [segment(SENDER, RECEIVER, isn + 1, payload=100, linktype=LINKTYPE_ETHERNET)]
    accounting = account_pcap(write_pcap(tmp_path / "e.pcap", frames, linktype=LINKTYPE_ETHERNET))
    assert accounting.direction(*SENDER, *RECEIVER).data_bytes == 100


def test_parse_segment_ignores_non_tcp():
    udp = dpkt.ip.IP(src=b"\x01\x02\x03\x04", dst=b"\x01\x02\x03\x05", p=17, data=dpkt.udp.UDP(sport=1, dport=2))
    frame = struct.pack("!HHH8sH", 0, 1, 6, b"\0" * 8, 0x0800) + bytes(udp)
    assert parse_segment(LINKTYPE_LINUX_SLL, frame) is None
    arp = struct.pack("!HHH8sH", 0, 1, 6, b"\0" * 8, 0x0806) + b"\0" * 28
    assert parse_segment(LINKTYPE_LINUX_SLL, arp) is None


def test_seq_space_merges_ranges_and_counts_overlaps():
    space = SeqSpace()
    assert space.add(0, 10) == 0
    assert space.add(20, 30) == 0
    assert len(space) == 2
    assert space.add(5, 25) == 10  # 5 bytes of each range
    assert len(space) == 1
    assert space.add(30, 40) == 0
    assert (space.starts, space.ends) == ([0], [40])
    assert space.add(-5, 45) == 40


def test_a_capture_cut_inside_a_record_keeps_the_records_before_and_says_so(tmp_path):
    isn = 3
    path = write_pcap(tmp_path / "cut.pcap", handshake(isn) + [data(isn, 0, 1000), data(isn, 1000, 1000)])
    path.write_bytes(path.read_bytes()[:-30])  # cut the last record's body
    accounting = account_pcap(path)
    assert accounting.problem is not None and "cut short in record 4" in accounting.problem
    assert accounting.records == 3
    assert accounting.direction(*SENDER, *RECEIVER).data_bytes == 1000


def test_a_capture_cut_inside_a_record_header(tmp_path):
    isn = 3
    path = write_pcap(tmp_path / "cut.pcap", handshake(isn) + [data(isn, 0, 1000)])
    path.write_bytes(path.read_bytes() + b"\x01\x02\x03")
    accounting = account_pcap(path)
    assert "record header has 3 of 16 bytes" in accounting.problem
    assert accounting.direction(*SENDER, *RECEIVER).data_bytes == 1000


def test_unreadable_captures_raise_a_clear_error(tmp_path):
    (tmp_path / "empty.pcap").write_bytes(b"")
    with pytest.raises(PcapError, match="empty"):
        account_pcap(tmp_path / "empty.pcap")
    (tmp_path / "text.pcap").write_text("this is not a capture, it only has some text in it")
    with pytest.raises(PcapError, match="not a pcap"):
        account_pcap(tmp_path / "text.pcap")
    with open(tmp_path / "wifi.pcap", "wb") as f:
        dpkt.pcap.Writer(f, linktype=127)  # radiotap
    with pytest.raises(PcapError, match="link type 127"):
        account_pcap(tmp_path / "wifi.pcap")


# ----------------------------------------------------------------------------------- the real fixture

#: tcptrace -l -n tests/fixtures/run-westwood/raw/rl.pcap (tcptrace 6.6.7),
#: connection 10.1.0.1:40000 -> 10.2.0.1:5201
FIXTURE_TCPTRACE = {
    "actual data pkts": 914,
    "actual data bytes": 1320613,
    "rexmt data pkts": 173,
    "rexmt data bytes": 250504,
    "unique bytes sent": 1070109,
}


def test_fixture_capture_counts():
    accounting = account_pcap(FIXTURE / "raw" / "rl.pcap")
    assert accounting.problem is None
    assert accounting.records == 1500
    stats = accounting.direction(*SENDER, *RECEIVER)
    assert stats.data_pkts == FIXTURE_TCPTRACE["actual data pkts"]
    assert stats.data_bytes == FIXTURE_TCPTRACE["actual data bytes"]
    assert stats.rexmit_pkts == FIXTURE_TCPTRACE["rexmt data pkts"]
    assert stats.rexmit_bytes == FIXTURE_TCPTRACE["rexmt data bytes"]
    assert stats.unique_bytes == FIXTURE_TCPTRACE["unique bytes sent"]
    assert stats.transfer_s == pytest.approx(1.256, abs=0.001)
    # iperf3's control connection shares the server port but is a connection of its own
    control = [d for d in accounting.directions.values() if d.dport == 5201 and d.sport != 40000]
    assert len(control) == 1 and control[0].data_bytes < 1000


@pytest.mark.skipif(shutil.which("tcptrace") is None, reason="tcptrace is not installed (apt-get install tcptrace)")
def test_fixture_matches_tcptrace():
    """The same definitions as tcptrace -l -n ("actual data", "rexmt data", "unique bytes sent")."""
    pcap = FIXTURE / "raw" / "rl.pcap"
    output = subprocess.run(["tcptrace", "-l", "-n", str(pcap)], capture_output=True, text=True, check=True).stdout
    theirs = tcptrace_connection(output, SENDER[1])
    ours = account_pcap(pcap).direction(*SENDER, *RECEIVER)
    assert ours.data_pkts == theirs["actual data pkts"]
    assert ours.data_bytes == theirs["actual data bytes"]
    assert ours.rexmit_pkts == theirs["rexmt data pkts"]
    assert ours.rexmit_bytes == theirs["rexmt data bytes"]
    assert ours.unique_bytes == theirs["unique bytes sent"]
    assert ours.transfer_s == pytest.approx(theirs["data xmit time"], abs=0.001)


@pytest.mark.skipif(shutil.which("tcptrace") is None, reason="tcptrace is not installed (apt-get install tcptrace)")
def test_synthetic_retransmissions_match_tcptrace(tmp_path):
    isn = 2**32 - 1500
    frames = handshake(isn) + [
        data(isn, 0, 1000),
        data(isn, 1000, 1000),
        data(isn, 1500, 1000),
        data(isn, 3000, 500),
        data(isn, 2400, 700),
        data(isn, 1000, 1000),
    ]
    pcap = write_pcap(tmp_path / "mix.pcap", frames)
    output = subprocess.run(["tcptrace", "-l", "-n", str(pcap)], capture_output=True, text=True, check=True).stdout
    theirs = tcptrace_connection(output, SENDER[1])
    ours = account_pcap(pcap).direction(*SENDER, *RECEIVER)
    assert (ours.data_pkts, ours.data_bytes) == (theirs["actual data pkts"], theirs["actual data bytes"])
    assert (ours.rexmit_pkts, ours.rexmit_bytes) == (theirs["rexmt data pkts"], theirs["rexmt data bytes"])
    assert ours.unique_bytes == theirs["unique bytes sent"]


def test_pcapng_captures_are_read_too(tmp_path):
    isn = 11
    path = tmp_path / "a.pcapng"
    with open(path, "wb") as f:
        writer = dpkt.pcapng.Writer(f, linktype=LINKTYPE_LINUX_SLL)
        for i, frame in enumerate(handshake(isn) + [data(isn, 0, 1000), data(isn, 0, 1000)]):
            writer.writepkt(frame, ts=100.0 + i)
    stats = sender_stats(path)
    assert (stats.data_bytes, stats.rexmit_bytes) == (2000, 1000)
    assert stats.transfer_s == pytest.approx(1.0)


def test_fast_path_windows_split_records_and_a_gap_goes_segment_by_segment(tmp_path):
    # windows of 200 bytes cut records in two; a segment skipped (a drop before this capture point)
    # and then retransmitted leaves a gap that the fast path must account like SeqSpace
    frames = handshake(100) + [data(100, i * 100, 100) for i in range(20) if i != 5] + [data(100, 500, 100)]
    path = write_pcap(tmp_path / "gap.pcap", frames)
    account_pcap(path, chunk_bytes=200)
    stats = sender_stats(path)
    assert (stats.data_pkts, stats.rexmit_pkts, stats.unique_bytes) == (20, 0, 2000)


@pytest.mark.parametrize("seed", range(12))
def test_drops_reordering_and_retransmissions_count_the_same_on_both_paths(tmp_path, seed):
    """The fast path's sequence space (a range less its holes) against pcap.SeqSpace, segment by segment:
    random drops before the capture point (up to 40 holes open: more than the fast path keeps, so some
    seeds go to its exact replay), late retransmissions, reordering, overlapping resends, data sent
    before the first captured byte, and a zero window on the other side in some seeds."""
    import random

    rng = random.Random(seed)
    isn = rng.randrange(2**32)
    size = 1000
    order = list(range(60))
    for _ in range(12):  # reordering: swap neighbours
        i = rng.randrange(len(order) - 1)
        order[i], order[i + 1] = order[i + 1], order[i]
    dropped = set(rng.sample(order[2:], rng.choice([3, 20, 40])))
    frames = handshake(isn) if seed % 3 else []  # some captures start mid-stream
    for k in order:
        if k not in dropped:
            frames.append(data(isn, k * size, size))
        if rng.random() < 0.1:  # an ACK; one in a few seeds closes the window
            frames.append(segment(RECEIVER, SENDER, 8, ack=isn + 1 + k * size, window=0 if seed % 5 == 4 else 900))
    for k in sorted(dropped):  # the retransmissions, some overlapping their neighbours
        start = k * size - rng.choice([0, 0, 300])
        frames.append(data(isn, max(start, 0), size + rng.choice([0, 500])))
    frames.append(data(isn, 0, 100))  # resends the start: below everything in captures that began late
    account_pcap(write_pcap(tmp_path / "r.pcap", frames))  # asserts fast == record by record


def test_more_holes_than_the_fast_path_keeps_and_data_before_the_first_seen_byte(tmp_path):
    # every other segment dropped before the capture point: 20 holes open at once (the fast path keeps 16
    # and hands the connection to its exact replay), then all resent
    holes = handshake(0) + [data(0, k * 100, 100) for k in [*range(0, 40, 2), *range(1, 40, 2)]]
    stats = account_pcap(write_pcap(tmp_path / "h.pcap", holes)).direction(*SENDER, *RECEIVER)
    assert (stats.data_pkts, stats.rexmit_pkts, stats.unique_bytes) == (40, 0, 4000)
    # the first data captured is not the first sent: what came before it is new, the gap between a hole
    # ([500, 1500) resends 500 bytes, [1000, 5000) resends 500 more and fills the hole)
    front = handshake(0) + [data(0, 5000, 1000), data(0, 0, 1000), data(0, 500, 1000), data(0, 1000, 4000)]
    stats = account_pcap(write_pcap(tmp_path / "f.pcap", front)).direction(*SENDER, *RECEIVER)
    assert (stats.data_bytes, stats.rexmit_pkts, stats.rexmit_bytes, stats.unique_bytes) == (7000, 2, 1000, 6000)


def test_a_capture_without_packets_counts_nothing(tmp_path):
    # tcpdump writes the file header alone when nothing crossed the interface
    result = account_pcap(write_pcap(tmp_path / "empty.pcap", []))
    assert (result.records, result.tcp_segments, result.problem, len(result.directions)) == (0, 0, None, 0)


def test_first_bulk_times_skip_the_cookie_and_stop_reading_once_every_sender_is_found(tmp_path):
    """The runner's data start check: iperf3's 37-byte cookie is not the start of the data, nor is a
    segment that the run before's connection on the same ports resent (a kept network) before the SYN."""
    other = ("10.1.1.1", 40001)
    frames = (
        [data(0, 5000, 1448)]
        + handshake(0)
        + [  # the orphan's segment, t = 1000.00
            data(0, 0, 37),  # the cookie, t = 1000.03
            segment(other, RECEIVER, 8, flags=SYN, ack=0),  # t = 1000.04
            segment(other, RECEIVER, 9, payload=1448),  # another sender's data, t = 1000.05
            data(0, 37, 1448),  # the first data, t = 1000.06
        ]
    )
    path = write_pcap(tmp_path / "c.pcap", frames)
    with open(path, "ab") as f:
        f.write(b"\0" * 7)  # a record cut short after them: never read, since both were found before
    found, problem = first_bulk_times(path, {SENDER, other}, 37)
    assert found == {SENDER: pytest.approx(1000.06), other: pytest.approx(1000.05)}
    assert problem is None


def test_first_bulk_times_report_a_cut_capture_and_keep_what_came_before(tmp_path):
    path = write_pcap(tmp_path / "t.pcap", handshake(0) + [data(0, 0, 1000)])
    with open(path, "ab") as f:
        f.write(b"\0" * 7)
    found, problem = first_bulk_times(path, {SENDER, ("10.9.9.9", 1)}, 37)
    assert found == {SENDER: pytest.approx(1000.02)}
    assert "cut short" in problem and "t.pcap" in problem
    missing, problem = first_bulk_times(tmp_path / "none.pcap", {SENDER}, 37)
    assert missing == {} and "none.pcap" in problem


def test_ecn_echoes_and_answers_are_counted_apart_from_the_handshakes_request(tmp_path):
    """ECN (RFC 3168): the SYN asks with ECE | CWR and the SYN-ACK answers with ECE, which are not
    counted; then an ACK that echoes a CE mark carries ECE, and the sender's answer CWR."""
    ece, cwr = dpkt.tcp.TH_ECE, dpkt.tcp.TH_CWR
    frames = [
        segment(SENDER, RECEIVER, 0, flags=SYN | ece | cwr, ack=0),
        segment(RECEIVER, SENDER, 7, flags=SYN | ACK | ece, ack=1),
        data(0, 0, 1000),
        segment(RECEIVER, SENDER, 8, flags=ACK | ece, ack=1001),  # the data was CE-marked on its way
        segment(RECEIVER, SENDER, 8, flags=ACK | ece, ack=1001),
        segment(SENDER, RECEIVER, 1001, payload=1000, flags=ACK | PSH | cwr),  # the sender's window reduced
        segment(RECEIVER, SENDER, 8, flags=ACK, ack=2001),
    ]
    result = account_pcap(write_pcap(tmp_path / "ecn.pcap", frames))  # both accountings agree
    sender, acks = result.direction(*SENDER, *RECEIVER), result.direction(*RECEIVER, *SENDER)
    assert (sender.cwr_count, sender.ece_count) == (1, 0)
    assert (acks.ece_count, acks.cwr_count) == (2, 0)


def test_setup_retransmissions_count_the_waits_of_set_up_segments_sent_again(tmp_path):
    """A lossy link took a set-up segment: the data start check takes its wait off the lag (a kept
    network's orphaned segments before the SYN and the data's own retransmissions do not count)."""
    control = ("10.1.0.1", 61000)
    frames = [
        data(0, 5000, 10),  # the run before's orphan on the data port, t = 1000.00 ...
        data(0, 5000, 10),  # ... sent again, t = 1000.01: not this run's
        segment(control, RECEIVER, 100, flags=SYN, ack=0),  # the control connection's SYN, t = 1000.02
        segment(control, RECEIVER, 100, flags=SYN, ack=0),  # sent again, t = 1000.03: 0.01 s
        segment(control, RECEIVER, 101, payload=37),  # its cookie, t = 1000.04
        segment(SENDER, RECEIVER, 0, flags=SYN, ack=0),  # the data connection, t = 1000.05
        data(0, 0, 37),  # its cookie, t = 1000.06 ...
        segment(RECEIVER, SENDER, 7, payload=1),  # the server's side is not the client's set-up, t = 1000.07
        data(0, 0, 37),  # ... sent again, t = 1000.08: 0.02 s
        data(0, 37, 1448),  # the data begins, t = 1000.09
        data(0, 37, 1448),  # a retransmission of data: not set-up, t = 1000.10
    ]
    path = write_pcap(tmp_path / "s.pcap", frames)
    waits, problem = setup_retransmission_s(path, {SENDER: (RECEIVER[1], 1000.09), ("10.1.9.1", 40009): (5210, 1000.5)})
    assert problem is None
    assert waits == {SENDER: pytest.approx(0.03)}
