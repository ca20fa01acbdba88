"""The claims' verdict rule (analysis/verdicts/claims.py) tested as a statistician would: on simulated samples of
known truth, no kernel. Each test draws many claims' runs from a known effect with normal run-to-run
noise (coefficient of variation ``CV``), judges them by the rule, and compares how often each verdict
comes out with the error rate the rule states (alpha = 0.05, one-sided tests, Holm over conditions).

A rate's bound allows for the simulation's own chance: with ``TRIALS`` = 4000 claims, a true rate of
5 % is measured above 6.2 % less than once in a thousand (binomial, 3.1 standard deviations), so
``MAX_FALSE`` is that bound. The numbers measured when this file was written are in each docstring
(random seed 2026) and in docs/results.md.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.verdicts import claims, stats

TRIALS = 4000
ALPHA = 0.05
MAX_FALSE = ALPHA + 3.1 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)


def _claim(expect: str, **fields) -> claims.Claim:
    entry = {
        "id": "simulated",
        "experiment": "e",
        "source": "s",
        "quote": "q",
        "paper_numbers": "n",
        "metric": "goodput",
        "expect": expect,
        "a": {"cc": "westwood"},
        "b": {"cc": "reno"},
    } | fields
    if expect == "near":
        entry.pop("b")
    return claims.Claim.model_validate(entry)


def _rates(claim: claims.Claim, truths: list[float], runs: int, cv: float, seed: int = 2026) -> dict[str, float]:
    """How often each verdict comes out over TRIALS simulated claims: at condition i, ``runs`` runs of b
    ~ N(1, cv) and of a ~ N(1 + truths[i], cv (1 + truths[i])) (a against ``claim.value`` for near)."""
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    for _ in range(TRIALS):
        results = []
        for truth in truths:
            if claim.expect == "near":
                a = rng.normal(claim.value * (1 + truth), cv * claim.value * (1 + truth), runs)
                results.append(
                    claims.ConditionResult(
                        "c",
                        list(a),
                        [claim.value],
                        stats.ratio_to_value(a, claim.value),
                        "undecided",
                        against_value=True,
                    )
                )
                continue
            a, b = rng.normal(1 + truth, cv * (1 + truth), runs), rng.normal(1.0, cv, runs)
            results.append(claims.ConditionResult("c", list(a), list(b), stats.ratio_effect(a, b), "undecided"))
        verdict = claims.decide(claim, results, plan=False)
        counts[verdict] = counts.get(verdict, 0) + 1
    return {verdict: n / TRIALS for verdict, n in counts.items()}


HIGHER = {"paper_effect": 0.34, "paper_effect_from": "+34 % (paper 000's smallest wireless gain)"}


@pytest.mark.parametrize("runs, cv", [(3, 0.10), (3, 0.30), (5, 0.20)])
def test_higher_at_the_threshold_is_reproduced_at_most_alpha(runs, cv):
    """Truth exactly +5 % (the threshold: the null's boundary). Measured: 3.9 % (3 runs, 10 % noise),
    3.6 % (3, 30 %), 4.5 % (5, 20 %)."""
    rate = _rates(_claim("higher", **HIGHER), [0.05], runs, cv).get("reproduced", 0.0)
    assert rate <= MAX_FALSE


def test_higher_with_no_difference_is_almost_never_reproduced_nor_opposite():
    """Truth 0, 3 runs, 20 % noise: reproduced 2.2 %, opposite 2.2 % (the threshold adds a margin)."""
    rates = _rates(_claim("higher", **HIGHER), [0.0], 3, 0.20)
    assert rates.get("reproduced", 0.0) <= MAX_FALSE / 2 and rates.get("opposite", 0.0) <= MAX_FALSE / 2


def test_a_true_effect_the_size_of_the_papers_is_not_called_short_of_it_beyond_alpha():
    """Truth exactly the paper's +34 %, 3 runs, 20 % noise: "short of the paper" or "reproduced, smaller than
    the paper's effect" (both say shown below the paper's) at most alpha, and "not reproduced" (shown below
    the threshold) almost never."""
    claim = _claim("higher", **HIGHER)
    rng = np.random.default_rng(2026)
    short = absent = 0
    for _ in range(TRIALS):
        a, b = rng.normal(1.34, 0.20 * 1.34, 3), rng.normal(1.0, 0.20, 3)
        result = claims.ConditionResult("c", list(a), list(b), stats.ratio_effect(a, b), "undecided")
        verdict = claims.decide(claim, [result], plan=False)
        short += result.finding == "short" or result.smaller
        absent += verdict == "not reproduced"
    assert short / TRIALS <= MAX_FALSE and absent / TRIALS <= MAX_FALSE / 5


def test_the_runs_the_rule_asks_for_decide_with_the_power_it_promises():
    """Truth +34 % at 20 % noise. At 3 runs a side the claim is reproduced only sometimes; the rule's own
    answer to "how many runs would decide it" (80 % power at Bonferroni's alpha) then reproduces it at
    least 80 % of the time, less the simulation's chance. Measured: 29 % at 3 runs; the rule asks for 10,
    at which 83 %."""
    claim = _claim("higher", **HIGHER)
    at_three = _rates(claim, [0.34], 3, 0.20).get("reproduced", 0.0)
    truth = stats.Effect(math.log(1.34), math.nan, math.nan, 3, 3, 0.20**2, 0.20**2)
    needed = claims.seeds_needed(claim, truth, ALPHA)
    assert needed is not None and needed > 3
    at_needed = _rates(claim, [0.34], needed, 0.20).get("reproduced", 0.0)
    assert at_three < 0.8 <= at_needed + 3.1 * math.sqrt(0.8 * 0.2 / TRIALS), (at_three, needed, at_needed)


@pytest.mark.parametrize("truth", [0.20, 1 / 1.2 - 1])
def test_similar_is_not_reproduced_when_the_truth_is_at_the_margin(truth):
    """Equivalence (TOST) within 20 %: truth exactly at the margin, either side, 5 runs, 10 % noise.
    Measured: 4.8 % (+20 %) and 4.6 % (-16.7 %)."""
    claim = _claim("similar", margin=0.2, margin_reason="test")
    assert _rates(claim, [truth], 5, 0.10).get("reproduced", 0.0) <= MAX_FALSE


def test_similar_when_alike_is_reproduced_at_the_runs_the_rule_asks_for():
    """Truth 0, 10 % noise, equivalence within 20 %: at 5 runs a side it is shown 64 % of the time; at the
    runs the rule says would decide it (80 % power; 7), at least 80 % less the simulation's chance
    (measured 88 %)."""
    claim = _claim("similar", margin=0.2, margin_reason="test")
    truth = stats.Effect(0.0, math.nan, math.nan, 5, 5, 0.10**2, 0.10**2)
    needed = claims.seeds_needed(claim, truth, ALPHA)
    assert needed is not None and needed > 5
    at_needed = _rates(claim, [0.0], needed, 0.10).get("reproduced", 0.0)
    assert at_needed >= 0.8 - 3.1 * math.sqrt(0.8 * 0.2 / TRIALS), (needed, at_needed)


def test_similar_with_a_difference_beyond_the_margin_is_never_reproduced():
    """Truth +30 % against a 20 % margin, 5 runs, 10 % noise: reproduced at most alpha (measured 0.2 %);
    shown different ("not reproduced") 18 % of the time, undecided otherwise."""
    rates = _rates(_claim("similar", margin=0.2, margin_reason="test"), [0.30], 5, 0.10)
    assert rates.get("reproduced", 0.0) <= MAX_FALSE and rates.get("not reproduced", 0.0) > 0.1


def test_not_lower_at_the_margin_is_reproduced_at_most_alpha():
    """Non-inferiority within 10 %: truth exactly -9.1 % (1 / 1.1 - 1), 3 runs, 20 % noise. Measured: 3.7 %."""
    claim = _claim("not_lower", margin=0.1, margin_reason="test")
    assert _rates(claim, [1 / 1.1 - 1], 3, 0.20).get("reproduced", 0.0) <= MAX_FALSE


def test_near_at_the_margin_is_reproduced_at_most_alpha():
    """a's mean against the paper's 10 Mbit/s within 10 %: truth exactly 11 Mbit/s, 5 runs, 5 % noise.
    Measured: 4.7 %."""
    claim = _claim("near", value=10.0, margin=0.1, margin_reason="test")
    assert _rates(claim, [0.10], 5, 0.05).get("reproduced", 0.0) <= MAX_FALSE


def test_holm_keeps_a_claim_over_several_conditions_at_alpha():
    """Three conditions, each exactly at the threshold, and each would be "shown" 5 % of the time alone:
    the claim (holds at 2 of 3, nothing against) is reproduced at most alpha. Measured: 0.1 %."""
    claim = _claim("higher", **HIGHER)
    assert _rates(claim, [0.05, 0.05, 0.05], 3, 0.20).get("reproduced", 0.0) <= MAX_FALSE
    # and a true opposite at any one of them is not reported as "opposite" for the claim unless shown at most
    rates = _rates(claim, [0.0, 0.0, 0.0], 3, 0.20)
    assert rates.get("opposite", 0.0) <= MAX_FALSE
