"""Many flows on one host pair: an address pair and a per-destination delay per flow instead of a host pair."""

import pytest

from testbed.guest.shaping import delay_map_lines
from testbed.plan.connections import client_argv, plan_connections
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import scenario_from_dict
from topologies import TOPOLOGIES, ManyFlows, ManyFlowsParams
from topologies.params import LinkParams
from topologies.shaping import DelayClass, EgressPlan, fq_tc_argv, qdisc_specs


def many(rtts, **bottleneck):
    return ManyFlows(ManyFlowsParams(bottleneck=LinkParams(rate_mbit=10, **bottleneck)), rtts)


def rtt_fairness(m: int, **flow_options) -> dict:
    return {
        "topology": {"name": "many_flows", "bottleneck": {"rate_mbit": 10, "queue_bdp": 1}},
        "flows": [
            {"cc": "reno", "count": m, "rtt_ms": 20, "rtt_max_ms": 250, **flow_options},
            {"cc": "reno", "count": 10, "rtt_ms": 20, "rtt_max_ms": 250, "direction": "reverse"},
        ],
        "duration_s": 10,
    }


def test_registry_and_two_hosts_for_any_number_of_flows():
    assert TOPOLOGIES["many_flows"] is ManyFlows
    spec = many([40.0 + i for i in range(210)]).netspec()
    assert spec.nodes == ["l0", "r0", "dl", "rl", "rr"]
    assert len(spec.addresses[("l0", "l0-eth0")]) == 210
    assert spec.addresses[("l0", "l0-eth0")][7] == "10.1.7.1/16"
    assert spec.addresses[("r0", "r0-eth0")][209] == "10.2.209.1/16"
    assert spec.routes["l0"] == [("default", "10.1.255.254")]


def test_each_flow_gets_its_one_way_delay_on_the_delay_node_toward_each_address_in_both_directions():
    spec = many([100, 40, 250], queue_bdp=1).netspec()
    assert spec.egress[("dl", "dl-eth1")].delay_classes == (
        DelayClass("10.2.0.1", 50),
        DelayClass("10.2.1.1", 20),
        DelayClass("10.2.2.1", 125),
    )
    assert spec.egress[("dl", "dl-eth0")].delay_classes[2] == DelayClass("10.1.2.1", 125)
    # never on the sending hosts (fq would hold packets still charged to their sockets)
    assert ("l0", "l0-eth0") not in spec.egress and ("r0", "r0-eth0") not in spec.egress
    # the left router reaches the hosts through the delay node
    assert ("10.1.0.0/16", "10.3.0.1") in spec.routes["rl"] and spec.routes["dl"] == [("default", "10.3.0.2")]
    # the bottleneck and its queue are the dumbbell's (rate x longest RTT)
    assert spec.egress[("rl", "rl-eth0")] == EgressPlan(rate_mbit=10, queue_pkts=207)
    # per-destination delays need fq and the BPF program, not netem
    assert not spec.needs_netem and not spec.egress[("dl", "dl-eth0")].is_empty


def test_delays_are_an_unpaced_fq_and_a_map_of_destination_to_nanoseconds():
    argv = fq_tc_argv("dl-eth1")
    assert argv[:8] == ["tc", "qdisc", "add", "dev", "dl-eth1", "root", "handle", "1:"]
    assert argv[8:10] == ["fq", "nopacing"]
    # a 125 ms delay at 10 Mbit/s holds ~104 packets of one flow: fq's default flow_limit (100) would drop
    assert int(argv[argv.index("flow_limit") + 1]) >= 10_000 and "horizon_cap" in argv
    assert qdisc_specs(EgressPlan(delay_classes=(DelayClass("10.2.0.1", 1),))) == []
    (line,) = delay_map_lines(7, {"10.2.1.1": 20.5})
    # key: the address in network byte order; value: 20.5 ms = 20 500 000 ns, little-endian u64
    assert line == "map update id 7 key hex 0a 02 01 01 value hex 20 ce 38 01 00 00 00 00"


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
    assert argv[argv.index("-B") + 1] == "10.1.3.1"  # the flow's addresses pick its delays
    assert topo.delay_egress(3) == [("dl", "dl-eth1", "10.2.3.1"), ("dl", "dl-eth0", "10.1.3.1")]


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


def test_ecn_on_one_flow_of_a_shared_host_is_refused_not_spread_to_the_others():
    """ECN is a sysctl of the sender's host (net.ipv4.tcp_ecn): one flow asking for it would turn it on
    for every flow of many_flows' two hosts."""
    data = rtt_fairness(10)
    data["flows"][1]["ecn"] = True
    with pytest.raises(ScenarioError, match=r"flows\[1\]\.ecn: all flows of many_flows share two hosts, so 'ecn'"):
        scenario_from_dict(data)
    for flow in data["flows"]:
        flow["ecn"] = True
    assert scenario_from_dict(data).points
