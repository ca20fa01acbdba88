"""Seeds where they decide something (testbed/workflows/decide.py, analysis/verdicts/seedplan.py): the plan on judged
flows of known spread, the budget, and the suite grown by new seeds without losing the runs made."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.verdicts import claims, seedplan
from testbed.scenario.suite import find_suite, load_suite
from testbed.workflows.decide import grow, parse_budget

PROJECT = Path(__file__).resolve().parents[2]


def _claim(claim_id: str, experiment: str) -> claims.Claim:
    return claims.Claim.model_validate(
        {
            "id": claim_id,
            "experiment": experiment,
            "source": "s",
            "quote": "q",
            "paper_numbers": "n",
            "metric": "goodput",
            "expect": "higher",
            "paper_effect": 0.34,
            "paper_effect_from": "test",
            "a": {"cc": "westwood"},
            "b": {"cc": "reno"},
        }
    )


def _flows(experiment: str, values: dict[str, list[float]], wall_s: float) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "experiment": experiment,
                "profile": "quick",
                "params": {"cc": cc},
                "point": f"{experiment}.cc={cc}",
                "seed": seed,
                "run": f"{experiment}-{cc}-{seed}",
                "kernel": "k",
                "flow": 0,
                "cc": cc,
                "direction": "forward",
                "goodput_mbit": g,
                "wall_s": wall_s,
            }
            for cc, goodputs in values.items()
            for seed, g in enumerate(goodputs, start=1)
        ]
    )


def _verdicts() -> list[claims.Verdict]:
    # both +20 % with 3 runs a side: "near" (10 % spread, 30 s runs) is cheap to decide, "far" (25 %
    # spread, 60 s runs) dear; "done" is already reproduced
    # (the seeds' ratios: near 1.32, 1.33, 0.98; far 1.5, 1.6, 0.72)
    near = _flows("near", {"westwood": [1.32, 1.2, 1.08], "reno": [1.0, 0.9, 1.1]}, 30.0)
    far = _flows("far", {"westwood": [1.5, 1.2, 0.9], "reno": [1.0, 0.75, 1.25]}, 60.0)
    done = _flows("done", {"westwood": [2.0, 2.1, 1.9], "reno": [1.0, 1.1, 0.9]}, 30.0)
    flows = pd.concat([near, far, done], ignore_index=True)
    return [claims.judge(_claim(e, e), flows) for e in ("far", "near", "done")]


def test_the_plan_starts_with_the_claim_cheapest_to_decide_and_keeps_to_the_budget():
    verdicts = _verdicts()
    assert [v.verdict for v in verdicts] == ["undecided", "undecided", "reproduced"]
    far, near = verdicts[0].cost()[1], verdicts[1].cost()[1]
    assert near < far
    plan = seedplan.seed_plan(verdicts, budget_s=far + near)
    assert plan.claims == ["near", "far"]
    assert set(plan.more) == {"near.cc=westwood", "near.cc=reno", "far.cc=westwood", "far.cc=reno"}
    assert plan.cost_s <= far + near
    # half way first: the next step of "near" is about half of what would decide it
    needed = verdicts[1].conditions[0].seeds_needed
    assert plan.more["near.cc=reno"] == -(-(needed - 3) // 2)
    # a budget that holds only the cheaper step
    small = seedplan.seed_plan(verdicts, budget_s=plan.more["near.cc=reno"] * 2 * 30.0)
    assert small.claims == ["near"] and "far: its next" in small.left[0]
    assert not seedplan.seed_plan(verdicts, budget_s=1.0).more


def test_a_budget_reads_as_minutes_hours_or_seconds():
    assert parse_budget("60m") == 3600 and parse_budget("1.5h") == 5400 and parse_budget("900s") == 900
    assert parse_budget("45") == 45 * 60
    for bad in ("", "soon", "-5m", "0", "10d"):
        with pytest.raises(ValueError, match="give a positive time such as 60m"):
            parse_budget(bad)


def test_growing_a_suite_adds_seeds_after_the_highest_and_keeps_the_runs_made():
    suite = load_suite(find_suite("default", PROJECT / "scenarios" / "suites"), PROJECT / "scenarios")
    point = suite.points[0]
    grown = grow(suite, {point.point_id: 2})
    before, after = {r.point_id + str(r.seed): r.identity() for r in suite.runs()}, grown.runs()
    assert [r.seed for r in after if r.point_id == point.point_id] == [*point.scenario.seeds, 9, 10]
    assert len(after) == len(before) + 2
    assert all(before[r.point_id + str(r.seed)] == r.identity() for r in after if r.seed <= 8)
