"""The default and headline suites are designed to decide claims: every claim of analysis/verdicts/claims.yaml
about a point they run, with both sides' algorithms in it, gets both sides at one condition (judged by
analysis/verdicts/claims.py's own pairing on the flows the suite's runs would give), and the claims each is built
for get 3 runs per side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.verdicts import claims
from testbed.scenario.algorithms import algorithm_of
from testbed.scenario.points import ScenarioFile
from testbed.scenario.suite import find_suite, load_suite

PROJECT = Path(__file__).resolve().parents[2]
SCENARIOS = PROJECT / "scenarios"
DESIGNED_FOR = {"mobile-westwood-beats-reno-bernoulli"}
HEADLINE = DESIGNED_FOR | {"gilbert-westwood-beats-reno-delack", "lab-westwood-beats-cubic-with-loss"}


def suite_flows(suite: ScenarioFile) -> pd.DataFrame:
    """The ``claims.flow_rows`` the suite's runs would give: one row per flow and replica of every run
    (experiment, profile and params as the runs' manifests record them), each with the same goodput."""
    rows = []
    for point in suite.points:
        for run in point.runs():
            for index, flow in enumerate(point.scenario.flows):
                for replica in range(flow.count):
                    rows.append(
                        {
                            "experiment": run.scenario_name,
                            "profile": run.profile or suite.profile,
                            "params": run.params,
                            "point": run.point_id,
                            "seed": run.seed,
                            "run": f"{run.point_id}/seed={run.seed}",
                            "kernel": "any",
                            "flow": index,
                            "replica": replica,
                            "cc": flow.cc,
                            "direction": flow.direction,
                            "goodput_mbit": 1.0 + 0.1 * run.seed,
                            "recv_goodput_mbit": 1.0 + 0.1 * run.seed,
                            "sent_bytes": 1000.0,
                            "retrans_bytes": 10.0,
                        }
                    )
    return pd.DataFrame(rows)


def about_the_suite(claim: claims.Claim, flows: pd.DataFrame) -> bool:
    """The claim is about an experiment and a point the suite runs, with both sides' algorithms in it."""
    own = flows[flows["experiment"] == claim.experiment]
    points = own.drop_duplicates("point")
    if not any(claims._matches_point(claim, row.params, row.profile) for row in points.itertuples()):
        return False
    algorithms = set(own["cc"].map(algorithm_of))
    sides = [claim.a] + ([claim.b] if claim.b is not None else [])
    return all(algorithm_of(side.cc) in algorithms for side in sides)


def runs_per_side(verdict: claims.Verdict) -> list[tuple[int, int]]:
    return [(len(c.a), len(c.b)) for c in verdict.conditions]


@pytest.fixture(scope="module")
def default_flows() -> pd.DataFrame:
    return suite_flows(load_suite(find_suite("default", SCENARIOS / "suites"), SCENARIOS))


def test_every_claim_about_the_default_suites_points_has_both_sides_at_one_condition(default_flows):
    targeted = [claim for claim in claims.load_claims() if about_the_suite(claim, default_flows)]
    assert DESIGNED_FOR <= {claim.id for claim in targeted}
    for claim in targeted:
        verdict = claims.judge(claim, default_flows)
        assert verdict.verdict != "no data", f"{claim.id}: {verdict.measured}"


@pytest.fixture(scope="module")
def headline_flows() -> pd.DataFrame:
    return suite_flows(load_suite(find_suite("headline", SCENARIOS / "suites"), SCENARIOS))


@pytest.mark.parametrize("claim_id", sorted(DESIGNED_FOR))
def test_the_claims_the_default_suite_is_built_for_get_five_runs_per_side(default_flows, claim_id):
    (claim,) = [claim for claim in claims.load_claims() if claim.id == claim_id]
    verdict = claims.judge(claim, default_flows)
    assert runs_per_side(verdict) == [(5, 5)], f"{claim_id}: {verdict.measured}"


@pytest.mark.parametrize("claim_id", sorted(HEADLINE))
def test_the_headline_suites_claims_get_three_runs_per_side(headline_flows, claim_id):
    (claim,) = [claim for claim in claims.load_claims() if claim.id == claim_id]
    verdict = claims.judge(claim, headline_flows)
    assert runs_per_side(verdict) == [(3, 3)], f"{claim_id}: {verdict.measured}"


def test_the_check_sees_an_unreachable_claim(headline_flows):
    # the lab claim without its CUBIC runs: about the suite's experiment, but side b never runs
    default_flows = headline_flows
    without_cubic = default_flows[default_flows["cc"] != "cubic"]
    (claim,) = [claim for claim in claims.load_claims() if claim.id == "lab-westwood-beats-cubic-with-loss"]
    assert claims.judge(claim, without_cubic).verdict == "no data"
    # a side of another algorithm (the papers' variant, which westwood_ml is not) finds no flows
    variant = claim.model_copy(update={"a": claims.Side(cc="westwood_paper")})
    assert claims.judge(variant, default_flows).verdict == "no data"
