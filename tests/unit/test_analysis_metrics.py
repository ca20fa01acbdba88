"""analysis.runs.metrics on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.runs.metrics import (
    flow_totals,
    goodput_mbit,
    interval_boundaries,
    jain_by_direction,
    jain_index,
    receiver_goodput_mbit,
    retransmission_ratio,
    split_into_intervals,
)
from analysis.verdicts.stats import power_factor, seed_stats, student_t_cdf, student_t_quantile


def test_goodput_takes_retransmissions_off():
    # 10 MB sent of which 1 MB twice, over 9 s: 9e6 bytes * 8 / 9 s = 8 Mbit/s
    assert goodput_mbit(10_000_000, 1_000_000, 9.0) == pytest.approx(8.0)
    assert goodput_mbit(10_000_000, 0, 10.0) == pytest.approx(8.0)


def test_goodput_is_undefined_without_a_transfer_time():
    assert math.isnan(goodput_mbit(1448, 0, 0.0))
    assert math.isnan(goodput_mbit(1448, 0, None))
    assert math.isnan(goodput_mbit(None, 0, 1.0))
    assert math.isnan(goodput_mbit(float("nan"), 0, 1.0))


def test_receiver_goodput_and_retransmission_ratio():
    assert receiver_goodput_mbit(1_250_000, 2.0) == pytest.approx(5.0)
    assert math.isnan(receiver_goodput_mbit(1_250_000, 0))
    assert retransmission_ratio(1_000, 50_000) == pytest.approx(0.02)
    assert math.isnan(retransmission_ratio(0, 0))


def test_jain_is_one_for_equal_shares_and_one_over_n_when_one_flow_takes_all():
    assert jain_index([2.5, 2.5, 2.5, 2.5]) == pytest.approx(1.0)
    assert jain_index([10.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([7.0, 0, 0, 0, 0]) == pytest.approx(0.2)
    # (1+2+3)^2 / (3 * (1+4+9)) = 36/42
    assert jain_index([1, 2, 3]) == pytest.approx(36 / 42)
    assert jain_index([5.0]) == pytest.approx(1.0)


def test_jain_is_undefined_for_missing_or_all_zero_shares():
    assert math.isnan(jain_index([]))
    assert math.isnan(jain_index([1.0, float("nan")]))
    assert math.isnan(jain_index([0.0, 0.0]))
    with pytest.raises(ValueError):
        jain_index([1.0, -1.0])


def samples(rows):
    return pd.DataFrame(rows, columns=["t_start_s", "t_end_s", "bytes"])


def test_interval_split_is_proportional_at_boundaries():
    # [0,1): 1000 B; [1,2.5): 3000 B -> 2000 B in [1,2), 1000 B in [2,3); [3,4) is not covered
    result = split_into_intervals(samples([(0, 1, 1000), (1, 2.5, 3000)]), [0, 1, 2, 3, 4])
    assert result["bytes"].tolist()[:3] == pytest.approx([1000, 2000, 1000])
    assert math.isnan(result["bytes"].iloc[3]) and math.isnan(result["goodput_mbit"].iloc[3])
    assert result["covered_s"].tolist() == pytest.approx([1, 1, 0.5, 0])
    # goodput is per interval length: 1000 B in 1 s = 0.008 Mbit/s
    assert result["goodput_mbit"].tolist()[:3] == pytest.approx([0.008, 0.016, 0.008])


def test_interval_split_of_a_sample_over_several_intervals_and_off_the_grid():
    # 4000 B over [0.5, 2.5): a quarter in [0,1), half in [1,2), a quarter in [2,3)
    result = split_into_intervals(samples([(0.5, 2.5, 4000), (10, 11, 99)]), [0, 1, 2, 3])
    assert result["bytes"].tolist() == pytest.approx([1000, 2000, 1000])
    assert result["bytes"].sum() == pytest.approx(4000)  # the sample outside the intervals is left out


def test_interval_split_with_uneven_intervals_like_the_papers_250_s():
    edges = interval_boundaries(0, 1000, 250)
    assert edges == [0, 250, 500, 750, 1000]
    rows = [(t, t + 1, 125_000) for t in range(0, 1000)]  # 1 Mbit/s throughout
    result = split_into_intervals(samples(rows), edges)
    assert result["goodput_mbit"].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert interval_boundaries(0, 10.5, 2) == [0, 2, 4, 6, 8, 10, 10.5]


def test_zero_length_samples_go_to_their_interval():
    result = split_into_intervals(samples([(1.5, 1.5, 10)]), [0, 1, 2])
    assert result["bytes"].tolist()[1] == 10 and math.isnan(result["bytes"].iloc[0])


def test_student_t_quantiles():
    assert student_t_quantile(0.975, 1) == pytest.approx(12.706204736, rel=1e-9)
    assert student_t_quantile(0.975, 2) == pytest.approx(4.302652730, rel=1e-9)
    assert student_t_quantile(0.975, 9) == pytest.approx(2.262157163, rel=1e-9)
    assert student_t_quantile(0.975, 1000) == pytest.approx(1.962339, rel=1e-6)
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.776445105, rel=1e-9)
    assert student_t_cdf(0.0, 3) == pytest.approx(0.5)


@pytest.mark.parametrize(("df", "alpha", "sides"), [(4, 0.05, 2), (4, 0.05 / 34, 2), (2, 0.05, 1), (1, 0.05, 2)])
def test_the_power_factors_shift_is_found_with_the_power_asked(df, alpha, sides):
    """A true difference of power_factor standard errors is found 80 % of the time by the t-test it names
    (simulated: the statistic's numerator normal, its noise estimate chi-square); at few runs and Holm's
    level the usual shortcut (the two t quantiles added) is found less often."""
    rng = np.random.default_rng(7)
    critical = student_t_quantile(1 - alpha / sides, df)

    def found(shift: float) -> float:
        t = (rng.standard_normal(400_000) + shift) / np.sqrt(rng.chisquare(df, 400_000) / df)
        return float(np.mean(t > critical) + (np.mean(t < -critical) if sides == 2 else 0.0))

    assert found(power_factor(df, alpha, 0.8, sides)) == pytest.approx(0.8, abs=0.005)
    if alpha < 0.01:
        assert found(critical + student_t_quantile(0.8, df)) < 0.75


def test_one_seed_gives_no_interval():
    stats = seed_stats([6.29])
    assert (stats.n, stats.mean, stats.min, stats.max) == (1, 6.29, 6.29, 6.29)
    assert math.isnan(stats.ci_low) and math.isnan(stats.ci_high)


def test_three_seeds_give_a_student_t_interval():
    stats = seed_stats([1.0, 2.0, 3.0])
    # mean 2, sample sd 1, t(0.975, 2) = 4.302653: half width 4.302653 / sqrt(3) = 2.484138
    assert stats.mean == pytest.approx(2.0)
    assert (stats.min, stats.max) == (1.0, 3.0)
    assert stats.ci_half_width == pytest.approx(2.484138, rel=1e-6)
    assert stats.ci_low == pytest.approx(2.0 - 2.484138, rel=1e-6)


def test_missing_seeds_are_left_out_and_none_give_nan():
    stats = seed_stats([4.0, float("nan"), None, 6.0])
    assert stats.n == 2 and stats.mean == pytest.approx(5.0)
    # n = 2: sd = sqrt(2), t(0.975, 1) = 12.7062: half width 12.7062 * sqrt(2) / sqrt(2)
    assert stats.ci_half_width == pytest.approx(12.706205, rel=1e-6)
    empty = seed_stats([])
    assert empty.n == 0 and math.isnan(empty.mean) and math.isnan(empty.ci_low)


def connections(**columns):
    base = {
        "flow": [0],
        "replica": [0],
        "cc": ["westwood"],
        "direction": ["forward"],
        "sent_bytes": [1000],
        "retrans_bytes": [0],
        "transfer_s": [1.0],
        "recv_bytes": [1000],
        "recv_s": [1.0],
    }
    base.update(columns)
    return pd.DataFrame(base)


def test_a_flows_on_periods_add_up_bytes_and_times():
    # one flow, two ON periods: (1e6 - 1e5 + 2e6 - 0) B over 1 + 2 s -> 2.9e6 * 8 / 3 s
    frame = connections(
        flow=[0, 0],
        replica=[0, 0],
        cc=["reno"] * 2,
        direction=["reverse"] * 2,
        sent_bytes=[1_000_000, 2_000_000],
        retrans_bytes=[100_000, 0],
        transfer_s=[1.0, 2.0],
        recv_bytes=[900_000, 2_000_000],
        recv_s=[1.0, 2.0],
    )
    flows = flow_totals(frame)
    assert len(flows) == 1
    assert flows["goodput_mbit"].iloc[0] == pytest.approx(2.9e6 * 8 / 3 / 1e6)
    assert flows["recv_goodput_mbit"].iloc[0] == pytest.approx(2.9e6 * 8 / 3 / 1e6)
    assert flows["retrans_ratio"].iloc[0] == pytest.approx(0.1 / 3)
    assert flows["connections"].iloc[0] == 2


def test_a_flow_with_a_missing_connection_has_no_goodput():
    frame = connections(
        flow=[0, 0],
        replica=[0, 0],
        cc=["reno"] * 2,
        direction=["forward"] * 2,
        sent_bytes=[1000, None],
        retrans_bytes=[0, None],
        transfer_s=[1.0, None],
        recv_bytes=[1000, 1000],
        recv_s=[1.0, 1.0],
    )
    flows = flow_totals(frame)
    assert math.isnan(flows["goodput_mbit"].iloc[0])
    assert flows["recv_goodput_mbit"].iloc[0] == pytest.approx(0.008)


def test_jain_by_direction_only_where_there_are_several_flows():
    frame = connections(
        flow=[0, 1, 2],
        replica=[0, 0, 0],
        cc=["westwood", "reno", "reno"],
        direction=["forward", "forward", "reverse"],
        sent_bytes=[3000, 1000, 500],
        retrans_bytes=[0, 0, 0],
        transfer_s=[1.0] * 3,
        recv_bytes=[1] * 3,
        recv_s=[1.0] * 3,
    )
    result = jain_by_direction(flow_totals(frame))
    assert set(result) == {"forward"}
    assert result["forward"] == pytest.approx(16 / 20)  # (3+1)^2 / (2 (9+1))
