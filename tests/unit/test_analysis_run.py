"""analysis.runs.analyze.analyze_run on a copy of the real fixture, whole and with broken or missing files."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.runs.analyze import capture_node
from testbed.report.pages.runpage import fmt, report_run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run-westwood"
T0 = 63.290864951
#: the fixture's data connection as counted in its capture (see test_analysis_pcap.py)
SENT, RETRANSMITTED, UNIQUE, TRANSFER_S = 1320613, 250504, 1070109, 1.256148


@pytest.fixture
def run_dir(tmp_path) -> Path:
    target = tmp_path / "default" / "seed=1"
    shutil.copytree(FIXTURE, target)
    return target


def edit_manifest(run_dir: Path, **changes) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest.update(changes)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def test_flows_csv_has_the_connection_and_the_papers_goodput(run_dir):
    analysis = report_run(run_dir)
    assert analysis.problems == []
    flows = pd.read_csv(run_dir / "flows.csv")
    for column in [
        "conn",
        "flow",
        "replica",
        "period",
        "pair",
        "cc",
        "direction",
        "start_s",
        "stop_s",
        "base_rtt_ms",
        "sent_bytes",
        "retrans_bytes",
        "unique_bytes",
        "transfer_s",
        "goodput_mbit",
        "recv_goodput_mbit",
        "retrans_ratio",
        "iperf3_retransmits",
        "mean_rtt_ms",
    ]:
        assert column in flows.columns, column
    row = flows.iloc[0]
    assert (row["conn"], row["cc"], row["direction"], row["capture"]) == (
        "c0",
        "westwood",
        "forward",
        "rl.pcap",
    )
    assert (row["sent_bytes"], row["retrans_bytes"], row["unique_bytes"]) == (SENT, RETRANSMITTED, UNIQUE)
    assert row["transfer_s"] == pytest.approx(TRANSFER_S, abs=1e-6)
    assert row["goodput_mbit"] == pytest.approx((SENT - RETRANSMITTED) * 8 / TRANSFER_S / 1e6, rel=1e-6)
    assert row["recv_goodput_mbit"] == pytest.approx(7920560 * 8 / 10.123518 / 1e6, rel=1e-6)
    assert row["retrans_ratio"] == pytest.approx(RETRANSMITTED / SENT, rel=1e-6)
    assert row["iperf3_retransmits"] == 201
    assert row["mean_rtt_ms"] == pytest.approx(analysis.flows["mean_rtt_ms"].iloc[0])
    assert 100 < row["mean_rtt_ms"] < 400 and row["mean_rtt_source"] == "tcp_probe srtt"


def test_series_csv_is_tidy_and_on_the_runs_clock(run_dir):
    report_run(run_dir)
    series = pd.read_csv(run_dir / "series.csv")
    assert list(series.columns) == ["conn", "t_s", "metric", "value"]
    assert set(series["metric"]) == {"cwnd_pkts", "ssthresh_current_pkts", "srtt_ms", "recv_goodput_mbit", "acked_mb"}
    acked = series[series["metric"] == "acked_mb"]["value"]
    # snd_una since the first event: starts at 0, never goes back, ends near what the receiver got
    assert acked.iloc[0] == 0 and (acked.diff().dropna() >= 0).all() and 1 < acked.iloc[-1] < 20
    cwnd = series[series["metric"] == "cwnd_pkts"]
    assert len(cwnd) == 1000
    assert cwnd["t_s"].min() == pytest.approx(64.029525 - T0, abs=1e-6)
    assert cwnd["value"].iloc[0] == 10
    srtt = series[series["metric"] == "srtt_ms"]
    assert srtt["value"].iloc[0] == pytest.approx(102.941)
    # ssthresh is "infinite" (2147483647) until the first loss: empty cells, not a huge number
    ssthresh = series[series["metric"] == "ssthresh_current_pkts"]
    assert ssthresh["value"].isna().iloc[0]
    assert ssthresh["value"].max() < 1000 and ssthresh["value"].notna().any()
    goodput = series[series["metric"] == "recv_goodput_mbit"]
    assert len(goodput) == 11  # the server's last interval is the 0.12 s after the client stopped
    assert goodput["t_s"].iloc[0] == pytest.approx(1.002123)  # start_s 0 + the end of iperf3's first interval
    assert goodput["value"].iloc[0] == pytest.approx(474944 * 8 / 1.00212299823761 / 1e6)


def test_report_html_is_self_contained_with_provenance_fidelity_and_plots(run_dir):
    analysis = report_run(run_dir)
    page = (run_dir / "report.html").read_text()
    assert analysis.report_path == run_dir / "report.html"
    for text in [
        "short",
        "default",
        "seed=1",
        "6.1.0-56-amd64",
        "accel tcg",
        "Trustworthy: no",
        "base RTT pair 0",
        "FAILED",
        "Westwood+",
        "ssthresh_current",
    ]:
        assert text in page, text
    assert page.count("data:image/png;base64,") == 4
    assert not re.search(r"""(src|href)=["']https?:""", page)  # nothing fetched from elsewhere
    assert ">nan<" not in page.lower()


def test_post_run_check_compares_queue_drops_with_retransmissions(run_dir):
    checks = report_run(run_dir).drop_checks
    assert len(checks) == 1
    check = checks.iloc[0]
    assert check["bottleneck"] == "rl/rl-eth0"
    assert (check["queue_drops"], check["udp_probe_lost"], check["tcp_retrans_pkts"]) == (545, 343, 173)
    # the fixture keeps only the first 1500 captured packets: 29 of the drops' retransmissions are cut off
    assert check["difference"] == 173 - (545 - 343)
    assert check["verdict"].startswith("more drops than retransmissions")


def test_a_truncated_capture_is_reported_and_the_rest_analysed(run_dir):
    pcap = run_dir / "raw" / "rl.pcap"
    pcap.write_bytes(pcap.read_bytes()[:-50])
    analysis = report_run(run_dir)
    assert any(p.startswith("raw/rl.pcap: cut short in record 1500") for p in analysis.problems), analysis.problems
    row = analysis.flows.iloc[0]
    assert 0 < row["sent_bytes"] < SENT  # the records before the cut still count
    assert row["recv_goodput_mbit"] == pytest.approx(6.259136, rel=1e-6)
    assert (run_dir / "report.html").exists()


def test_a_truncated_iperf3_json_is_reported_and_the_rest_analysed(run_dir):
    server = run_dir / "raw" / "iperf3-c0-server.json"
    server.write_text(server.read_text()[:3000])
    analysis = report_run(run_dir)
    assert any(p.startswith("raw/iperf3-c0-server.json: JSON cut short") for p in analysis.problems), analysis.problems
    row = analysis.flows.iloc[0]
    # the client's end section carries the server's totals: said so, not hidden
    assert row["recv_source"] == "iperf3 client (server's report)"
    assert row["recv_goodput_mbit"] == pytest.approx(7920560 * 8 / 10.123518 / 1e6, rel=1e-6)
    assert row["sent_bytes"] == SENT
    assert not (analysis.series["metric"] == "recv_goodput_mbit").any()


def test_an_empty_trace_is_reported_and_the_rest_analysed(run_dir):
    (run_dir / "raw" / "tcp_probe.txt").write_text("")
    analysis = report_run(run_dir)
    assert "raw/tcp_probe.txt: no tcp_probe events (empty trace)" in analysis.problems
    assert set(analysis.series["metric"]) == {"recv_goodput_mbit"}
    row = analysis.flows.iloc[0]
    assert row["mean_rtt_source"] == "iperf3 mean_rtt" and row["mean_rtt_ms"] == pytest.approx(117.922)
    assert row["sent_bytes"] == SENT


def test_missing_files_leave_blanks_not_numbers(run_dir):
    (run_dir / "raw" / "rl.pcap").unlink()
    (run_dir / "raw" / "iperf3-c0-client.json").unlink()
    (run_dir / "raw" / "tc-stats.json").unlink()
    analysis = report_run(run_dir)
    assert "raw/rl.pcap: missing" in analysis.problems
    assert "raw/iperf3-c0-client.json: missing" in analysis.problems
    assert "raw/tc-stats.json: missing" in analysis.problems
    flows_text = (run_dir / "flows.csv").read_text().splitlines()
    row = dict(zip(flows_text[0].split(","), flows_text[1].split(","), strict=True))
    assert row["goodput_mbit"] == "" and row["sent_bytes"] == "" and row["iperf3_retransmits"] == ""
    assert float(row["recv_goodput_mbit"]) == pytest.approx(6.259136, rel=1e-5)
    assert analysis.drop_checks["verdict"].iloc[0].startswith("n/a")
    page = (run_dir / "report.html").read_text()
    assert "n/a" in page and ">nan<" not in page.lower()


def test_a_failed_run_shows_its_status_and_reason(run_dir):
    edit_manifest(run_dir, status="failed", reason="iperf3 server on r0 exited with 1")
    for name in ["rl.pcap", "iperf3-c0-server.json", "iperf3-c0-client.json"]:
        (run_dir / "raw" / name).unlink()
    analysis = report_run(run_dir)
    assert analysis.status == "failed"
    page = (run_dir / "report.html").read_text()
    assert "Status: FAILED - iperf3 server on r0 exited with 1" in page
    assert math.isnan(analysis.flows["goodput_mbit"].iloc[0])
    assert math.isnan(analysis.flows["recv_goodput_mbit"].iloc[0])
    assert (run_dir / "flows.csv").exists() and (run_dir / "series.csv").exists()


def test_a_run_still_marked_running_is_incomplete(run_dir):
    edit_manifest(run_dir, status="running")
    analysis = report_run(run_dir)
    assert analysis.status == "incomplete"
    assert any("interrupted" in p for p in analysis.problems)


def test_no_manifest_at_all(run_dir):
    (run_dir / "manifest.json").unlink()
    analysis = report_run(run_dir)
    assert analysis.problems[0] == "manifest.json: missing"
    assert analysis.status == "unknown"
    # connections recovered from the iperf3 client files, counted in no capture (no topology known)
    assert analysis.flows["conn"].tolist() == ["c0"]
    assert analysis.flows["recv_goodput_mbit"].iloc[0] == pytest.approx(6.259136, rel=1e-5)
    assert "Status: UNKNOWN" in (run_dir / "report.html").read_text()


def test_capture_node_is_the_router_next_to_the_sender(tmp_path):
    manifest = {
        "topology": {"bottlenecks": [{"node": "rl", "direction": "forward"}, {"node": "rr", "direction": "reverse"}]}
    }
    assert capture_node({"direction": "forward", "sender": "l3"}, manifest, tmp_path) == "rl"
    assert capture_node({"direction": "reverse", "sender": "r3"}, manifest, tmp_path) == "rr"
    assert (
        capture_node({"direction": "reverse", "sender": "r0"}, {"topology": {"capture_nodes": ["rl", "rr"]}}, tmp_path)
        == "rr"
    )
    assert capture_node({"direction": "forward"}, {}, tmp_path) is None


def test_cell_format():
    assert fmt(float("nan")) == "n/a" and fmt(None) == "n/a" and fmt(pd.NA) == "n/a"
    assert fmt(6.289949) == "6.29" and fmt(0.034841) == "0.0348" and fmt(8353549) == "8353549"
    assert fmt(132.39) == "132" and fmt(2.0) == "2" and fmt(True) == "yes"
