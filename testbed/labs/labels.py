"""A graded run's labels read back from its raw files: a run is what its captures say, not what its
manifest says.

A manifest is text a student can edit: its congestion control, seed, start time and settings can be
made to say anything, with the run's identity computed again by the project's own code. Its raw
files were written by the programs that ran: iperf3 reports the congestion control its socket used,
a timed loss channel the seed of its draws and the timeline of states that seed gives, iperf3 when it
started on the guest's clock, the capture and iperf3's receiver the bytes that crossed. Grading
(testbed/labs/grading.py, through testbed/labs/evidence.py) holds each label to them:

* **congestion control**: each connection's ``cc`` is the one iperf3's client reports for the
  sending socket (``end.sender_tcp_congestion``): New Reno's runs relabelled as Westwood+ fail;
* **seed**: each timed loss channel's draw seed is the one the manifest's seed gives
  (``lossbpf.draw_seed``), and its timeline of states is the one ``lossmodel.timeline`` draws from
  that seed: a run of seed 3 relabelled seed 5 fails, naming the channel;
* **start time**: iperf3's own start stamp lies between the manifest's start and end (both on the
  guest's clock, in real and in virtual time): a start time edited to after ``testbed lab start``
  fails;
* **goodput**, in a lab that sets ``receiver_check_pct``: each flow's goodput from the capture and from
  iperf3's receiver agree within it (a capture whose timestamps were compressed to raise its goodput no
  longer matches the receiver's count). Only where honest runs agree closely: a single bulk flow over a
  shallow queue (the wireless lab: 0.1-2.2 % apart); with deep queues, many flows, a multipath sprayer or
  ON/OFF traffic the capture's count differs from the receiver's by up to 20-150 % honestly (measured
  on 1325 flows here), so no other lab sets it.

A student who rewrites every one of these consistently (iperf3's JSON, the loss timelines, the capture)
is not caught here (the grader running a sample of the student's runs again would be: not built yet);
docs/labs.md says so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from testbed.guest import lossbpf
from testbed.results import rundir
from topologies.lossmodel import TimedTwoStateLoss, timeline

#: iperf3's start stamp (whole seconds) may lie this far outside the manifest's start and end (whole seconds)
CLOCK_SLACK_S = 5.0
#: below this many bytes received a flow's two counts are too small to compare
MIN_COMPARED_BYTES = 100_000


def label_problems(raw: Path, manifest: dict) -> list[str]:
    """Where the manifest's labels disagree with what the run's raw files say (empty: they agree)."""
    return _cc_problems(raw, manifest) + _seed_problems(raw, manifest) + _clock_problems(raw, manifest)


def _client(raw: Path, connection: dict) -> dict | None:
    path = raw / f"iperf3-{connection.get('id')}-client.json"
    try:
        data = rundir.read_json(path)
    except rundir.LoadError:
        return None
    return data if isinstance(data, dict) else None


def _cc_problems(raw: Path, manifest: dict) -> list[str]:
    problems = []
    for connection in manifest.get("connections") or []:
        client = _client(raw, connection)
        if client is None:
            problems.append(
                f"raw/iperf3-{connection.get('id')}-client.json is missing or unreadable: the run's "
                "congestion control cannot be read from it"
            )
            continue
        used = (client.get("end") or {}).get("sender_tcp_congestion")
        if used != connection.get("cc"):
            problems.append(
                f"{rundir.MANIFEST} says {connection.get('id')} ran {connection.get('cc')}; iperf3's "
                f"own output says its sender used {used}"
            )
    return problems


def _seed_problems(raw: Path, manifest: dict) -> list[str]:
    """Each timed loss channel's draw seed and timeline against the manifest's seed."""
    seed = manifest.get("seed")
    problems = []
    for path in sorted(raw.glob("loss-*.json")):
        try:
            channel = rundir.read_json(path)
            model = TimedTwoStateLoss.model_validate(channel["model"])
            stream, states = int(channel["stream"]), channel["states"]
        except (rundir.LoadError, KeyError, TypeError, ValueError) as err:
            problems.append(f"raw/{path.name} does not read as a loss channel's record ({err})")
            continue
        if not isinstance(seed, int) or channel.get("draw_seed") != lossbpf.draw_seed(seed, stream):
            problems.append(f"raw/{path.name}: its draws were seeded by another seed than the manifest's ({seed})")
            continue
        if _states(states) != _states(_drawn(model, seed, states, stream)):
            problems.append(f"raw/{path.name}: its timeline of states is not the one seed {seed} draws")
    return problems


def _drawn(model: TimedTwoStateLoss, seed: int, states: list, stream: int) -> list[dict]:
    horizon = max((float(s.get("end_s", 0)) for s in states if isinstance(s, dict)), default=0.0)
    return [s.to_dict() for s in timeline(model, seed, horizon, stream)][: len(states)]


def _states(states: list) -> list[tuple]:
    """A timeline's states as compared: kind, start and end (ms)."""
    return [(s.get("state"), _ms(s.get("start_s")), _ms(s.get("end_s"))) for s in states if isinstance(s, dict)]


def _ms(seconds) -> int | None:
    return round(float(seconds) * 1000) if isinstance(seconds, int | float) else None


def _clock_problems(raw: Path, manifest: dict) -> list[str]:
    """iperf3's start stamps against the manifest's start and end (the guest's clock, both)."""
    try:
        start = datetime.fromisoformat(manifest["started_utc"]).timestamp()
        end = datetime.fromisoformat(manifest["ended_utc"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return [f"{rundir.MANIFEST} gives no start and end time (started_utc, ended_utc)"]
    problems = []
    for connection in manifest.get("connections") or []:
        stamp = ((_client(raw, connection) or {}).get("start") or {}).get("timestamp", {}).get("timesecs")
        if isinstance(stamp, int | float) and not start - CLOCK_SLACK_S <= stamp <= end + CLOCK_SLACK_S:
            problems.append(
                f"{rundir.MANIFEST} says the run went from {manifest['started_utc']} to "
                f"{manifest['ended_utc']}; iperf3's own output says {connection.get('id')} started "
                f"{datetime.fromtimestamp(stamp, UTC).isoformat(timespec='seconds')}"
            )
    return problems


def receiver_problems(flows: pd.DataFrame, tolerance_pct: float) -> list[str]:
    """Each flow's goodput from the capture against iperf3's receiver (the flows as the analysis computes
    them from the raw files), within ``tolerance_pct`` (a lab's ``receiver_check_pct``)."""
    problems = []
    columns = {"conn", "recv_bytes", "goodput_mbit", "recv_goodput_mbit"}
    if flows.empty or not columns <= set(flows.columns):
        return problems
    for row in flows.itertuples():
        if not (row.recv_bytes >= MIN_COMPARED_BYTES and row.recv_goodput_mbit > 0):
            continue
        if abs(row.goodput_mbit / row.recv_goodput_mbit - 1) > tolerance_pct / 100:
            problems.append(
                f"{row.conn}: the capture gives a goodput of {row.goodput_mbit:.4g} Mbit/s, iperf3's "
                f"receiver {row.recv_goodput_mbit:.4g} (more than {tolerance_pct:g} % apart: its clock "
                "is not the capture's)"
            )
    return problems
