"""`make reproduce` decides every claim: the suite scenarios/suites/reproduce.yaml has, for each claim of
analysis/verdicts/claims.yaml, a condition where both sides run with 3 seeds, unless the claim says why it
cannot be decided on a machine like ours (``not_here``). Judged by the verdict code itself
(analysis.verdicts.claims.judge) on the flows the plan would make, each with a made-up goodput of 1: what
counts is which flows run where, not what they measure."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.verdicts import claims
from testbed import PROJECT
from testbed.plan.connections import plan_connections
from testbed.scenario.suite import load_suite
from topologies import TOPOLOGIES

SUITE = PROJECT / "scenarios" / "suites" / "reproduce.yaml"
SEEDS = 3


@pytest.fixture(scope="module")
def planned_flows() -> pd.DataFrame:
    """One row per connection of every run of the suite, as analysis.verdicts.claims.flow_rows would give them."""
    suite = load_suite(SUITE, PROJECT / "scenarios")
    rows = []
    for run in suite.runs():
        topology = TOPOLOGIES[run.scenario.topology.name].from_scenario(run.scenario)
        for c in plan_connections(run.scenario, topology):
            rows.append(
                {
                    "experiment": run.scenario_name,
                    "profile": run.profile or suite.profile,
                    "params": run.params,
                    "point": run.point_id,
                    "seed": run.seed,
                    "run": f"{run.point_id}/seed={run.seed}",
                    "kernel": "planned",
                    "flow": c.flow,
                    "cc": c.cc,
                    "direction": c.direction,
                    "goodput_mbit": 1.0,
                    "recv_goodput_mbit": 1.0,
                    "retrans_bytes": 1,
                    "sent_bytes": 100,
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("claim", claims.load_claims(), ids=lambda c: c.id)
def test_every_claim_has_a_condition_with_three_seeds_a_side(claim, planned_flows):
    verdict = claims.judge(claim, planned_flows)
    if claim.not_here:
        assert len(claim.not_here) > 40, "a claim not decided here says why, in a sentence"
        return
    assert verdict.conditions, (
        f"{claim.id}: no condition of scenarios/suites/reproduce.yaml runs both {claim.compared()} "
        f"(experiment {claim.experiment}, profiles {claim.profiles or 'any'}, where {claim.where or '-'}, "
        f"below {claim.below or '-'}): add its points to the suite, or say in claims.yaml why it cannot be "
        f"decided here (not_here)"
    )
    runs = [(len(c.a), len(c.b)) for c in verdict.conditions]
    assert any(a >= SEEDS and (claim.expect == "near" or b >= SEEDS) for a, b in runs), (claim.id, runs)


def test_a_claim_out_of_reach_says_so_in_the_verdict():
    claim = next(c for c in claims.load_claims() if c.not_here)
    verdict = claims.judge(claim, pd.DataFrame())
    assert verdict.verdict == "no data" and verdict.measured.startswith("not decided here: ")
