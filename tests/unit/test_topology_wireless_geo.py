"""The wireless last hop and the GEO satellite link: where queues, delays and loss channels go."""

import pytest

from testbed.plan.connections import plan_connections
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import scenario_from_dict
from topologies import TOPOLOGIES, Geo, Wireless
from topologies.lossmodel import TimedTwoStateLoss
from topologies.shaping import EgressPlan

CHANNEL = {"model": "timed_two_state", "good_s": 1, "bad_s": 0.01, "bad_loss_pct": 10}


def resolve(data: dict):
    (point,) = scenario_from_dict({"duration_s": 10, **data}).points
    topology = TOPOLOGIES[point.scenario.topology.name].from_scenario(point.scenario)
    return point.scenario, topology


def wireless(flows, wired=None, **radio):
    return resolve(
        {
            "topology": {
                "name": "wireless",
                "wired": wired or {},
                "wireless": {"rate_mbit": 2, "delay_ms": 20, "queue_pkts": 40, **radio},
            },
            "flows": flows,
        }
    )


def test_the_radio_link_queues_on_routers_and_loses_after_the_queues_in_both_directions():
    _, topo = wireless([{"cc": "reno", "path": "mobile", "rtt_ms": 250}], loss=CHANNEL)
    spec = topo.netspec()
    assert isinstance(topo, Wireless) and spec.routers == ["ra", "bs", "air", "ap"]
    assert spec.egress[("bs", "bs-eth1")] == EgressPlan(rate_mbit=2, queue_pkts=40)  # forward radio queue
    assert spec.egress[("ap", "ap-eth0")] == EgressPlan(rate_mbit=2, queue_pkts=40)  # reverse radio queue
    for intf in ("air-eth0", "air-eth1"):  # one channel per direction, with the radio's delay
        plan = spec.egress[("air", intf)]
        assert plan.delay_ms == 20 and plan.timed_loss == TimedTwoStateLoss(**CHANNEL)
    # no loss on any sending host: the rest of the one-way delay is the hosts' netem
    assert spec.egress[("l0", "l0-eth0")] == EgressPlan(delay_ms=105)
    assert spec.egress[("r0", "r0-eth0")] == EgressPlan(delay_ms=105)
    assert topo.base_rtt_ms(0) == 250 and topo.ingress_router(0, "reverse") == "ap"
    assert ("ra", "ra-eth0") not in spec.egress  # the wired link is unshaped unless it has a rate


def test_wired_cross_flows_end_at_the_base_station_and_share_the_shaped_wired_link():
    scenario, topo = wireless(
        [
            {"cc": "westwood", "path": "mobile", "rtt_ms": 250},
            {"cc": "reno", "path": "wired", "count": 2, "rtt_ms": 66, "rtt_max_ms": 250},
        ],
        wired={"rate_mbit": 10, "queue_pkts": 100},
    )
    spec = topo.netspec()
    routers = {link.node2 for link in spec.links if link.node1 in ("r1", "r2", "r0")}
    assert routers == {"bs", "ap"}
    assert spec.egress[("ra", "ra-eth0")] == EgressPlan(rate_mbit=10, queue_pkts=100)
    assert spec.egress[("r1", "r1-eth0")] == EgressPlan(delay_ms=(66 + 92) / 2)
    assert spec.routes["bs"] == [("10.1.0.0/16", "10.0.0.1"), ("10.2.0.0/24", "10.0.1.2")]
    probes = {(p.direction, p.pair): p.rate_mbit for p in topo.probes()}
    assert probes == {("forward", 0): 2, ("reverse", 0): 2, ("forward", 1): 10, ("reverse", 1): 10}
    connections = plan_connections(scenario, topo)
    assert [c.capture_node for c in connections] == ["ra", "ra", "ra"]
    assert spec.capture_filters["bs"] == "tcp and (src net 10.2.1.0/24 or src net 10.2.2.0/24)"


def test_wireless_refusals_name_the_field_and_the_valid_values():
    with pytest.raises(ScenarioError, match="valid: mobile .*wired"):
        wireless([{"cc": "reno", "path": "through", "rtt_ms": 250}])
    with pytest.raises(ScenarioError, match="at least one flow path: mobile"):
        wireless([{"cc": "reno", "path": "wired", "rtt_ms": 250}])
    with pytest.raises(ScenarioError, match=r"rtt_ms >= 40"):
        wireless([{"cc": "reno", "path": "mobile", "rtt_ms": 30}])
    with pytest.raises(ScenarioError, match="wireless link needs rate_mbit"):
        resolve(
            {
                "topology": {"name": "wireless", "wired": {}, "wireless": {"delay_ms": 1}},
                "flows": [{"cc": "reno", "path": "mobile", "rtt_ms": 10}],
            }
        )
    with pytest.raises(ScenarioError, match="loss_pct"):
        wireless([{"cc": "reno", "path": "mobile", "rtt_ms": 250}], loss_pct=120)


def geo(flows, **satellite):
    return resolve(
        {
            "topology": {
                "name": "geo",
                "ground_rtt_ms": 40,
                "satellite": {"rate_mbit": 10, "delay_ms": 275, "queue_bdp": 1, **satellite},
            },
            "flows": flows,
        }
    )


def test_geo_flows_share_one_channel_per_direction_on_the_satellite_node():
    _, topo = geo([{"cc": "reno", "count": 3}, {"cc": "reno", "direction": "reverse", "rtt_ms": 600}], loss=CHANNEL)
    spec = topo.netspec()
    assert isinstance(topo, Geo) and "sat" in spec.routers
    assert topo.pair_rtts_ms == [590, 590, 590, 600]  # 2 x 275 + ground 40 unless the flow says
    timed = [key for key, plan in spec.egress.items() if plan.timed_loss is not None]
    assert sorted(timed) == [("sat", "sat-eth0"), ("sat", "sat-eth1")]
    assert spec.egress[("sat", "sat-eth0")].delay_ms == 275
    assert spec.egress[("l0", "l0-eth0")] == EgressPlan(delay_ms=20)
    assert spec.egress[("r3", "r3-eth0")] == EgressPlan(delay_ms=25)
    assert spec.egress[("rl", "rl-eth0")] == EgressPlan(rate_mbit=10, queue_pkts=496)
    assert spec.egress[("rr", "rr-eth0")] == EgressPlan(rate_mbit=10, queue_pkts=496)
    assert not any(link.node1 == "rl" and link.node2 == "rr" for link in spec.links)
    assert spec.routes["sat"] == [("10.1.0.0/16", "10.0.0.1"), ("10.2.0.0/16", "10.0.1.2")]


def test_geo_refuses_an_rtt_below_the_satellites_round_trip():
    with pytest.raises(ScenarioError, match=r"at least 2 x bottleneck delay_ms = 550"):
        geo([{"cc": "reno", "rtt_ms": 500}])
    with pytest.raises(ScenarioError, match="one path"):
        geo([{"cc": "reno", "path": "mobile"}])
