"""The live page's records: a session folder read as it grows, each record a JSON-ready dict.

One stream, two views. The records are read from the run folders' own files as the runs write them,
with the analysis' own parsers: the running run's manifest (its time zero, connections and
topology, written again when its traffic starts), ``raw/tcp_probe.txt`` (``analysis.raw.loaders.trace_event``,
the line parser of the finished report's cwnd, ssthresh and RTT), ``raw/queues-live.csv`` (the queue
sampler's ticks as it reads them), the session's ``plan.json`` and, under a guest, the console log's
fidelity lines; at a run's end its manifest's checks and its ``flows.csv`` (the report's numbers).
A finished session is the same files read at once, which is how ``testbed watch`` replays it.
The guest writes these folders while they are read: every file is opened as a regular file only (a
symbolic link is not followed, a FIFO not waited on: such a file counts as not there yet,
``rundir.open_regular``), a JSON or CSV file is read only up to :data:`MAX_FILE_BYTES`, and a growing
file at most :data:`TAIL_READ_BYTES` a poll.

Records (``kind``):

- ``session``: the session's folder and its runs in plan order;
- ``progress``: runs done of total, the run going on, the time left by the plan's estimates;
- ``run``: a run's status and what the paper's figures draw beside the measured line (the
  bottleneck's rate, the fair share, the BDP in packets);
- ``flow``: a connection's cwnd, ssthresh, smoothed RTT and acked rate (snd_una's advance) in
  :data:`BIN_S` bins, on the run's clock;
- ``queue``: a bottleneck's backlog, drops and ECN marks per sampler tick;
- ``check``: a fidelity check, as the guest logs it or as the manifest keeps it;
- ``result``: a finished run's goodput per connection (flows.csv) and whether it is trustworthy;
- ``claims``: in a session of the papers' experiments, each claim's verdict, effect and interval over
  the runs finished so far, judged as the report judges them (``analysis.verdicts.claims.verdicts`` on the runs'
  analyses: the report's cache, else the analysis).

Past 500 lines because the feed's events are read here together: each follows the same bounded,
no-link reading of an untrusted run folder (testbed/results/rundir.py), and apart they would not.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from analysis.raw.loaders import INFINITE_SSTHRESH, trace_event
from analysis.runs import analyze as run_analysis
from analysis.verdicts import claims as paper_claims
from analysis.verdicts import sequential
from testbed.guest.queues import LIVE_CSV
from testbed.plan import progress
from testbed.report.cache import entries
from testbed.results import rundir

#: a flow's samples are binned this wide (the page updates at least twice a second)
BIN_S = 0.2
#: the acked rate is snd_una's advance over this long (a 0.2 s bin holds a handful of ACKs at 2 Mbit/s)
RATE_WINDOW_S = 1.0
#: how often a followed results folder is searched for a newer session
RESCAN_S = 2.0
#: how long an ended run's manifest is read again for the host's check (see RunTail._late_checks)
HOST_CHECK_WAIT_S = 5.0
#: the claims are judged again at most this often (each time over every finished run: seconds of CPU
#: in a long session)
CLAIMS_EVERY_S = 30.0
#: a packet, for the BDP drawn beside cwnd (the queues' own unit)
PACKET_BYTES = 1500
#: the most read of a run's manifest, the session's plan or a run's flows.csv (a manifest is about 30 KB)
MAX_FILE_BYTES = 8 << 20
#: the most a growing file (a trace, the queues, the console log) is read of at one poll: a run's end
#: waits until its traces are read to their end (see RunTail.poll)
TAIL_READ_BYTES = 16 << 20
#: a line still without its newline past this length is dropped (no trace line comes near it)
MAX_LINE_BYTES = 1 << 20
_FIDELITY_LINE = re.compile(r"fidelity: (.+?): (ok|OFF): (.*)$")


class _Tail:
    """A text file read as it grows: whole lines only (a line being written waits for its newline), at most
    :data:`TAIL_READ_BYTES` a call (``behind`` then says there is more); a link or a FIFO is not read."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.behind = False

    def lines(self) -> list[str]:
        try:
            with rundir.open_regular(self.path) as handle:
                handle.seek(self.offset)
                data = handle.read(TAIL_READ_BYTES)
                self.behind = self.offset + len(data) < os.fstat(handle.fileno()).st_size
        except (OSError, rundir.LoadError):
            self.behind = False  # gone, or not a file: nothing more to wait for
            return []
        self.offset += len(data)
        *whole, self.partial = (self.partial + data).split(b"\n")
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial = b""  # not a line of any file this reads: dropped, not kept growing
        return [line.decode(errors="replace") for line in whole]


@dataclass
class _Bin:
    start: float
    values: dict = field(default_factory=dict)
    una_last: int | None = None


class RunTail:
    """One run folder followed: its records since the last :meth:`poll`."""

    def __init__(self, session: Path, run: str):
        self.dir = session / run
        self.run = run
        self.status: str | None = None
        self.t0: float | None = None
        self.ports: dict[frozenset, str] = {}
        self.probe = _Tail(self.dir / "raw" / "tcp_probe.txt")
        self.queues = _Tail(self.dir / "raw" / LIVE_CSV)
        self.queue_header: list[str] | None = None
        self.bins: dict[str, _Bin] = {}
        self.acked: dict[str, list[tuple[float, int]]] = {}  # conn -> (bin end, snd_una) over the rate window
        self.checks: dict[str, bool] = {}
        self.scenario: str | None = None
        self.done = False  # its end read
        self.goodput_told = False  # its goodput (flows.csv: the analysis comes after the run) told
        self.amended = False  # the host's check read (testbed/host/hostload.py adds it after the end)
        self.ended_at = 0.0  # when its end was read (time.monotonic())

    @property
    def flows(self) -> Path:
        return self.dir / "flows.csv"

    @property
    def settled(self) -> bool:
        """Nothing more will come: its end, its goodput and the host's check (or its wait) told."""
        return self.done and self.goodput_told and self.amended

    def poll(self) -> list[dict]:
        """New records of the run (after its end only the host's check and its goodput, as they come)."""
        if self.done:
            return self._late_checks() + ([] if self.goodput_told else self._goodput_record())
        manifest = self._manifest()
        if manifest is None:
            return []
        records = self._start_records(manifest)
        if self.t0 is not None:  # the two traces merged by time: a replay releases them by it
            records += sorted(self._flow_records() + self._queue_records(), key=lambda r: r["t"])
        # ended once its traces are read to their end (a long trace takes more than one poll)
        ended = manifest.get("status") not in (None, "running") and not (self.probe.behind or self.queues.behind)
        if ended:
            records += self._flush_bins() + self._status_record(manifest) + self._end_records(manifest)
            self.done = True
        elif manifest.get("status") == "running":
            records += self._status_record(manifest)
        return records

    def _manifest(self) -> dict | None:
        try:
            return rundir.read_json(self.dir / rundir.MANIFEST, MAX_FILE_BYTES)
        except (rundir.LoadError, OSError):
            return None

    def _start_records(self, manifest: dict) -> list[dict]:
        """Once the run's traffic has its time zero: its connections and the paper's lines."""
        if self.t0 is not None or manifest.get("t0_monotonic") is None:
            return []
        self.t0 = float(manifest["t0_monotonic"])
        self.ports = {
            frozenset((c["client_port"], c["server_port"])): c["id"] for c in manifest.get("connections") or []
        }
        return [
            {
                "kind": "run",
                "run": self.run,
                "expect": expectations(manifest),
                "conns": {c["id"]: c.get("cc") for c in manifest.get("connections") or []},
            }
        ]

    def _status_record(self, manifest: dict) -> list[dict]:
        """The run's status when it changed (its end after its traces: a replay shows it ended last)."""
        status = manifest.get("status")
        if status == self.status:
            return []
        self.status = status
        return [{"kind": "run", "run": self.run, "status": status}]

    def _flow_records(self) -> list[dict]:
        records = []
        for line in self.probe.lines():
            event = trace_event(line)
            if event is None:
                continue
            conn = self.ports.get(frozenset((event.get("src_port"), event.get("dest_port"))))
            if conn is None:
                continue
            t = event["t_mono_s"] - self.t0
            current = self.bins.get(conn)
            if current is not None and t >= current.start + BIN_S:
                records.append(self._bin_record(conn, current))
                current = None
            if current is None:
                current = self.bins[conn] = _Bin(start=BIN_S * (t // BIN_S))
            current.values = event
            una = event.get("snd_una")
            if isinstance(una, int):
                current.una_last = una
        return records

    def _bin_record(self, conn: str, done: _Bin) -> dict:
        event = done.values
        ssthresh = event.get("ssthresh")
        end = done.start + BIN_S
        acked = None
        if done.una_last is not None:
            history = self.acked.setdefault(conn, [])
            history.append((end, done.una_last))
            while len(history) > 1 and history[1][0] <= end - RATE_WINDOW_S:
                history.pop(0)
            una_first, span = history[0][1], end - history[0][0]
            if span > 0:
                acked = round(((done.una_last - una_first) % 2**32) * 8 / span / 1e6, 4)
        srtt = event.get("srtt")
        return {
            "kind": "flow",
            "run": self.run,
            "conn": conn,
            "t": round(end, 3),
            "cwnd": event.get("snd_cwnd"),
            "ssthresh": ssthresh if isinstance(ssthresh, int) and ssthresh < INFINITE_SSTHRESH else None,
            "rtt_ms": round(srtt / 1000, 3) if isinstance(srtt, (int, float)) else None,
            "acked_mbit": acked,
        }

    def _flush_bins(self) -> list[dict]:
        records = [self._bin_record(conn, b) for conn, b in self.bins.items()]
        self.bins = {}
        return records

    def _queue_records(self) -> list[dict]:
        lines = self.queues.lines()
        if self.queue_header is None and lines:
            self.queue_header, lines = next(csv.reader([lines[0]])), lines[1:]
        records = []
        for row in csv.DictReader(io.StringIO("\n".join(lines)), fieldnames=self.queue_header):
            try:
                t = float(row["t_mono_s"]) - self.t0
            except (KeyError, TypeError, ValueError):
                continue
            if t < 0:
                continue  # the sampler starts before the traffic: the page shows the traffic's window
            records.append(
                {
                    "kind": "queue",
                    "run": self.run,
                    "link": f"{row['node']}/{row['intf']}",
                    "t": round(t, 3),
                    "backlog_pkts": _int(row.get("backlog_pkts")),
                    "drops": _int(row.get("drops")),
                    "marks": _int(row.get("marks")),
                }
            )
        return records

    def check_line(self, name: str, ok: bool, detail: str) -> dict | None:
        """A fidelity check the console logged for this run (None when it was already told)."""
        if self.checks.get(name) == ok:
            return None
        self.checks[name] = ok
        return {"kind": "check", "run": self.run, "name": name, "ok": ok, "detail": detail}

    def _end_records(self, manifest: dict) -> list[dict]:
        fidelity = manifest.get("fidelity") or {}
        records = [
            r
            for c in fidelity.get("checks") or []
            if (r := self.check_line(c.get("name", ""), bool(c.get("ok")), c.get("detail", "")))
        ]
        records.append(
            {
                "kind": "result",
                "run": self.run,
                "status": manifest.get("status"),
                "trustworthy": fidelity.get("trustworthy"),
            }
        )
        self.goodput_told = manifest.get("status") != "complete"  # a failed run has no goodput to wait for
        # the host judges a complete run's traffic; a failed run or a shell's recording has nothing to wait for
        self.amended = "host" in manifest or manifest.get("status") != "complete"
        self.ended_at = time.monotonic()
        self.scenario = manifest.get("scenario")
        return records + self._goodput_record()

    def _late_checks(self) -> list[dict]:
        """The host's contention check: the host adds it to the manifest when the runner logs the run's end,
        a moment after the manifest says complete, so the ended run's manifest is read again until it has
        it (a run the host does not judge: for at most HOST_CHECK_WAIT_S)."""
        if self.amended:
            return []
        manifest = self._manifest() or {}
        self.amended = "host" in manifest or time.monotonic() - self.ended_at > HOST_CHECK_WAIT_S
        checks = (manifest.get("fidelity") or {}).get("checks") or []
        return [r for c in checks if (r := self.check_line(c.get("name", ""), bool(c.get("ok")), c.get("detail", "")))]

    def _goodput_record(self) -> list[dict]:
        """The run's goodput per connection once its analysis wrote flows.csv (after the run's end)."""
        try:  # a run run again had its earlier attempt's files moved away (.attempts/): this one is its own
            rows = list(csv.DictReader(io.StringIO(rundir.read_text(self.flows, MAX_FILE_BYTES))))
        except rundir.LoadError:
            return []
        self.goodput_told = True
        return [
            {
                "kind": "result",
                "run": self.run,
                "goodput_mbit": {row.get("conn"): _float(row.get("goodput_mbit")) for row in rows},
            }
        ]


def _claim_row(verdict) -> dict:
    """A claim's verdict as the page lists it: its deciding condition's effect and interval, in %."""
    shown = [c for c in verdict.conditions if c.effect is not None]
    row = {"id": verdict.claim.id, "verdict": verdict.label, "condition": None}
    if shown:
        best = min(shown, key=lambda c: min(c.p_values.values(), default=1.0))
        low, high = best.interval()
        row.update(
            condition=best.condition,
            effect_pct=_percent(best.difference),
            low_pct=_percent(low),
            high_pct=_percent(high),
            runs=f"{len(best.a)} vs {len(best.b)}",
        )
    return row


def _percent(value: float) -> float | None:
    """A relative value in %, None when it is not a number (an interval from one run a side: JSON has no NaN)."""
    return round(100 * value, 1) if math.isfinite(value) else None


def expectations(manifest: dict) -> dict:
    """What the paper's figures draw beside the measured lines: the forward bottleneck's rate, each
    forward flow's fair share of it, and the bandwidth-delay product in packets at the flows' base RTT."""
    bottlenecks = (manifest.get("topology") or {}).get("bottlenecks") or []
    forward = [b for b in bottlenecks if b.get("direction", "forward") == "forward" and b.get("rate_mbit")]
    connections = [c for c in manifest.get("connections") or [] if c.get("direction", "forward") == "forward"]
    if not forward:
        return {}
    rate = min(float(b["rate_mbit"]) for b in forward)
    rtts = [float(c["base_rtt_ms"]) for c in connections if c.get("base_rtt_ms")]
    expect = {"rate_mbit": rate, "fair_mbit": round(rate / max(1, len(connections)), 4)}
    if rtts:
        expect["bdp_pkts"] = round(rate * 1e6 / 8 * (min(rtts) / 1000) / PACKET_BYTES, 1)
    return expect


def _int(text) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _float(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class SessionFeed:
    """A session folder followed (or, given a results folder, its newest session, switching to a newer
    one when it appears): :meth:`poll` returns the records since the last call."""

    def __init__(self, folder: Path, since: float | None = None):
        self.folder = Path(folder)
        self.since = since  # follow only sessions planned after this time (``--live``: the command's own)
        self.session: Path | None = None
        self.runs: list[RunTail] = []
        self.estimates: list[float] = []
        self.console: _Tail | None = None
        self.current: int | None = None  # the run the console's lines are about
        self.last_scan = 0.0
        self.told: tuple | None = None  # the progress last told
        self.analyses: dict[str, object] = {}  # run -> its analysis, once settled (for the claims)
        self.claims_judged = (0, -CLAIMS_EVERY_S)  # (runs judged, when)

    def poll(self) -> list[dict]:
        records = self._switch()
        if self.session is None:
            return records
        records += self._console_records()
        for run in self.runs:  # in plan order, the progress after each: a replay's bar moves run by run
            records += run.poll()
            records += self._progress_if_moved()
        return records + self._claims_records()

    def _claims_records(self) -> list[dict]:
        """The claims over the runs settled so far, when more settled (at most every CLAIMS_EVERY_S, and
        once all have)."""
        settled = [r for r in self.runs if r.settled and r.status == "complete"]
        judged, when = self.claims_judged
        due = time.monotonic() - when >= CLAIMS_EVERY_S or len(settled) == len(self.runs)
        if len(settled) == judged or not due:
            return []
        self.claims_judged = (len(settled), time.monotonic())
        experiments = {run.scenario for run in settled}
        if not any(c.experiment in experiments for c in paper_claims.load_claims()):
            return []
        for run in settled:
            if run.run not in self.analyses:
                self.analyses[run.run] = entries.load(self.session, run.dir) or run_analysis.analyze_run(
                    run.dir, write=False
                )
        # by the session's design, as its report will judge (sequential.json); provisional until every run is in,
        # and never recorded from here (the report records the look)
        final = len(settled) == len(self.runs)
        record = sequential.read_record(self.session)
        judged = sequential.judge_by_design(self.session, list(self.analyses.values()), record, final=final)
        rows = [_claim_row(v) for v in judged.verdicts]
        if not final:
            for row in rows:
                row["verdict"] = f"provisional: {row['verdict']}"
        return [{"kind": "claims", "runs": len(settled), "provisional": not final, "claims": rows}]

    def _progress_if_moved(self) -> list[dict]:
        told = self._progress()
        if (told["done"], told["running"], told["finished"]) == self.told:  # the page counts the time left down between
            return []
        self.told = (told["done"], told["running"], told["finished"])
        return [told]

    def _switch(self) -> list[dict]:
        """Follow the newest session (a new one starts the page over)."""
        now = time.monotonic()
        if self.session is not None and (now - self.last_scan < RESCAN_S or (self.folder / "plan.json").is_file()):
            return []
        self.last_scan = now
        newest = newest_session(self.folder, self.since)
        if newest is None or newest == self.session:
            return []
        try:
            plan = rundir.read_json(newest / "plan.json", MAX_FILE_BYTES)
        except rundir.LoadError:
            return []  # not written yet, or not a file to read: looked at again at the next scan
        self.session = newest
        entries = plan.get("runs") or []
        self.runs = [RunTail(newest, e["run_dir"]) for e in entries]
        self.estimates = [float(e.get("estimate_s") or 0.0) for e in entries]
        console = next(iter(sorted(newest.glob("*console*.log"))), None)
        self.console = _Tail(console) if console else None
        self.current = None
        return [{"kind": "session", "session": str(newest), "name": newest.name, "runs": [r.run for r in self.runs]}]

    def _console_records(self) -> list[dict]:
        if self.console is None:
            found = next(iter(sorted(self.session.glob("*console*.log"))), None)
            if found is None:
                return []
            self.console = _Tail(found)
        records = []
        for line in self.console.lines():
            message = progress.message_of(line)
            if message is None:
                continue
            event = progress.parse_line(message)
            if isinstance(event, progress.RunStarted):
                self.current = event.index - 1
            match = _FIDELITY_LINE.search(message)
            if match and self.current is not None and 0 <= self.current < len(self.runs):
                record = self.runs[self.current].check_line(match.group(1), match.group(2) == "ok", match.group(3))
                records += [record] if record else []
        return records

    def _progress(self) -> dict:
        done = [r.done for r in self.runs]
        running = next((r.run for r in self.runs if r.status == "running"), None)
        left = sum(e for e, d in zip(self.estimates, done, strict=True) if not d)
        return {
            "kind": "progress",
            "done": sum(done),
            "total": len(self.runs),
            "running": running,
            "eta_s": round(left, 1),
            "finished": bool(self.runs) and all(done),
        }

    @property
    def settled(self) -> bool:
        """Every run ended and its goodput told: nothing more will come."""
        return bool(self.runs) and all(r.settled for r in self.runs)


def newest_session(folder: Path, since: float | None = None) -> Path | None:
    """``folder`` when it is a session (it has a plan.json), else the session under it planned last
    (after ``since``, a time.time(), when given); None when there is none yet."""
    if (folder / "plan.json").is_file():
        return folder
    plans = [(p.stat().st_mtime, p.parent) for p in folder.rglob("plan.json") if p.is_file()]
    plans = [(t, p) for t, p in plans if since is None or t >= since]
    return max(plans)[1] if plans else None


def finished(session: Path) -> bool:
    """Whether every run of the session's plan has ended (its manifest no longer says running)."""
    try:
        entries = rundir.read_json(session / "plan.json", MAX_FILE_BYTES).get("runs") or []
    except rundir.LoadError:
        return False
    for entry in entries:
        try:
            status = rundir.read_json(session / entry["run_dir"] / rundir.MANIFEST, MAX_FILE_BYTES).get("status")
        except rundir.LoadError:
            return False
        if status in (None, "running"):
            return False
    return True
