"""The module's trace (raw/westwood_tb.txt): loader, estimate and ssthresh metrics, plots and the run report."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from analysis.figures import plots
from analysis.raw.loaders import WESTWOOD_CONG_FIELDS, WESTWOOD_SAMPLE_FIELDS, LoadError, load_westwood_tb
from analysis.runs import metrics
from analysis.runs.analyze import FLOW_COLUMNS, analyze_run
from testbed.report.pages.runpage import report_run
from testbed.scenario.algorithms import REGISTRY

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = FIXTURES / "westwood_tb"
TRACE = FIXTURE / "raw" / "westwood_tb.txt"
T0 = 40.000098758  # the fixture manifest's t0_monotonic
#: the full run's sender goodput, from its untrimmed capture (tests/fixtures/README.md)
SENDER_GOODPUT_MBIT = 5.478344219


def raw_events(name: str) -> list[dict]:
    """The trace's events of one kind, read independently of the loader."""
    found = []
    for line in TRACE.read_text().splitlines():
        match = re.search(r"\s([\d.]+): (westwood_tb_\w+): (.*)$", line)
        if match and match.group(2) == name:
            found.append({"t": float(match.group(1)), **dict(re.findall(r"(\w+)=(\S+)", match.group(3)))})
    return found


@pytest.fixture
def run_dir(tmp_path) -> Path:
    target = tmp_path / "cc=westwood_paper" / "seed=1"
    shutil.copytree(FIXTURE, target)
    return target


# ------------------------------------------------------------------------------------------ loader


def test_loader_reads_samples_and_congestion_events():
    trace = load_westwood_tb(TRACE)
    assert (len(trace.samples), len(trace.events)) == (93, 2)
    assert trace.problems == []
    assert list(trace.samples.columns) == ["t_mono_s", *WESTWOOD_SAMPLE_FIELDS]
    assert list(trace.events.columns) == ["t_mono_s", *WESTWOOD_CONG_FIELDS]
    assert set(trace.samples["variant"]) == set(trace.events["variant"]) == {"paper"}
    assert list(trace.events["kind"]) == ["recovery", "complete_cwr"]
    assert set(trace.samples["sport"]) == {40000} and set(trace.samples["dport"]) == {5201}
    first = trace.samples.iloc[0]
    assert first["t_mono_s"] == pytest.approx(40.800703)
    assert (first["acked_bytes"], first["win_us"], first["est_Bps"], first["cwnd"]) == (1448, 116253, 12455, 10)
    recovery = trace.events.iloc[0]
    assert (recovery["cwnd_before"], recovery["ssthresh_after"], recovery["est_Bps"]) == (324, 14, 215099)
    assert recovery["rtt_min_us"] == 98633


def test_infinite_ssthresh_is_nan():
    trace = load_westwood_tb(TRACE)
    infinite = [e["ssthresh"] == "2147483647" for e in raw_events("westwood_tb_sample")]
    assert any(infinite) and not all(infinite)
    assert list(trace.samples["ssthresh"].isna()) == infinite
    assert math.isnan(trace.events["ssthresh_before"].iloc[0])  # the first recovery left slow start
    assert trace.events["ssthresh_before"].iloc[1] == 14
    assert trace.samples["ssthresh"].dropna().eq(14).all()


def test_fields_are_parsed_generically(tmp_path):
    line = TRACE.read_text().splitlines()[0]
    path = tmp_path / "westwood_tb.txt"
    path.write_text(line + " newer_field=0x10\n")
    samples = load_westwood_tb(path).samples
    assert samples["newer_field"].iloc[0] == 16
    assert list(samples.columns[: len(WESTWOOD_SAMPLE_FIELDS) + 1]) == ["t_mono_s", *WESTWOOD_SAMPLE_FIELDS]


def test_a_line_cut_short_is_skipped_and_reported(tmp_path):
    text = TRACE.read_text()
    path = tmp_path / "raw" / "westwood_tb.txt"
    path.parent.mkdir()
    path.write_text(text[:-30])  # the last sample, cut inside its ssthresh field
    trace = load_westwood_tb(path)
    assert len(trace.samples) == 92 and trace.incomplete_lines == 1
    assert trace.problems == ["raw/westwood_tb.txt: 1 events cut short (skipped)"]

    lines = text.splitlines(keepends=True)
    lines[10] = lines[10].split(" est_Bps=")[0] + "\n"  # a line that lost its last fields
    path.write_text("".join(lines))
    trace = load_westwood_tb(path)
    assert len(trace.samples) + len(trace.events) == 94 and trace.incomplete_lines == 1


def test_an_empty_or_missing_trace_is_a_clear_error(tmp_path):
    empty = tmp_path / "raw" / "westwood_tb.txt"
    empty.parent.mkdir()
    empty.write_text("")
    with pytest.raises(LoadError, match=r"^raw/westwood_tb.txt: no westwood_tb events \(empty trace\)$"):
        load_westwood_tb(empty)
    empty.write_text(TRACE.read_text().splitlines()[0][:80])
    with pytest.raises(LoadError, match="no westwood_tb events .*1 events cut short"):
        load_westwood_tb(empty)
    with pytest.raises(LoadError, match="missing"):
        load_westwood_tb(tmp_path / "nothing.txt")


# ----------------------------------------------------------------------------------------- metrics


def test_estimate_vs_goodput():
    samples = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "est_Bps": [125_000, 250_000, 1_000_000, 1_250_000]})
    # mean estimate from t = 2 s on: 1 125 000 B/s = 9 Mbit/s
    assert metrics.mean_estimate_mbit(samples, 2.0) == pytest.approx(9.0)
    assert metrics.estimate_vs_goodput(samples, 10.0, 2.0) == pytest.approx(-0.1)
    assert metrics.estimate_vs_goodput(samples, 7.5, 2.0) == pytest.approx(0.2)
    assert math.isnan(metrics.estimate_vs_goodput(samples, 10.0, 3.5))  # no sample that late
    assert math.isnan(metrics.estimate_vs_goodput(samples, None, 0.0))
    assert math.isnan(metrics.estimate_vs_goodput(samples, 0.0, 0.0))
    # without t_s the trace's own clock
    on_trace_clock = samples.rename(columns={"t_s": "t_mono_s"})
    assert metrics.estimate_vs_goodput(on_trace_clock, 10.0, 2.0) == pytest.approx(-0.1)


def test_goodput_limit_of_a_bottleneck():
    assert metrics.tcp_goodput_limit_mbit(10, 1448) == pytest.approx(10 * 1448 / 1514)


def cong(t_s, kind, ssthresh_after, est_Bps, rtt_min_us, variant="paper", sport=40000):
    return {
        "t_s": t_s,
        "variant": variant,
        "kind": kind,
        "sport": sport,
        "ssthresh_after": ssthresh_after,
        "est_Bps": est_Bps,
        "rtt_min_us": rtt_min_us,
    }


def test_paper_ssthresh_check_gives_the_difference_in_segments():
    events = pd.DataFrame(
        [
            cong(1.0, "recovery", 100, 1_448_000, 100_000),  # BWE * RTT_min = 144 800 bytes = 100 segments
            cong(2.0, "complete_cwr", 100, 1_448_000, 100_000),  # no decision: not checked
            cong(3.0, "loss", 53, 724_000, 100_000),  # 50 expected: 3 segments too many
            cong(4.0, "recovery", 7, 1_448_000, 100_000, variant="ml"),  # mainline halves cwnd: not checked
            cong(5.0, "recovery", 2, 10_000, 100_000),  # 0.69 segments: the floor
            cong(6.0, "recovery", 2, 10_000, 0),  # no RTT sample yet: the floor
        ]
    )
    check = metrics.paper_ssthresh_check(events, pd.DataFrame(), mss_bytes=1448)
    assert list(check.columns) == metrics.PAPER_SSTHRESH_CHECK_COLUMNS
    assert list(check["t_s"]) == [1.0, 3.0, 5.0, 6.0]
    assert list(check["kind"]) == ["recovery", "loss", "recovery", "recovery"]
    assert list(check["expected"]) == pytest.approx([100, 50, 2, 2])
    assert list(check["diff_segments"]) == pytest.approx([0, 3, 0, 0])


def test_paper_ssthresh_check_takes_a_missing_estimate_from_the_last_sample():
    events = pd.DataFrame([cong(2.5, "recovery", 99, math.nan, math.nan)])
    samples = pd.DataFrame(
        {
            "t_s": [1.0, 2.0, 3.0],
            "sport": [40000, 40000, 40000],
            "est_Bps": [100_000, 1_448_000, 5_000_000],
            "rtt_min_us": [120_000, 100_000, 90_000],
        }
    )
    row = metrics.paper_ssthresh_check(events, samples, mss_bytes=1448).iloc[0]
    assert (row["est_Bps"], row["rtt_min_us"], row["expected"]) == (1_448_000, 100_000, pytest.approx(100))
    assert row["diff_segments"] == pytest.approx(-1)
    assert math.isnan(metrics.paper_ssthresh_check(events, pd.DataFrame(), 1448)["expected"].iloc[0])


def test_paper_ssthresh_check_on_the_fixture():
    trace = load_westwood_tb(TRACE)
    check = metrics.paper_ssthresh_check(trace.events, trace.samples, mss_bytes=1448)
    assert len(check) == 1
    row = check.iloc[0]
    assert row["t_s"] == pytest.approx(41.403554)  # no t_s column: the trace's clock
    assert row["expected"] == pytest.approx(215099 * 98633 / 1e6 / 1448)
    assert row["ssthresh_after"] == 14 and -1 < row["diff_segments"] <= 0


# ------------------------------------------------------------------------------------------- plots


def colours_in(png: bytes) -> set[tuple[int, int, int]]:
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    rgb = (pixels[..., :3] * 255).round().astype(int).reshape(-1, 3)
    return {tuple(int(c) for c in row) for row in np.unique(rgb, axis=0)}


def test_plots_render_in_the_registry_colour_and_survive_no_data():
    trace = load_westwood_tb(TRACE)
    samples = trace.samples.assign(conn="c0", t_s=trace.samples["t_mono_s"] - T0)
    events = trace.events.assign(conn="c0", t_s=trace.events["t_mono_s"] - T0)

    def metric(frame: pd.DataFrame, name: str, values: pd.Series) -> pd.DataFrame:
        return pd.DataFrame({"conn": "c0", "t_s": frame["t_s"], "metric": name, "value": values})

    series = pd.concat(
        [
            metric(samples, "bwe_mbit", samples["est_Bps"] * 8e-6),
            metric(samples, "bwe_sample_mbit", samples["sample_Bps"] * 8e-6),
            metric(events, "ssthresh_pkts", events["ssthresh_after"]),
        ]
    )
    conns = pd.DataFrame({"conn": ["c0"], "cc": ["westwood_paper"], "recv_goodput_mbit": [5.43]})
    hex_colour = REGISTRY["westwood_paper"].colour
    colour = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    for png in [
        plots.estimate_png(series, conns, 10.0),
        plots.real_ssthresh_png(series, conns, events, samples),
    ]:
        assert png.startswith(b"\x89PNG") and colour in colours_in(png)
    nothing = series.iloc[0:0]
    assert plots.estimate_png(nothing, conns, 10.0).startswith(b"\x89PNG")
    assert plots.real_ssthresh_png(nothing, conns, events.iloc[0:0]).startswith(b"\x89PNG")


# ------------------------------------------------------------------------------------- analyze_run


def test_analyze_run_adds_the_estimate_and_the_real_ssthresh(run_dir):
    analysis = report_run(run_dir)
    # the fixture has no capture, tcp_probe or tc stats: said so, and the rest analysed
    assert "raw/rl.pcap: missing" in analysis.problems
    assert not [p for p in analysis.problems if "westwood_tb" in p]

    series = pd.read_csv(run_dir / "series.csv")
    samples = raw_events("westwood_tb_sample")
    bwe = series[series["metric"] == "bwe_mbit"]
    assert len(bwe) == len(samples) == len(series[series["metric"] == "bwe_sample_mbit"]) == 93
    assert bwe["t_s"].iloc[0] == pytest.approx(40.800703 - T0)
    assert bwe["value"].iloc[0] == pytest.approx(12455 * 8 / 1e6)
    ssthresh = series[series["metric"] == "ssthresh_pkts"]
    assert list(ssthresh["value"]) == [14, 14]
    assert ssthresh["t_s"].iloc[0] == pytest.approx(41.403554 - T0)

    flows = pd.read_csv(run_dir / "flows.csv")
    assert list(flows.columns) == [*FLOW_COLUMNS, "bwe_mbit_final", "bwe_error_pct"]
    late = [int(s["est_Bps"]) for s in samples if s["t"] - T0 >= 5.0]  # the last half of 0..10 s
    assert flows["bwe_mbit_final"].iloc[0] == pytest.approx(sum(late) / len(late) * 8 / 1e6)
    assert math.isnan(flows["bwe_error_pct"].iloc[0])  # no capture, no sender goodput: n/a, not made up

    events = analysis.congestion_events
    assert list(events["kind"]) == ["recovery", "complete_cwr"]
    assert events["expected"].iloc[0] == pytest.approx(215099 * 98633 / 1e6 / 1448)
    assert math.isnan(events["expected"].iloc[1])

    page = (run_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6  # cwnd srtt acked interval estimate ssthresh
    for text in [
        'alt="bandwidth estimate vs time"',
        'alt="cwnd and real ssthresh vs time"',
        "is the <b>real</b> one",
        "Congestion events",
        "complete_cwr",
        "infinite",
        "14.65",
        "1448/1514 = 9.56 Mbit/s",  # the goodput limit of the 10 Mbit/s bottleneck
    ]:
        assert text in page, text
    assert ">nan<" not in page.lower()


def test_the_estimate_error_is_against_the_sender_goodput(run_dir, monkeypatch):
    monkeypatch.setattr(metrics, "goodput_mbit", lambda *args: SENDER_GOODPUT_MBIT)
    row = analyze_run(run_dir, write=False).flows.iloc[0]
    assert row["bwe_error_pct"] == pytest.approx((row["bwe_mbit_final"] / SENDER_GOODPUT_MBIT - 1) * 100)
    assert 0 < row["bwe_error_pct"] < 20


def test_a_broken_trace_is_reported_and_the_rest_analysed(run_dir):
    trace = run_dir / "raw" / "westwood_tb.txt"
    trace.write_text(trace.read_text()[:-30])
    analysis = report_run(run_dir)
    assert "raw/westwood_tb.txt: 1 events cut short (skipped)" in analysis.problems
    assert (analysis.series["metric"] == "bwe_mbit").sum() == 92

    trace.write_text("")
    analysis = report_run(run_dir)
    assert "raw/westwood_tb.txt: no westwood_tb events (empty trace)" in analysis.problems
    assert "bwe_mbit_final" not in analysis.flows.columns
    assert (run_dir / "report.html").read_text().count("data:image/png;base64,") == 4

    trace.unlink()
    analysis = report_run(run_dir)
    assert any(p.startswith("raw/westwood_tb.txt: missing") for p in analysis.problems), analysis.problems


def test_a_run_without_the_module_is_unchanged(tmp_path):
    run_dir = tmp_path / "default" / "seed=1"
    shutil.copytree(FIXTURES / "run-westwood", run_dir)
    assert json.loads((run_dir / "manifest.json").read_text())["connections"][0]["cc"] == "westwood"
    analysis = report_run(run_dir)
    assert analysis.problems == [] and analysis.westwood_samples is None
    assert list(pd.read_csv(run_dir / "flows.csv").columns) == FLOW_COLUMNS
    assert set(analysis.series["metric"]) == {
        "cwnd_pkts",
        "ssthresh_current_pkts",
        "srtt_ms",
        "recv_goodput_mbit",
        "acked_mb",
    }
    page = (run_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "module trace" not in page
