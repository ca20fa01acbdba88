"""``testbed explain``'s rule and plan, no kernel (analysis/verdicts/ablation.py, testbed/workflows/explain.py).

The rule is tested as the claims' rule is (tests/unit/test_verdict_rule.py): on simulated runs of known
truth. A factor whose true effect is the baseline's must not be said to explain the claim more often than
alpha (Holm over the settings); a factor that moves the effect to the paper's is found; one that moves it
only part of the way is "partly". The plan is tested on the real claims file and reproduce suite: every
claim with ablations has exactly one deciding condition there and each setting changes what it says.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.verdicts import ablation, claims, stats
from analysis.verdicts.factors import Ablations, Factor
from testbed.report.pages.verdicts import terminal_lines
from testbed.scenario.points import RunSpec
from testbed.workflows import explain

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
        "paper_effect_from": "+34 %",
        "a": {"cc": "westwood"},
        "b": {"cc": "reno"},
    }
)
FACTORS = {name: Factor(paper=False, why="simulated: no kernel here") for name in ("sack", "rack", "tlp")}
TRIALS = 1000
ALPHA = 0.05
#: a 5 % rate measured over TRIALS is above this less than once in a thousand (binomial, 3.1 sd)
MAX_FALSE = ALPHA + 3.1 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)


def _samples(rng, truths: dict[str, float], runs: int, cv: float, rho: float = 0.0) -> dict:
    """Each setting's runs as ``(seed, value)``: b = 1 + z, a = (1 + truth)(1 + z'), each z ~ N(0, cv) made of
    a part shared by every run of the seed (variance ``rho`` cv^2: the seed's random numbers, common to
    both sides and every setting) and a part of the run's own."""
    shared = rng.normal(0.0, cv * math.sqrt(rho), runs)
    own = cv * math.sqrt(1 - rho)
    return {
        name: (
            [(s, (1 + t) * (1 + shared[s] + rng.normal(0.0, own))) for s in range(runs)],
            [(s, 1 + shared[s] + rng.normal(0.0, own)) for s in range(runs)],
        )
        for name, t in truths.items()
    }


def _conclusions(truths: dict[str, float], runs: int, cv: float, trials: int, seed: int = 2026) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    for _ in range(trials):
        kind = ablation.kind(ablation.judge_settings(CLAIM, _samples(rng, truths, runs, cv), FACTORS).conclusion)
        counts[kind] = counts.get(kind, 0) + 1
    return {k: n / trials for k, n in counts.items()}


def test_factors_that_change_nothing_explain_it_at_most_alpha():
    """Truth: -20 % under every setting (the paper's +34 % nowhere). Measured (seed 2026, 3 runs a side,
    20 % noise, 1000 trials): explained 0 %, partly 2.0 %, not explained 98 %; the bound is alpha's plus the
    simulation's chance, 7.1 %."""
    rates = _conclusions({"baseline": -0.2, "sack": -0.2, "rack": -0.2, "tlp": -0.2, "all": -0.2}, 3, 0.2, TRIALS)
    assert rates.get("explained", 0) + rates.get("partly", 0) <= MAX_FALSE, rates


def test_a_factor_that_moves_the_effect_to_the_papers_explains_it():
    """Truth: -20 % at the baseline, +60 % with SACK off (and all together), -20 % with the others; 5 runs a
    side, 10 % noise. Measured (seed 7): explained by sack in 200 of 200 trials."""
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(200):
        truths = {"baseline": -0.2, "sack": 0.6, "rack": -0.2, "tlp": -0.2, "all": 0.6}
        result = ablation.judge_settings(CLAIM, _samples(rng, truths, 5, 0.1), FACTORS)
        found += result.conclusion.startswith("explained by sack:")
    assert found >= 180, found


def test_one_simulated_explanation_reads_as_a_finding():
    rng = np.random.default_rng(11)
    truths = {"baseline": -0.2, "sack": 0.6, "rack": -0.2, "tlp": 0.0, "all": 0.6}
    result = ablation.judge_settings(CLAIM, _samples(rng, truths, 5, 0.05), FACTORS)
    assert result.conclusion.startswith("explained by sack: set as the paper had it, the claim holds"), (
        result.conclusion
    )
    by = {s.setting: s for s in result.settings}
    assert by["sack"].condition.finding == "holds" and by["sack"].outcome.startswith("to the paper's")
    assert by["tlp"].outcome.startswith("towards the paper's, the claim still not shown")
    assert by["rack"].outcome.startswith("no move shown (these runs would show one of ")
    lines = result.lines()
    assert lines[0] == f"simulated: {result.conclusion}" and any(line.startswith("  sack: ") for line in lines)
    frame = ablation.table(result)
    assert list(frame["setting"]) == ["baseline", "sack", "rack", "tlp", "all"]
    assert frame.loc[1, "moved"] > 0.5 and frame.loc[1, "moved_low"] > 0


def test_a_move_part_of_the_way_is_partly_and_a_holding_baseline_needs_nothing():
    rng = np.random.default_rng(3)
    truths = {"baseline": -0.3, "sack": 0.0, "rack": -0.3, "tlp": -0.3}
    partly = ablation.judge_settings(CLAIM, _samples(rng, truths, 5, 0.05), FACTORS)
    assert partly.conclusion.startswith("partly explained by sack: the effect moves towards the paper's")
    holding = ablation.judge_settings(CLAIM, _samples(rng, {"baseline": 0.6, "sack": 0.6}, 5, 0.05), FACTORS)
    assert holding.conclusion == "nothing to explain: the claim holds at the baseline"
    empty = ablation.judge_settings(CLAIM, {"sack": ([(1, 1.0), (2, 1.1)], [(1, 1.0), (2, 0.9)])}, FACTORS)
    assert empty.conclusion.startswith("not judged")


def test_the_shift_is_the_ratio_of_the_effects_with_both_noises():
    a0, b0, a1, b1 = [0.8, 0.9, 0.85], [1.0, 1.1, 0.95], [1.3, 1.4, 1.35], [1.0, 1.05, 0.98]
    base, moved = stats.ratio_effect(a0, b0), stats.ratio_effect(a1, b1)
    shift = stats.effect_shift(moved, base)
    assert shift.relative == pytest.approx((np.mean(a1) / np.mean(b1)) / (np.mean(a0) / np.mean(b0)) - 1)
    assert shift.se == pytest.approx(math.hypot(base.se, moved.se))
    assert 2 <= shift.df <= 8  # Welch's over four samples of 3
    assert 0 < shift.detectable() < 1


def test_a_paired_shift_is_the_mean_of_the_seeds_moves():
    """Every setting runs the same seeds: the move is each seed's log ratio at the setting minus the
    baseline's at that seed, tested as one sample (the seeds' shared noise drops out)."""
    base = stats.seeded_effect([(1, 0.8), (2, 0.9), (3, 0.7)], [(1, 1.0), (2, 1.1), (3, 0.9)])
    moved = stats.seeded_effect([(1, 1.3), (2, 1.4), (3, 1.2)], [(1, 1.0), (2, 1.05), (3, 0.95)])
    shift = stats.effect_shift(moved, base)
    per_seed = [
        math.log(1.3 / 1.0) - math.log(0.8 / 1.0),
        math.log(1.4 / 1.05) - math.log(0.9 / 1.1),
        math.log(1.2 / 0.95) - math.log(0.7 / 0.9),
    ]
    assert shift.paired and shift.df == 2 and shift.log_ratio == pytest.approx(np.mean(per_seed))
    assert shift.se == pytest.approx(np.std(per_seed, ddof=1) / math.sqrt(3))


def _moves_claimed(truths: dict[str, float], runs: int, cv: float, rho: float, trials: int, seed: int) -> float:
    """How often some setting is said to move the effect (towards or away from the paper's)."""
    rng = np.random.default_rng(seed)
    moved = 0
    for _ in range(trials):
        result = ablation.judge_settings(CLAIM, _samples(rng, truths, runs, cv, rho), FACTORS)
        moved += any(s.outcome.startswith(("to the", "towards", "away")) for s in result.settings[1:])
    return moved / trials


@pytest.mark.parametrize("baseline", [0.34, -0.2])
def test_no_setting_moves_the_effect_beyond_alpha_wherever_the_baseline_sits(baseline):
    """No factor changes anything; the baseline at the paper's effect (where a one-sided test towards the
    paper's, its direction chosen by where the baseline happened to fall, erred about twice its alpha) and
    below it. Two-sided, Holm over the settings: measured 1.3 % and 1.5 % (3 seeds, 20 % noise, seeds
    sharing half their noise, 1000 trials, seed 5)."""
    truths = dict.fromkeys(("baseline", "sack", "rack", "tlp", "all"), baseline)
    assert _moves_claimed(truths, 3, 0.2, 0.5, TRIALS, 5) <= MAX_FALSE


def test_pairing_by_seed_finds_a_move_more_often_when_seeds_share_their_noise():
    """A +40 % move by SACK at 4 seeds, 15 % noise: how often it is shown with seeds sharing none of their
    noise and 90 % of it. Measured (seed 9, 300 trials): 29 % and 92 %."""
    truths = {"baseline": -0.2, "sack": 0.12, "rack": -0.2, "tlp": -0.2}
    alone = _moves_claimed(truths, 4, 0.15, 0.0, 300, 9)
    shared = _moves_claimed(truths, 4, 0.15, 0.9, 300, 9)
    assert shared > alone + 0.3, (alone, shared)


def test_every_claim_with_ablations_has_one_deciding_condition_and_settings_that_differ():
    with_ablations = [c for c in claims.load_claims() if c.ablations]
    assert len(with_ablations) >= 6
    for claim in with_ablations:
        scenario = explain.plan(claim, 2)
        settings = {p.params[ablation.ABLATE_PARAM] for p in scenario.points}
        assert settings == {"baseline", "all", *claim.ablations.runnable()}, claim.id
        assert all(sorted({r.seed for r in p.runs()}) == [1, 2] for p in scenario.points)
        baseline = {
            p.point_id.replace("ablate=baseline", ""): p
            for p in scenario.points
            if p.params[ablation.ABLATE_PARAM] == "baseline"
        }
        assert len(baseline) in (2, 3), claim.id  # both sides' points (the SACK claims have a third)
        for name, factor in claim.ablations.runnable().items():
            changed = [p for p in scenario.points if p.params[ablation.ABLATE_PARAM] == name]
            flows = [f for p in changed for f in p.scenario.flows]
            if name == "variant":
                assert "westwood_paper" in {f.cc for f in flows}
            elif name == "length":
                assert {p.scenario.duration_s for p in changed} == {factor.run}
            else:
                assert {getattr(f, name) for f in flows if f.cc} == {factor.paper}, (claim.id, name)


def test_bad_factor_names_and_claims_are_refused_with_the_valid_ones():
    claim = explain.find_claim("gilbert-westwood-beats-sack-delack-off")
    with pytest.raises(ValueError, match="factor 'sack' cannot be switched here: side b is the SACK flow"):
        explain.plan(claim, 3, ["sack"])
    with pytest.raises(ValueError, match="factor 'nope' is not one of this claim's: variant, sack"):
        explain.plan(claim, 3, ["nope"])
    with pytest.raises(ValueError, match="at least 2 runs a side"):
        explain.plan(claim, 1)
    with pytest.raises(ValueError, match="has no ablations .* claims with them: onoff-westwood-not-below-newreno"):
        explain.find_claim("pipe-similar-retransmissions")
    with pytest.raises(ValueError, match="no claim 'nope'"):
        explain.find_claim("nope")
    with pytest.raises(ValueError, match="not a switch the testbed has; valid: variant, sack, rack"):
        Ablations.model_validate({"factors": {"prr": {"paper": False, "why": "no such switch in Linux"}}})
    with pytest.raises(ValueError, match="paper .or run. must be a bool"):
        Ablations.model_validate({"factors": {"sack": {"paper": 1, "why": "an int where a bool belongs"}}})


def test_new_switches_at_their_defaults_keep_old_runs_identities():
    """A run made before rack, tlp and frto existed had no such keys: at their defaults its identity is the
    same (so it resumes, and a lab's runs still match their scenario file); switched off it differs."""
    run = explain.plan(explain.find_claim("onoff-westwood-not-below-newreno"), 2, ["rack"]).points[0].runs()[0]

    def with_flows(**update) -> RunSpec:
        flows = [f.model_copy(update=update) for f in run.scenario.flows]
        return RunSpec(
            run.scenario_name, run.point_id, run.params, run.seed, run.scenario.model_copy(update={"flows": flows})
        )

    old = run.scenario.model_dump(mode="json", exclude={"seeds", "description"})
    for flow in old["flows"]:
        for key in ("rack", "tlp", "frto"):
            del flow[key]
    made_before = json.dumps([run.scenario_name, old, run.seed], sort_keys=True, separators=(",", ":"))
    assert with_flows(rack=True).identity() == hashlib.sha256(made_before.encode()).hexdigest()
    assert with_flows(rack=False).identity() != with_flows(rack=True).identity()


def _flows(setting: str, run: int, a: float, b: float, cc_a: str = "westwood") -> pd.DataFrame:
    params = {"cc": cc_a, ablation.ABLATE_PARAM: setting}
    rows = [
        {
            "cc": cc,
            "direction": "forward",
            "flow": 0,
            "goodput_mbit": value,
            "run": f"r{setting}{run}{cc}",
            "params": params,
            "experiment": "e",
            "profile": "quick",
            "wall_s": 20.0,
            "point": setting,
            "seed": run,
            "kernel": "6.1.0-56-amd64",
        }
        for cc, value in ((cc_a, a), ("reno", b))
    ]
    return pd.DataFrame(rows)


def test_samples_come_from_each_settings_runs_and_claims_judge_only_the_baseline(monkeypatch):
    monkeypatch.setattr(
        claims.metrics,
        "group_metric",
        lambda chosen, metric: chosen["goodput_mbit"].mean() if len(chosen) else math.nan,
    )
    flows = pd.concat(
        [
            _flows("baseline", 1, 0.8, 1.0),
            _flows("baseline", 2, 0.9, 1.1),
            _flows("variant", 1, 1.4, 1.0, "westwood_paper"),
            _flows("variant", 2, 1.5, 1.0, "westwood_paper"),
            _flows("sack", 1, 1.0, 1.0),
        ],
        ignore_index=True,
    )
    samples, walls = ablation.samples_of(CLAIM, flows, "westwood_paper")
    assert samples["baseline"] == ([(1, 0.8), (2, 0.9)], [(1, 1.0), (2, 1.1)])
    assert samples["variant"] == ([(1, 1.4), (2, 1.5)], [(1, 1.0), (2, 1.0)])  # side a is the variant's flows
    assert walls["sack"] == 20.0
    verdict = claims.judge(CLAIM, flows)
    assert [c.condition for c in verdict.conditions] == ["ablate='baseline'"]


def test_the_report_shows_the_latest_explanation_beside_a_claim_not_reproduced(tmp_path):
    record = ablation.ExplanationRecord(
        claim="simulated",
        conclusion="explained by sack: the claim holds",
        kind="explained",
        paper_effect=0.34,
        settings=[],
        factors=FACTORS,
    )
    for stamp in ("20261128T000000Z-aaaaaaa", "20261128T010000Z-bbbbbbb"):
        folder = tmp_path / "explain-simulated" / stamp
        folder.mkdir(parents=True)
        ablation.rundir.write_json_atomic(folder / ablation.EXPLANATION, record.model_dump(mode="json"))
    text = ablation.latest_text("simulated", tmp_path)
    assert text.startswith("explained by sack: the claim holds (") and "bbbbbbb" in text
    assert ablation.latest_text("other", tmp_path) == ""
    verdict = claims.Verdict(CLAIM, "not reproduced", explained=text)
    assert any(
        line.startswith("      measured (testbed explain): explained by sack") for line in terminal_lines([verdict])
    )


def test_a_session_without_runs_says_it_could_not_judge(tmp_path):
    claim = explain.find_claim("onoff-westwood-not-below-newreno")
    result = explain.explain_session(claim, tmp_path, [])
    assert result.conclusion == "not judged: the baseline has no runs on both sides"
    assert (tmp_path / "explanation.md").read_text().startswith(f"# Why {claim.id}?\n\n**not judged")
    assert (tmp_path / "figures" / "explain.png").read_bytes()[:4] == b"\x89PNG"
