"""Where runs go when nobody says (testbed/host/choice.py): a named kernel always means a guest, so
``--kernel`` under the default ``--backend auto`` never lands on a backend that then refuses it."""

from __future__ import annotations

from testbed.host import choice
from testbed.scenario.load import scenario_from_dict


def test_a_named_kernel_goes_to_a_guest_even_where_this_host_could_run_it(monkeypatch):
    runs = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
            "flows": [{"cc": "cubic", "rtt_ms": 20}],
            "duration_s": 5,
        },
        name="x",
    ).runs()
    monkeypatch.setattr(choice, "host_can_run", lambda runs: (True, "this kernel has everything"))
    assert choice.choose_backend(runs) == ("local", "this kernel has everything")
    assert choice.choose_backend(runs, "6.1.0-56") == ("guest", "--kernel 6.1.0-56 boots in a guest")
