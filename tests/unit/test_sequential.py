"""The sequential design (analysis/verdicts/sequential.py) and the loop that adds runs, simulated whole on runs of
known truth: testbed/workflows/decide.py's own ``decide`` driven by testbed/workflows/decide_check.py's
simulated session. No kernel. A rate's bound allows for the simulation's own
chance: over ``TRIALS`` claims a true 5 % is measured above ``MAX_FALSE`` less than once in a thousand
(binomial, 3.1 standard deviations). Measured numbers are in each docstring (seed 2026) and in
docs/results.md.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from analysis.verdicts import claims, sequential
from testbed.workflows import decide as decide_workflow
from testbed.workflows import decide_check as sim

TRIALS = 1000
ALPHA = 0.05
MAX_FALSE = ALPHA + 3.1 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)


def test_the_looks_spend_alpha_and_no_more():
    for looks in range(1, 7):
        design = sequential.Design(looks)
        levels = [design.alpha_at(k) for k in range(1, looks + 1)]
        assert sum(levels) == pytest.approx(ALPHA)
        assert levels == sorted(levels, reverse=True)  # Pocock's type spends most at the first look
    assert sequential.Design(1).alpha_at(1) == pytest.approx(ALPHA)
    assert sequential.Design(4).summary().startswith("4 planned looks at alpha 0.0179, 0.0131, 0.0104, 0.0086 ")
    with pytest.raises(ValueError, match="outside the design's 4 planned looks"):
        sequential.Design(4).alpha_at(5)


def test_a_claim_decided_at_a_look_keeps_its_verdict_and_level():
    record = sequential.Record(sequential.Design(3))
    record.look({"x": "reproduced", "y": "undecided"})
    record.look({"x": "opposite", "y": "not reproduced", "z": "no data"})
    assert record.decided == {"x": (1, "reproduced"), "y": (2, "not reproduced")}
    assert record.alpha_for("x") == pytest.approx(record.design.alpha_at(1))
    assert record.alpha_for("z") == pytest.approx(record.design.alpha_at(2))  # undecided: the last look's
    assert record.left() == 1
    again = sequential.Record.from_json(record.to_json())
    assert again.decided == record.decided and again.looks == 2 and again.design == record.design


@pytest.mark.parametrize(
    "noise, looks",
    [
        ("normal", 1),
        ("normal", 4),
        ("normal", 6),
        ("heavy-tailed", 4),
        ("unequal spreads", 2),
        ("paired, rho 0.9", 5),
        ("paired, rho -0.8", 3),
    ],
)
def test_the_whole_loop_calls_a_claim_at_its_threshold_reproduced_at_most_alpha(noise, looks):
    """Truth exactly +5 % (the threshold), 3 runs a side to start, decide's own loop and planner, up to
    ``looks`` looks, pair correlation -0.8 to 0.9. docs/results.md has the measured table."""
    rates = sim.rates(sim.AT_THRESHOLD, sim.NOISES[noise], looks, TRIALS)
    assert rates.get("reproduced", 0.0) <= MAX_FALSE, rates


@pytest.mark.parametrize("noise", ["heavy-tailed", "paired, rho -0.8"])
def test_the_whole_loop_calls_the_opposite_at_most_alpha(noise):
    """Truth exactly -4.8 % (the opposite's threshold), 4 looks."""
    rates = sim.rates(sim.AT_OPPOSITE, sim.NOISES[noise], 4, TRIALS)
    assert rates.get("opposite", 0.0) <= MAX_FALSE, rates


@pytest.mark.parametrize("truths", [[0.05, 0.05, 0.05], [0.05, 0.05, 0.05, 0.05, 0.05], [0.05, 0.05, 1.0]])
def test_several_conditions_with_holm_through_the_loop_stay_within_alpha(truths):
    """A claim over 3 or 5 conditions, every one at the threshold (or one far beyond it: the others must
    still not carry a false majority), 4 looks: false "reproduced" at most alpha."""
    rates = sim.rates(truths, sim.NOISES["normal"], 4, TRIALS // 2)
    assert rates.get("reproduced", 0.0) <= ALPHA + 3.1 * math.sqrt(ALPHA * (1 - ALPHA) / (TRIALS // 2)), rates


def test_without_the_correction_the_same_loop_errs_beyond_alpha(monkeypatch):
    """decide's loop with every look at the full 5 %: 6 looks on the normal noise call the threshold's truth
    reproduced well beyond alpha. This is why the looks spend alpha."""
    monkeypatch.setattr(sequential.Design, "alpha_at", lambda self, look: self.alpha)
    assert sim.rates(sim.AT_THRESHOLD, sim.NOISES["normal"], 6, TRIALS).get("reproduced", 0.0) > MAX_FALSE


def test_every_look_of_the_loop_judges_at_the_designs_level(monkeypatch):
    """A spy on the rule: each judgement decide makes is at its look's level, in order; a path that judged at
    0.05 (or any other level) where the design says otherwise fails here."""
    seen: list[float] = []
    rule = claims.decide
    monkeypatch.setattr(
        claims,
        "decide",
        lambda claim, results, alpha=0.05, plan=True: seen.append(alpha) or rule(claim, results, alpha, plan),
    )
    rng = np.random.default_rng(7)
    for looks in (1, 2, 4, 6):
        design = sequential.Design(looks)
        for _ in range(30):
            seen.clear()
            verdict, look = sim.one_claim(rng, [0.15], sim.NOISES["normal"], looks)
            levels = [design.alpha_at(k) for k in range(1, looks + 1)]
            # decide's looks in order; the final reading (undecided claims) at the last look's level
            assert seen[:look] == pytest.approx(levels[:look]), (looks, look, seen)
            assert set(seen) <= set(levels)


def test_a_plain_session_spent_its_alpha_and_decide_refuses_it(tmp_path):
    record = sequential.Record(sequential.Design(1))
    assert record.look_at(6, [f"r{i}" for i in range(6)]) == 1
    (tmp_path / sequential.RECORD_FILE).write_text(__import__("json").dumps(record.to_json()))
    with pytest.raises(ValueError, match="already judged it at the full 0.05 in one look"):
        decide_workflow.planned_record(tmp_path)


def test_seeds_that_share_their_noise_decide_more_often():
    """Power at the paper's +34 % at the first look (3 seeds, 20 % noise): seeds sharing none of it and 90 %
    of it. Measured: 25 % and 87 %."""
    alone = sim.rates(0.34, sim.NOISES["normal"], 1, 600).get("reproduced", 0.0)
    shared = sim.rates(0.34, sim.NOISES["paired, rho 0.9"], 1, 600).get("reproduced", 0.0)
    assert shared > alone + 0.3, (alone, shared)


def test_the_simulated_runs_share_each_seeds_noise():
    rng = np.random.default_rng(1)
    noise = dataclasses.replace(sim.NOISES["paired, rho 0.9"], cv=0.1)
    a, b = sim.draw_pairs(rng, 0.0, noise, 400)
    assert np.corrcoef(a, b)[0, 1] == pytest.approx(0.9, abs=0.05)
    a, b = sim.draw_pairs(rng, 0.0, dataclasses.replace(sim.NOISES["paired, rho -0.8"], cv=0.1), 400)
    assert np.corrcoef(a, b)[0, 1] == pytest.approx(-0.8, abs=0.05)


def test_judging_the_same_runs_again_is_the_same_look_and_more_runs_past_the_last_look_are_refused():
    """``testbed explain`` run again with more seeds judges the grown session: a new look; the same runs
    judged again (a report written anew) are the look that judged them."""
    record = sequential.Record(sequential.Design(sequential.EXPLAIN_LOOKS))
    assert [record.look_at(n) for n in (10, 10, 20, 30, 20)] == [1, 1, 2, 3, 2]
    assert record.look_at(40) is None  # a fourth look the design did not plan
    assert sequential.Record.from_json(record.to_json()).runs_at == [10, 20, 30]
