"""Loaders for every raw file a run writes, each returning tidy pandas frames or plain dicts.

A run folder (docs/results.md shows the whole layout)::

    manifest.json                 provenance, status, connections, topology, fidelity
    raw/iperf3-<conn>-client.json iperf3 -J of the sender (the client) of connection <conn>
    raw/iperf3-<conn>-server.json iperf3 -J of the receiver (the server)
    raw/tcp_probe.txt             ftrace text of tcp:tcp_probe, trace_clock=mono, sender side only
    raw/westwood_tb.txt           ftrace text of our module's westwood_tb events (runs of westwood_ml/_paper)
    raw/<router>.pcap             tcpdump -i any -Q in on each router, headers only (see pcap.py)
    raw/tc-stats.json             tc -s -j qdisc show, per "node/intf", after the run
    raw/tc-stats-before.json      the same counters as the run before it left them, when the run
                                  used a network kept from that run (testbed.guest.keeper)
    raw/ping-pair<i>.txt          ping summary of the pre-traffic RTT probe
    raw/udp-probe-<dir>[-client|-server].json  the pre-traffic UDP rate probe (iperf3 -u -J)

Every loader raises :class:`LoadError` naming the file and what is wrong with it (missing, empty,
cut short, not what it should be), so the caller can report it and go on with the other files.
Files are read through ``testbed.results.rundir`` (the one JSON and text reader, which raises that
error). Nothing here needs root or a kernel: results can be analysed anywhere. Past 500 lines because it
holds one short loader per raw file above, each with the model of what it returns; nothing else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from testbed.results.rundir import MANIFEST, SESSION, LoadError, display_path, read_json, read_text

#: tcp_probe's ssthresh when it was never set (TCP_INFINITE_SSTHRESH)
INFINITE_SSTHRESH = 0x7FFFFFFF
#: tcp_probe fields printed in hex without a 0x prefix (``%llx``)
_BARE_HEX_FIELDS = {"sock_cookie"}


def load_manifest(run_dir: Path) -> dict:
    """The run's ``manifest.json`` as a dict (keys may be missing: a failed run has few). The analysis
    reads it as data, not as :class:`testbed.results.manifest.Manifest`: a manifest whose values do not
    fit the model still gives what it has (connections, topology) and the status reads "unknown"."""
    path = Path(run_dir) / MANIFEST
    data = read_json(path)
    if not isinstance(data, dict):
        raise LoadError(path, "not a JSON object")
    return data


# --------------------------------------------------------------------------------------------- iperf3


@dataclass
class Iperf3Result:
    """One iperf3 ``-J`` output.

    ``totals`` (from the ``end`` section; empty when iperf3 died before writing it):
    ``sent_bytes``/``sent_s`` (application bytes written, sender's view), ``received_bytes``/``received_s``
    (bytes the receiver read), ``retransmits`` (the sender kernel's count), ``mean_rtt_ms``/``min_rtt_ms``/
    ``max_rtt_ms`` (sender only), ``sender_cc``/``receiver_cc``.
    ``intervals``: one row per reporting interval (``start_s``, ``end_s``, ``seconds``, ``bytes``,
    ``bits_per_second`` and, on the sender, ``retransmits``, ``snd_cwnd_bytes``, ``rtt_ms``); times
    are relative to the start of the iperf3 test.
    """

    path: Path
    role: str  # "client" or "server"
    is_sender: bool | None
    totals: dict = field(default_factory=dict)
    intervals: pd.DataFrame = field(default_factory=pd.DataFrame)
    error: str | None = None  # iperf3's own "error" entry
    local: tuple[str, int] | None = None
    remote: tuple[str, int] | None = None


_INTERVAL_COLUMNS = [
    "start_s",
    "end_s",
    "seconds",
    "bytes",
    "bits_per_second",
    "retransmits",
    "snd_cwnd_bytes",
    "rtt_ms",
]


def load_iperf3(path: Path) -> Iperf3Result:
    """Parse an iperf3 JSON (client or server, by the file name's ``-client``/``-server`` suffix)."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise LoadError(path, "not an iperf3 JSON object")
    role = "server" if path.stem.endswith("-server") else "client"
    start = data.get("start") or {}
    connected = (start.get("connected") or [{}])[0]
    result = Iperf3Result(path=path, role=role, is_sender=None, error=data.get("error"))
    if connected.get("local_host") is not None:
        result.local = (connected["local_host"], int(connected.get("local_port", 0)))
        result.remote = (connected.get("remote_host"), int(connected.get("remote_port", 0)))
    rows = []
    for interval in data.get("intervals") or []:
        total = interval.get("sum") or {}
        streams = interval.get("streams") or [{}]
        if "sender" in total:
            result.is_sender = bool(total["sender"])
        rtt = _mean([s.get("rtt") for s in streams])
        rows.append(
            {
                "start_s": total.get("start"),
                "end_s": total.get("end"),
                "seconds": total.get("seconds"),
                "bytes": total.get("bytes"),
                "bits_per_second": total.get("bits_per_second"),
                "retransmits": total.get("retransmits"),
                "snd_cwnd_bytes": _sum([s.get("snd_cwnd") for s in streams]),
                "rtt_ms": rtt / 1000 if rtt is not None else None,
            }
        )
    result.intervals = pd.DataFrame(rows, columns=_INTERVAL_COLUMNS).astype("float64")
    end = data.get("end") or {}
    if end:
        sent, received = end.get("sum_sent") or {}, end.get("sum_received") or {}
        senders = [s.get("sender") or {} for s in end.get("streams") or []]
        totals = {
            "sent_bytes": sent.get("bytes"),
            "sent_s": sent.get("seconds"),
            "received_bytes": received.get("bytes"),
            "received_s": received.get("seconds"),
            "retransmits": sent.get("retransmits"),
            "mean_rtt_ms": _scaled(_mean([s.get("mean_rtt") for s in senders]), 1e-3),
            "min_rtt_ms": _scaled(_min([s.get("min_rtt") for s in senders]), 1e-3),
            "max_rtt_ms": _scaled(_max([s.get("max_rtt") for s in senders]), 1e-3),
            "sender_cc": end.get("sender_tcp_congestion"),
            "receiver_cc": end.get("receiver_tcp_congestion"),
        }
        result.totals = {k: v for k, v in totals.items() if v is not None}
        if result.is_sender is None and "sender" in sent:
            result.is_sender = bool(sent["sender"])
    return result


def _finite(values) -> list[float]:
    return [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]


def _mean(values) -> float | None:
    clean = _finite(values)
    return sum(clean) / len(clean) if clean else None


def _sum(values) -> float | None:
    clean = _finite(values)
    return sum(clean) if clean else None


def _min(values) -> float | None:
    clean = _finite(values)
    return min(clean) if clean else None


def _max(values) -> float | None:
    clean = _finite(values)
    return max(clean) if clean else None


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


# ------------------------------------------------------------------------------------------ tcp_probe

# "<task>-<pid> [cpu] <flags> <timestamp>: tcp_probe: key=value ..."; the task name may contain spaces
_TRACE_LINE = re.compile(r"\s(\d+\.\d+):\s+([\w:]+):\s(.*)$")
_LOST_EVENTS = re.compile(r"\[LOST (\d+) EVENTS\]")
_KEY_VALUE = re.compile(r"(\w+)=(\S+)")


@dataclass
class TcpProbeTrace:
    """``events``: one row per tcp_probe event, columns ``t_mono_s`` (CLOCK_MONOTONIC seconds), ``src_ip``,
    ``src_port``, ``dest_ip``, ``dest_port`` and every other ``key=value`` field of the event as printed
    (numbers parsed, ``0x`` hex to int; ``srtt`` in microseconds, ``snd_cwnd`` and ``ssthresh`` in packets).
    ``ssthresh`` is the kernel's tcp_current_ssthresh(), not the real ssthresh (MACHINE.md)."""

    path: Path
    events: pd.DataFrame
    lost_events: int = 0
    unparsed_lines: int = 0


def _field_value(key: str, text: str) -> object:
    if key in _BARE_HEX_FIELDS:
        try:
            return int(text, 16)
        except ValueError:
            return text
    if text.startswith(("0x", "0X")):
        try:
            return int(text, 16)
        except ValueError:
            return text
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _split_endpoint(text: str) -> tuple[str, int | None]:
    """``10.1.0.1:40000`` or ``[2001:db8::1]:40000`` -> (address, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text, None
    return host.strip("[]"), int(port)


def trace_event(line: str, event: str = "tcp_probe") -> dict | None:
    """One ftrace text line's fields (``t_mono_s``, ``src_ip``, ``src_port``, ... as :class:`TcpProbeTrace`
    describes them) when it is an ``event``; None for any other line. The live page (testbed/report/live/livefeed.py)
    reads a trace as it grows through this, as :func:`load_tcp_probe` reads a finished one."""
    match = _TRACE_LINE.search(line)
    if match is None or match.group(2).rsplit(":", 1)[-1] != event:
        return None
    values: dict = {"t_mono_s": float(match.group(1))}
    for key, text in _KEY_VALUE.findall(match.group(3)):
        if key in ("src", "dest"):
            values[f"{key}_ip"], values[f"{key}_port"] = _split_endpoint(text)
        else:
            values[key] = _field_value(key, text)
    return values


def load_tcp_probe(path: Path, event: str = "tcp_probe") -> TcpProbeTrace:
    """Parse an ftrace text file of ``tcp:tcp_probe`` events. Fields are parsed generically (newer
    kernels add fields). An absent file or one without any event raises :class:`LoadError`."""
    path = Path(path)
    columns: dict[str, list] = {"t_mono_s": []}
    count = 0
    lost = 0
    unparsed = 0
    try:
        handle = open(path, errors="replace")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise LoadError(path, "missing") from None
    except OSError as exc:
        raise LoadError(path, f"unreadable ({exc.strerror})") from None
    with handle:
        for line in handle:
            if not line.strip() or line.startswith("#"):
                continue
            values = trace_event(line, event)
            if values is None:
                lost_match = _LOST_EVENTS.search(line)
                if lost_match:
                    lost += int(lost_match.group(1))
                elif _TRACE_LINE.search(line) is None:
                    unparsed += 1
                continue
            for key, value in values.items():
                column = columns.get(key)
                if column is None:
                    column = columns[key] = [None] * count
                column.append(value)
            count += 1
            for column in columns.values():
                if len(column) < count:
                    column.append(None)
    if count == 0:
        detail = "no tcp_probe events (empty trace)"
        if lost:
            detail += f"; the trace buffer lost {lost} events"
        raise LoadError(path, detail)
    frame = pd.DataFrame(columns)
    for name in frame.columns:
        if name in ("src_ip", "dest_ip", "family"):
            continue
        converted = pd.to_numeric(frame[name], errors="coerce")
        if converted.notna().sum() == frame[name].notna().sum():
            frame[name] = converted
    return TcpProbeTrace(path=path, events=frame, lost_events=lost, unparsed_lines=unparsed)


# ---------------------------------------------------------------------------------------- westwood_tb

#: the module's events (kernel-patch/README.md, "Trace events") and the fields each must have: a line
#: without all of them was cut short (the last line of a trace read while the kernel was writing it)
WESTWOOD_SAMPLE_FIELDS = [
    "variant",
    "sport",
    "dport",
    "acked_bytes",
    "win_us",
    "sample_Bps",
    "est_Bps",
    "rtt_us",
    "rtt_min_us",
    "cwnd",
    "ssthresh",
]
WESTWOOD_CONG_FIELDS = [
    "variant",
    "kind",
    "sport",
    "dport",
    "cwnd_before",
    "cwnd_after",
    "ssthresh_before",
    "ssthresh_after",
    "est_Bps",
    "rtt_min_us",
]
_WESTWOOD_EVENTS = {"westwood_tb_sample": WESTWOOD_SAMPLE_FIELDS, "westwood_tb_cong": WESTWOOD_CONG_FIELDS}
_WESTWOOD_TEXT_FIELDS = {"variant", "kind"}
_WESTWOOD_SSTHRESH_FIELDS = {"ssthresh", "ssthresh_before", "ssthresh_after"}
#: westwood_paper's RTT_min before its first RTT sample (U32_MAX); the cong event prints 0 instead
_UNKNOWN_RTT_MIN_US = 0xFFFFFFFF


@dataclass
class WestwoodTrace:
    """The module's trace (``raw/westwood_tb.txt``, kernel-patch/README.md "Trace events").

    ``samples``: one row per ``westwood_tb_sample`` (one bandwidth sample), ``events``: one row per
    ``westwood_tb_cong`` (one congestion event). Both have ``t_mono_s`` (CLOCK_MONOTONIC seconds) and
    every ``key=value`` field as printed (numbers parsed; ``variant`` is ``ml`` or ``paper``, ``kind`` one
    of recovery, cwr, loss, loss_repeat, complete_cwr, undo). Units are the kernel's: ``*_Bps`` bytes/s,
    ``*_us`` microseconds, ``cwnd``/``ssthresh*`` segments. The ssthresh fields are the **real**
    ``snd_ssthresh`` (not tcp_probe's tcp_current_ssthresh()), NaN while infinite (2147483647);
    ``rtt_min_us`` is NaN while westwood_paper has no RTT sample yet (4294967295).
    ``problems``: lines skipped, each message naming the file (cut short, not understood, lost events).
    """

    path: Path
    samples: pd.DataFrame
    events: pd.DataFrame
    lost_events: int = 0
    incomplete_lines: int = 0
    unparsed_lines: int = 0

    @property
    def problems(self) -> list[str]:
        where = display_path(self.path)
        found = []
        if self.incomplete_lines:
            found.append(f"{where}: {self.incomplete_lines} events cut short (skipped)")
        if self.unparsed_lines:
            found.append(f"{where}: {self.unparsed_lines} lines not understood (skipped)")
        if self.lost_events:
            found.append(f"{where}: the trace buffer lost {self.lost_events} events")
        return found


def _westwood_frame(rows: list[dict], fields: list[str]) -> pd.DataFrame:
    extra = sorted({key for row in rows for key in row} - {"t_mono_s", *fields})  # fields of newer versions
    frame = pd.DataFrame(rows, columns=["t_mono_s", *fields, *extra])
    for name in frame.columns:
        if name in _WESTWOOD_TEXT_FIELDS:
            frame[name] = frame[name].astype("object")
            continue
        converted = pd.to_numeric(frame[name], errors="coerce")
        if converted.notna().sum() == frame[name].notna().sum():
            frame[name] = converted.astype("float64") if name in _WESTWOOD_SSTHRESH_FIELDS else converted
    for name in _WESTWOOD_SSTHRESH_FIELDS & set(frame.columns):
        frame[name] = frame[name].where(frame[name] < INFINITE_SSTHRESH)
    if "rtt_min_us" in frame.columns:
        rtt_min = pd.to_numeric(frame["rtt_min_us"], errors="coerce").astype("float64")
        frame["rtt_min_us"] = rtt_min.where(rtt_min != _UNKNOWN_RTT_MIN_US)
    return frame


def load_westwood_tb(path: Path) -> WestwoodTrace:
    """Parse the ftrace text of the module's ``westwood_tb_sample`` and ``westwood_tb_cong`` events.

    Fields are parsed generically, as for tcp_probe. A line that lacks a field its event always has, or
    the file's last line when it has no newline, was cut short: it is skipped and counted
    (``incomplete_lines``), never half used. An absent file or one without any event raises
    :class:`LoadError`.
    """
    path = Path(path)
    rows: dict[str, list[dict]] = {name: [] for name in _WESTWOOD_EVENTS}
    lost = incomplete = unparsed = 0
    text = read_text(path)
    lines = text.split("\n")
    last_cut = bool(lines[-1].strip())  # text after the last newline: the writer stopped mid-line
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _TRACE_LINE.search(line)
        event = match.group(2).rsplit(":", 1)[-1] if match else None
        if event not in _WESTWOOD_EVENTS:
            lost_match = _LOST_EVENTS.search(line)
            if lost_match:
                lost += int(lost_match.group(1))
            elif match is None and number == len(lines) and last_cut:
                incomplete += 1
            elif match is None:
                unparsed += 1
            continue
        values: dict = {"t_mono_s": float(match.group(1))}
        for key, value in _KEY_VALUE.findall(match.group(3)):
            values[key] = value if key in _WESTWOOD_TEXT_FIELDS else _field_value(key, value)
        if (number == len(lines) and last_cut) or any(f not in values for f in _WESTWOOD_EVENTS[event]):
            incomplete += 1
            continue
        rows[event].append(values)
    if not rows["westwood_tb_sample"] and not rows["westwood_tb_cong"]:
        detail = "no westwood_tb events (empty trace)"
        if incomplete:
            detail += f"; {incomplete} events cut short"
        if lost:
            detail += f"; the trace buffer lost {lost} events"
        raise LoadError(path, detail)
    return WestwoodTrace(
        path=path,
        samples=_westwood_frame(rows["westwood_tb_sample"], WESTWOOD_SAMPLE_FIELDS),
        events=_westwood_frame(rows["westwood_tb_cong"], WESTWOOD_CONG_FIELDS),
        lost_events=lost,
        incomplete_lines=incomplete,
        unparsed_lines=unparsed,
    )


# ------------------------------------------------------------------------------------------- tc stats

_TC_COLUMNS = [
    "node",
    "intf",
    "kind",
    "handle",
    "parent",
    "root",
    "limit",
    "bytes",
    "packets",
    "drops",
    "overlimits",
    "requeues",
    "backlog",
    "qlen",
]


#: the counters of ``tc -s`` (they count on from the qdisc's creation; backlog and qlen are levels)
TC_COUNTERS = ["bytes", "packets", "drops", "overlimits", "requeues"]
_TC_KEY = ["node", "intf", "kind", "handle", "parent"]


def load_tc_stats(path: Path, before: Path | None = None) -> pd.DataFrame:
    """``tc -s -j qdisc show`` per ``"node/intf"``: one row per qdisc (columns in ``_TC_COLUMNS``).

    ``before``: the counters at the run's start (present when the run used a network kept from an
    earlier run), subtracted from the counters so that they count this run only."""
    frame = _tc_frame(Path(path))
    if before is None or not Path(before).exists():
        return frame
    start = _tc_frame(Path(before))[_TC_KEY + TC_COUNTERS].drop_duplicates(_TC_KEY)
    merged = frame.merge(start, on=_TC_KEY, how="left", suffixes=("", "_before"))
    for name in TC_COUNTERS:
        frame[name] = (merged[name] - merged[f"{name}_before"].fillna(0)).to_numpy()
    return frame


def _tc_frame(path: Path) -> pd.DataFrame:
    data = read_json(path)
    if not isinstance(data, dict):
        raise LoadError(path, "expected an object of 'node/intf' -> list of qdiscs")
    rows = []
    for where, qdiscs in data.items():
        node, _, intf = where.partition("/")
        if not isinstance(qdiscs, list):
            continue
        for q in qdiscs:
            if not isinstance(q, dict):
                continue
            options = q.get("options") or {}
            rows.append(
                {
                    "node": node,
                    "intf": intf,
                    "kind": q.get("kind"),
                    "handle": q.get("handle"),
                    "parent": q.get("parent"),
                    "root": bool(q.get("root", False)),
                    "limit": options.get("limit"),
                    **{k: q.get(k) for k in _TC_COLUMNS[7:]},
                }
            )
    frame = pd.DataFrame(rows, columns=_TC_COLUMNS)
    for name in _TC_COLUMNS[6:]:
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    return frame


def leaf_qdiscs(tc: pd.DataFrame) -> pd.DataFrame:
    """The qdiscs that hold packets themselves (no child qdisc below them): their drops are not double-counted
    (an HTB root repeats its children's drops)."""
    parents = {
        (row.node, row.intf, row.parent.split(":")[0] + ":") for row in tc.itertuples() if isinstance(row.parent, str)
    }
    has_child = [(row.node, row.intf, row.handle) in parents for row in tc.itertuples()]
    return tc[[not flag for flag in has_child]]


# ----------------------------------------------------------------------------------------------- ping

_PING_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_PING_COUNTS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_PING_LOSS = re.compile(r"([\d.]+)% packet loss")


def load_ping(path: Path) -> dict:
    """ping's summary: ``transmitted``, ``received``, ``loss_pct`` and ``min_ms``, ``avg_ms``, ``max_ms``,
    ``mdev_ms`` (None when no reply came back)."""
    path = Path(path)
    text = read_text(path)
    counts = _PING_COUNTS.search(text)
    if counts is None:
        raise LoadError(path, "no ping summary (ping did not finish?)")
    result: dict = {"transmitted": int(counts.group(1)), "received": int(counts.group(2))}
    loss = _PING_LOSS.search(text)
    result["loss_pct"] = float(loss.group(1)) if loss else None
    rtt = _PING_RTT.search(text)
    for key, value in zip(["min_ms", "avg_ms", "max_ms", "mdev_ms"], rtt.groups() if rtt else [None] * 4, strict=True):
        result[key] = float(value) if value is not None else None
    return result


# ------------------------------------------------------------------------------------------ UDP probe


def udp_probe_files(raw: Path, direction: str) -> list[Path]:
    """The UDP probe files of one bottleneck direction, most informative first."""
    names = [
        f"udp-probe-{direction}-server.json",
        f"udp-probe-{direction}.json",
        f"udp-probe-{direction}-client.json",
    ]
    return [Path(raw) / name for name in names if (Path(raw) / name).exists()]


def load_udp_probe(path: Path) -> dict:
    """The pre-traffic UDP probe's totals: ``packets`` sent, ``lost_packets``, ``lost_percent``,
    ``received_mbit`` (what the receiver got)."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise LoadError(path, "not an iperf3 JSON object")
    if data.get("error") and not data.get("end"):
        raise LoadError(path, f"iperf3 reported an error: {data['error']}")
    end = data.get("end") or {}
    total = end.get("sum") or {}
    received = end.get("sum_received") or {}
    if not total and not received:
        raise LoadError(path, "no end totals (iperf3 died before the end of the probe?)")
    lost = total.get("lost_packets", received.get("lost_packets"))
    bps = received.get("bits_per_second", total.get("bits_per_second"))
    return {
        "packets": total.get("packets"),
        "lost_packets": lost,
        "lost_percent": total.get("lost_percent", received.get("lost_percent")),
        "received_mbit": bps / 1e6 if bps is not None else None,
    }


# ------------------------------------------------------------------------------------------- sessions


def load_session(session_dir: Path) -> dict:
    """``session.json`` of a sweep."""
    path = Path(session_dir) / SESSION
    data = read_json(path)
    if not isinstance(data, dict):
        raise LoadError(path, "not a JSON object")
    return data
