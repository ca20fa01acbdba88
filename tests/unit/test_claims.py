"""The verdict rule of analysis/claims.py on synthetic flow tables, and the shipped claims file."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import claims


def _claim(**changes) -> claims.Claim:
    entry = {
        "id": "w-beats-r",
        "experiment": "exp",
        "source": "000 §0",
        "quote": "Westwood+ improves the goodput.",
        "paper_numbers": "+20 %",
        "metric": "goodput",
        "expect": "higher",
        "a": {"cc": "westwood"},
        "b": {"cc": "reno"},
    }
    entry.update(changes)
    return claims.Claim.model_validate(entry)


def _flows(values: dict, loss_key: str = "loss_pct", flows_per_run: int = 1) -> pd.DataFrame:
    """values: (loss, cc) -> goodput of each seed (one run per seed, ``flows_per_run`` equal flows)."""
    rows = []
    for (loss, cc), goodputs in values.items():
        for seed, goodput in enumerate(goodputs, start=1):
            for flow in range(flows_per_run):
                rows.append(
                    {
                        "experiment": "exp",
                        "profile": "quick",
                        "params": {loss_key: loss, "cc": cc},
                        "seed": seed,
                        "run": f"{loss}-{cc}-{seed}",
                        "kernel": "6.1.0-56-amd64",
                        "flow": flow,
                        "cc": cc,
                        "direction": "forward",
                        "goodput_mbit": goodput,
                        "recv_goodput_mbit": goodput,
                        "sent_bytes": 1000.0,
                        "retrans_bytes": 10.0,
                    }
                )
    return pd.DataFrame(rows)


def test_a_clear_gain_at_every_condition_is_reproduced():
    flows = _flows({(1, "westwood"): [2.0, 2.1, 1.9], (1, "reno"): [1.0, 1.1, 0.9],
                    (5, "westwood"): [1.0, 1.05, 0.95], (5, "reno"): [0.5, 0.55, 0.45]})  # fmt: skip
    verdict = claims.judge(_claim(), flows)
    assert verdict.verdict == "reproduced"
    assert [c.outcome for c in verdict.conditions] == ["higher", "higher"]
    assert verdict.conditions[0].difference == pytest.approx(1.0)
    assert verdict.conditions[0].p_value < 0.01
    assert "loss_pct=1: 2 vs 1 Mbit/s (+100%, 3 vs 3 runs" in verdict.measured


def test_the_reverse_is_opposite_and_noise_is_not_a_difference():
    flows = _flows({(1, "westwood"): [1.0, 1.1, 0.9], (1, "reno"): [2.0, 2.1, 1.9]})
    assert claims.judge(_claim(), flows).verdict == "opposite"
    # 8 % apart but seeds spread over +-40 %: Welch's test does not count it
    noisy = _flows({(1, "westwood"): [1.5, 0.7, 1.04], (1, "reno"): [1.4, 0.6, 0.9]})
    verdict = claims.judge(_claim(), noisy)
    assert verdict.conditions[0].outcome == "similar" and verdict.verdict == "not reproduced"
    assert claims.judge(_claim(expect="similar"), noisy).verdict == "reproduced"


def test_one_run_per_side_needs_ten_percent():
    assert claims.judge(_claim(), _flows({(1, "westwood"): [1.08], (1, "reno"): [1.0]})).verdict == "not reproduced"
    assert claims.judge(_claim(), _flows({(1, "westwood"): [1.2], (1, "reno"): [1.0]})).verdict == "reproduced"


def test_mixed_outcomes_are_not_reproduced_and_where_selects_conditions():
    flows = _flows({(1, "westwood"): [1.5], (1, "reno"): [1.0], (5, "westwood"): [0.5], (5, "reno"): [1.0]})
    assert claims.judge(_claim(), flows).verdict == "not reproduced"
    assert claims.judge(_claim(where={"loss_pct": [1]}), flows).verdict == "reproduced"
    assert claims.judge(_claim(below={"loss_pct": 3}), flows).verdict == "reproduced"
    assert claims.judge(_claim(where={"loss_pct": [2]}), flows).verdict == "no data"


def test_without_the_other_side_there_is_no_verdict():
    verdict = claims.judge(_claim(), _flows({(1, "westwood"): [1.5, 1.4]}))
    assert verdict.verdict == "no data" and "no run had both westwood and reno" in verdict.measured


def test_jain_and_friendliness_sides():
    # Jain over the flows of one algorithm in a run: equal shares 1, one flow taking all 1/n
    rows = _flows({(1, "westwood"): [1.0], (1, "reno"): [1.0]}, flows_per_run=4)
    rows.loc[(rows["cc"] == "reno") & (rows["flow"] > 0), "goodput_mbit"] = 0.0
    verdict = claims.judge(_claim(metric="jain"), rows)
    assert verdict.conditions[0].a == [1.0] and verdict.conditions[0].b == [pytest.approx(0.25)]
    # 5 reno flows next to 5 westwood vs next to 5 reno: reno's goodput "not lower"
    mixed = pd.DataFrame(
        [
            {"experiment": "exp", "profile": "quick", "params": {"flows.0.cc": c0, "flows.1.cc": c1}, "seed": 1,
             "run": f"{c0}-{c1}", "kernel": "k", "flow": flow, "cc": cc, "direction": "forward",
             "goodput_mbit": goodput, "sent_bytes": 1.0, "retrans_bytes": 0.0}
            for c0, c1, flows in [("westwood", "reno", [(0, "westwood", 1.3), (1, "reno", 1.0)]),
                                  ("reno", "reno", [(0, "reno", 1.02), (1, "reno", 1.0)])]
            for flow, cc, goodput in flows
        ]
    )  # fmt: skip
    friendly = _claim(
        expect="not_lower", a={"cc": "reno", "with_cc": "westwood"}, b={"cc": "reno", "without_cc": "westwood"}
    )
    verdict = claims.judge(friendly, mixed)
    assert verdict.verdict == "reproduced", verdict.measured
    assert verdict.conditions[0].a == [1.0] and verdict.conditions[0].b == [pytest.approx(1.01)]


def test_the_shipped_claims_load_and_every_experiment_exists():
    loaded = claims.load_claims()
    assert len(loaded) >= 10
    from pathlib import Path

    scenarios = {p.stem for p in (Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml")}
    assert {c.experiment for c in loaded} <= scenarios


def test_the_mobile_claim_compares_the_mobile_flow_not_the_wired_reno_cross_traffic():
    # full-wired-reno: flow 0 is the mobile flow (the point's cc), flows 1.. are wired Reno flows at 10 Mbit/s
    rows = []
    for cc, mobile in (("westwood", 0.6), ("reno", 0.3)):
        for flow, goodput in enumerate([mobile] + [10.0] * 9):
            rows.append({"experiment": "mobile-bernoulli", "profile": "full-wired-reno",
                         "params": {"loss_pct": 4, "cc": cc}, "seed": 1, "run": cc, "kernel": "k", "flow": flow,
                         "cc": cc if flow == 0 else "reno", "direction": "forward",
                         "goodput_mbit": goodput})  # fmt: skip
    (claim,) = [c for c in claims.load_claims() if c.id == "mobile-westwood-beats-reno-bernoulli"]
    verdict = claims.judge(claim, pd.DataFrame(rows))
    assert [(c.a, c.b, c.outcome) for c in verdict.conditions] == [([0.6], [0.3], "higher")]


def test_a_bad_claims_file_names_the_claim_and_field(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text("- {id: x, experiment: e, source: s, quote: q, paper_numbers: n, metric: speed, "
                    "expect: higher, a: {cc: westwood}, b: {cc: reno}}\n")  # fmt: skip
    with pytest.raises(claims.ClaimsError, match=r"claim 0 \(x\): metric: Input should be 'goodput'"):
        claims.load_claims(path)


def test_receiver_goodput_judges_what_was_delivered():
    flows = _flows({(1, "westwood"): [1.0], (1, "reno"): [1.0]})
    flows.loc[flows["cc"] == "westwood", "recv_goodput_mbit"] = 1.5  # reno's sent data stuck behind a hole
    assert claims.judge(_claim(), flows).verdict == "not reproduced"
    verdict = claims.judge(_claim(metric="recv_goodput"), flows)
    assert verdict.verdict == "reproduced" and "1.5 vs 1 Mbit/s" in verdict.measured


def test_a_westwood_side_takes_the_instrumented_westwood_ml_but_not_the_papers_variant():
    gain = {(1, "reno"): [1.0, 1.1, 0.9]}
    instrumented = claims.judge(_claim(), _flows({(1, "westwood_ml"): [2.0, 2.1, 1.9], **gain}))
    assert instrumented.verdict == "reproduced"
    assert "loss_pct=1: 2 vs 1 Mbit/s (+100%, 3 vs 3 runs" in instrumented.measured
    variant = claims.judge(_claim(), _flows({(1, "westwood_paper"): [2.0, 2.1, 1.9], **gain}))
    assert variant.verdict == "no data"
    # and a side naming westwood_paper does not take mainline Westwood+'s flows
    paper = _claim(a={"cc": "westwood_paper"})
    assert claims.judge(paper, _flows({(1, "westwood"): [2.0, 2.1, 1.9], **gain})).verdict == "no data"


def _run(westwood_cc: str) -> pd.DataFrame:
    """One run: a Westwood-like flow of ``westwood_cc`` (3 Mbit/s) beside a reno flow (1 Mbit/s)."""
    return pd.DataFrame(
        [
            {"params": {"flows.0.cc": westwood_cc}, "flow": flow, "cc": cc, "direction": "forward", "goodput_mbit": g}
            for flow, cc, g in ((0, westwood_cc, 3.0), (1, "reno", 1.0))
        ]
    )


def test_with_cc_without_cc_and_side_params_match_by_algorithm():
    with_westwood = claims.Side(cc="reno", with_cc="westwood")
    without_westwood = claims.Side(cc="reno", without_cc="westwood")
    assert claims.side_value(_run("westwood_ml"), with_westwood, "goodput") == 1.0
    assert math.isnan(claims.side_value(_run("westwood_ml"), without_westwood, "goodput"))
    assert math.isnan(claims.side_value(_run("westwood_paper"), with_westwood, "goodput"))
    assert claims.side_value(_run("westwood_paper"), without_westwood, "goodput") == 1.0
    by_param = claims.Side(cc="westwood", params={"flows.0.cc": "westwood"})
    assert claims.side_value(_run("westwood_ml"), by_param, "goodput") == 3.0
    assert math.isnan(claims.side_value(_run("westwood_paper"), by_param, "goodput"))
    # the algorithm parameters stay out of the condition: westwood_ml runs pair with reno runs
    assert claims.condition_of("e", "quick", {"loss_pct": 5, "cc": "westwood_ml"}) == claims.condition_of(
        "e", "quick", {"loss_pct": 5, "cc": "reno"}
    )


def test_a_condition_says_its_noise_and_the_difference_it_could_detect():
    # 3 runs a side, spread 10 %: Welch's test at 80 % power finds about 30 % (regress's figure)
    result = claims.ConditionResult("loss_pct=1", [1.0, 1.1, 0.9], [1.0, 1.1, 0.9], 0.0, 1.0, "similar")
    text = result.text("goodput")
    assert "noise 10%, detectable " in text
    detectable = int(text.split("detectable ")[1].split("%")[0])
    assert 25 <= detectable <= 40
    single = claims.ConditionResult("loss_pct=1", [1.0], [1.1], -0.09, float("nan"), "similar")
    assert "noise" not in single.text("goodput")
