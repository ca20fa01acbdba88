"""Queue disciplines on shaped links (topologies.queues): what a scenario may ask for, the errors a
misspelled or impossible one gets, and the qdiscs each becomes under HTB's shaped class (the kernel's
side is in tests/guest/test_guest_queues.py)."""

from __future__ import annotations

import textwrap

import pytest

from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario_text
from topologies.dumbbell import Dumbbell
from topologies.shaping import EgressPlan, leaf_spec, qdisc_specs

BASE = """\
topology:
  name: dumbbell
  bottleneck:
    rate_mbit: 10
{queue}
flows:
  - cc: reno
    rtt_ms: 100
duration_s: 20
"""


def load(queue: str):
    text = BASE.format(queue=textwrap.indent(textwrap.dedent(queue).strip(), "    "))
    return load_scenario_text(text, name="test.yaml")


def problem_of(queue: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        load(queue)
    (problem,) = caught.value.problems
    return f"line {problem.line}, {problem.path}: {problem.message}"


def bottleneck_leaf(queue: str):
    scenario = load(queue).points[0].scenario
    plan = Dumbbell.from_scenario(scenario).netspec().egress[("rl", "rl-eth0")]
    return leaf_spec(plan)


def test_fq_codel_goes_in_with_its_parameters_in_the_kernels_units():
    leaf = bottleneck_leaf("queue: {discipline: fq_codel, target_ms: 2.5, interval_ms: 50, ce_threshold_ms: 1}")
    assert (leaf.command, leaf.kind) == ("add", "fq_codel")
    assert leaf.kwargs == {
        "handle": "10:",
        "parent": "1:1",
        "fqc_target": 2500,
        "fqc_interval": 50_000,
        "fqc_ecn": 1,
        "fqc_ce_threshold": 1000,
        "fqc_flows": 1024,
    }


def test_a_queue_size_in_bdp_sizes_an_aqm_too():
    # 10 Mbit/s x 100 ms = 83 full-size packets; 2 BDP
    leaf = bottleneck_leaf("queue_bdp: 2\nqueue: {discipline: codel}")
    assert leaf.kwargs["cdl_limit"] == 166 and leaf.kwargs["cdl_ecn"] == 0


def test_drop_tail_is_a_pfifo_with_or_without_the_discipline_named():
    named = bottleneck_leaf("queue: {discipline: fifo, limit_pkts: 50}")
    assert bottleneck_leaf("queue_pkts: 50").kwargs == named.kwargs
    assert bottleneck_leaf("queue_pkts: 50").kwargs == {"handle": "10:", "parent": "1:1", "limit": 50}


def test_pie_and_red_go_in_with_the_tc_command_red_in_bytes():
    pie = bottleneck_leaf("queue: {discipline: pie, target_ms: 20, ecn: true, limit_pkts: 300}")
    assert pie.command == "tc" and pie.kwargs["argv"] == [
        "tc",
        "qdisc",
        "add",
        "dev",
        "{dev}",
        "parent",
        "1:1",
        "handle",
        "10:",
        "pie",
        "target",
        "20000us",
        "tupdate",
        "15000us",
        "alpha",
        "2",
        "beta",
        "20",
        "ecn",
        "nobytemode",
        "limit",
        "300",
    ]
    red = bottleneck_leaf("queue_pkts: 120\nqueue: {discipline: red, ecn: true}")
    argv = red.kwargs["argv"]
    assert argv[argv.index("limit") + 1] == str(120 * 1514)
    assert argv[argv.index("max") + 1] == str(30 * 1514) and argv[argv.index("min") + 1] == str(10 * 1514)
    assert argv[-1] == "ecn" and "bandwidth" in argv


def test_cake_runs_unshaped_under_htb_with_its_rtt_in_microseconds():
    leaf = bottleneck_leaf("queue: {discipline: cake, rtt_ms: 20, flow_mode: flows}")
    assert leaf.kwargs == {"handle": "10:", "parent": "1:1", "rtt": 20_000, "flow_mode": "flows", "ack_filter": False}


def test_the_qdisc_modules_a_network_needs_are_named():
    scenario = load("queue: {discipline: fq_codel}").points[0].scenario
    assert Dumbbell.from_scenario(scenario).netspec().qdisc_modules == ["sch_fq_codel"]
    plain = load("queue_pkts: 10").points[0].scenario
    assert Dumbbell.from_scenario(plain).netspec().qdisc_modules == []


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        (
            "queue: {discipline: fq-codel}",
            "'fq-codel' is not a known queue discipline; valid: fifo, codel, fq_codel, "
            "pie, red, cake (did you mean 'fq_codel'?)",
        ),
        ("queue: {discipline: codel, target_ms: true}", "target_ms"),
        ("queue: {discipline: fq_codel, target: 5}", "target"),
        ("queue_pkts: 100\nqueue: {discipline: codel, limit_pkts: 50}", "give the queue's size once"),
        ("queue_bdp: 1\nqueue: {discipline: cake}", "cake sizes its queue by memory"),
        ("queue: {discipline: red, min_pkts: 40, max_pkts: 20}", "min_pkts < max_pkts <= limit_pkts"),
        ("queue: {target_ms: 5}", "which queue discipline? add 'discipline:' with one of: fifo, codel"),
    ],
)
def test_a_wrong_queue_is_a_line_numbered_error_naming_the_field(queue, expected):
    assert expected in problem_of(queue)


def test_a_plan_with_a_discipline_but_no_rate_is_refused():
    from topologies.queues import Codel

    with pytest.raises(ValueError, match="a queue needs a rate"):
        EgressPlan(delay_ms=10, discipline=Codel(discipline="codel"))
    # the control lane stays beside any discipline
    kinds = [s.kind for s in qdisc_specs(EgressPlan(rate_mbit=10, discipline=Codel(discipline="codel")))]
    assert kinds[:3] == ["htb", "htb", "codel"] and "u32" in kinds
