"""A queue discipline the kernel lacks (this host's kernel has no fq_codel, codel, pie, red or cake:
MACHINE.md) stops the network's build with an error naming the kernel, the qdisc and its module, and
nothing is left behind (the clean_kernel fixture); `auto` sends such a scenario to a guest. The
disciplines themselves are tested in the guest tier (tests/guest/test_guest_queues.py)."""

from __future__ import annotations

import os

import pytest

from testbed.guest.network import Network
from testbed.guest.shaping import MissingQdiscError
from testbed.host.session import _kernel_has_qdisc, host_can_run
from testbed.scenario.load import scenario_from_dict
from topologies.dumbbell import Dumbbell


def dumbbell(queue: dict):
    return scenario_from_dict(
        {"topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue": queue}},
         "flows": [{"cc": "reno", "rtt_ms": 0}], "duration_s": 5},  # fmt: skip
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
