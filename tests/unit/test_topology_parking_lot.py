"""The parking lot's NetSpec, computed purely: every packet finds its way, queues and delays sit where
the docstring says, RTTs follow from the hops, flows map onto pairs, bad parameters are refused."""

from __future__ import annotations

import ipaddress

import pytest

from testbed.plan.connections import plan_connections
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import scenario_from_dict
from topologies import TOPOLOGIES
from topologies.parking_lot import ParkingLot, ParkingLotParams


def lot(hops=3, **params):
    return ParkingLot(
        ParkingLotParams(
            hops=hops, hop={"rate_mbit": 10, "delay_ms": 10, "queue_pkts": 125}, access={"delay_ms": 20}, **params
        )
    )


def walk(spec, src_host, dst_ip):
    """Follow the routes hop by hop from a host to an address; return the nodes visited."""
    owner = {ipaddress.ip_interface(cidr).ip: node for (node, _), cidr in spec.addresses.items()}
    node, visited = src_host, [src_host]
    for _ in range(50):
        if ipaddress.ip_address(dst_ip) in [
            ipaddress.ip_interface(c).ip for (n, _), c in spec.addresses.items() if n == node
        ]:
            return visited
        gateway = None
        for dst, via in spec.routes.get(node, []):
            if dst == "default" or ipaddress.ip_address(dst_ip) in ipaddress.ip_network(dst):
                gateway = via
                break
        if gateway is None:  # directly connected?
            for (n, _), cidr in spec.addresses.items():
                if n == node and ipaddress.ip_address(dst_ip) in ipaddress.ip_interface(cidr).network:
                    gateway = dst_ip
        assert gateway is not None, f"{node} has no route to {dst_ip}"
        node = owner[ipaddress.ip_address(gateway)]
        visited.append(node)
    raise AssertionError(f"routing loop from {src_host} to {dst_ip}: {visited}")


def test_registered():
    assert TOPOLOGIES["parking_lot"] is ParkingLot


@pytest.mark.parametrize("hops", [1, 3, 10])
def test_every_pair_reaches_its_peer_over_the_right_hops(hops):
    topology = lot(hops)
    spec = topology.netspec()
    for pair in range(hops + 1):
        for direction in ("forward", "reverse"):
            sender, receiver = topology.endpoints(pair, direction)
            path = walk(spec, sender.node, receiver.ip)
            hop_nodes = [n for n in path if n.startswith("k")]
            assert len(hop_nodes) == topology.hops_of(pair), path
            assert path[1] == topology.ingress_router(pair, direction)


def test_queues_delays_and_rtts():
    topology = lot(3)
    spec = topology.netspec()
    assert len(spec.bottlenecks) == 6 and {b.queue_pkts for b in spec.bottlenecks} == {125}
    assert {b.rate_mbit for b in spec.bottlenecks} == {10}
    netems = {key: plan.delay_ms for key, plan in spec.egress.items() if plan.needs_netem}
    assert netems[("k2", "k2-eth0")] == 10 and netems[("k2", "k2-eth1")] == 10
    assert netems[("s0", "s0-eth0")] == 20
    assert all(not plan.needs_netem for key, plan in spec.egress.items() if plan.rate_mbit)  # queue and delay apart
    assert topology.base_rtt_ms(0) == 2 * (40 + 30) and topology.base_rtt_ms(2) == 2 * (40 + 10)
    assert len(spec.hosts) == 2 * 4 and len(spec.routers) == 4 + 3
    assert "src net 10.1.0.0/24" in spec.capture_filters["p0"] and "10.2.0.0/24" in spec.capture_filters["p3"]
    assert all(len(f"{n}-eth{i}") <= 15 for n in spec.nodes for i in range(len(spec.interfaces(n))))


def scenario(**flows_override):
    return {
        "topology": {
            "name": "parking_lot",
            "hops": 3,
            "hop": {"rate_mbit": 10, "delay_ms": 10, "queue_pkts": 125},
            "access": {"delay_ms": 20},
        },
        "flows": [
            {"cc": "westwood", "path": "through", "start_s": 10},
            {"cc": "reno", "path": "hop"},
            {"cc": "reno", "path": "hop", "direction": "reverse"},
        ],
        "duration_s": 60,
    } | flows_override


def test_flows_map_onto_pairs():
    point = scenario_from_dict(scenario()).points[0]
    topology = ParkingLot.from_scenario(point.scenario)
    connections = plan_connections(point.scenario, topology)
    assert [(c.pair, c.direction, c.sender) for c in connections] == [
        (0, "forward", "s0"),
        (1, "forward", "a1"),
        (2, "forward", "a2"),
        (3, "forward", "a3"),
        (1, "reverse", "b1"),
        (2, "reverse", "b2"),
        (3, "reverse", "b3"),
    ]
    assert connections[0].base_rtt_ms == 140 and connections[0].start_s == 10
    assert [c.capture_node for c in connections] == ["p0", "p0", "p1", "p2", "p1", "p2", "p3"]


def test_bad_parameters_name_the_valid_range():
    bad = scenario()
    bad["topology"] = {**bad["topology"], "hops": 11}
    with pytest.raises(ScenarioError, match="topology.hops: 11 is out of range: must be between 1 and 10"):
        scenario_from_dict(bad)
    with pytest.raises(ScenarioError, match=r"flows\[0\].path: 'all' is not a path of the parking lot; valid: through"):
        scenario_from_dict(scenario(flows=[{"cc": "reno", "path": "all"}]))
    with pytest.raises(ScenarioError, match=r"flows\[0\].rtt_ms: the parking lot's paths set the RTT"):
        scenario_from_dict(scenario(flows=[{"cc": "reno", "path": "hop", "rtt_ms": 50}]))
    with pytest.raises(ScenarioError, match=r"flows\[0\].path: the dumbbell has one path"):
        scenario_from_dict(
            {
                "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10}},
                "flows": [{"cc": "reno", "rtt_ms": 50, "path": "hop"}],
                "duration_s": 10,
            }
        )
