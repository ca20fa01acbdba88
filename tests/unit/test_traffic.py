"""Flows become iperf3 connections with their own ports, hosts and times."""

from testbed.plan.connections import CLIENT_PORT_BASE, SERVER_PORT_BASE, client_argv, plan_connections
from testbed.scenario.load import load_scenario_text
from topologies import Dumbbell

SCENARIO = """
topology: {name: dumbbell, bottleneck: {rate_mbit: 2, queue_pkts: 40}}
flows:
  - {cc: westwood, rtt_ms: 250}
  - {cc: reno, rtt_ms: 250, direction: reverse, count: 2, periods: [[2, 4], [6, 8]]}
duration_s: 8
"""


def plan():
    (point,) = load_scenario_text(SCENARIO, name="t").points
    scenario = point.scenario
    topology = Dumbbell.from_scenario(scenario)
    return plan_connections(scenario, topology)


def test_every_flow_replica_and_period_is_a_connection():
    conns = plan()
    assert [(c.flow, c.replica, c.period, c.pair) for c in conns] == [
        (0, 0, 0, 0),
        (1, 0, 0, 1),
        (1, 0, 1, 1),
        (1, 1, 0, 2),
        (1, 1, 1, 2),
    ]
    assert [(c.start_s, c.stop_s) for c in conns[1:3]] == [(2, 4), (6, 8)]
    assert conns[0].stop_s == 8


def test_reverse_flows_send_from_the_right_side():
    conns = plan()
    assert (conns[0].sender, conns[0].receiver) == ("l0", "r0")
    assert (conns[1].sender, conns[1].receiver_ip) == ("r1", "10.1.1.1")


def test_ports_are_unique_and_fixed():
    conns = plan()
    assert [c.server_port for c in conns] == list(range(SERVER_PORT_BASE, SERVER_PORT_BASE + 5))
    assert [c.client_port for c in conns] == list(range(CLIENT_PORT_BASE, CLIENT_PORT_BASE + 5))


def test_client_argv_binds_the_client_port_and_names_the_algorithm():
    argv = client_argv(plan()[2])
    assert argv[:3] == ["iperf3", "-c", "10.1.1.1"]
    assert argv[argv.index("--cport") + 1] == str(CLIENT_PORT_BASE + 2)
    assert argv[argv.index("-C") + 1] == "reno"
    assert argv[argv.index("-t") + 1] == "2"
    assert "-J" in argv


def test_fixed_size_transfers_send_exactly_their_size():
    from testbed.plan.connections import MAX_BLOCK_BYTES, block_bytes

    for size in (2_000_000, 3_200_000, 320_000, 32_000_000, 131_073):
        block = block_bytes(size)
        assert size % block == 0 and 1024 <= block <= MAX_BLOCK_BYTES
    assert block_bytes(1_000_003) == MAX_BLOCK_BYTES  # prime: whole default blocks


def test_a_window_cap_sets_the_socket_buffers_of_its_flow_only():
    text = SCENARIO.replace("{cc: westwood, rtt_ms: 250}", "{cc: westwood, rtt_ms: 250, window_kb: 32}")
    (point,) = load_scenario_text(text, name="t").points
    conns = plan_connections(point.scenario, Dumbbell.from_scenario(point.scenario))
    capped = client_argv(conns[0])
    assert capped[capped.index("-w") + 1] == "32K"
    assert "-w" not in client_argv(conns[1])


def test_long_connections_report_coarser_and_the_server_waits_out_a_starved_flow():
    from testbed.plan.connections import report_interval_s, server_argv

    assert [report_interval_s(d) for d in (2, 200, 201, 1000, 1800, 10_000, 100_000)] == [1, 1, 2, 5, 10, 50, 100]
    conn = plan()[2]
    argv = server_argv(conn)
    assert argv[argv.index("-i") + 1] == "1" and client_argv(conn)[client_argv(conn).index("-i") + 1] == "1"
    # iperf3's default --rcv-timeout (120 s) ended a flow starved for 2 minutes in a 1000 s run of 200 flows
    assert int(argv[argv.index("--rcv-timeout") + 1]) >= (conn.duration_s + 120) * 1000
