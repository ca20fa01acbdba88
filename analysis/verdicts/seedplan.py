"""Where more runs decide most: the next seeds for the undecided claims (``testbed suite --decide``), the
cheapest to decide first, each given half the way to the runs that would decide it at the measured
noise (so that the estimate is made again with the new runs), within a budget of wall time. Each look
at the added runs is judged at analysis/verdicts/sequential.py's level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from analysis.verdicts import stats
from analysis.verdicts.claims import Verdict

#: a run's wall time when its runs did not record one (a guess on the long side of this machine's runs)
UNKNOWN_WALL_S = 60.0


@dataclass
class SeedPlan:
    """The runs to add next (``testbed suite --decide``): point id -> how many more runs (new seeds)."""

    more: dict[str, int] = field(default_factory=dict)
    claims: list[str] = field(default_factory=list)  # the claims these runs work towards
    cost_s: float = 0.0  # their wall time here, by the runs' own measured times
    left: list[str] = field(default_factory=list)  # undecided claims no run was added for, and why


def _step(claim_verdict: Verdict) -> tuple[dict[str, int], float, float]:
    """For one undecided claim: the next runs (point -> how many more: half way to what would decide each
    undecided condition, at least one), their cost, and the whole way's cost (seconds)."""
    more, step_s = {}, 0.0
    for c in claim_verdict.conditions:
        if c.finding not in ("undecided", "short") or not c.seeds_needed or c.seeds_needed > stats.SEED_LIMIT:
            continue
        wall = c.wall_s if not math.isnan(c.wall_s) else UNKNOWN_WALL_S
        for point, runs in c.points.items():
            added = max(1, math.ceil((c.seeds_needed - runs) / 2))
            more[point] = max(more.get(point, 0), added)
            step_s += added * wall
    _, whole_s = claim_verdict.cost()
    return more, step_s, whole_s


def seed_plan(results: list[Verdict], budget_s: float) -> SeedPlan:
    """Where more runs move most verdicts per minute: the undecided claims in the order of what deciding
    each would cost here (its runs per side that would decide it at the measured noise, times its runs'
    measured wall time), each given the next step towards it (half way, so that the estimate is made again
    with the new runs) while the steps fit in ``budget_s``. Runs of a point shared by claims count once."""
    plan = SeedPlan()
    ranked = []
    for v in results:
        if v.verdict not in ("undecided", "short of the paper"):
            continue
        more, step_s, whole_s = _step(v)
        if not more:
            plan.left.append(f"{v.claim.id}: no number of runs decides it at the measured effect and noise")
            continue
        ranked.append((whole_s, step_s, v.claim.id, more))
    for _whole_s, step_s, claim_id, more in sorted(ranked, key=lambda r: r[:3]):
        if plan.cost_s + step_s > budget_s:
            plan.left.append(f"{claim_id}: its next {step_s / 60:.0f} min of runs do not fit the budget left")
            continue
        for point, added in more.items():
            plan.more[point] = max(plan.more.get(point, 0), added)
        plan.claims.append(claim_id)
        plan.cost_s += step_s
    return plan
