"""The verdict logic of testbed regress (analysis/kernels/regression.py) on synthetic samples."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis.kernels import regression
from analysis.verdicts import stats


def test_no_difference_is_no_change():
    same = [9.0, 9.1, 8.9, 9.05, 8.95]
    result = regression.compare_one("p", "reno", "goodput", same, list(reversed(same)))
    assert result.verdict == "no change" and result.change == pytest.approx(0.0)


def test_a_ten_percent_drop_is_a_regression_and_a_gain_an_improvement():
    baseline = [9.0, 9.1, 8.9, 9.05, 8.95]
    dropped = [v * 0.9 for v in baseline]
    result = regression.compare_one("p", "reno", "goodput", baseline, dropped)
    assert result.verdict == "regression" and result.change == pytest.approx(-0.10)
    assert result.p_value < 0.001 and result.cohen_d < -5
    assert result.detectable < 0.03  # 0.6 % noise: a 10 % change is far above what n = 5 resolves
    assert regression.compare_one("p", "reno", "goodput", dropped, baseline).verdict == "improvement"
    # retransmissions: higher is worse
    assert (
        regression.compare_one("p", "reno", "retrans_ratio", [0.01] * 2 + [0.011] * 3, [0.02] * 2 + [0.021] * 3).verdict
        == "regression"
    )


def test_small_or_insignificant_changes_do_not_count():
    baseline = [9.0, 9.1, 8.9, 9.05, 8.95]
    # 3 % lower, clearly significant, but under the 5 % practical threshold
    assert regression.compare_one("p", "reno", "goodput", baseline, [v * 0.97 for v in baseline]).verdict == "no change"
    # 8 % lower on average but with 20 % noise: Welch's test does not count it
    noisy = [10.5, 6.0, 9.8, 7.2, 8.0]
    assert regression.compare_one("p", "reno", "goodput", baseline, noisy).verdict == "no change"
    # a retransmission ratio going from 0.01 % to 0.03 %: tripled, but below the 0.1 point floor
    tiny = regression.compare_one("p", "reno", "retrans_ratio", [0.0001] * 5, [0.0003, 0.0003, 0.0003, 0.0003, 0.00031])
    assert tiny.verdict == "no change"


def test_noise_at_the_default_repetitions_gives_no_false_alarms():
    rng = random.Random(7)
    alarms = 0
    for _ in range(300):
        # the same kernel twice: 3 % noise, more than the measured 1.8 %
        draw = lambda: [rng.gauss(9.0, 0.27) for _ in range(regression.DEFAULT_REPEAT)]  # noqa: E731
        alarms += regression.compare_one("p", "reno", "goodput", draw(), draw()).verdict == "regression"
    assert alarms <= 3, f"{alarms} false regressions in 300 comparisons of identical kernels"


def test_the_default_repetitions_resolve_five_percent_at_the_measured_noise():
    rng = random.Random(3)
    baseline = [rng.gauss(9.0, 0.16) for _ in range(regression.DEFAULT_REPEAT)]  # 1.8 %
    candidate = [rng.gauss(9.0, 0.16) for _ in range(regression.DEFAULT_REPEAT)]
    assert stats.detectable_change(baseline, candidate) < 0.05


def test_too_few_runs_and_compare_over_frames():
    assert regression.compare_one("p", "reno", "goodput", [9.0], [8.0, 8.1]).verdict == "too few runs"
    rows = lambda side, values: pd.DataFrame(  # noqa: E731
        [
            {"run": f"{side}{i}", "point": "dumbbell", "cc": "reno", "metric": m, "value": v}
            for i, v in enumerate(values)
            for m in ("goodput", "jain")
        ]
    )
    base, cand = rows("b", [9.0, 9.1, 8.9]), rows("c", [8.0, 8.1, 7.9])
    base.loc[base["metric"] == "jain", "value"] = math.nan
    cand.loc[cand["metric"] == "jain", "value"] = math.nan
    [only] = regression.compare(base, cand)  # no Jain index with one flow: not compared
    assert only.metric == "goodput" and only.verdict == "regression"
    assert regression.counts([only]) == {"regression": 1}


def test_run_metrics_from_flow_rows():
    flows = pd.DataFrame(
        [
            {
                "run": "r1",
                "point": "pt",
                "cc": "reno",
                "direction": "forward",
                "goodput_mbit": g,
                "sent_bytes": 100.0,
                "retrans_bytes": 5.0,
            }
            for g in (1.0, 3.0)
        ]
        + [
            {
                "run": "r1",
                "point": "pt",
                "cc": "reno",
                "direction": "reverse",
                "goodput_mbit": 9.0,
                "sent_bytes": 100.0,
                "retrans_bytes": 50.0,
            }
        ]
    )
    values = regression.run_metrics(flows).set_index("metric")["value"]
    assert values["goodput"] == 2.0 and values["total_goodput"] == 4.0
    assert values["jain"] == pytest.approx(16 / (2 * 10)) and values["retrans_ratio"] == pytest.approx(0.05)


def test_a_single_flow_is_compared_once_per_metric():
    """One forward flow: its total goodput is its goodput (and it has no Jain's index), so neither is a
    comparison of its own; the family Holm adjusts over is not padded with copies."""
    flows = pd.DataFrame(
        [
            {
                "run": "r1",
                "point": "pt",
                "cc": "reno",
                "direction": "forward",
                "goodput_mbit": 2.0,
                "sent_bytes": 100.0,
                "retrans_bytes": 5.0,
            }
        ]
    )
    assert sorted(regression.run_metrics(flows)["metric"]) == ["goodput", "retrans_ratio"]


# New Reno's goodput on a wireless point with the seeded timed channel (seeds 1 and 2), the same
# kernel on both sides, SACK off on the candidate (measured in a TCG guest, testbed regress)
SEEDED_BASELINE = [1.3325, 0.6015]
SEEDED_SACK_OFF = [0.6499, 0.3239]


def test_pairs_that_share_a_seed_take_out_the_seeds_spread():
    welch = regression.compare_one("p", "reno", "goodput", SEEDED_BASELINE, SEEDED_SACK_OFF)
    paired = regression.compare_one("p", "reno", "goodput", SEEDED_BASELINE, SEEDED_SACK_OFF, paired=True)
    assert welch.test == "Welch" and welch.p_value > 0.3 and welch.verdict == "no change"
    assert paired.test == "paired" and paired.p_value < 0.05 and paired.verdict == "regression"
    assert paired.change == pytest.approx(-0.496, abs=1e-3)
    # the same drop with the pairs' ratios far apart (0.3 and 0.8) is not consistent enough
    scattered = regression.compare_one("p", "reno", "goodput", SEEDED_BASELINE, [0.40, 0.48], paired=True)
    assert scattered.verdict == "no change"


def test_a_paired_ratio_at_zero_is_compared_by_difference():
    result = regression.compare_one("p", "reno", "retrans_ratio", [0.0, 0.01, 0.02], [0.02, 0.031, 0.04], paired=True)
    assert result.test == "paired" and result.verdict == "regression" and not math.isnan(result.detectable)


def test_runs_pair_by_seed_when_both_sides_have_the_same_seeds_once():
    def frame(side, seeds, values):
        return pd.DataFrame(
            [
                {"run": f"{side}{s}", "point": "pt", "seed": s, "cc": "reno", "metric": "goodput", "value": v}
                for s, v in zip(seeds, values, strict=True)
            ]
        )

    # the candidate's runs listed in another order: they are matched by seed, not by position
    [paired] = regression.compare(frame("b", [1, 2], SEEDED_BASELINE), frame("c", [2, 1], SEEDED_SACK_OFF[::-1]))
    assert paired.test == "paired" and paired.verdict == "regression"
    assert paired.baseline == SEEDED_BASELINE and paired.candidate == SEEDED_SACK_OFF
    [unpaired] = regression.compare(frame("b", [1, 2], SEEDED_BASELINE), frame("c", [1, 3], SEEDED_SACK_OFF))
    assert unpaired.test == "Welch" and unpaired.verdict == "no change"
    # the candidate's repetition 2 failed (its guest did not boot): seeds 1 and 3 still pair up
    [partial] = regression.compare(
        frame("b", [1, 2, 3], [1.3325, 5.0, 0.6015]), frame("c", [3, 1], SEEDED_SACK_OFF[::-1])
    )
    assert partial.test == "paired" and partial.baseline == SEEDED_BASELINE and partial.verdict == "regression"


def test_paired_noise_at_the_default_repetitions_gives_no_false_alarms_and_resolves_five_percent():
    rng = random.Random(11)
    alarms, detectable = 0, []
    for _ in range(300):
        # pairs that share nothing (unseeded loss): 3 % noise on each side, more than the measured 1.8 %
        draw = lambda: [rng.gauss(9.0, 0.27) for _ in range(regression.DEFAULT_REPEAT)]  # noqa: E731
        result = regression.compare_one("p", "reno", "goodput", draw(), draw(), paired=True)
        alarms += result.verdict == "regression"
        quiet = [rng.gauss(9.0, 0.16) for _ in range(2 * regression.DEFAULT_REPEAT)]  # 1.8 %
        half = regression.DEFAULT_REPEAT
        detectable.append(
            regression.compare_one("p", "reno", "goodput", quiet[:half], quiet[half:], paired=True).detectable
        )
    assert alarms <= 3, f"{alarms} false regressions in 300 paired comparisons of identical kernels"
    assert sorted(detectable)[len(detectable) // 2] < 0.05


def test_the_detectable_change_is_one_the_alarm_finds_among_its_family():
    """The printed detectable change is at the level Holm asks of a change alone in its family (5 % / the
    comparisons), so a change of that size raises the alarm most of the time; one of the size a lone test
    at 5 % resolves (what the column printed before) mostly does not."""
    rng = random.Random(5)
    n, family, noise = regression.DEFAULT_REPEAT, 12, 0.05  # log-ratio noise per pair

    def alarm_rate(log_change: float) -> tuple[float, float]:
        alarms, printed = 0, []
        for _ in range(150):
            found = [
                regression.compare_one(
                    f"p{k}",
                    "reno",
                    "goodput",
                    [1.0] * n,
                    [math.exp((log_change if k == 0 else 0.0) + rng.gauss(0, noise)) for _ in range(n)],
                    paired=True,
                )
                for k in range(family)
            ]
            target = regression.adjust(found)[0]
            alarms += target.verdict == "regression"
            printed.append(math.log1p(target.detectable))
        return alarms / 150, sorted(printed)[len(printed) // 2]

    at_family = stats.power_factor(n - 1, regression.ALPHA / family) * noise / math.sqrt(n)
    rate, printed = alarm_rate(-at_family)
    assert 0.55 <= rate <= 0.95, f"a change of the detectable size alarmed in {rate:.0%}"
    assert 0.8 <= printed / at_family <= 1.1  # the column says that size (its noise estimated from the runs)
    lone = stats.power_factor(n - 1) * noise / math.sqrt(n)
    assert alarm_rate(-lone)[0] < 0.35


def test_latency_percentiles_are_metrics_where_lower_is_better():
    """A run's ping and requests samples become p50 and p99 metrics (analysis.kernels.regression.LATENCY_METRICS);
    a slower ping is a regression."""

    def run(seed: int, ping_ms: float):
        samples = pd.DataFrame(
            {
                "id": "p1",
                "kind": "ping",
                "flow": 1,
                "t_s": range(100),
                "value_ms": [ping_ms + i / 100 for i in range(100)],
            }
        )
        manifest = {"point_id": "bb.discipline=fq_codel", "seed": seed}
        return SimpleNamespace(status="complete", latency_samples=samples, manifest=manifest, run_dir=f"r{seed}")

    base = regression.latency_metrics([run(s, 50.0) for s in (1, 2, 3)])
    assert set(base["metric"]) == {"ping_p50_ms", "ping_p99_ms"} and set(base["cc"]) == {"ping"}
    assert base[base["metric"] == "ping_p50_ms"]["value"].iloc[0] == pytest.approx(50.495)
    slower = regression.latency_metrics([run(s, 80.0 + s) for s in (1, 2, 3)])
    (p99,) = [c for c in regression.compare(base, slower) if c.metric == "ping_p99_ms"]
    assert p99.verdict == "regression", p99


def test_holm_keeps_a_whole_aa_run_free_of_alarms_at_five_percent():
    """400 simulated A/A runs of 40 comparisons each (5 paired repetitions, noise as wide as 20 %, so the
    5 % practical threshold does not hide the noise): unadjusted, most runs raise an alarm somewhere;
    Holm-adjusted (``compare``'s family), at most 5 % of runs do, less the simulation's chance (binomial,
    3.1 standard deviations: 8.4 %)."""
    rng = random.Random(11)
    raw_runs = adjusted_runs = 0
    for _ in range(400):
        comparisons = []
        for i in range(40):
            base, same = [rng.gauss(9.0, 1.8) for _ in range(5)], [rng.gauss(9.0, 1.8) for _ in range(5)]
            comparisons.append(regression.compare_one(f"p{i}", "reno", "goodput", base, same, paired=True))
        raw_runs += any(c.verdict != "no change" for c in comparisons)
        adjusted_runs += any(c.verdict != "no change" for c in regression.adjust(comparisons))
    assert raw_runs / 400 > 0.5
    assert adjusted_runs / 400 <= 0.05 + 3.1 * math.sqrt(0.05 * 0.95 / 400), adjusted_runs
