"""Many flows on one host pair: an address pair and a delay class per flow instead of a host pair."""

import pytest

from testbed.scenario import ScenarioError, scenario_from_dict
from testbed.traffic import client_argv, plan_connections
from topologies import TOPOLOGIES, ManyFlows, ManyFlowsParams
from topologies.params import LinkParams
from topologies.shaping import DelayClass, EgressPlan, delay_class_specs, delay_classid, qdisc_specs


def many(rtts, **bottleneck):
    return ManyFlows(ManyFlowsParams(bottleneck=LinkParams(rate_mbit=10, **bottleneck)), rtts)


def rtt_fairness(m: int, **flow_options) -> dict:
    return {
        "topology": {"name": "many_flows", "bottleneck": {"rate_mbit": 10, "queue_bdp": 1}},
        "flows": [{"cc": "reno", "count": m, "rtt_ms": 20, "rtt_max_ms": 250, **flow_options},
                  {"cc": "reno", "count": 10, "rtt_ms": 20, "rtt_max_ms": 250, "direction": "reverse"}],
        "duration_s": 10,
    }  # fmt: skip


def test_registry_and_two_hosts_for_any_number_of_flows():
    assert TOPOLOGIES["many_flows"] is ManyFlows
    spec = many([40.0 + i for i in range(210)]).netspec()
    assert spec.nodes == ["l0", "r0", "rl", "rr"]
    assert len(spec.addresses[("l0", "l0-eth0")]) == 210
    assert spec.addresses[("l0", "l0-eth0")][7] == "10.1.7.1/16"
    assert spec.addresses[("r0", "r0-eth0")][209] == "10.2.209.1/16"
    assert spec.routes["l0"] == [("default", "10.1.255.254")]


def test_each_flow_gets_its_one_way_delay_toward_its_peer_address_in_both_directions():
    spec = many([100, 40, 250], queue_bdp=1).netspec()
    assert spec.egress[("l0", "l0-eth0")].delay_classes == (
        DelayClass("10.2.0.1", 50), DelayClass("10.2.1.1", 20), DelayClass("10.2.2.1", 125))
    assert spec.egress[("r0", "r0-eth0")].delay_classes[2] == DelayClass("10.1.2.1", 125)
    # the bottleneck and its queue are the dumbbell's (rate x longest RTT)
    assert spec.egress[("rl", "rl-eth0")] == EgressPlan(rate_mbit=10, queue_pkts=207)
    assert spec.needs_netem


def test_delay_classes_are_htb_classes_with_netem_leaves_and_a_filter_on_the_destination():
    specs = delay_class_specs((DelayClass("10.2.0.1", 50), DelayClass("10.2.1.1", 20.5)))
    assert [(s.command, s.kind) for s in specs] == [
        ("add", "htb"), ("add-class", "htb"),
        ("add-class", "htb"), ("add", "netem"), ("add-filter", "u32"),
        ("add-class", "htb"), ("add", "netem"), ("add-filter", "u32"),
    ]  # fmt: skip
    assert specs[0].kwargs["default"] == 1  # unmatched packets (ARP) go to 1:1, without delay
    assert specs[6].kwargs["delay"] == 20500 and specs[6].kwargs["parent"] == delay_classid(1) == 0x10003
    assert specs[7].kwargs["keys"] == ["0x0a020101/0xffffffff+16"] and specs[7].kwargs["target"] == 0x10003
    assert qdisc_specs(EgressPlan(delay_classes=(DelayClass("10.2.0.1", 1),)))[3].kind == "netem"


def test_delay_classes_take_the_whole_egress():
    with pytest.raises(ValueError, match="no rate, delay or loss"):
        EgressPlan(delay_ms=5, delay_classes=(DelayClass("10.2.0.1", 1),))


def test_flows_use_their_own_addresses_and_calibration_reaches_their_classes():
    scenario = scenario_from_dict(rtt_fairness(20)).points[0].scenario
    topo = ManyFlows.from_scenario(scenario)
    connections = plan_connections(scenario, topo)
    assert len(connections) == 30
    forward, reverse = connections[3], connections[25]
    assert (forward.sender, forward.sender_ip, forward.receiver_ip) == ("l0", "10.1.3.1", "10.2.3.1")
    assert (reverse.sender, reverse.sender_ip, reverse.receiver_ip) == ("r0", "10.2.25.1", "10.1.25.1")
    assert forward.base_rtt_ms == pytest.approx(20 + 4 * 230 / 20)
    argv = client_argv(forward)
    assert argv[argv.index("-B") + 1] == "10.1.3.1"  # the source address picks the flow's delay class
    assert topo.delay_egress(3) == [("l0", "l0-eth0", 3), ("r0", "r0-eth0", 3)]


def test_the_papers_largest_m_fits_and_more_pairs_are_refused_with_the_range():
    assert len(scenario_from_dict(rtt_fairness(200)).points[0].scenario.flows) == 2
    with pytest.raises(ValueError, match="1..250"):
        many([40.0] * 251)


def test_host_wide_options_must_agree_across_flows():
    data = rtt_fairness(10, sack=False)
    with pytest.raises(ScenarioError, match="'sack' must be the same for every flow"):
        scenario_from_dict(data)
    data["flows"][1]["sack"] = False
    assert scenario_from_dict(data).points
