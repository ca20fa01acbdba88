"""The multipath NetSpec, computed purely: routes take path 1, the sprayers list every other path with
its next hop on that path, delays and queues sit where the docstring says, bad parameters are
refused with the valid range."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario, scenario_from_dict
from tests.unit.test_topology_parking_lot import walk
from topologies import TOPOLOGIES
from topologies.multipath import Multipath, MultipathParams

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def multipath(paths=3, pairs=1, **params):
    link = {"rate_mbit": 1.5, "delay_ms": 10, "queue_pkts": 20}
    return Multipath(MultipathParams(paths=paths, link=link, access={"delay_ms": 5}, **params), pairs)


def test_registered():
    assert TOPOLOGIES["multipath"] is Multipath


@pytest.mark.parametrize("paths", [2, 3, 4])
def test_routes_take_path_1_and_the_sprayer_covers_the_others(paths):
    topology = multipath(paths, pairs=2, spray="data_and_acks")
    spec = topology.netspec()
    for pair in range(2):
        for direction in ("forward", "reverse"):
            sender, receiver = topology.endpoints(pair, direction)
            route = walk(spec, sender.node, receiver.ip)
            assert route[1] == topology.ingress_router(pair, direction)
            assert "m1" in route and len(route) == 5, route
    owner = {ipaddress.ip_interface(cidr).ip: node for (node, _), cidr in spec.addresses.items()}
    forward, reverse = spec.sprayers
    assert (forward.node, forward.intf, reverse.node, reverse.intf) == ("rl", "rl-eth0", "rr", "rr-eth0")
    for sprayer in spec.sprayers:
        assert [owner[ipaddress.ip_address(nexthop)] for _, nexthop in sprayer.paths] == [
            f"m{k}" for k in range(2, paths + 1)
        ]
        for intf, nexthop in sprayer.paths:  # each next hop is on the link of its interface
            network = ipaddress.ip_interface(spec.addresses[(sprayer.node, intf)]).network
            assert ipaddress.ip_address(nexthop) in network


def test_data_only_sprays_one_direction():
    spec = multipath(2, spray="data").netspec()
    assert [s.direction for s in spec.sprayers] == ["forward"]


def test_delays_queues_and_probes():
    topology = multipath(4)
    spec = topology.netspec()
    # hosts carry both access links and path 1 (10 ms); path k's node only what it adds
    assert spec.egress[("l0", "l0-eth0")].delay_ms == 2 * 5 + 10
    assert ("m1", "m1-eth0") not in spec.egress
    assert spec.egress[("m4", "m4-eth1")].delay_ms == 30
    assert topology.base_rtt_ms(0) == 40 and topology.path_rtt_ms(4) == 2 * (10 + 40)
    for k in range(4):
        for router in ("rl", "rr"):
            plan = spec.egress[(router, f"{router}-eth{k}")]
            assert (plan.rate_mbit, plan.queue_pkts) == (1.5, 20)
    assert [(p.direction, p.rate_mbit) for p in topology.probes()] == [("forward", 6.0), ("reverse", 1.5)]


def test_set_up_round_trips_average_the_paths_the_packets_are_sprayed_over():
    # path k adds k x 10 ms one way on top of 2 x 5 ms of access links each way
    both = multipath(4, spray="data_and_acks")
    assert both.setup_rtt_ms(0) == 20 + 25 + 25
    assert multipath(4, spray="data").setup_rtt_ms(0) == 20 + 25 + 10  # ACKs take path 1
    assert both.setup_rtt_ms(0) > both.base_rtt_ms(0)


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"paths": 5}, "5 is out of range: must be between 2 and 4"),
        ({"paths": 1}, "1 is out of range: must be between 2 and 4"),
        ({"paths": 3, "path_links": [2, 1, 3]}, "path 1 must be the shortest"),
        ({"paths": 4, "path_links": [1, 2, 3]}, "needs 4 entries in path_links"),
        ({"paths": 2, "link": {"rate_mbit": 1.5, "delay_ms": -1}}, "delay_ms"),
        ({"paths": 2, "link": {"delay_ms": 10}}, "needs rate_mbit"),
    ],
)
def test_bad_parameters_are_refused_with_the_valid_range(topology, message):
    data = {
        "topology": {"name": "multipath", "link": {"rate_mbit": 1.5}, **topology},
        "flows": [{"cc": "reno"}],
        "duration_s": 10,
    }
    with pytest.raises(ScenarioError, match=message):
        scenario_from_dict(data)


def test_flows_take_no_rtt():
    data = {
        "topology": {"name": "multipath", "paths": 2, "link": {"rate_mbit": 1.5}},
        "flows": [{"cc": "reno", "rtt_ms": 50}],
        "duration_s": 10,
    }
    with pytest.raises(ScenarioError, match="leave rtt_ms out"):
        scenario_from_dict(data)


def test_the_scenario_file_sweeps_paths_and_delays():
    full = load_scenario(SCENARIOS / "multipath.yaml", profile="full")
    assert len(full.points) == 3 * 6 * 2 * 2
    data_only = load_scenario(SCENARIOS / "multipath.yaml", profile="full-data-only")
    assert {p.scenario.topology.spray for p in data_only.points} == {"data"}
