"""Checks that the emulation delivers what the scenario asked for, before and during traffic.

Before traffic: each pair's base RTT by ping (min of a few probes vs the configured RTT), and
the bottleneck rate by a short UDP probe (received rate vs the rate's UDP payload share).
During traffic: the CPU headroom of the machine (an emulator that runs out of CPU slows the
links down). A run whose checks fail is kept but marked untrustworthy, with the reasons.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import asdict, dataclass, field

#: base RTT tolerance: |measured min - configured| <= max(RTT_TOLERANCE_MS, RTT_TOLERANCE_FRACTION * RTT)
RTT_TOLERANCE_MS = 2.0
RTT_TOLERANCE_FRACTION = 0.02
#: received UDP rate within this fraction of the expected payload rate
RATE_TOLERANCE_FRACTION = 0.05
#: a connection may start this late, or START_LAG_FRACTION of its duration if more
START_LAG_MIN_S = 1.0
START_LAG_FRACTION = 0.05
#: guest CPU busier than this during traffic: timing is no longer trustworthy
CPU_BUSY_LIMIT_PCT = 90.0
#: others than the guest used this share of the host's CPUs during traffic: the host was contended
#: (measured here under TCG, 2 cores, a 10 Mbit/s run: 0 % on a quiet host, 54-62 % with 4 busy loops;
#: over 324 runs of two make reproduce sessions and the labs' reference runs, with nothing else running:
#: median 0 %, 99th percentile 18 %, at most 21 %, and 24 % once in a short run of the guest tests, so
#: 20 % judged a quiet host's rare spikes contended)
OTHER_BUSY_LIMIT_PCT = 30.0
#: the host's own hypervisor took this share of its CPU time (steal)
HOST_STEAL_LIMIT_PCT = 10.0
UDP_PAYLOAD_BYTES = 1448
UDP_WIRE_BYTES = UDP_PAYLOAD_BYTES + 8 + 20 + 14  # + UDP + IPv4 + Ethernet headers


@dataclass
class Check:
    name: str
    ok: bool
    measured: float | None
    expected: float | None
    detail: str = ""


@dataclass
class FidelityReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def trustworthy(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def problems(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def to_dict(self) -> dict:
        return {
            "trustworthy": self.trustworthy,
            "problems": self.problems,
            "checks": [asdict(c) for c in self.checks],
        }


def parse_ping(output: str) -> dict | None:
    """min/avg/max/mdev in ms and the loss from ping's summary, or None if there is none."""
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", output)
    loss = re.search(r"([\d.]+)% packet loss", output)
    if not rtt:
        return None
    result = dict(zip(["min_ms", "avg_ms", "max_ms", "mdev_ms"], map(float, rtt.groups()), strict=True))
    result["loss_pct"] = float(loss.group(1)) if loss else None
    return result


def rtt_check(name: str, ping_output: str, configured_ms: float) -> Check:
    summary = parse_ping(ping_output)
    tolerance = max(RTT_TOLERANCE_MS, RTT_TOLERANCE_FRACTION * configured_ms)
    if summary is None:
        return Check(name, False, None, configured_ms, "no ping reply: the path does not work")
    error = summary["min_ms"] - configured_ms
    ok = abs(error) <= tolerance
    detail = f"min RTT {summary['min_ms']:.2f} ms vs {configured_ms:g} ms configured (error {error:+.2f} ms, "
    detail += f"tolerance {tolerance:.2f} ms)"
    return Check(name, ok, summary["min_ms"], configured_ms, detail)


def start_lag_tolerance_s(duration_s: float) -> float:
    """How late a connection may start: START_LAG_MIN_S, or a share of its duration if more."""
    return max(START_LAG_MIN_S, START_LAG_FRACTION * duration_s)


def start_lag_check(
    connections, lag_s: dict[str, float], unread: list[str] | None = None, waited_s: dict[str, float] | None = None
) -> Check:
    """Did every connection's data start on schedule? ``lag_s``: connection id -> seconds its first data
    segment came after its planned start (from the captures); ``unread``: captures that could not be read
    to the end; ``waited_s``: on a path with configured loss, how long a connection's set-up waited on
    segments that loss took (sent again: testbed.guest.clients.setup_waits). That wait is the path's
    doing, as asked for, not the testbed's: it is taken off the lag before the tolerance is applied."""
    waited_s = waited_s or {}
    missing = [c.id for c in connections if c.id not in lag_s]
    problems = "; ".join(unread or [])
    if not lag_s:
        detail = f"no connection's data was found in the captures {problems}".strip()
        return Check("data start", False, None, None, detail)
    own = {cid: lag - waited_s.get(cid, 0.0) for cid, lag in lag_s.items()}
    late = [(abs(own[c.id]) / start_lag_tolerance_s(c.duration_s), c) for c in connections if c.id in own]
    ratio, worst = max(late, key=lambda item: item[0])
    tolerance = start_lag_tolerance_s(worst.duration_s)
    detail = (
        f"data started {min(lag_s.values()):+.2f} to {max(lag_s.values()):+.2f} s from schedule (worst against "
        f"its tolerance: {worst.id}, {own[worst.id]:+.2f} s, tolerance {tolerance:.2f} s)"
    )
    excused = [f"{cid} {waited:.2f} s" for cid, waited in sorted(waited_s.items()) if waited > 0]
    if excused:
        detail += (
            f"; set-up segments lost to the path's configured loss and sent again: {', '.join(excused)} "
            "of waiting taken off"
        )
    if missing:
        detail += f"; no data captured for {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}"
        detail += f" ({problems})" if problems else ""
    return Check("data start", ratio <= 1 and not missing, own[worst.id], tolerance, detail)


def expected_udp_rate_mbit(rate_mbit: float, loss_pct: float = 0.0) -> float:
    """UDP payload rate that a link of ``rate_mbit`` (Ethernet counted) delivers at saturation."""
    return rate_mbit * UDP_PAYLOAD_BYTES / UDP_WIRE_BYTES * (1 - loss_pct / 100)


def udp_steady_rate_mbit(server_json: str, skip_first: int = 2, skip_last: int = 1) -> float | None:
    """Median received rate over the steady-state intervals of a UDP iperf3 server's JSON.

    The first intervals include the path's fill time and the last one the queue's drain, so
    a whole-test average under-reads a rate by (queue + RTT) / duration; the median of the
    middle intervals reads the link itself.
    """
    try:
        intervals = json.loads(server_json)["intervals"]
    except (ValueError, KeyError, TypeError):
        return None
    rates = sorted(i["sum"]["bits_per_second"] / 1e6 for i in intervals[skip_first : len(intervals) - skip_last])
    if not rates:
        return None
    middle = len(rates) // 2
    return rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2


def rate_check(name: str, received_mbit: float | None, expected_mbit: float) -> Check:
    if received_mbit is None:
        return Check(name, False, None, expected_mbit, "the UDP probe produced no result")
    error = received_mbit / expected_mbit - 1
    ok = abs(error) <= RATE_TOLERANCE_FRACTION
    detail = f"UDP received {received_mbit:.3f} Mbit/s vs {expected_mbit:.3f} expected ({error:+.1%})"
    return Check(name, ok, received_mbit, expected_mbit, detail)


def cpu_check(busy_pct: float) -> Check:
    ok = busy_pct <= CPU_BUSY_LIMIT_PCT
    return Check("cpu headroom", ok, busy_pct, CPU_BUSY_LIMIT_PCT, f"CPU {busy_pct:.0f}% busy during traffic")


def host_check(host: dict) -> Check:
    """Did the host give the guest (or a local run) its CPUs during traffic? ``host``: a
    ``hostload.HostSummary`` as a dict (the manifest's ``host``); a pinned guest is judged on its cores."""
    if host.get("clock") == "virtual":
        return _virtual_host_check(host)
    problems = []
    subject = "the run's processes" if host.get("subject") == "run" else "the guest"
    where = f"its cores {','.join(map(str, host['cores']))}" if host.get("cores") else f"the host's {host['cpus']} CPUs"
    if host["other_busy_pct"] > OTHER_BUSY_LIMIT_PCT:
        problems.append(
            f"others than {subject} used {host['other_busy_pct']:.0f} % of {where} (limit {OTHER_BUSY_LIMIT_PCT:g} %)"
        )
    if host["host_steal_pct"] > HOST_STEAL_LIMIT_PCT:
        problems.append(
            f"the host's hypervisor stole {host['host_steal_pct']:.0f} % of the CPU time of {where} "
            f"(limit {HOST_STEAL_LIMIT_PCT:g} %)"
        )
    if host["other_guests"]:
        on = "on its cores" if host.get("cores") else "on the host"
        problems.append(f"other guests ran {on}: {'; '.join(host['other_guests'])}")
    figures = (
        f"{where} busy {host['host_busy_pct']:.0f} %, {host['other_busy_pct']:.0f} % by others than "
        f"{subject}; load {host['load_1m']:.2f}"
    )
    if host.get("subject", "guest") == "guest":
        figures += f"; the guest's vCPUs waited for a CPU {host['vcpu_wait_pct']:.0f} % of the time they wanted one"
    if problems and host.get("busiest_others"):  # who they were, so that the contention can be found and stopped
        figures += f"; busiest others: {', '.join(host['busiest_others'])}"
    detail = ("the host was contended: " + "; ".join(problems) + f" ({figures})") if problems else figures
    return Check("host contention", not problems, host["other_busy_pct"], OTHER_BUSY_LIMIT_PCT, detail)


def _virtual_host_check(host: dict) -> Check:
    """In virtual time the guest's clock advances by its own instructions: the host's load (others' CPU, other
    guests, steal) stretches the run's wall time and cannot change what the guest measured. Said, not judged."""
    stretch = (
        f"{host['window_s']:.1f} s of wall time for {host['guest_traffic_s']:.1f} s of the guest's traffic "
        f"({host['wall_per_guest_s']:.2f} wall s per guest s)"
        if host.get("wall_per_guest_s")
        else f"{host['window_s']:.1f} s of wall time for the traffic"
    )
    others = f"; other guests ran: {len(host['other_guests'])}" if host.get("other_guests") else ""
    detail = (
        f"virtual time: {stretch}; the host's CPUs busy {host['host_busy_pct']:.0f} %, "
        f"{host['other_busy_pct']:.0f} % by others than the guest{others}: load slows a virtual-time run, it "
        "does not reach the guest's clock (not judged)"
    )
    return Check("host contention", True, host["other_busy_pct"], None, detail)


def capture_check(node: str, stats: dict) -> Check:
    """A capture that lost packets under-counts what the senders sent (the papers' goodput)."""
    dropped = stats.get("dropped")
    ok = dropped == 0
    detail = f"tcpdump on {node}: {stats.get('captured')} captured, {dropped} dropped by the kernel"
    return Check(f"capture {node}", ok, dropped, 0, detail)


def cpu_times() -> tuple[int, int]:
    """(total, idle+iowait) jiffies from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]


def busy_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[0] - before[0]
    idle = after[1] - before[1]
    return 100.0 * (1 - idle / total) if total > 0 else 0.0


#: realized loss of a channel state may differ from the configured one by this many binomial standard
#: deviations plus LOSS_TOLERANCE_PP percentage points before the run is untrustworthy
LOSS_SIGMAS = 4.0
LOSS_TOLERANCE_PP = 0.5


def loss_check(name: str, seen: int, dropped: int, configured_pct: float, variance: float | None = None) -> Check:
    """Realized loss of one channel state vs its configured probability: binomial tolerance, or that of
    a bursty chain when ``variance`` (its per-packet asymptotic variance, :func:`chain_loss`) is given."""
    if seen == 0:
        return Check(name, True, None, configured_pct, "no packet crossed the channel in this state")
    realized = 100 * dropped / seen
    p = configured_pct / 100
    spread = variance if variance is not None else p * (1 - p)
    tolerance = 100 * LOSS_SIGMAS * (spread / seen) ** 0.5 + LOSS_TOLERANCE_PP
    bursty = ", the chain's bursts counted" if variance is not None else ""
    detail = (
        f"{realized:.2f} % of {seen} packets lost, configured {configured_pct:.4g} % "
        f"(tolerance ±{tolerance:.2f} pp{bursty})"
    )
    return Check(name, abs(realized - configured_pct) <= tolerance, round(realized, 4), configured_pct, detail)


#: lags summed at most for a chain's autocovariance (a chain slower than this to forget is not judged)
CHAIN_MAX_LAGS = 100_000


def chain_loss(chain: list[list[float]], loss: list[float]) -> tuple[float, float] | None:
    """Stationary loss probability of a Markov-modulated loss (a packet lost with ``loss[s]`` in state s of
    the per-packet ``chain``) and its per-packet asymptotic variance: the binomial p(1 - p) plus twice the
    sum of the autocovariances, which bursts make positive. The realized share over n packets then spreads
    by sqrt(variance / n). None when the sum does not settle within :data:`CHAIN_MAX_LAGS` (a periodic or
    very slow chain). Written out (a few lines of pure Python) because the runner in the guest avoids
    numpy's import for one 4 x 4 matrix."""
    states = range(len(loss))
    step = [[(chain[i][j] + (i == j)) / 2 for j in states] for i in states]  # lazy: same π, never periodic
    pi = [1 / len(loss)] * len(loss)
    for _ in range(CHAIN_MAX_LAGS):
        nxt = [sum(pi[i] * step[i][j] for i in states) for j in states]
        settled = max(abs(a - b) for a, b in zip(nxt, pi, strict=True)) < 1e-15
        pi = nxt
        if settled:
            break
    mean = sum(pi[i] * loss[i] for i in states)
    ahead, total, quiet = list(loss), 0.0, 0
    for _ in range(CHAIN_MAX_LAGS):
        ahead = [sum(chain[i][j] * ahead[j] for j in states) for i in states]  # E[loss k packets on | state]
        covariance = sum(pi[i] * loss[i] * ahead[i] for i in states) - mean * mean
        total += covariance
        quiet = quiet + 1 if abs(covariance) < 1e-12 else 0
        if quiet >= 50:
            return mean, max(0.0, mean * (1 - mean) + 2 * total)
    return None


#: the passive rate check decides from this much time in which the link was provably busy (10 intervals at 10 Hz)
PASSIVE_MIN_BUSY_S = 1.0
#: the busiest stretch of this length is compared with the rate when the queue never stood
PEAK_WINDOW_S = 1.0


def passive_rate_check(name: str, samples: list[tuple[float, int, int]], rate_mbit: float) -> Check | None:
    """The link's rate read from its queue's own counters during the run (``queues.QueueSampler``).

    ``samples``: (monotonic s, bytes dequeued so far, bytes queued) of one bottleneck's root qdisc.
    An interval whose queue held more bytes at its start than the link sent during it was busy all
    along (the packets queued at its start were never all sent, so the link never waited for one),
    and over such intervals, the first of each busy stretch left out (HTB may spend its burst of
    saved tokens there), the dequeue rate is the emulated rate (Ethernet bytes, as HTB counts them):
    within RATE_TOLERANCE_FRACTION of the configured rate, or the run is untrustworthy. (A queue merely
    non-empty at both ends may have drained in between: that read 7.5 % low at 10 Mbit/s here.)
    A queue that never stood (never held a packet at two samples in a row) never limited the traffic:
    the check then only asks that its busiest second stayed within the rate (a shaper that does not
    shape fails). None otherwise, when the link was provably busy for less than PASSIVE_MIN_BUSY_S:
    too little to decide; an active probe must (``probes``)."""
    busy_bytes, busy_s, stood, was_busy = 0, 0.0, False, False
    for (t1, b1, q1), (t2, b2, q2) in itertools.pairwise(samples):
        stood = stood or (q1 > 0 and q2 > 0)
        busy = t2 > t1 and q1 > b2 - b1
        # not the first interval of a busy stretch: HTB may spend its burst of saved tokens there
        if busy and was_busy:
            busy_bytes += b2 - b1
            busy_s += t2 - t1
        was_busy = busy
    if busy_s >= PASSIVE_MIN_BUSY_S:
        measured = busy_bytes * 8 / busy_s / 1e6
        error = measured / rate_mbit - 1
        detail = (
            f"dequeued {measured:.3f} Mbit/s while provably busy ({busy_s:.1f} s of the run) vs {rate_mbit:g} "
            f"configured ({error:+.1%})"
        )
        return Check(name, abs(error) <= RATE_TOLERANCE_FRACTION, round(measured, 4), rate_mbit, detail)
    if stood:
        return None
    peak = _peak_rate_mbit(samples)
    ok = peak is None or peak <= rate_mbit * (1 + RATE_TOLERANCE_FRACTION)
    shown = "no traffic" if peak is None else f"its busiest second carried {peak:.3f} Mbit/s"
    detail = f"the queue never stood (the link did not limit the traffic); {shown}, configured {rate_mbit:g}"
    return Check(name, ok, None if peak is None else round(peak, 4), rate_mbit, detail)


def _peak_rate_mbit(samples: list[tuple[float, int, int]]) -> float | None:
    """The highest dequeue rate over PEAK_WINDOW_S (or the whole sampling, if shorter)."""
    if len(samples) < 2:
        return None
    peak, j = 0.0, 0
    for i, (t1, b1, _) in enumerate(samples):
        j = max(j, i + 1)
        while j < len(samples) - 1 and samples[j][0] - t1 < PEAK_WINDOW_S:
            j += 1
        if j >= len(samples):
            break
        t2, b2, _ = samples[j]
        if t2 > t1 and (t2 - t1 >= PEAK_WINDOW_S or i == 0):
            peak = max(peak, (b2 - b1) * 8 / (t2 - t1) / 1e6)
    return peak
