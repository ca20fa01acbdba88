"""Parsing and judging the pre-traffic fidelity probes."""

import json
from types import SimpleNamespace

import pytest

from testbed.guest import fidelity

PING = """PING 10.2.0.1 (10.2.0.1) 56(84) bytes of data.

--- 10.2.0.1 ping statistics ---
5 packets transmitted, 5 received, 0% packet loss, time 805ms
rtt min/avg/max/mdev = 100.412/100.950/101.733/0.456 ms
"""


def test_parse_ping_summary():
    assert fidelity.parse_ping(PING) == {
        "min_ms": 100.412,
        "avg_ms": 100.95,
        "max_ms": 101.733,
        "mdev_ms": 0.456,
        "loss_pct": 0.0,
    }
    assert fidelity.parse_ping("ping: connect: Network is unreachable") is None


def test_rtt_check_tolerance():
    assert fidelity.rtt_check("pair 0", PING, 100).ok
    off = fidelity.rtt_check("pair 0", PING, 95)
    assert not off.ok and "+5.41 ms" in off.detail
    # 2 % of a long RTT is wider than 2 ms
    assert fidelity.rtt_check("pair 0", PING.replace("100.412", "596.0"), 590).ok
    dead = fidelity.rtt_check("pair 0", "100% packet loss", 100)
    assert not dead.ok and "no ping reply" in dead.detail


def test_expected_udp_rate_counts_headers_and_loss():
    assert fidelity.expected_udp_rate_mbit(10) == pytest.approx(10 * 1448 / 1490)
    assert fidelity.expected_udp_rate_mbit(10, 10) == pytest.approx(0.9 * 10 * 1448 / 1490)


def _server_json(rates):
    return json.dumps({"intervals": [{"sum": {"bits_per_second": r * 1e6}} for r in rates]})


def test_udp_steady_rate_skips_fill_and_drain():
    # the fill (first two) and the drain (last) intervals would drag an average down
    assert fidelity.udp_steady_rate_mbit(_server_json([3.0, 9.0, 9.7, 9.72, 9.71, 5.0])) == pytest.approx(9.71)
    assert fidelity.udp_steady_rate_mbit(_server_json([1.0, 2.0])) is None
    assert fidelity.udp_steady_rate_mbit("{truncated") is None


def test_rate_check():
    assert fidelity.rate_check("r", 9.6, 9.718).ok
    off = fidelity.rate_check("r", 9.0, 9.718)
    assert not off.ok and "-7.4%" in off.detail
    assert not fidelity.rate_check("r", None, 9.7).ok


def test_cpu_busy_and_report():
    assert fidelity.busy_pct((1000, 800), (2000, 1300)) == pytest.approx(50.0)
    report = fidelity.FidelityReport([fidelity.cpu_check(95.0), fidelity.cpu_check(20.0)])
    assert not report.trustworthy
    assert report.problems == ["cpu headroom: CPU 95% busy during traffic"]
    assert report.to_dict()["trustworthy"] is False


def test_tcpdump_stats_and_capture_check():
    from testbed.guest.capture import tcpdump_stats

    log = (
        "tcpdump: listening on any\n25412 packets captured\n25420 packets received by filter\n"
        "8 packets dropped by kernel\n"
    )
    stats = tcpdump_stats(log)
    assert stats == {"captured": 25412, "received": 25420, "dropped": 8}
    check = fidelity.capture_check("rl", stats)
    assert not check.ok and "8 dropped" in check.detail
    assert fidelity.capture_check("rl", tcpdump_stats(log.replace("8 packets dropped", "0 packets dropped"))).ok
    assert not fidelity.capture_check("rl", tcpdump_stats("killed")).ok, "unknown drops are not trusted"


def test_data_start_tolerance_is_a_second_or_a_share_of_the_duration():
    conns = [SimpleNamespace(id="c0", duration_s=10.0), SimpleNamespace(id="c1", duration_s=1000.0)]
    ok = fidelity.start_lag_check(conns, {"c0": 0.4, "c1": 30.0})  # 30 s late of 1000 s: within 5 %
    assert ok.ok and "+0.40 to +30.00 s from schedule" in ok.detail
    late = fidelity.start_lag_check(conns, {"c0": 1.5, "c1": 0.1})
    assert not late.ok and "c0, +1.50 s, tolerance 1.00 s" in late.detail
    early = fidelity.start_lag_check(conns, {"c0": -1.2, "c1": 0.1})  # released too early: off as well
    assert not early.ok and "c0, -1.20 s" in early.detail
    assert not fidelity.start_lag_check(conns, {}).ok


def test_a_set_up_wait_on_segments_a_lossy_path_took_is_not_counted_as_late():
    conns = [SimpleNamespace(id="c0", duration_s=20.0), SimpleNamespace(id="c1", duration_s=20.0)]
    # GEO friendliness: c1's cookie lost to the 1 % loss, sent again 1.43 s later
    check = fidelity.start_lag_check(conns, {"c0": -0.1, "c1": 1.40}, waited_s={"c1": 1.43})
    assert check.ok and "c1 1.43 s of waiting taken off" in check.detail
    still_late = fidelity.start_lag_check(conns, {"c0": -0.1, "c1": 2.60}, waited_s={"c1": 1.43})
    assert not still_late.ok and "c1, +1.17 s" in still_late.detail


def test_a_connection_without_captured_data_fails_the_start_check_and_says_why():
    conns = [SimpleNamespace(id="c0", duration_s=10.0), SimpleNamespace(id="c1", duration_s=10.0)]
    check = fidelity.start_lag_check(conns, {"c0": 0.2}, ["rl.pcap: cut short in record 9"])
    assert not check.ok
    assert "no data captured for c1 (rl.pcap: cut short in record 9)" in check.detail


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("sleep 0.3; echo 'tcpdump: listening on any, link-type LINUX_SLL' >&2; sleep 30", None),
        ("echo 'tcpdump: any: You do not have permission' >&2; exit 1", "exited (1) before capturing: tcpdump: any"),
        ("sleep 30", "did not start capturing within 1 s: no output"),
    ],
)
def test_traffic_waits_for_tcpdump_to_listen_and_says_why_it_did_not(tmp_path, script, problem):
    import subprocess

    from testbed.guest.capture import wait_tcpdump_listening

    log = tmp_path / "tcpdump-rl.log"
    with open(log, "wb") as out, subprocess.Popen(["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT) as proc:
        try:
            found = wait_tcpdump_listening(proc, log, timeout_s=1)
        finally:
            proc.kill()
    assert found == problem if problem is None else problem in found


def _queue(rate_mbit: float, seconds: float, backlog: int, hz: float = 10.0, start_bytes: int = 0):
    """Samples of a queue dequeuing at rate_mbit with `backlog` bytes standing."""
    step = 1 / hz
    return [
        (i * step, start_bytes + round(rate_mbit * 1e6 / 8 * i * step), backlog) for i in range(round(seconds * hz) + 1)
    ]


def test_passive_rate_reads_the_dequeue_rate_while_backlogged():
    check = fidelity.passive_rate_check("bottleneck rate forward", _queue(2.0, 5, backlog=30_000), 2.0)
    assert check.ok and check.measured == pytest.approx(2.0, rel=1e-3)
    slow = fidelity.passive_rate_check("bottleneck rate forward", _queue(1.8, 5, backlog=30_000), 2.0)
    assert not slow.ok and "-10.0%" in slow.detail


def test_passive_rate_counts_only_intervals_busy_all_along():
    # 3 s with more queued than a 0.1 s interval sends (25 kB at 2 Mbit/s), then 3 s with a queue of a few
    # packets (it may drain between samples) at 0.5 Mbit/s: only the first part counts
    busy = _queue(2.0, 3, backlog=30_000)
    idle = [(t + 3.1, b + busy[-1][1] + 25_000, 3000) for t, b, _ in _queue(0.5, 3, backlog=0)]
    check = fidelity.passive_rate_check("r", busy + idle, 2.0)
    assert check.ok and check.measured == pytest.approx(2.0, rel=1e-3)


def test_a_queue_that_never_stood_is_checked_against_its_peak():
    never = fidelity.passive_rate_check("r", _queue(1.2, 5, backlog=0), 2.0)
    assert never.ok and "never stood" in never.detail
    unshaped = fidelity.passive_rate_check("r", _queue(3.0, 5, backlog=0), 2.0)
    assert not unshaped.ok and "busiest second carried 3.000" in unshaped.detail


def test_a_queue_that_stood_too_briefly_cannot_decide():
    samples = _queue(2.0, 0.5, backlog=30_000) + [(0.6 + t, b, 0) for t, b, _ in _queue(1.0, 3, backlog=0)]
    assert fidelity.passive_rate_check("r", samples, 2.0) is None


def _lossy_dumbbell_spec(**bottleneck):
    from testbed.scenario.load import scenario_from_dict
    from topologies import TOPOLOGIES

    scenario = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100, **bottleneck}},
            "flows": [{"cc": "reno", "rtt_ms": 20}],
            "duration_s": 5,
        },
        name="t",
    )
    return TOPOLOGIES["dumbbell"].from_scenario(scenario.points[0].scenario).netspec()


def _netem(packets: int, drops: int) -> list[dict]:
    # as `tc -s -j qdisc show` lists a lossy egress: the prio, the control lane's netem, the dropping netem
    return [
        {"kind": "prio", "handle": "1:", "root": True, "packets": packets + 50, "drops": drops},
        {"kind": "netem", "handle": "10:", "parent": "1:1", "packets": 50, "drops": 0},
        {"kind": "netem", "handle": "20:", "parent": "1:2", "packets": packets, "drops": drops},
    ]


def test_netem_bernoulli_loss_is_checked_against_its_configured_rate():
    from testbed.guest.collect import netem_loss_checks

    spec = _lossy_dumbbell_spec(loss={"model": "bernoulli", "loss_pct": 5, "seeded": False})
    # 500 lost of 10000 is the rate; 900 is far off (9 % against 5 %: four spreads and 0.5 pp are 1.4 pp)
    fine = {"rl/rl-eth1": _netem(9500, 500), "rr/rr-eth1": _netem(4750, 250)}
    checks = netem_loss_checks(spec, fine, None)
    assert [(c.name, c.ok) for c in checks] == [("loss netem rl/rl-eth1", True), ("loss netem rr/rr-eth1", True)]
    assert "5.00 % of 10000 packets lost, configured 5 %" in checks[0].detail
    off = {"rl/rl-eth1": _netem(9100, 900), "rr/rr-eth1": _netem(4750, 250)}
    assert [c.ok for c in netem_loss_checks(spec, off, None)] == [False, True]
    # on a kept network the counters go on: the run is what they moved by
    before = {"rl/rl-eth1": _netem(9100, 400), "rr/rr-eth1": _netem(0, 0)}
    after = {"rl/rl-eth1": _netem(9100 + 9500, 400 + 500), "rr/rr-eth1": _netem(4750, 250)}
    assert all(c.ok for c in netem_loss_checks(spec, after, before))
    missing = netem_loss_checks(spec, {"rr/rr-eth1": _netem(4750, 250)}, None)
    assert not missing[0].ok and "no netem 20:" in missing[0].detail
    # a lossless link has no check
    assert netem_loss_checks(_lossy_dumbbell_spec(), {}, None) == []


def _simulate_chain(chain, loss, packets, rng):
    state, lost = 0, 0
    for _ in range(packets):
        lost += rng.random() < loss[state]
        draw, state_next = rng.random(), 0
        for j, p in enumerate(chain[state]):
            draw -= p
            if draw < 0:
                state_next = j
                break
        else:
            state_next = state
        state = state_next
    return lost


def test_bursty_netem_loss_is_checked_within_its_chains_own_spread():
    """Gilbert-Elliott and 4-state loss: the chain's spread matches the closed form where there is one,
    simulated chains of the configured model pass (at most 1 in 100 fails) and a chain that loses half as
    much as configured fails."""
    import random

    from testbed.guest.collect import netem_loss_checks
    from topologies.lossmodel import FourStateLoss, GilbertElliottLoss, packet_chain

    ge = GilbertElliottLoss(p_pct=5, r_pct=50, bad_loss_pct=100)
    mean, variance = fidelity.chain_loss(*packet_chain(ge))
    lag1 = 1 - 0.05 - 0.5
    assert mean == pytest.approx(0.05 / 0.55) and variance == pytest.approx(mean * (1 - mean) * (1 + lag1) / (1 - lag1))
    four = FourStateLoss(p13_pct=2, p31_pct=60, p32_pct=20, p23_pct=60, p14_pct=1)
    assert 100 * fidelity.chain_loss(*packet_chain(four))[0] == pytest.approx(four.stationary_loss_pct())
    rng = random.Random(7)
    for model in (ge, four):
        settled = fidelity.chain_loss(*packet_chain(model))
        failed = sum(
            not fidelity.loss_check(
                "x", 2000, _simulate_chain(*packet_chain(model), 2000, rng), 100 * settled[0], settled[1]
            ).ok
            for _ in range(100)
        )
        assert failed <= 1, (model, failed)
    half = GilbertElliottLoss(p_pct=5, r_pct=50, bad_loss_pct=50)  # what a netem losing half as often would do
    lost = _simulate_chain(*packet_chain(half), 20_000, rng)
    spec = _lossy_dumbbell_spec(loss=ge.model_dump())
    checks = netem_loss_checks(spec, {"rl/rl-eth1": _netem(20_000 - lost, lost), "rr/rr-eth1": _netem(0, 0)}, None)
    assert [c.ok for c in checks] == [False, True]
    assert "configured 9.091 %" in checks[0].detail and "the chain's bursts counted" in checks[0].detail
