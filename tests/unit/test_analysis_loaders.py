"""analysis.raw.loaders on the real fixture and on broken files: every problem names its file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.raw.loaders import (
    INFINITE_SSTHRESH,
    LoadError,
    leaf_qdiscs,
    load_iperf3,
    load_manifest,
    load_ping,
    load_tc_stats,
    load_tcp_probe,
    load_udp_probe,
    read_json,
)

RAW = Path(__file__).resolve().parents[1] / "fixtures" / "run-westwood" / "raw"


def test_manifest():
    manifest = load_manifest(RAW.parent)
    assert manifest["status"] == "complete"
    assert manifest["connections"][0]["client_port"] == 40000


def test_iperf3_client_end_totals_and_intervals():
    client = load_iperf3(RAW / "iperf3-c0-client.json")
    assert client.role == "client" and client.is_sender is True
    assert client.totals["sent_bytes"] == 9966584
    assert client.totals["retransmits"] == 201
    assert client.totals["mean_rtt_ms"] == pytest.approx(117.922)
    assert client.totals["sender_cc"] == "westwood"
    assert client.local == ("10.1.0.1", 40000) and client.remote == ("10.2.0.1", 5201)
    assert len(client.intervals) == 10
    first = client.intervals.iloc[0]
    assert first["bytes"] == 2864144 and first["retransmits"] == 171
    assert first["rtt_ms"] == pytest.approx(211.18)
    assert client.intervals["end_s"].iloc[-1] == pytest.approx(10.001683)


def test_iperf3_server_gives_the_receiver_side():
    server = load_iperf3(RAW / "iperf3-c0-server.json")
    assert server.role == "server" and server.is_sender is False
    assert server.totals["received_bytes"] == 7920560
    assert server.totals["received_s"] == pytest.approx(10.123518)
    assert server.intervals["bytes"].sum() == pytest.approx(server.totals["received_bytes"], rel=0.01)
    assert server.intervals["retransmits"].isna().all()  # only the sender knows


def test_iperf3_json_cut_short_is_a_clear_error(tmp_path):
    text = (RAW / "iperf3-c0-client.json").read_text()
    cut = tmp_path / "iperf3-c0-client.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(LoadError) as caught:
        load_iperf3(cut)
    assert "iperf3-c0-client.json" in str(caught.value)
    assert "cut short" in str(caught.value)


def test_iperf3_json_cut_inside_a_string(tmp_path):
    cut = tmp_path / "iperf3-c1-server.json"
    cut.write_text('{"start": {"version": "iperf 3.1')
    with pytest.raises(LoadError, match="cut short"):
        load_iperf3(cut)


def test_iperf3_error_entry_is_kept(tmp_path):
    path = tmp_path / "iperf3-c0-client.json"
    path.write_text(json.dumps({"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server"}))
    result = load_iperf3(path)
    assert result.error == "unable to connect to server"
    assert result.totals == {}
    assert result.intervals.empty


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(LoadError, match="missing") as caught:
        load_iperf3(tmp_path / "raw" / "iperf3-c9-server.json")
    assert str(caught.value).startswith("raw/iperf3-c9-server.json:")
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(LoadError, match="empty file"):
        read_json(tmp_path / "empty.json")
    (tmp_path / "bad.json").write_text('{"a": 1,, "b": 2}\n\n')
    with pytest.raises(LoadError, match="not valid JSON"):
        read_json(tmp_path / "bad.json")


def test_tcp_probe_fixture():
    trace = load_tcp_probe(RAW / "tcp_probe.txt")
    events = trace.events
    assert len(events) == 1000
    first = events.iloc[0]
    assert first["t_mono_s"] == pytest.approx(64.029525)
    assert (first["src_ip"], first["src_port"], first["dest_ip"], first["dest_port"]) == (
        "10.1.0.1",
        40000,
        "10.2.0.1",
        5201,
    )
    assert first["snd_una"] == 0xCAB53563 and first["snd_nxt"] == 0xCAB53588
    assert first["snd_cwnd"] == 10 and first["srtt"] == 102941
    assert first["ssthresh"] == INFINITE_SSTHRESH
    assert events["ssthresh"].min() < 1000  # losses happened in the first 1000 ACKs
    assert trace.lost_events == 0 and trace.unparsed_lines == 0


def test_tcp_probe_fields_are_parsed_generically(tmp_path):
    path = tmp_path / "tcp_probe.txt"
    path.write_text(
        "# tracer: nop\n#\n"
        "          <idle>-0       [001] ..s2.  10.500000: tcp_probe: family=AF_INET6 src=[2001:db8::1]:40001 "
        "dest=[2001:db8::2]:5202 mark=0x0 data_len=0 snd_nxt=0x10 snd_una=0x8 snd_cwnd=12 ssthresh=7 "
        "snd_wnd=1000 srtt=2500 rcv_wnd=100 sock_cookie=1f new_field=42 label=abc\n"
        "CPU:1 [LOST 17 EVENTS]\n"
        "     my task-12     [000] .....  11.000000: tcp_probe: family=AF_INET src=10.0.0.1:1 "
        "dest=10.0.0.2:2 snd_cwnd=13 srtt=3000\n"
        "          <idle>-0       [000] ..s2.  12.000000: tcp_retransmit_skb: skbaddr=0x0 sport=1 dport=2\n"
        "garbage line\n"
    )
    trace = load_tcp_probe(path)
    events = trace.events
    assert len(events) == 2
    assert events.loc[0, "src_ip"] == "2001:db8::1" and events.loc[0, "src_port"] == 40001
    assert events.loc[0, "new_field"] == 42 and events.loc[0, "sock_cookie"] == 0x1F
    assert events.loc[0, "label"] == "abc"
    assert math.isnan(events.loc[1, "new_field"])  # absent in the second event
    assert events.loc[1, "t_mono_s"] == pytest.approx(11.0)
    assert trace.lost_events == 17
    assert trace.unparsed_lines == 1


def test_an_empty_trace_is_a_clear_error(tmp_path):
    path = tmp_path / "raw" / "tcp_probe.txt"
    path.parent.mkdir()
    path.write_text("# tracer: nop\n#\n")
    with pytest.raises(LoadError) as caught:
        load_tcp_probe(path)
    assert str(caught.value) == "raw/tcp_probe.txt: no tcp_probe events (empty trace)"
    with pytest.raises(LoadError, match="missing"):
        load_tcp_probe(tmp_path / "raw" / "nothing.txt")


def test_tc_stats_and_the_bottleneck_queue():
    tc = load_tc_stats(RAW / "tc-stats.json")
    pfifo = tc[(tc["node"] == "rl") & (tc["intf"] == "rl-eth0") & (tc["kind"] == "pfifo")]
    assert pfifo["drops"].tolist() == [545]
    assert pfifo["limit"].tolist() == [83]
    leaves = leaf_qdiscs(tc)
    # the HTB root repeats its pfifo child's drops: only the child is a leaf
    assert set(leaves[leaves["node"] == "rl"]["kind"]) == {"pfifo", "netem"}
    assert leaves["drops"].sum() == 545


def test_tc_counters_of_a_run_on_a_kept_network_count_from_where_the_run_before_left_them(tmp_path):
    after = json.loads((RAW / "tc-stats.json").read_text())
    before = {"rl/rl-eth0": after["rl/rl-eth0"]}
    for qdisc in before["rl/rl-eth0"]:
        qdisc.update(drops=qdisc["drops"] // 5, bytes=qdisc["bytes"] // 5, backlog=12345)
    (tmp_path / "tc-stats-before.json").write_text(json.dumps(before))
    tc = load_tc_stats(RAW / "tc-stats.json", before=tmp_path / "tc-stats-before.json")
    whole = load_tc_stats(RAW / "tc-stats.json")
    pfifo = (tc["node"] == "rl") & (tc["intf"] == "rl-eth0") & (tc["kind"] == "pfifo")
    assert tc[pfifo]["drops"].tolist() == [545 - 545 // 5]
    assert tc[pfifo]["bytes"].tolist() == [whole[pfifo]["bytes"].iloc[0] - whole[pfifo]["bytes"].iloc[0] // 5]
    # a level (backlog) is not a counter; a qdisc the run before did not have counts from zero
    assert tc[pfifo]["backlog"].tolist() == whole[pfifo]["backlog"].tolist()
    other = tc["node"] != "rl"
    assert tc[other]["packets"].tolist() == whole[other]["packets"].tolist()
    # no file: the run built its own network
    assert load_tc_stats(RAW / "tc-stats.json", before=tmp_path / "absent.json").equals(whole)


def test_ping_summary(tmp_path):
    ping = load_ping(RAW / "ping-pair0.txt")
    assert ping["transmitted"] == 5 and ping["received"] == 5 and ping["loss_pct"] == 0
    assert ping["min_ms"] == pytest.approx(102.571)
    (tmp_path / "ping.txt").write_text("PING 10.2.0.1 (10.2.0.1) 56(84) bytes of data.\n")
    with pytest.raises(LoadError, match="no ping summary"):
        load_ping(tmp_path / "ping.txt")


def test_udp_probe():
    probe = load_udp_probe(RAW / "udp-probe-forward.json")
    assert probe["lost_packets"] == 343 and probe["packets"] == 2072
    assert probe["received_mbit"] == pytest.approx(9.0924, abs=1e-3)
