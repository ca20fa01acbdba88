"""``testbed suite --decide``'s loop simulated whole, on runs of known truth: the workflow's own code.

A simulated session holds one claim's conditions (a ``higher`` claim by default: threshold +5 %, the
paper's effect +34 %), both sides run at the same seeds. Each seed's run of a side is ``truth x (1 + z)``,
where ``z`` has a part shared by the seed's two runs (its random numbers: correlation ``rho``, negative
where the two sides are flows of one run that take from each other, as the Gilbert channel's measure
r = -0.77) and a part of each run's own, normal or heavy-tailed (Student's t, 3 degrees of freedom,
scaled to the same spread); side a may be noisier than side b (``spread_ratio``).

What runs is testbed/workflows/decide.py's ``decide`` itself: its design and record (``sequential.json``
in a temporary folder), its seed planner, its stopping rule; only its two hands on the world are
replaced, ``judge`` (the claims' rule, ``claims.decide`` with Holm over the conditions, on the simulated
values) and ``run`` / ``grow`` (new seeds drawn instead of run). The verdict counted is what the report
then shows: the record's decision where a look decided the claim, else the last look's verdict
(``sequential.judge_by_design`` reads the same record: tests/unit/test_sequential.py checks that the two
agree on simulated run folders). ``python -m testbed.workflows.decide_check`` prints docs/results.md's
table.

Pure: numpy draws and a temporary folder, no kernel.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analysis.verdicts import claims, sequential, stats
from testbed.workflows import decide as decide_workflow

CLAIM = claims.Claim.model_validate(
    {
        "id": "simulated",
        "experiment": "e",
        "source": "s",
        "quote": "q",
        "paper_numbers": "n",
        "metric": "goodput",
        "expect": "higher",
        "paper_effect": 0.34,
        "paper_effect_from": "+34 % (paper 000's smallest wireless gain)",
        "a": {"cc": "westwood"},
        "b": {"cc": "reno"},
    }
)
#: the boundaries of each wrong verdict's null: "reproduced" at the threshold, "opposite" at minus it
AT_THRESHOLD = 0.05
AT_OPPOSITE = 1 / 1.05 - 1
#: seeds per point the simulated loop never goes beyond (the seed planner's own limit is far higher)
MAX_SEEDS = 24
#: the budget of one simulated loop: runs "take" a second each, so only the planner's steps and the looks stop it
BUDGET_S = 1e9


@dataclass(frozen=True)
class Noise:
    cv: float = 0.2  # a run's relative spread (side b's)
    rho: float = 0.0  # the correlation of a seed's two runs, -1 to 1
    heavy: bool = False  # Student's t (3 df) instead of normal
    spread_ratio: float = 1.0  # side a's spread over side b's


def _draw(rng: np.random.Generator, noise: Noise, n: int) -> np.ndarray:
    """``n`` draws of unit variance, normal or t(3) scaled to variance 1."""
    if noise.heavy:
        return rng.standard_t(3, n) / math.sqrt(3.0)
    return rng.standard_normal(n)


def draw_pairs(rng, truth: float, noise: Noise, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Both sides' values at ``n`` new seeds; floored at 1 % of the mean (a goodput is > 0)."""
    shared = _draw(rng, noise, n) * math.sqrt(abs(noise.rho))
    own = math.sqrt(1 - abs(noise.rho))
    z_a = (math.copysign(1.0, noise.rho) * shared + _draw(rng, noise, n) * own) * noise.cv * noise.spread_ratio
    z_b = (shared + _draw(rng, noise, n) * own) * noise.cv
    return np.maximum((1 + truth) * (1 + z_a), 0.01 * (1 + truth)), np.maximum(1 + z_b, 0.01)


@dataclass
class Session:
    """A simulated session: per condition, both sides' values by seed."""

    rng: np.random.Generator
    truths: list[float]
    noise: Noise
    claim: claims.Claim = field(default_factory=lambda: CLAIM)
    values: list[tuple[list[float], list[float]]] = field(default_factory=list)

    def run(self, seeds: dict[str, int]) -> object:
        """``decide``'s ``run``: the seeds the (grown) suite asks for, the new ones drawn."""
        for condition, truth in enumerate(self.truths):
            if condition == len(self.values):
                self.values.append(([], []))
            a, b = self.values[condition]
            more = seeds[f"c{condition}"] - len(a)
            if more > 0:
                new_a, new_b = draw_pairs(self.rng, truth, self.noise, more)
                a += new_a.tolist()
                b += new_b.tolist()
        runs = sum(2 * len(a) for a, _ in self.values)
        return _Result(runs=[None] * runs, failed=[])

    def judge(self, _session_dir: Path, alpha: float) -> tuple[list[claims.Verdict], list[str]]:
        """``decide``'s ``judge``: the claims' rule (Holm over the conditions) on the values, at ``alpha``."""
        results = []
        for condition, (a, b) in enumerate(self.values):
            seeded = list(enumerate(a)), list(enumerate(b))
            results.append(
                claims.ConditionResult(
                    f"c{condition}",
                    a,
                    b,
                    stats.seeded_effect(*seeded),
                    "undecided",
                    wall_s=1.0,
                    points={f"c{condition}": len(a)},
                )
            )
        verdict = claims.decide(self.claim, results, alpha)
        names = [
            f"c{c}/seed={s}/{side}" for c, (a, _) in enumerate(self.values) for s in range(len(a)) for side in "ab"
        ]
        return [claims.Verdict(self.claim, verdict, results, alpha=alpha)], names


def grow(seeds: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """``decide``'s ``grow``: each point's seeds, more where the planner asks (at most ``MAX_SEEDS``)."""
    return {point: min(MAX_SEEDS, n + more.get(point, 0)) for point, n in seeds.items()}


@dataclass
class _Result:
    runs: list
    failed: list


def one_claim(
    rng, truths: list[float], noise: Noise, looks: int, start: int = 3, folder: Path | None = None
) -> tuple[str, int]:
    """One simulated claim through ``decide``: the verdict the report shows and the look that gave it. The
    session's record is kept in ``folder`` (a temporary one of its own by default)."""
    if folder is None:
        with tempfile.TemporaryDirectory() as own:
            return one_claim(rng, truths, noise, looks, start, Path(own))
    (folder / sequential.RECORD_FILE).unlink(missing_ok=True)  # a new session
    session = Session(rng, truths, noise)
    seeds = {f"c{c}": start for c in range(len(truths))}
    session.run(seeds)
    decide_workflow.decide(
        seeds, folder, BUDGET_S, session.run, log=lambda _line: None, judge=session.judge, grow=grow, looks=looks
    )
    record = sequential.read_record(folder)
    if record is None:
        return "undecided", 0
    if CLAIM.id in record.decided:
        look, verdict = record.decided[CLAIM.id]
        return verdict, look
    last, _names = session.judge(folder, record.design.alpha_at(record.looks))
    return last[0].verdict, record.looks


def rates(truth: float | list[float], noise: Noise, looks: int, trials: int, seed: int = 2026) -> dict[str, float]:
    """How often each verdict comes out over ``trials`` simulated claims (``truth`` per condition)."""
    rng = np.random.default_rng(seed)
    truths = truth if isinstance(truth, list) else [truth]
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(trials):
            verdict, _look = one_claim(rng, truths, noise, looks, folder=Path(folder))
            counts[verdict] = counts.get(verdict, 0) + 1
    return {verdict: n / trials for verdict, n in counts.items()}


NOISES = {
    "normal": Noise(),
    "heavy-tailed": Noise(heavy=True),
    "unequal spreads": Noise(spread_ratio=2.0),
    "paired, rho 0.5": Noise(rho=0.5),
    "paired, rho 0.9": Noise(rho=0.9),
    "paired, rho -0.8": Noise(rho=-0.8),
}


def table(trials: int = 2000, looks=(1, 3, 4, 6)) -> list[dict]:
    """Per noise and planned looks: false "reproduced" at the threshold, false "opposite" at minus it, and
    the power at the paper's effect (reproduced when the truth is +34 %)."""
    rows = []
    for name, noise in NOISES.items():
        for k in looks:
            rows.append(
                {
                    "noise": name,
                    "looks": k,
                    "false reproduced": rates(AT_THRESHOLD, noise, k, trials).get("reproduced", 0.0),
                    "false opposite": rates(AT_OPPOSITE, noise, k, trials).get("opposite", 0.0),
                    "power at +34 %": rates(0.34, noise, k, trials).get("reproduced", 0.0),
                }
            )
    return rows


if __name__ == "__main__":
    for row in table():
        print(
            f"{row['noise']:16s} {row['looks']} looks: false reproduced {row['false reproduced']:.1%}, "
            f"false opposite {row['false opposite']:.1%}, power at +34 % {row['power at +34 %']:.1%}"
        )
