"""The sequential design simulated whole: the loop ``testbed suite --decide`` runs, on runs of known truth.

One simulated claim (``higher``, threshold +5 %, the paper's effect +34 %) at one condition, both sides
run at the same seeds. Each seed's run of a side is ``truth_side x (1 + z)``, where ``z`` has a part shared
by the seed's two runs (its random numbers: correlation ``rho``) and a part of each run's own, normal or
heavy-tailed (Student's t with 3 degrees of freedom, scaled to the same spread), and side a may be
noisier than side b (``spread_ratio``). The loop is the workflow's own parts: the claims' rule at the
design's level for the look (``claims.decide``), and the seed planner's next step for an undecided claim
(``seedplan.seed_plan``); a claim decided at a look stops there, one undecided after the last look stays
undecided. ``python -m analysis.sequential_check`` prints the table docs/results.md shows.

Pure: numpy draws, no kernel, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis import claims, seedplan, sequential, stats

CLAIM = claims.Claim.model_validate({
    "id": "simulated", "experiment": "e", "source": "s", "quote": "q", "paper_numbers": "n", "metric": "goodput",
    "expect": "higher", "paper_effect": 0.34, "paper_effect_from": "+34 % (paper 000's smallest wireless gain)",
    "a": {"cc": "westwood"}, "b": {"cc": "reno"},
})  # fmt: skip
#: the boundaries of each wrong verdict's null: "reproduced" at the threshold, "opposite" at minus it
AT_THRESHOLD = 0.05
AT_OPPOSITE = 1 / 1.05 - 1
#: seeds per side the simulated loop never goes beyond (the seed planner's own limit is far higher)
MAX_SEEDS = 24


@dataclass(frozen=True)
class Noise:
    cv: float = 0.2  # a run's relative spread (side b's)
    rho: float = 0.0  # the share of that spread a seed's two runs have in common
    heavy: bool = False  # Student's t (3 df) instead of normal
    spread_ratio: float = 1.0  # side a's spread over side b's


def _draw(rng: np.random.Generator, noise: Noise, n: int) -> np.ndarray:
    """``n`` draws of unit variance, normal or t(3) scaled to variance 1."""
    if noise.heavy:
        return rng.standard_t(3, n) / math.sqrt(3.0)
    return rng.standard_normal(n)


def _runs(rng, truth: float, noise: Noise, seeds: range) -> tuple[list, list]:
    """Both sides' runs at ``seeds`` as (seed, value); values floored at 1 % of the mean (a goodput is > 0)."""
    n = len(seeds)
    shared = _draw(rng, noise, n) * math.sqrt(noise.rho)
    own = math.sqrt(1 - noise.rho)
    z_a = (shared + _draw(rng, noise, n) * own) * noise.cv * noise.spread_ratio
    z_b = (shared + _draw(rng, noise, n) * own) * noise.cv
    a = np.maximum((1 + truth) * (1 + z_a), 0.01 * (1 + truth))
    b = np.maximum(1 + z_b, 0.01)
    return list(zip(seeds, a.tolist(), strict=True)), list(zip(seeds, b.tolist(), strict=True))


def one_claim(rng, truth: float, noise: Noise, design: sequential.Design, start: int = 3) -> tuple[str, int]:
    """One simulated claim through the loop: its verdict and the look that gave it."""
    a, b = _runs(rng, truth, noise, range(start))
    for look in range(1, design.max_looks + 1):
        result = claims.ConditionResult("c", [v for _, v in a], [v for _, v in b], stats.seeded_effect(a, b),
                                        "undecided", wall_s=1.0, points={"p": len(a)})  # fmt: skip
        verdict = claims.decide(CLAIM, [result], design.alpha_at(look))
        if verdict != "undecided" or look == design.max_looks:
            return verdict, look
        plan = seedplan.seed_plan([claims.Verdict(CLAIM, verdict, [result])], math.inf)
        more = min(plan.more.get("p", 0), MAX_SEEDS - len(a))
        if more <= 0:
            return verdict, look
        new_a, new_b = _runs(rng, truth, noise, range(len(a), len(a) + more))
        a, b = a + new_a, b + new_b
    return "undecided", design.max_looks


def rates(truth: float, noise: Noise, design: sequential.Design, trials: int, seed: int = 2026) -> dict[str, float]:
    """How often each verdict comes out over ``trials`` simulated claims."""
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    for _ in range(trials):
        verdict, _look = one_claim(rng, truth, noise, design)
        counts[verdict] = counts.get(verdict, 0) + 1
    return {verdict: n / trials for verdict, n in counts.items()}


NOISES = {"normal": Noise(), "heavy-tailed": Noise(heavy=True), "unequal spreads": Noise(spread_ratio=2.0),
          "paired, rho 0.5": Noise(rho=0.5), "paired, rho 0.9": Noise(rho=0.9)}  # fmt: skip


def table(trials: int = 2000, looks=(1, 2, 4, 6)) -> list[dict]:
    """Per noise and planned looks: false "reproduced" at the threshold, false "opposite" at minus it, and
    the power at the paper's effect (reproduced when the truth is +34 %)."""
    rows = []
    for name, noise in NOISES.items():
        for k in looks:
            design = sequential.Design(k)
            rows.append({"noise": name, "looks": k,
                         "false reproduced": rates(AT_THRESHOLD, noise, design, trials).get("reproduced", 0.0),
                         "false opposite": rates(AT_OPPOSITE, noise, design, trials).get("opposite", 0.0),
                         "power at +34 %": rates(0.34, noise, design, trials).get("reproduced", 0.0)})  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in table():
        print(f"{row['noise']:16s} {row['looks']} looks: false reproduced {row['false reproduced']:.1%}, "
              f"false opposite {row['false opposite']:.1%}, power at +34 % {row['power at +34 %']:.1%}")
