"""Fidelity of the paths: each pair's base RTT (from the calibration's pings, before traffic) and
each bottleneck's rate, read passively from its queue during the traffic, or, where the traffic never
kept the queue backlogged long enough to tell, under a UDP probe after it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from testbed.guest import fidelity, launch, queues
from testbed.guest.clients import listening, process_state
from testbed.guest.network import Network
from testbed.plan.connections import Connection

UDP_PROBE_S = 3.0


UDP_PROBE_PORT = 5100


#: how long the probe's server may take to listen (it was a fixed 0.5 s wait)
SERVER_LISTEN_S = 5.0


#: a probe that reads off (a busy moment of the emulator, or its start-up datagram lost) is run once more;
#: both are recorded, the check is the last one
UDP_PROBE_ATTEMPTS = 2


#: a probe whose UDP handshake was lost is given up this long after its planned end (it cost 15-20 s at 12)
UDP_PROBE_SLACK_S = 4.0


#: the probe's client must have been exec'd and stopped at its first connect() within this long (in virtual
#: time on a contended host an exec can take seconds of the guest's clock; a deadline, not a wait)
PROBE_HOLD_TIMEOUT_S = 60.0


#: a probe whose queue has dequeued nothing this long (plus UDP_START_RTTS base RTTs: iperf3's connection,
#: parameter exchange and UDP handshake) after its client started lost its UDP handshake: it is given up
#: then, not at its end (on a 5 %-loss link the first attempt of a session's first probe waited 8 s so)
UDP_START_CHECK_S = 1.5
UDP_START_RTTS = 6


def rtt_checks(topology, raw: Path, pings: dict[int, str]) -> list[fidelity.Check]:
    """Each pair's base RTT from ``pings`` (the calibration's last measurement), its output kept in ``raw``."""
    checks = []
    for pair, out in sorted(pings.items()):
        (raw / f"ping-pair{pair}.txt").write_text(out)
        checks.append(fidelity.rtt_check(f"base RTT pair {pair}", out, topology.base_rtt_ms(pair)))
    return checks


def rate_checks(
    net: Network,
    topology,
    netspec,
    connections: list[Connection],
    raw: Path,
    samples: list[queues.QueueSample],
    probed: dict | None = None,
    run: str | None = None,
) -> list[fidelity.Check]:
    """The rate of every bottleneck in a direction that has flows, read passively from its queue
    during the traffic (``samples``); where that cannot decide, or reads off, from its queue under a
    UDP probe after the traffic. A passive reading alone never fails a run: read at 10 Hz by a thread
    of a busy guest, a short backlogged stretch read -7.5 % and +16 % on one 10 Mbit/s link here
    (late samples, HTB's burst at a stretch's start), while the probe keeps the queue full for seconds.

    ``probed``: the probes that passed on this network after earlier runs (it was kept for this run:
    testbed.guest.keeper), by check name; a direction whose every bottleneck has one is not probed
    again (the probe measures the emulated link, which is the same), and new passes are added, each named
    by ``run`` ("<point id> seed=<n>"; by default from ``raw``'s folder, which in virtual time is a staging
    folder in a tmpfs, not the run's)."""
    checks, undecided = _passive(netspec, connections, samples)
    probed = {} if probed is None else probed
    for direction in sorted({b.direction for _, b, _ in undecided}):
        todo = [(name, b, passive) for name, b, passive in undecided if b.direction == direction]
        if all(name in probed for name, _, _ in todo):
            verdicts = {name: _earlier(probed[name]) for name, _, _ in todo}
        else:
            probes = [p for p in topology.probes() if p.direction == direction]
            verdicts = {c.name: c for c in probe_direction(net, topology, probes, todo, raw)}
            run = run or f"{raw.parent.parent.name} {raw.parent.name}"  # the run folder: <point id>/seed=<n>
            probed.update({name: (c, run) for name, c in verdicts.items() if c.ok})
        for name, _, passive in todo:
            check = verdicts.get(name)
            if check is not None and passive is not None:  # what the traffic showed, kept beside the verdict
                check = replace(check, detail=f"{check.detail}; during the traffic: {passive.detail}")
            if check is not None:
                checks.append(check)
    return checks


def will_probe(
    netspec, connections: list[Connection], samples: list[queues.QueueSample], probed: dict | None = None
) -> bool:
    """Whether :func:`rate_checks` will run a UDP probe (some bottleneck undecided, no earlier probe for it)."""
    _, undecided = _passive(netspec, connections, samples)
    return any(name not in (probed or {}) for name, _, _ in undecided)


def _passive(netspec, connections: list[Connection], samples: list[queues.QueueSample]) -> tuple[list, list]:
    """The bottlenecks' passive checks that passed, and the (name, bottleneck, check or None) of the others."""
    directions = {c.direction for c in connections}
    bottlenecks = [b for b in netspec.bottlenecks if b.direction in directions]
    per_direction = {d: sum(b.direction == d for b in bottlenecks) for d in directions}
    checks, undecided = [], []
    for b in bottlenecks:
        name = f"bottleneck rate {b.direction}" + (f" {b.node}/{b.intf}" if per_direction[b.direction] > 1 else "")
        check = fidelity.passive_rate_check(name, _series(samples, b), b.rate_mbit)
        if check is not None and check.ok:
            checks.append(check)
        else:
            undecided.append((name, b, check))
    return checks, undecided


def _earlier(probe: tuple[fidelity.Check, str]) -> fidelity.Check:
    check, run = probe
    return replace(check, detail=f"{check.detail} (the probe after run {run}, on this same network)")


def _series(samples: list[queues.QueueSample], bottleneck) -> list[tuple[float, int, int]]:
    link = (bottleneck.node, bottleneck.intf)
    return [(s.t_s, s.bytes, s.backlog_bytes) for s in samples if (s.node, s.intf) == link]


def probe_direction(net: Network, topology, probes: list, todo: list, raw: Path) -> list[fidelity.Check]:
    """Fill the direction's queues with UDP (each probe of the topology in turn, its send rate raised
    by the loss before the queue) and read each bottleneck of ``todo`` (name, bottleneck, its passive
    check or None) from its queue as during traffic; a bottleneck that still cannot be read gets the
    probe's received rate instead (the first probe's, the one over the first pair)."""
    sampler = queues.QueueSampler([(b.node, b.intf) for _, b, _ in todo], net.netns_path)
    t0 = time.monotonic()
    sampler.start()
    decided = _decided(sampler, todo)
    received = []
    try:
        for index, probe in enumerate(probes):
            if decided():  # an earlier probe of the direction filled these queues long enough already
                break
            received.append(
                active_rate_check(net, topology, probe, probes, index, raw, flowing=_flowing(sampler), enough=decided)
            )
    finally:
        samples = sampler.stop()
        # what the check below reads, kept with the run (and the source of tests/fixtures/probe-queues)
        queues.write_csv(raw / f"probe-queues-{todo[0][1].direction}.csv", samples, t0)
    checks = []
    for name, b, _ in todo:
        check = fidelity.passive_rate_check(name, _series(samples, b), b.rate_mbit)
        if _reads_rate(check):
            check = replace(check, detail=f"under a UDP probe: {check.detail}")
        elif received:
            check = replace(received[0], name=name)
        else:
            continue
        checks.append(check)
    return checks


def _reads_rate(check: fidelity.Check | None) -> bool:
    """Whether a passive check read the rate from backlogged intervals (not only 'the queue never stood')."""
    return check is not None and check.measured is not None and "never stood" not in check.detail


def _decided(sampler: queues.QueueSampler, todo: list):
    """A function telling whether the samples so far read every bottleneck of ``todo`` (name,
    bottleneck, passive check) from its queue at its rate: the probe can end (:func:`udp_probe`'s
    ``enough``). A reading that is off does not end it: the probe goes on to its end, and the check
    reads all of it (and a second attempt, if the received rate is off too). In real time one stall of a
    TCG guest (about 0.2 s with few dequeues, CI at 6eac275) read a 2 Mbit/s link -10.6 % over the 1.2 s
    of backlog the probe had when it was ended (tests/fixtures/probe-queues/stall.csv); the bytes it
    lost, over the second of backlog the probe's rest would add, come to about -6 %."""

    def decided() -> bool:
        samples = list(sampler.samples)
        checks = [fidelity.passive_rate_check(name, _series(samples, b), b.rate_mbit) for name, b, _ in todo]
        return all(_reads_rate(check) and check.ok for check in checks)

    return decided


def _flowing(sampler: queues.QueueSampler):
    """A function telling, once called to start, whether the sampled queues dequeued anything since."""

    def dequeued() -> int:
        latest: dict[tuple[str, str], int] = {}
        for sample in list(sampler.samples):
            latest[(sample.node, sample.intf)] = sample.bytes
        return sum(latest.values())

    def since():
        start = dequeued()
        return lambda: dequeued() > start + 10 * fidelity.UDP_PAYLOAD_BYTES

    return since


def active_rate_check(
    net: Network, topology, probe, probes: list, index: int, raw: Path, flowing=None, enough=None
) -> fidelity.Check:
    """One UDP rate probe of the topology (its received rate against the rate less the loss), run once
    more when it reads off; both attempts recorded. ``flowing``, ``enough``: see :func:`udp_probe`
    (a probe ended by ``enough`` is not run again: the queues, not its received rate, decide)."""
    # a second probe in one direction (another path of the topology) is named by its pair
    first = all(p.direction != probe.direction for p in probes[:index])
    label = probe.direction if first else f"{probe.direction}-pair{probe.pair}"
    expected = fidelity.expected_udp_rate_mbit(probe.rate_mbit, probe.loss_pct)
    attempts = []
    for attempt in range(1, UDP_PROBE_ATTEMPTS + 1):
        client_out, server_out = udp_probe(net, topology, probe, flowing, enough)
        measured = fidelity.udp_steady_rate_mbit(server_out)
        attempts.append(measured)
        final = (
            fidelity.rate_check("", measured, expected).ok
            or attempt == UDP_PROBE_ATTEMPTS
            or (enough is not None and enough())
        )
        prefix = f"udp-probe-{label}" if final else f"udp-probe-{label}-attempt{attempt}"
        (raw / f"{prefix}-client.json").write_text(client_out)
        (raw / f"{prefix}-server.json").write_text(server_out)
        # let the probe's standing queue drain before the next probe, if one follows (after the last, the
        # collection and the next run's set-up take longer than a queue takes to drain)
        if not final or index + 1 < len(probes):
            time.sleep((probe.queue_pkts or 100) * 1514 * 8 / (probe.rate_mbit * 1e6) + 0.5)
        if final:
            break
    check = fidelity.rate_check(f"bottleneck rate {label.replace('-pair', ' pair ')}", measured, expected)
    if len(attempts) > 1:
        shown = ", ".join("no result" if m is None else f"{m:.3f}" for m in attempts[:-1])
        check = replace(check, detail=f"{check.detail}; attempt {len(attempts)} (before: {shown})")
    return check


def udp_probe(net: Network, topology, probe, flowing=None, enough=None) -> tuple[str, str]:
    """One UDP rate probe (iperf3 -u at 1.2 x the rate, more by the loss a lossy link takes before its
    queue, for UDP_PROBE_S); the client's and server's JSON.

    iperf3 3.12 starts a UDP test with one datagram each way and no retry: on a lossy link that
    handshake is lost now and then, and the client would wait 30 s. It gets UDP_PROBE_S + twice the
    path's RTT + UDP_PROBE_SLACK_S, then both ends are killed (the attempt has no result); sooner when
    ``flowing`` (called at the client's start, it returns a test of whether the probed queues have
    dequeued anything since) says nothing flowed UDP_START_CHECK_S + UDP_START_RTTS base RTTs after the start;
    the client starts held at its first ``connect()`` by the clients' shim (testbed.guest.launch) and that
    count begins when it is continued: its exec, which reads its program and libraries from the host's
    files, is not counted (in virtual time a slow host stretched it past the check: two guests packed);
    and once ``enough()`` says the probed queues have been backlogged long enough to read their rate
    (fidelity.PASSIVE_MIN_BUSY_S), the client is ended: the rest of the probe would read the same rate
    (on a 10 Mbit/s link with a 1-BDP queue that cuts the 3 s probe to about 2 s)."""
    sender, receiver = topology.endpoints(probe.pair, probe.direction)
    server = net.popen(
        receiver.node, ["iperf3", "-s", "-1", "-J", "-i", "0.5", "-p", str(UDP_PROBE_PORT)], stdout=subprocess.PIPE
    )
    deadline = time.monotonic() + SERVER_LISTEN_S  # a server that does not listen leaves the probe without result
    while not listening(server.pid, UDP_PROBE_PORT) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    client = net.popen(
        sender.node,
        _client_argv(probe, sender.ip, receiver.ip),
        stdout=subprocess.PIPE,
        env={**os.environ, "LD_PRELOAD": str(launch.hold_library())},
    )
    rtt_s = topology.base_rtt_ms(probe.pair) / 1000
    timeout = UDP_PROBE_S + 2 * rtt_s + UDP_PROBE_SLACK_S if _held(client) else 0.0
    started = flowing() if flowing is not None else None
    client.send_signal(signal.SIGCONT)
    if started is not None and timeout > 0:
        try:
            client.wait(timeout=UDP_START_CHECK_S + UDP_START_RTTS * rtt_s)
        except subprocess.TimeoutExpired:
            if not started():  # the handshake was lost: this attempt will not measure anything
                timeout = 0.0
    if enough is not None and timeout > 0:
        timeout = _until_enough(client, timeout, enough)
    outputs = []
    for proc, wait in ((client, timeout), (server, 10.0)):
        try:
            out = proc.communicate(timeout=wait)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        outputs.append(out.decode(errors="replace"))
    return outputs[0], outputs[1]


def _client_argv(probe, sender_ip: str, receiver_ip: str) -> list[str]:
    """The probe's iperf3 client: UDP at 1.2 x the rate, raised by a loss the link may take before its queue."""
    send_mbit = probe.rate_mbit * 1.2 / (1 - min(probe.loss_pct, 90) / 100)
    return [
        *("iperf3", "-c", receiver_ip, "-B", sender_ip, "-p", str(UDP_PROBE_PORT), "-u"),
        *("-b", f"{send_mbit:.3f}M", "-l", str(fidelity.UDP_PAYLOAD_BYTES), "-t", f"{UDP_PROBE_S:g}", "-J"),
    ]


def _held(client: subprocess.Popen) -> bool:
    """Wait until the client has stopped at its first connect() (True), or ended first or never stopped (False:
    the attempt has no result, its output says why)."""
    deadline = time.monotonic() + PROBE_HOLD_TIMEOUT_S
    while process_state(client.pid) != "T":
        if client.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


#: how often a probe's queues are read for ``enough`` (the sampler's own rate)
ENOUGH_POLL_S = 1 / queues.SAMPLE_HZ


def _until_enough(client: subprocess.Popen, timeout: float, enough) -> float:
    """Wait up to ``timeout`` for the client to end; end it (SIGTERM: iperf3 still writes its JSON)
    once ``enough()``. Returns the time left for its exit."""
    end = time.monotonic() + timeout
    while client.poll() is None and time.monotonic() < end:
        if enough():
            client.terminate()
            return UDP_PROBE_SLACK_S
        time.sleep(ENOUGH_POLL_S)
    return max(0.0, end - time.monotonic())
