"""testbed.guest.keeper's decisions: which run gets the network kept from the run before, and when it is
torn down (the networks themselves are real in tests/netns/test_dumbbell_host.py; here a stand-in
records what the keeper asks of them)."""

from __future__ import annotations

import pytest

from testbed.guest import keeper as keeping


class Recorded:
    made: list[Recorded] = []

    def __init__(self, spec, run_id, host_sysctls=None):
        self.spec, self.calls = spec, []
        Recorded.made.append(self)

    def __enter__(self):
        self.calls.append("start")
        return self

    def end_run(self):
        self.calls.append("end_run")

    def stop(self):
        self.calls.append("stop")


@pytest.fixture
def keeper(monkeypatch):
    Recorded.made = []
    monkeypatch.setattr(keeping, "Network", Recorded)
    monkeypatch.setattr(keeping, "cleanup_leftovers", lambda: Recorded.made.append("cleanup"))
    return keeping.NetworkKeeper()


def use(keeper, spec, key, keep=True):
    with keeper.network(spec, key, {}) as lease:
        lease.keep = keep
        return lease


def test_runs_with_the_same_key_share_one_network_and_a_new_key_builds_a_new_one(keeper):
    leases = [use(keeper, "a", "k1"), use(keeper, "a", "k1"), use(keeper, "b", "k2")]
    assert [(lease.reused, lease.runs_before) for lease in leases] == [(False, 0), (True, 1), (False, 0)]
    # leftovers are swept before each network is built, never under a kept one
    assert [m if m == "cleanup" else "net" for m in Recorded.made] == ["cleanup", "net", "cleanup", "net"]
    first, second = [m for m in Recorded.made if m != "cleanup"]
    assert first.calls == ["start", "end_run", "end_run", "stop"] and second.calls == ["start", "end_run"]
    assert leases[0].carried is leases[1].carried and leases[2].carried is not leases[0].carried
    keeper.close()
    assert second.calls[-1] == "stop"


def test_a_run_that_went_wrong_or_has_no_key_never_hands_its_network_on(keeper):
    use(keeper, "a", "k1", keep=False)
    assert use(keeper, "a", "k1").reused is False
    with pytest.raises(RuntimeError), keeper.network("a", "k1", {}):
        raise RuntimeError("the run failed")
    assert use(keeper, "a", None).reused is False
    assert use(keeper, "a", None).reused is False
    nets = [m for m in Recorded.made if m != "cleanup"]
    assert all(net.calls[-1] == "stop" for net in nets) and len(nets) == 4


def test_a_disabled_keeper_builds_every_run_anew(monkeypatch):
    Recorded.made = []
    monkeypatch.setattr(keeping, "Network", Recorded)
    monkeypatch.setattr(keeping, "cleanup_leftovers", lambda: None)
    fresh = keeping.NetworkKeeper(enabled=False)
    assert [use(fresh, "a", "k1").reused for _ in range(3)] == [False, False, False]
    assert [net.calls for net in Recorded.made] == [["start", "stop"]] * 3
