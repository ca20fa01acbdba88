"""Queue disciplines on the host kernel. Where the kernel has a discipline (any stock Debian kernel),
the network puts it under the shaped class of the bottleneck, and `auto` keeps the run on this kernel.
Where it lacks one (this project's CI host has no fq_codel, codel, pie, red or cake: MACHINE.md), the
network's build stops with an error naming the kernel, the qdisc and its module, nothing is left behind
(the clean_kernel fixture), and `auto` sends the scenario to a guest. Each kernel runs one of the two
tests per discipline and skips the other, saying why. What the disciplines do to traffic is tested in
the guest tier (tests/guest/test_guest_queues.py)."""

from __future__ import annotations

import json
import os

import pytest

from testbed.guest.network import Network
from testbed.guest.shaping import MissingQdiscError
from testbed.host.choice import _kernel_has_qdisc, host_can_run
from testbed.scenario.load import scenario_from_dict
from topologies.dumbbell import Dumbbell


def dumbbell(queue: dict):
    return scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue": queue}},
            "flows": [{"cc": "reno", "rtt_ms": 0}],
            "duration_s": 5,
        },
        name="queues",
    )


@pytest.mark.parametrize("discipline", ["fq_codel", "pie"])  # one through pyroute2, one through tc
def test_a_discipline_the_kernel_lacks_is_named_with_its_module(discipline, clean_kernel):
    if _kernel_has_qdisc(discipline, True):
        pytest.skip(f"this host's kernel has sch_{discipline}: the error cannot be seen here")
    scenario = dumbbell({"discipline": discipline})
    topology = Dumbbell.from_scenario(scenario.points[0].scenario)
    with pytest.raises(MissingQdiscError) as caught:
        with Network(topology.netspec(), "missing-qdisc"):
            pass
    message = str(caught.value)
    assert f"'{discipline}'" in message and f"sch_{discipline}" in message and os.uname().release in message
    assert "testbed run --backend guest" in message
    ok, why = host_can_run(scenario.runs())
    assert not ok and discipline in why, why


@pytest.mark.parametrize("discipline", ["fq_codel", "pie"])
def test_a_discipline_the_kernel_has_is_the_queue_under_the_shaped_class(discipline, clean_kernel):
    if not _kernel_has_qdisc(discipline, True):
        pytest.skip(f"this host's kernel ({os.uname().release}) has no sch_{discipline}: the missing-qdisc test runs")
    scenario = dumbbell({"discipline": discipline})
    topology = Dumbbell.from_scenario(scenario.points[0].scenario)
    with Network(topology.netspec(), "host-qdisc") as net:
        qdiscs = json.loads(net.cmd("rl", "tc -j qdisc show dev rl-eth0"))
    (leaf,) = [q for q in qdiscs if q.get("parent") == "1:1"]
    assert leaf["kind"] == discipline and leaf["handle"] == "10:", qdiscs
    ok, why = host_can_run(scenario.runs())
    assert ok, why
