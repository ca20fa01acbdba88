"""The dumbbell's network description: addresses, routes, where delay, loss and the queue go."""

import pytest

from topologies import TOPOLOGIES, Dumbbell, DumbbellParams
from topologies.lossmodel import BernoulliLoss
from topologies.params import LinkParams, bdp_packets, queue_packets, tcp_goodput_limit_mbit
from topologies.shaping import EgressPlan, qdisc_specs


def dumbbell(rtts, **bottleneck):
    return Dumbbell(DumbbellParams(bottleneck=LinkParams(rate_mbit=10, **bottleneck)), rtts)


def test_registry_names_the_dumbbell():
    assert TOPOLOGIES["dumbbell"] is Dumbbell


def test_bdp_of_the_papers_default_path():
    # MACHINE.md: 10 Mbit/s x 100 ms = 83 packets of 1514 B
    assert bdp_packets(10, 100) == 83
    assert tcp_goodput_limit_mbit(10) == pytest.approx(9.5640, abs=1e-3)


def test_queue_in_bdp_uses_the_longest_rtt():
    # paper 000 §3: buffer = bottleneck rate x max round-trip propagation time
    assert dumbbell([50, 100], queue_bdp=1).queue_pkts == 83
    assert dumbbell([50, 100], queue_bdp=0.5).queue_pkts == 42
    assert dumbbell([50], queue_pkts=7).queue_pkts == 7
    assert queue_packets(LinkParams(rate_mbit=10), 100) is None


def test_one_netem_per_direction_carries_the_whole_one_way_delay():
    spec = dumbbell([100, 40], queue_bdp=1).netspec()
    assert spec.egress[("l0", "l0-eth0")] == EgressPlan(delay_ms=50)
    assert spec.egress[("r0", "r0-eth0")] == EgressPlan(delay_ms=50)
    assert spec.egress[("l1", "l1-eth0")] == EgressPlan(delay_ms=20)
    # no loss configured: nothing on the routers' host-facing side
    assert spec.egress[("rr", "rr-eth1")].is_empty


def test_bottleneck_queue_and_rate_in_both_directions_loss_after_the_queue():
    spec = dumbbell([100], queue_bdp=1, loss_pct=1).netspec()
    for router in ("rl", "rr"):
        assert spec.egress[(router, f"{router}-eth0")] == EgressPlan(rate_mbit=10, queue_pkts=83)
        # loss_pct is seeded Bernoulli: the BPF channel's one long state of 1 %, no netem loss
        assert spec.egress[(router, f"{router}-eth1")] == EgressPlan(loss_model=BernoulliLoss(loss_pct=1).as_timed())
    assert [(b.node, b.direction) for b in spec.bottlenecks] == [("rl", "forward"), ("rr", "reverse")]


def test_addresses_routes_and_naming():
    topo = dumbbell([100, 100, 100])
    spec = topo.netspec()
    assert spec.hosts == ["l0", "l1", "l2", "r0", "r1", "r2"]
    assert spec.addresses[("l2", "l2-eth0")] == "10.1.2.1/24"
    assert spec.addresses[("rr", "rr-eth3")] == "10.2.2.254/24"
    assert spec.routes["l1"] == [("default", "10.1.1.254")]
    assert spec.routes["rl"] == [("10.2.0.0/16", "10.0.0.2")]
    assert spec.interfaces("rl") == ["rl-eth0", "rl-eth1", "rl-eth2", "rl-eth3"]
    sender, receiver = topo.endpoints(1, "reverse")
    assert (sender.node, receiver.node) == ("r1", "l1")


def test_netem_only_when_delay_or_loss():
    assert not dumbbell([0], queue_pkts=100).netspec().needs_netem
    assert dumbbell([10], queue_pkts=100).netspec().needs_netem


def test_rtt_shorter_than_the_bottleneck_delay_is_refused_with_the_valid_range():
    with pytest.raises(ValueError, match=r"rtt_ms >= 40"):
        dumbbell([30], delay_ms=20)


def test_pair_count_is_bounded():
    with pytest.raises(ValueError, match="1..250"):
        dumbbell([])


def test_qdisc_specs_for_a_bottleneck():
    specs = qdisc_specs(EgressPlan(rate_mbit=10, queue_pkts=83))
    assert [(s.command, s.kind) for s in specs][:3] == [("add", "htb"), ("add-class", "htb"), ("add", "pfifo")]
    assert specs[0].kwargs["default"] == "1"  # what no filter picks is the experiment's traffic
    assert specs[1].kwargs["rate"] == "10000000bit"
    assert specs[2].kwargs == {"handle": "10:", "parent": "1:1", "limit": 83}


def _lane_filters(specs):
    return [s.kwargs["keys"] for s in specs if s.command == "add-filter" and s.kwargs["target"] == "1:2"]


def _u32_matches(keys: list[str], header: bytes) -> bool:
    """Whether every u32 key (value/mask+offset) matches ``header`` (IPv4 + TCP), as the kernel reads it."""
    for key in keys:
        value_mask, offset = key.split("+")
        value, mask = (int(x, 16) for x in value_mask.split("/"))
        word = int.from_bytes(header[int(offset) : int(offset) + 4], "big")
        if word & mask != value:
            return False
    return True


def _tcp_header(sport: int, dport: int, flags: int) -> bytes:
    ip = bytes([0x45, 0, 0, 52, 0, 0, 0x40, 0, 64, 6, 0, 0]) + bytes([10, 1, 0, 1, 10, 2, 0, 1])
    tcp = sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(8) + bytes([0x80, flags]) + bytes(6)
    return ip + tcp


@pytest.mark.parametrize(
    ("sport", "dport", "flags", "in_lane"),
    [
        (40000, 5201, 0x02, True),  # a data connection's SYN
        (5201, 40000, 0x12, True),  # its SYN-ACK
        (40000, 5201, 0x10, False),  # its data and ACKs: the experiment's queue
        (5201, 40000, 0x11, False),  # FIN
        (5201, 61440, 0x18, True),  # what iperf3's server says on its control connection
        (5201, 65535, 0x10, True),
        (61440, 5201, 0x18, False),  # what its client says: in order with the client's data
        (5201, 60000, 0x18, False),  # below the ephemeral range
    ],
)
def test_the_control_lane_takes_handshakes_and_the_control_servers_messages_only(sport, dport, flags, in_lane):
    specs = qdisc_specs(EgressPlan(rate_mbit=10, queue_pkts=83))
    lane_class = next(s for s in specs if s.command == "add-class" and s.kwargs["handle"] == "1:2")
    data_class = specs[1]
    # a lane of its own: served first, same rate, its own deep queue
    assert lane_class.kwargs["prio"] < data_class.kwargs["prio"]
    assert lane_class.kwargs["rate"] == data_class.kwargs["rate"]
    assert any(s.kind == "pfifo" and s.kwargs["parent"] == "1:2" and s.kwargs["limit"] >= 1000 for s in specs)
    header = _tcp_header(sport, dport, flags)
    assert any(_u32_matches(keys, header) for keys in _lane_filters(specs)) is in_lane


def test_the_control_lane_ignores_udp_and_ip_options():
    keys = _lane_filters(qdisc_specs(EgressPlan(rate_mbit=10, queue_pkts=83)))
    udp = bytearray(_tcp_header(5100, 61440, 0x02))
    udp[9] = 17
    assert not any(_u32_matches(k, bytes(udp)) for k in keys)
    options = bytearray(_tcp_header(5201, 61440, 0x10))
    assert any(_u32_matches(k, bytes(options)) for k in keys)
    options[0] = 0x46  # a 24-byte IP header: the TCP ports are not at offset 20
    assert not any(_u32_matches(k, bytes(options)) for k in keys)


def test_htb_burst_covers_10_ms_of_the_rate_and_a_few_frames_at_least():
    # a 2-frame burst lost tokens to late dequeues in TCG guests (the link read 8.2 of 9.7 Mbit/s)
    cls = qdisc_specs(EgressPlan(rate_mbit=10, queue_pkts=83))[1]
    assert cls.kwargs["burst"] == cls.kwargs["cburst"] == 12_500
    assert qdisc_specs(EgressPlan(rate_mbit=1.3))[1].kwargs["burst"] == 3_000


def test_qdisc_specs_for_delay_and_loss():
    (netem,) = qdisc_specs(EgressPlan(delay_ms=50))
    assert netem.kind == "netem" and netem.kwargs["handle"] == "1:"
    assert netem.kwargs["delay"] == 50_000  # microseconds
    assert netem.kwargs["limit"] >= 10_000  # never the queue that drops
    specs = qdisc_specs(EgressPlan(delay_ms=50, loss_pct=1.5))
    prio, lane, lossy = specs[:3]
    assert (prio.kind, prio.kwargs["bands"], set(prio.kwargs["priomap"])) == ("prio", 2, {1})  # all to band 2
    assert (lane.kwargs["parent"], lossy.kwargs["parent"]) == ("1:1", "1:2")
    assert lane.kwargs["delay"] == lossy.kwargs["delay"] == 50_000  # the lane has the delay, not the loss
    assert "loss" not in lane.kwargs and lossy.kwargs["loss"] == 1.5
    handshake = _tcp_header(40000, 5201, 0x02)
    assert {s.kwargs["target"] for s in specs[3:]} == {"1:1"}
    assert any(_u32_matches(s.kwargs["keys"], handshake) for s in specs[3:])
    # no lossy link drops a control connection's packets, whichever way (the lane does not reorder)
    for sport, dport in ((61440, 5201), (5201, 61440)):
        assert any(_u32_matches(s.kwargs["keys"], _tcp_header(sport, dport, 0x18)) for s in specs[3:])
    ip_filters = [f for f in specs[3:] if f.kwargs["protocol"] == 0x0800]  # (the ARP filter takes all ARP)
    assert not any(_u32_matches(f.kwargs["keys"], _tcp_header(40000, 5201, 0x18)) for f in ip_filters)
    assert qdisc_specs(EgressPlan()) == []


def test_rate_and_delay_on_one_interface_is_refused():
    with pytest.raises(ValueError, match="different interfaces"):
        EgressPlan(rate_mbit=10, delay_ms=5)
    with pytest.raises(ValueError, match="needs a rate"):
        EgressPlan(queue_pkts=10)


def _udp_header(payload: int) -> bytes:
    total = 28 + payload
    ip = bytes([0x45, 0]) + total.to_bytes(2, "big") + bytes([0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 2, 0, 1])
    return ip + (61000).to_bytes(2, "big") + (5999).to_bytes(2, "big") + (8 + payload).to_bytes(2, "big") + bytes(2)


def test_no_lossy_link_takes_a_udp_probes_start_or_arp_but_it_takes_the_probe():
    """iperf3 3.12 starts a UDP test with one 4-byte datagram each way and no retry: through 50 % loss
    each way the probe read nothing, twice (tests/fixtures/probe-queues/README.md)."""
    specs = qdisc_specs(EgressPlan(delay_ms=10, loss_pct=50))
    ip_lane = [s.kwargs["keys"] for s in specs if s.command == "add-filter" and s.kwargs["protocol"] == 0x0800]
    assert all(s.kwargs["target"] == "1:1" for s in specs if s.command == "add-filter")
    assert any(_u32_matches(keys, _udp_header(4)) for keys in ip_lane)  # the start, both ways
    assert not any(_u32_matches(keys, _udp_header(1472)) for keys in ip_lane)  # the probe's data is lost as asked
    arp = [s for s in specs if s.command == "add-filter" and s.kwargs["protocol"] == 0x0806]
    assert len(arp) == 1 and arp[0].kwargs["keys"] == ["0x0/0x0+0"]
