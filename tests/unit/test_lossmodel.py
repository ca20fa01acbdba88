"""The loss models: the seeded timeline of the time-based two-state channel, netem's arguments, the schema."""

from __future__ import annotations

import random
import statistics

import pytest

from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario_text
from topologies.lossmodel import (
    BernoulliLoss,
    FourStateLoss,
    GilbertElliottLoss,
    TimedTwoStateLoss,
    TimelineTooLong,
    netem_loss_args,
    probe_loss_pct,
    timeline,
)
from topologies.shaping import EgressPlan, netem_tc_argv


def test_deterministic_alternating_timeline_is_exact():
    model = TimedTwoStateLoss(good_s=1, bad_s=0.1, bad_loss_pct=10)
    states = timeline(model, seed=1, horizon_s=3.3)
    assert [(s.bad, round(s.start_s, 9), round(s.end_s, 9), s.loss_pct) for s in states] == [
        (False, 0, 1, 0),
        (True, 1, 1.1, 10),
        (False, 1.1, 2.1, 0),
        (True, 2.1, 2.2, 10),
        (False, 2.2, 3.2, 0),
        (True, 3.2, 3.3, 10),
    ]


def test_paper_000_next_state_is_drawn_with_probability_one_half():
    model = TimedTwoStateLoss(good_s=1, bad_s=0.01, bad_loss_pct=10, to_bad_p=0.5, to_good_p=0.5)
    states = timeline(model, seed=5, horizon_s=4000)
    assert states == timeline(model, seed=5, horizon_s=4000)  # same seed, same timeline
    assert states != timeline(model, seed=6, horizon_s=4000)
    assert states != timeline(model, seed=5, horizon_s=4000, stream=1)  # each direction its own channel
    follows_bad = [b.bad for a, b in zip(states, states[1:], strict=False) if not a.bad]
    assert 0.45 < sum(follows_bad) / len(follows_bad) < 0.55
    assert {round(s.end_s - s.start_s, 9) for s in states[:-1]} == {1, 0.01}
    assert all(a.end_s == b.start_s for a, b in zip(states, states[1:], strict=False))


def test_exponential_durations_have_the_configured_means():
    model = TimedTwoStateLoss(good_s=8, bad_s=4, durations="exponential", good_loss_pct=0.1, bad_loss_pct=20)
    states = timeline(model, seed=11, horizon_s=200_000)
    good = [s.end_s - s.start_s for s in states if not s.bad]
    bad = [s.end_s - s.start_s for s in states if s.bad]
    assert abs(statistics.mean(good) - 8) < 0.4 and abs(statistics.mean(bad) - 4) < 0.2
    assert abs(statistics.stdev(bad) - 4) < 0.3  # exponential: sd = mean
    assert all(a.bad != b.bad for a, b in zip(states, states[1:], strict=False))  # Markov chain: alternates


def test_a_timeline_longer_than_the_map_is_refused():
    with pytest.raises(TimelineTooLong, match="more than 65536"):
        timeline(TimedTwoStateLoss(good_s=0.001, bad_s=0.001, bad_loss_pct=1), seed=1, horizon_s=1000)


def test_netem_arguments_of_per_packet_models():
    assert netem_loss_args(BernoulliLoss(loss_pct=1.5)) == ["loss", "1.5%"]
    ge = GilbertElliottLoss(p_pct=1, r_pct=25, bad_loss_pct=90, good_loss_pct=0.1)
    assert netem_loss_args(ge) == ["loss", "gemodel", "1%", "25%", "90%", "0.1%"]
    argv = netem_tc_argv("rr-eth1", EgressPlan.with_loss(ge, delay_ms=5))
    # the lossy band of the prio root (beside the control lane's netem: topologies/shaping.py)
    assert argv[:11] == ["tc", "qdisc", "add", "dev", "rr-eth1", "parent", "1:2", "handle", "20:", "netem", "limit"]
    assert argv[12:14] == ["delay", "5000us"] and argv[14:16] == ["loss", "gemodel"]
    assert probe_loss_pct(ge) == pytest.approx(1 / 26 * 90 + 25 / 26 * 0.1)


def netem_4state_losses(model: FourStateLoss, packets: int, seed: int) -> int:
    """Replay sch_netem.c's loss_4state (Linux 6.1) packet by packet: how many of ``packets`` it loses."""
    p13, p31, p32, p23, p14 = (
        v / 100 for v in (model.p13_pct, model.p31_pct, model.p32_pct, model.p23_pct, model.p14_pct)
    )
    rng, state, lost = random.Random(seed), 1, 0
    for _ in range(packets):
        rnd = rng.random()
        if state == 1:
            state = 4 if rnd < p14 else 3 if rnd < p13 + p14 else 1
        elif state == 2:
            state = 3 if rnd < p23 else 2
        elif state == 3:
            state = 2 if rnd < p32 else 1 if rnd < p31 + p32 else 3
        else:
            state = 1
        lost += state in (3, 4)
    return lost


@pytest.mark.parametrize(
    "params",
    [
        {"p13_pct": 2},  # tc's defaults: one loss, then back to the gap
        {"p13_pct": 1, "p31_pct": 30, "p32_pct": 20, "p23_pct": 40, "p14_pct": 0.5},
        {"p13_pct": 5, "p31_pct": 60, "p32_pct": 30, "p23_pct": 10, "p14_pct": 2},
    ],
)
def test_four_state_stationary_loss_matches_netems_chain(params):
    model = FourStateLoss(**params)
    packets = 400_000
    realized = 100 * netem_4state_losses(model, packets, seed=3) / packets
    assert model.stationary_loss_pct() == pytest.approx(realized, abs=0.15)
    assert probe_loss_pct(model) == model.stationary_loss_pct()


def test_four_state_netem_arguments_and_refusals():
    model = FourStateLoss(p13_pct=1, p31_pct=30, p32_pct=20, p23_pct=40, p14_pct=0.5)
    assert netem_loss_args(model) == ["loss", "state", "1%", "30%", "20%", "40%", "0.5%"]
    plan = EgressPlan.with_loss(model)
    assert plan.needs_netem and netem_tc_argv("rr-eth1", plan)[-7:-5] == ["loss", "state"]
    with pytest.raises(ValueError, match="at most 100"):
        FourStateLoss(p13_pct=60, p14_pct=50)
    with pytest.raises(ValueError, match="give p23_pct > 0"):
        FourStateLoss(p13_pct=1, p31_pct=50, p32_pct=50, p23_pct=0)
    with pytest.raises(ValueError):
        FourStateLoss(p13_pct=1, p31_pct=0)


def test_egress_plans_per_model():
    assert EgressPlan.with_loss(BernoulliLoss(loss_pct=2, seeded=False)) == EgressPlan(loss_pct=2)
    assert EgressPlan.with_loss(BernoulliLoss(loss_pct=2)).timed_loss.good_loss_pct == 2  # seeded unless said
    timed = TimedTwoStateLoss(good_s=1, bad_s=1, bad_loss_pct=5)
    plan = EgressPlan.with_loss(timed)
    assert plan.timed_loss == timed and not plan.needs_netem and not plan.is_empty
    with pytest.raises(ValueError, match="different interfaces"):
        EgressPlan(rate_mbit=10, loss_model=timed)


def test_seeded_bernoulli_is_one_long_state_of_its_loss_drawn_by_the_bpf_channel():
    seeded = BernoulliLoss(loss_pct=1, seeded=True)
    plan = EgressPlan.with_loss(seeded, delay_ms=5)
    assert plan.loss_pct == 0 and not plan.is_lossy  # netem draws nothing: the BPF channel does
    states = timeline(plan.timed_loss, seed=3, horizon_s=60)
    assert [(s.start_s, s.loss_pct) for s in states] == [(0, 1)] and states[0].end_s >= 60
    assert timeline(plan.timed_loss, seed=3, horizon_s=60) == states
    assert probe_loss_pct(seeded) == 0  # armed when the traffic starts, after the probes
    with pytest.raises(ValueError):
        BernoulliLoss(loss_pct=1, seeded="yes")


SCENARIO = """
topology:
  name: dumbbell
  bottleneck:
    rate_mbit: 2
    loss:
      model: {model}
      good_s: 1
      bad_s: [0.001, 0.1]
      bad_loss_pct: {bad}
      to_bad_p: 0.5
      to_good_p: 0.5
flows:
  - {{cc: westwood, rtt_ms: 250}}
duration_s: 100
"""


def test_a_loss_model_in_a_scenario_sweeps_and_names_its_mistakes():
    loaded = load_scenario_text(SCENARIO.format(model="timed_two_state", bad=10))
    assert [p.point_id for p in loaded.points] == ["bad_s=0.001", "bad_s=0.1"]
    assert loaded.points[1].scenario.topology.bottleneck.loss_model.bad_s == 0.1
    with pytest.raises(ScenarioError) as error:
        load_scenario_text(SCENARIO.format(model="timed_2state", bad=110))
    message = str(error.value)
    assert "line 7, topology.bottleneck.loss.model: 'timed_2state' is not a known loss model; valid: " in message
    assert "(did you mean 'timed_two_state'?)" in message
    with pytest.raises(ScenarioError, match="bad_loss_pct: 110 is out of range: must be between 0 and 100"):
        load_scenario_text(SCENARIO.format(model="timed_two_state", bad=110))
    both = SCENARIO.format(model="timed_two_state", bad=10).replace("rate_mbit: 2", "rate_mbit: 2\n    loss_pct: 1")
    with pytest.raises(ScenarioError, match="either loss_pct or loss"):
        load_scenario_text(both)


def test_the_runner_does_not_import_numpy():
    """The lab VM under TCG has qemu64's CPU, on which numpy's wheels die with SIGILL."""
    import subprocess
    import sys

    code = "import sys, testbed.guest.runner; print(sorted(m for m in ('numpy', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_manifest_names_every_random_source_and_what_it_is_drawn_from():
    from testbed.guest.collect import random_sources
    from testbed.guest.lossbpf import draw_seed
    from testbed.scenario.load import scenario_from_dict
    from topologies import TOPOLOGIES

    def egress(loss: dict) -> dict:
        bottleneck = {"rate_mbit": 10, "queue_pkts": 100, **loss}
        scenario = scenario_from_dict(
            {
                "topology": {"name": "dumbbell", "bottleneck": bottleneck},
                "flows": [{"cc": "reno", "rtt_ms": 20}],
                "duration_s": 5,
            },
            name="t",
        )
        return TOPOLOGIES["dumbbell"].from_scenario(scenario.points[0].scenario).netspec().egress

    seeded = random_sources(egress({"loss_pct": 5}), seed=3)
    channels = [s for s in seeded if s["source"].startswith("loss ")]
    assert [s["drawn_from"] for s in channels] == ["run seed 3, stream 0", "run seed 3, stream 1"]
    assert channels[0]["draw_seed"] == draw_seed(3, 0) != draw_seed(4, 0)
    assert seeded[-1]["source"] == "schedules" and "nothing is drawn" in seeded[-1]["why"]
    netem = random_sources(egress({"loss": {"model": "gilbert_elliott", "p_pct": 5, "r_pct": 50}}), seed=3)
    assert [s["drawn_from"] for s in netem if s["source"].startswith("netem loss")] == [None, None]
