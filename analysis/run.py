"""Analysis of one run folder: raw files in, ``flows.csv`` and ``series.csv`` out (its page: ``testbed.report.run``).

``analyze_run(run_dir)`` reads ``manifest.json`` and ``raw/`` (loaders.py, pcap.py), computes the
metrics (metrics.py) and writes, next to the manifest:

* ``flows.csv``: one row per connection (the manifest's ``connections``): its ids, cc, direction,
  times, the capture's byte counts, **sender goodput** (paper 000 §3.1, from the capture) and
  **receiver goodput** (iperf3 server), retransmission ratio, the sender kernel's retransmission
  count (iperf3) and the mean srtt;
* ``series.csv``: tidy time series ``conn, t_s, metric, value`` with ``t_s`` in seconds since the
  run's time zero (``manifest["t0_monotonic"]``): ``cwnd_pkts``, ``ssthresh_current_pkts`` (the
  kernel's tcp_current_ssthresh(), empty while "infinite"), ``srtt_ms`` from tcp_probe, and
  ``recv_goodput_mbit`` per iperf3 interval, stamped at the interval's end (connection start_s +
  iperf3's own clock, which starts when the test starts);

Runs of ``westwood_ml``/``westwood_paper`` also have ``raw/westwood_tb.txt``, our module's trace
(kernel-patch/README.md, "Trace events"). When it exists, series.csv gets, per connection (its
``client_port`` is the events' ``sport``), ``bwe_mbit`` (the filtered estimate after each sample),
``bwe_sample_mbit`` (the raw sample) and ``ssthresh_pkts`` (the **real** ssthresh each congestion
event left, empty while infinite); flows.csv gets ``bwe_mbit_final`` (mean estimate over the last half
of the connection) and ``bwe_error_pct`` (its error vs the sender goodput, metrics.estimate_vs_goodput);
the report gets the estimate and real-ssthresh plots and a table of the congestion events. Without the
file, nothing of this appears (not even empty columns).

A file that is missing, empty or cut short becomes one line in ``problems`` naming it; everything
else is still analysed, and a number that cannot be computed stays empty ("n/a"), never made up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from analysis import metrics
from analysis.latency import QUEUE_COLUMNS, SAMPLE_COLUMNS, SUMMARY_COLUMNS, latency_frames, queue_delays
from analysis.loaders import (
    INFINITE_SSTHRESH,
    WESTWOOD_CONG_FIELDS,
    Iperf3Result,
    LoadError,
    TcpProbeTrace,
    WestwoodTrace,
    display_path,
    leaf_qdiscs,
    load_iperf3,
    load_manifest,
    load_tc_stats,
    load_tcp_probe,
    load_udp_probe,
    load_westwood_tb,
    udp_probe_files,
)
from analysis.pcap import PcapAccounting
from analysis.pcapfast import account_pcap_fast
from testbed.results.manifest import MANIFEST, Manifest
from testbed.results.pcapfile import PcapError
from testbed.results.rundir import write_text_atomic
from testbed.scenario.algorithms import REGISTRY

FLOW_COLUMNS = [
    "conn",
    "flow",
    "replica",
    "period",
    "pair",
    "cc",
    "direction",
    "sender",
    "receiver",
    "start_s",
    "stop_s",
    "base_rtt_ms",
    "capture",
    "sent_pkts",
    "sent_bytes",
    "retrans_pkts",
    "retrans_bytes",
    "unique_bytes",
    "transfer_s",
    "goodput_mbit",
    "recv_bytes",
    "recv_s",
    "recv_goodput_mbit",
    "recv_source",
    "retrans_ratio",
    "iperf3_retransmits",
    "mean_rtt_ms",
    "mean_rtt_source",
    "ece_acks",
    "cwr_segments",
]
_COUNT_COLUMNS = [
    "flow",
    "replica",
    "period",
    "pair",
    "sent_pkts",
    "sent_bytes",
    "retrans_pkts",
    "retrans_bytes",
    "unique_bytes",
    "recv_bytes",
    "iperf3_retransmits",
    "ece_acks",
    "cwr_segments",
]
SERIES_COLUMNS = ["conn", "t_s", "metric", "value"]
#: flows.csv columns added when the run has the module's trace (raw/westwood_tb.txt)
WESTWOOD_FLOW_COLUMNS = ["bwe_mbit_final", "bwe_error_pct"]
#: the algorithms whose runs write raw/westwood_tb.txt (testbed/guest/runner.py, uses_project_module)
WESTWOOD_TB_CCS = {name for name, cc in REGISTRY.items() if cc.module == "tcp_westwood_tb"}
#: payload of a full segment on the testbed's links: MTU 1500 - 20 (IP) - 20 (TCP) - 12 (timestamp option);
#: tcp_probe does not print the MSS, and the manifest records no MTU
MSS_BYTES = 1448
MSS_BYTES_NO_TIMESTAMPS = 1460
DROP_CHECK_COLUMNS = [
    "bottleneck",
    "direction",
    "queue_drops",
    "udp_probe_lost",
    "netem_drops",
    "tcp_retrans_pkts",
    "difference",
    "verdict",
]
#: retransmitted segments and queue drops agree when they differ by at most this many or this fraction
DROP_TOLERANCE_PKTS = 2
DROP_TOLERANCE_FRACTION = 0.05
#: goodput intervals in the run report: the smallest of these giving at most ~25 intervals
_INTERVAL_WIDTHS_S = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000]


@dataclass
class RunAnalysis:
    """What ``analyze_run`` found. ``flows`` is flows.csv (one row per connection), ``series`` series.csv."""

    run_dir: Path
    manifest: dict
    flows: pd.DataFrame
    series: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    status: str = "unknown"
    reason: str | None = None
    flow_totals: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per flow (flow x replica)
    jain: dict[str, float] = field(default_factory=dict)  # per direction with more than one flow
    drop_checks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DROP_CHECK_COLUMNS))
    intervals: pd.DataFrame = field(default_factory=pd.DataFrame)  # receiver goodput per interval, per conn
    report_path: Path | None = None
    # the module's trace (raw/westwood_tb.txt), per connection with conn and t_s; None: the run has none
    #: ping RTTs and request completion times (analysis.latency.SAMPLE_COLUMNS), their summary per flow
    latency_samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    latency: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SUMMARY_COLUMNS))
    #: each bottleneck queue's delay over time (analysis.latency.QUEUE_COLUMNS)
    queue_delays: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=QUEUE_COLUMNS))
    westwood_samples: pd.DataFrame | None = None
    #: the congestion events, with metrics.paper_ssthresh_check's expected/diff_segments for the paper's
    congestion_events: pd.DataFrame | None = None

    @property
    def trustworthy(self) -> bool | None:
        fidelity = self.manifest.get("fidelity") or {}
        value = fidelity.get("trustworthy")
        return bool(value) if value is not None else None


def _status(manifest: dict, problems: list[str]) -> str:
    """The run's status by the manifest's rule (``Manifest.run_status``: a run still marked running when
    analysed was killed, incomplete); "unknown" when there is no manifest to go on, or one that does
    not read as a manifest (that is a problem line)."""
    if not manifest:
        return "unknown"
    try:
        return Manifest.model_validate(manifest).run_status
    except ValidationError as exc:
        problems.append(f"{MANIFEST}: not a manifest ({exc.error_count()} values of the wrong type): status unknown")
        return "unknown"


def analyze_run(run_dir: Path, write: bool = True) -> RunAnalysis:
    """Analyse one run folder and (with ``write``) write flows.csv and series.csv into it
    (``testbed.report.run.report_run`` also writes its report.html)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    raw = run_dir / "raw"
    problems: list[str] = []
    manifest, status = _manifest_of(run_dir, raw, problems)
    connections = _connections(manifest, raw, problems)
    probe = _load_probe(raw, connections, problems)
    westwood = _load_westwood(raw, manifest, connections, problems)
    captures = _captures(raw, manifest, connections, problems)
    t0 = _t0(manifest, probe, problems, westwood)
    parts = _Parts()
    for conn in connections:
        parts.add(conn, manifest, raw, captures, probe, westwood, t0, problems)
    flows = _flows_frame(parts.rows)
    if westwood is not None:
        flows = _add_estimate_columns(flows, connections, parts.westwood_samples)
    series = _concat(parts.series, SERIES_COLUMNS)
    series = series.sort_values(["conn", "metric", "t_s"], kind="stable").reset_index(drop=True)
    analysis = RunAnalysis(run_dir=run_dir, manifest=manifest, flows=flows, series=series, problems=problems,
                           status=status, reason=manifest.get("reason"))  # fmt: skip
    if westwood is not None:
        analysis.westwood_samples = _concat_frames(parts.westwood_samples, westwood.samples)
        analysis.congestion_events = _congestion_table(
            _concat_frames(parts.westwood_events, westwood.events), analysis.westwood_samples, mss_bytes(manifest)
        )
    if not flows.empty:
        analysis.flow_totals = metrics.flow_totals(flows)
        analysis.jain = metrics.jain_by_direction(analysis.flow_totals)
    analysis.intervals = _interval_goodput(parts.interval_samples, manifest, connections)
    analysis.drop_checks = _drop_checks(raw, manifest, flows, problems)
    analysis.latency_samples, analysis.latency = latency_frames(raw, manifest)
    analysis.queue_delays = queue_delays(raw, manifest)
    if write:
        _write_csv(flows, run_dir / "flows.csv")
        _write_csv(series, run_dir / "series.csv")
        if not analysis.latency.empty:
            _write_csv(analysis.latency, run_dir / "latency.csv")
    return analysis


def _manifest_of(run_dir: Path, raw: Path, problems: list[str]) -> tuple[dict, str]:
    """The manifest as data (empty when it cannot be read) and the run's status; what is wrong goes to
    ``problems``."""
    try:
        manifest = load_manifest(run_dir)
    except LoadError as exc:
        problems.append(str(exc))
        manifest = {}
    status = _status(manifest, problems)
    if manifest.get("status") == "running":
        problems.append(f"{MANIFEST}: status is still 'running': the run was interrupted (incomplete)")
    if not raw.is_dir():
        problems.append("raw/: missing (no raw files at all)")
    return manifest, status


@dataclass
class _Parts:
    """What each connection adds to the run's tables, gathered connection by connection."""

    rows: list[dict] = field(default_factory=list)
    series: list[pd.DataFrame] = field(default_factory=list)
    interval_samples: list[pd.DataFrame] = field(default_factory=list)
    westwood_samples: list[pd.DataFrame] = field(default_factory=list)
    westwood_events: list[pd.DataFrame] = field(default_factory=list)

    def add(self, conn: dict, manifest: dict, raw: Path, captures: dict, probe: TcpProbeTrace | None,
            westwood: WestwoodTrace | None, t0: float | None, problems: list[str]) -> None:  # fmt: skip
        node = capture_node(conn, manifest, raw)
        row, samples = _connection_row(conn, raw, node, captures.get(node) if node else None, probe, problems)
        self.rows.append(row)
        self.interval_samples.append(samples)
        if probe is not None:
            self.series.append(_probe_series(conn, probe, t0))
        self.series.append(_goodput_series(samples))
        if westwood is not None:
            own_samples, own_events = _westwood_of(conn, westwood, t0, problems)
            self.westwood_samples.append(own_samples)
            self.westwood_events.append(own_events)
            self.series.append(_westwood_series(conn, own_samples, own_events))


# ------------------------------------------------------------------------------------- gathering


def _connections(manifest: dict, raw: Path, problems: list[str]) -> list[dict]:
    listed = manifest.get("connections")
    if isinstance(listed, list) and listed:
        return [c for c in listed if isinstance(c, dict) and c.get("id")]
    found = []
    for path in sorted(raw.glob("iperf3-*-client.json")) if raw.is_dir() else []:
        conn_id = path.name[len("iperf3-") : -len("-client.json")]
        try:
            result = load_iperf3(path)
        except LoadError:
            continue
        if result.local is None:
            continue
        found.append(
            {
                "id": conn_id,
                "cc": result.totals.get("sender_cc"),
                "sender_ip": result.local[0],
                "client_port": result.local[1],
                "receiver_ip": result.remote[0],
                "server_port": result.remote[1],
            }
        )
    if manifest:
        problems.append(
            f"{MANIFEST}: no connections listed"
            + (f"; took {len(found)} from the iperf3 client files (no flow or direction)" if found else "")
        )
    return found


def _load_probe(raw: Path, connections: list[dict], problems: list[str]) -> TcpProbeTrace | None:
    path = raw / "tcp_probe.txt"
    if not connections and not path.exists():
        return None
    try:
        probe = load_tcp_probe(path)
    except LoadError as exc:
        problems.append(str(exc))
        return None
    if probe.lost_events:
        problems.append(f"{display_path(path)}: the trace buffer lost {probe.lost_events} events")
    if probe.unparsed_lines:
        problems.append(f"{display_path(path)}: {probe.unparsed_lines} lines not understood (skipped)")
    return probe


def _t0(
    manifest: dict, probe: TcpProbeTrace | None, problems: list[str], westwood: WestwoodTrace | None = None
) -> float | None:
    t0 = manifest.get("t0_monotonic")
    if isinstance(t0, int | float):
        return float(t0)
    if probe is not None:
        problems.append(
            f"{MANIFEST}: no t0_monotonic: tcp_probe times are relative to the trace's first event"
        )
        return float(probe.events["t_mono_s"].min())
    if westwood is not None:
        problems.append(
            f"{MANIFEST}: no t0_monotonic: westwood_tb times are relative to the trace's first event"
        )
        return float(pd.concat([westwood.samples["t_mono_s"], westwood.events["t_mono_s"]]).min())
    return None


def capture_node(conn: dict, manifest: dict, raw: Path) -> str | None:
    """The router whose capture counts ``conn``'s data: the one next to its sender, before the bottleneck.

    That is the node of the bottleneck in the connection's direction (``manifest["topology"]
    ["bottlenecks"]``); for topologies with several in one direction, the dumbbell naming (sender
    ``l<i>`` -> ``rl``, ``r<i>`` -> ``rr``) if such a capture exists.
    """
    if conn.get("capture_node"):
        return conn["capture_node"]
    topology = manifest.get("topology") or {}
    nodes = [
        b.get("node")
        for b in topology.get("bottlenecks") or []
        if b.get("direction") == conn.get("direction")
    ]
    nodes = [n for n in nodes if n]
    if len(nodes) == 1:
        return nodes[0]
    sender = conn.get("sender") or ""
    if sender:
        guess = f"r{sender[0]}"
        if guess in (topology.get("capture_nodes") or []) or (raw / f"{guess}.pcap").exists():
            return guess
    return None


def _captures(
    raw: Path, manifest: dict, connections: list[dict], problems: list[str]
) -> dict[str, PcapAccounting | None]:
    captures: dict[str, PcapAccounting | None] = {}
    for conn in connections:
        node = capture_node(conn, manifest, raw)
        if node is None or node in captures:
            continue
        path = raw / f"{node}.pcap"
        try:
            if not path.exists():
                raise PcapError("missing")
            captures[node] = account_pcap_fast(path)
        except (PcapError, OSError) as exc:
            problems.append(f"{display_path(path)}: {exc}")
            captures[node] = None
            continue
        if captures[node].problem:
            problems.append(f"{display_path(path)}: {captures[node].problem}")
    return captures


def _load_iperf3(path: Path, problems: list[str]) -> Iperf3Result | None:
    try:
        result = load_iperf3(path)
    except LoadError as exc:
        problems.append(str(exc))
        return None
    if result.error:
        problems.append(f"{display_path(path)}: iperf3 reported an error: {result.error}")
    elif not result.totals:
        problems.append(f"{display_path(path)}: no end totals (iperf3 died before the end of the test?)")
    return result


def _nan(value) -> float:
    return math.nan if value is None else float(value)


#: the manifest's fields of a connection that flows.csv repeats
CONNECTION_FIELDS = ["flow", "replica", "period", "pair", "cc", "direction", "sender", "receiver", "start_s", "stop_s",
                     "base_rtt_ms"]  # fmt: skip


def _connection_row(
    conn: dict,
    raw: Path,
    node: str | None,
    capture: PcapAccounting | None,
    probe: TcpProbeTrace | None,
    problems: list[str],
) -> tuple[dict, pd.DataFrame]:
    """One connection's row of flows.csv (sender side from the capture, receiver side from iperf3, the
    mean RTT) and its receiver's interval samples."""
    row = {name: conn.get(name) for name in CONNECTION_FIELDS}
    row["conn"] = conn["id"]
    row.update(_sender_side(conn, node, capture, problems))
    server = _load_iperf3(raw / f"iperf3-{conn['id']}-server.json", problems)
    client = _load_iperf3(raw / f"iperf3-{conn['id']}-client.json", problems)
    row.update(_receiver_side(server, client))
    if client is not None:
        row["iperf3_retransmits"] = client.totals.get("retransmits")
    row.update(_mean_rtt(conn, probe, client, problems))
    return row, _receiver_samples(conn, server)


def _sender_side(conn: dict, node: str | None, capture: PcapAccounting | None, problems: list[str]) -> dict:
    """What the capture next to the sender counted: sent, retransmitted and unique bytes, goodput."""
    conn_id = conn["id"]
    row: dict = {"capture": f"{node}.pcap" if node else None}
    direction = None
    if node is None:
        problems.append(f"{conn_id}: no capture to count it in (cannot tell which router is next to its sender)")
    if capture is not None:
        direction = capture.direction(
            conn.get("sender_ip"), conn.get("client_port"), conn.get("receiver_ip"), conn.get("server_port")
        )
        if direction is None or direction.data_pkts == 0:
            problems.append(
                f"raw/{node}.pcap: no data segments of {conn_id} "
                f"({conn.get('sender_ip')}:{conn.get('client_port')} -> "
                f"{conn.get('receiver_ip')}:{conn.get('server_port')})"
            )
            direction = None
    if direction is not None:
        row.update(sent_pkts=direction.data_pkts, sent_bytes=direction.data_bytes, retrans_pkts=direction.rexmit_pkts,
                   retrans_bytes=direction.rexmit_bytes, unique_bytes=direction.unique_bytes,
                   transfer_s=direction.transfer_s, cwr_segments=direction.cwr_count)  # fmt: skip
        # the ACKs pass the same router on their way back: those that echo a CE mark (ECN)
        acks = capture.direction(conn.get("receiver_ip"), conn.get("server_port"), conn.get("sender_ip"),
                                 conn.get("client_port"))  # fmt: skip
        row["ece_acks"] = acks.ece_count if acks is not None else None
    row["goodput_mbit"] = metrics.goodput_mbit(row.get("sent_bytes"), row.get("retrans_bytes"), row.get("transfer_s"))
    row["retrans_ratio"] = metrics.retransmission_ratio(row.get("retrans_bytes"), row.get("sent_bytes"))
    return row


def _receiver_side(server: Iperf3Result | None, client: Iperf3Result | None) -> dict:
    """Bytes received and their time, from the iperf3 server (else the server's report the client got)."""
    row: dict = {}
    if server is not None and "received_bytes" in server.totals:
        row.update(recv_bytes=server.totals["received_bytes"], recv_s=server.totals.get("received_s"),
                   recv_source="iperf3 server")  # fmt: skip
    elif client is not None and "received_bytes" in client.totals:
        # the client's end section carries the server's own totals, sent back at the end of the test
        row.update(recv_bytes=client.totals["received_bytes"], recv_s=client.totals.get("received_s"),
                   recv_source="iperf3 client (server's report)")  # fmt: skip
    row["recv_goodput_mbit"] = metrics.receiver_goodput_mbit(row.get("recv_bytes"), row.get("recv_s"))
    return row


def _receiver_samples(conn: dict, server: Iperf3Result | None) -> pd.DataFrame:
    """The server's interval byte counts on the run's clock (the connection's start + iperf3's own)."""
    if server is None or server.intervals.empty:
        return pd.DataFrame(columns=["conn", "t_start_s", "t_end_s", "bytes"])
    offset = _nan(conn.get("start_s"))
    offset = 0.0 if math.isnan(offset) else offset
    intervals = server.intervals
    return pd.DataFrame({"conn": conn["id"], "t_start_s": intervals["start_s"] + offset,
                         "t_end_s": intervals["end_s"] + offset, "bytes": intervals["bytes"]})  # fmt: skip


def _mean_rtt(conn: dict, probe: TcpProbeTrace | None, client: Iperf3Result | None, problems: list[str]) -> dict:
    """The sender kernel's srtt at every ACK (tcp_probe), else iperf3's mean of its samples."""
    events = _probe_events(conn, probe)
    if events is not None and events.empty:
        problems.append(f"raw/tcp_probe.txt: no events of {conn['id']} "
                        f"(source {conn.get('sender_ip')}:{conn.get('client_port')})")  # fmt: skip
    if events is not None and not events.empty and "srtt" in events:
        return {"mean_rtt_ms": float(events["srtt"].mean()) / 1000, "mean_rtt_source": "tcp_probe srtt"}
    if client is not None and "mean_rtt_ms" in client.totals:
        return {"mean_rtt_ms": client.totals["mean_rtt_ms"], "mean_rtt_source": "iperf3 mean_rtt"}
    return {}


def _probe_events(conn: dict, probe: TcpProbeTrace | None) -> pd.DataFrame | None:
    if probe is None:
        return None
    events = probe.events
    if "src_ip" not in events or "src_port" not in events:
        return events.iloc[0:0]
    # the data connection's sender side: its source is the client port (the control connection shares
    # only the server port)
    mask = (events["src_ip"] == conn.get("sender_ip")) & (events["src_port"] == conn.get("client_port"))
    if "dest_port" in events and conn.get("server_port") is not None:
        mask &= events["dest_port"] == conn.get("server_port")
    return events[mask]


def _probe_series(conn: dict, probe: TcpProbeTrace, t0: float | None) -> pd.DataFrame:
    events = _probe_events(conn, probe)
    if events is None or events.empty or t0 is None:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    t_s = events["t_mono_s"].to_numpy(dtype=float) - t0
    parts = []
    if "snd_cwnd" in events:
        parts.append(("cwnd_pkts", events["snd_cwnd"].to_numpy(dtype=float)))
    if "ssthresh" in events:
        ssthresh = events["ssthresh"].to_numpy(dtype=float)
        parts.append(("ssthresh_current_pkts", np.where(ssthresh >= INFINITE_SSTHRESH, np.nan, ssthresh)))
    if "srtt" in events:
        parts.append(("srtt_ms", events["srtt"].to_numpy(dtype=float) / 1000))
    if "snd_una" in events and len(events):
        parts.append(("acked_mb", _unwrapped_seq(events["snd_una"].to_numpy(dtype=np.int64)) / 1e6))
    frames = [
        pd.DataFrame({"conn": conn["id"], "t_s": t_s, "metric": name, "value": values})
        for name, values in parts
    ]
    return _concat(frames, SERIES_COLUMNS)


def _unwrapped_seq(values: np.ndarray) -> np.ndarray:
    """Sequence numbers (mod 2**32) as bytes since the first one, unwrapped: each step is taken as the
    shortest way round the sequence space (paper 000 Figs 14-16 plot sequence numbers vs time)."""
    steps = np.diff(values % (1 << 32)) % (1 << 32)
    steps = np.where(steps >= 1 << 31, steps - (1 << 32), steps)
    return np.concatenate([[0], np.cumsum(steps)]).astype(float)


def _goodput_series(samples: pd.DataFrame) -> pd.DataFrame:
    if samples.empty:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    seconds = samples["t_end_s"] - samples["t_start_s"]
    value = (samples["bytes"] * metrics.BITS_PER_BYTE / seconds / metrics.BITS_PER_MBIT).where(seconds > 0)
    return pd.DataFrame(
        {"conn": samples["conn"], "t_s": samples["t_end_s"], "metric": "recv_goodput_mbit", "value": value}
    )


# ------------------------------------------------------------------- the module's trace (westwood_tb)


def _load_westwood(raw: Path, manifest: dict, connections: list[dict], problems: list[str]) -> WestwoodTrace | None:
    path = raw / "westwood_tb.txt"
    if not path.exists():
        captured = "westwood_tb" in (manifest.get("capture") or {})
        if raw.is_dir() and (captured or any(c.get("cc") in WESTWOOD_TB_CCS for c in connections)):
            problems.append(
                f"{display_path(path)}: missing (the run uses the westwood_tb module: no bandwidth estimate, "
                "no real ssthresh)"
            )
        return None
    try:
        trace = load_westwood_tb(path)
    except LoadError as exc:
        problems.append(str(exc))
        return None
    problems.extend(trace.problems)
    return trace


def mss_bytes(manifest: dict) -> int:
    timestamps = (manifest.get("sysctls") or {}).get("net.ipv4.tcp_timestamps")
    return MSS_BYTES_NO_TIMESTAMPS if str(timestamps).strip() == "0" else MSS_BYTES


def _westwood_of(
    conn: dict, trace: WestwoodTrace, t0: float | None, problems: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The connection's samples and congestion events, with ``conn`` and ``t_s`` (since the run's t0)."""

    def own(frame: pd.DataFrame) -> pd.DataFrame:
        mask = frame["sport"] == conn.get("client_port")
        if conn.get("server_port") is not None:
            mask &= frame["dport"] == conn.get("server_port")
        mine = frame[mask].copy()
        mine.insert(0, "conn", conn["id"])
        mine.insert(1, "t_s", mine["t_mono_s"] - (t0 if t0 is not None else math.nan))
        return mine.reset_index(drop=True)

    samples, events = own(trace.samples), own(trace.events)
    if samples.empty and conn.get("cc") in WESTWOOD_TB_CCS:
        problems.append(
            f"{display_path(trace.path)}: no samples of {conn['id']} (sport {conn.get('client_port')})"
        )
    return samples, events


def _westwood_series(conn: dict, samples: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    to_mbit = metrics.BITS_PER_BYTE / metrics.BITS_PER_MBIT
    parts = [
        ("bwe_mbit", samples["t_s"], samples["est_Bps"] * to_mbit),
        ("bwe_sample_mbit", samples["t_s"], samples["sample_Bps"] * to_mbit),
        ("ssthresh_pkts", events["t_s"], events["ssthresh_after"]),  # NaN while infinite (loader)
    ]
    frames = [
        pd.DataFrame(
            {
                "conn": conn["id"],
                "t_s": t_s.to_numpy(dtype=float),
                "metric": name,
                "value": pd.to_numeric(values, errors="coerce").to_numpy(dtype=float),
            }
        )
        for name, t_s, values in parts
    ]
    return _concat(frames, SERIES_COLUMNS)


def _add_estimate_columns(flows: pd.DataFrame, connections: list[dict], samples: list[pd.DataFrame]) -> pd.DataFrame:
    """``bwe_mbit_final``: mean estimate over the connection's last half (start_s + (stop_s - start_s)/2 on,
    or the second half of its samples' span when its times are unknown); ``bwe_error_pct``: that estimate's
    error vs the connection's sender goodput, in %. NaN for connections without samples."""
    final, error = [], []
    for row, own in zip(flows.itertuples(), samples, strict=True):
        if own.empty:
            final.append(math.nan)
            error.append(math.nan)
            continue
        start, stop = _nan(row.start_s), _nan(row.stop_s)
        if math.isnan(start) or math.isnan(stop) or stop <= start:
            start, stop = float(own["t_s"].min()), float(own["t_s"].max())
        half = start + (stop - start) / 2
        final.append(metrics.mean_estimate_mbit(own, half))
        error.append(metrics.estimate_vs_goodput(own, row.goodput_mbit, half) * 100)
    flows = flows.copy()
    flows["bwe_mbit_final"] = np.array(final, dtype=float)
    flows["bwe_error_pct"] = np.array(error, dtype=float)
    return flows


def _concat_frames(parts: list[pd.DataFrame], template: pd.DataFrame) -> pd.DataFrame:
    parts = [p for p in parts if not p.empty]
    if parts:
        return pd.concat(parts, ignore_index=True)
    empty = template.iloc[0:0].copy()
    empty.insert(0, "conn", pd.Series(dtype="object"))
    empty.insert(1, "t_s", pd.Series(dtype="float64"))
    return empty


CONGESTION_COLUMNS = [
    "conn",
    "t_s",
    *(field for field in WESTWOOD_CONG_FIELDS if field not in ("sport", "dport")),
    "expected",
    "diff_segments",
]


def _congestion_table(events: pd.DataFrame, samples: pd.DataFrame, mss_bytes: float) -> pd.DataFrame:
    """The congestion events, sorted by time, with the papers' expected ssthresh for westwood_paper's
    recovery and loss events (metrics.paper_ssthresh_check; NaN for the others)."""
    check = metrics.paper_ssthresh_check(events, samples, mss_bytes)
    check = check[["t_s", "sport", "kind", "expected", "diff_segments"]].drop_duplicates(["t_s", "sport", "kind"])
    if check.empty:
        table = events.assign(expected=math.nan, diff_segments=math.nan)
    else:
        table = events.merge(check.astype({"sport": events["sport"].dtype}), on=["t_s", "sport", "kind"], how="left")
    for name in CONGESTION_COLUMNS:
        if name not in table.columns:
            table[name] = pd.Series(dtype="float64")
    return table.sort_values(["t_s", "conn"], kind="stable")[CONGESTION_COLUMNS].reset_index(drop=True)


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(
            {c: pd.Series(dtype="float64" if c in ("t_s", "value") else "object") for c in columns}
        )
    return pd.concat(frames, ignore_index=True)[columns]


def _flows_frame(rows: list[dict]) -> pd.DataFrame:
    flows = pd.DataFrame(rows, columns=FLOW_COLUMNS)
    for name in FLOW_COLUMNS:
        if name in _COUNT_COLUMNS:
            flows[name] = pd.to_numeric(flows[name], errors="coerce").astype("Int64")
        elif name.endswith(("_s", "_ms", "_mbit", "_ratio")):
            flows[name] = pd.to_numeric(flows[name], errors="coerce").astype("float64")
    return flows


def _run_duration_s(manifest: dict, connections: list[dict]) -> float | None:
    resolved = manifest.get("resolved") or {}
    duration = resolved.get("duration_s")
    if isinstance(duration, int | float) and duration > 0:
        return float(duration)
    stops = [c.get("stop_s") for c in connections if isinstance(c.get("stop_s"), int | float)]
    return float(max(stops)) if stops else None


def _interval_goodput(samples: list[pd.DataFrame], manifest: dict, connections: list[dict]) -> pd.DataFrame:
    """Receiver goodput per interval of the run (metrics.split_into_intervals), per connection."""
    columns = ["conn", "t_start_s", "t_end_s", "bytes", "covered_s", "goodput_mbit"]
    samples = [s for s in samples if not s.empty]
    if not samples:
        return pd.DataFrame(columns=columns)
    duration = _run_duration_s(manifest, connections) or max(float(s["t_end_s"].max()) for s in samples)
    width = next((w for w in _INTERVAL_WIDTHS_S if duration / w <= 25), _INTERVAL_WIDTHS_S[-1])
    edges = metrics.interval_boundaries(0.0, duration, width)
    parts = []
    for s in samples:
        split = metrics.split_into_intervals(s, edges)
        split.insert(0, "conn", s["conn"].iloc[0])
        parts.append(split)
    return pd.concat(parts, ignore_index=True)[columns]


def _drop_checks(raw: Path, manifest: dict, flows: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """Post-run check: bottleneck queue drops (tc -s) vs retransmitted segments (capture).

    Every packet the bottleneck queue drops is a packet the sender has to send again, so, without
    random loss, queue drops = UDP probe packets lost (the probe ran before TCP, through the same
    queue) + TCP retransmitted segments. Spurious retransmissions (after an RTO) make the second
    larger; losses not repaired before the end of the run make it smaller.
    """
    bottlenecks = (manifest.get("topology") or {}).get("bottlenecks") or []
    if not bottlenecks:
        return pd.DataFrame(columns=DROP_CHECK_COLUMNS)
    try:
        tc = load_tc_stats(raw / "tc-stats.json", before=raw / "tc-stats-before.json")
    except LoadError as exc:
        problems.append(str(exc))
        tc = None
    rows = []
    directions = set(flows["direction"].dropna()) if not flows.empty else set()
    for bottleneck in bottlenecks:
        node, intf, direction = bottleneck.get("node"), bottleneck.get("intf"), bottleneck.get("direction")
        if directions and direction not in directions:
            continue
        queue_drops = netem_drops = math.nan
        if tc is not None:
            leaves = leaf_qdiscs(tc)
            here = leaves[(leaves["node"] == node) & (leaves["intf"] == intf)]
            if not here.empty:
                queue_drops = float(here["drops"].sum())
            netem = leaves[leaves["kind"] == "netem"]
            netem_drops = float(netem["drops"].sum()) if not netem.empty else 0.0
        probe_lost = math.nan
        files = udp_probe_files(raw, direction)
        for path in files:
            try:
                lost = load_udp_probe(path).get("lost_packets")
            except LoadError as exc:
                problems.append(str(exc))
                continue
            if lost is not None:
                probe_lost = float(lost)
                break
        mine = flows[flows["direction"] == direction] if not flows.empty else flows
        retrans = metrics.sum_or_nan(mine["retrans_pkts"]) if not mine.empty else math.nan
        difference, verdict = _drop_verdict(queue_drops, probe_lost, netem_drops, retrans, bool(files))
        rows.append(
            {
                "bottleneck": f"{node}/{intf}",
                "direction": direction,
                "queue_drops": queue_drops,
                "udp_probe_lost": probe_lost,
                "netem_drops": netem_drops,
                "tcp_retrans_pkts": retrans,
                "difference": difference,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows, columns=DROP_CHECK_COLUMNS)


def _drop_verdict(
    queue_drops: float, probe_lost: float, netem_drops: float, retrans: float, probe_ran: bool
) -> tuple[float, str]:
    if math.isnan(queue_drops) or math.isnan(retrans):
        return math.nan, "n/a: " + (
            "no tc stats for this queue" if math.isnan(queue_drops) else "retransmissions unknown"
        )
    if math.isnan(probe_lost):
        if probe_ran:
            return math.nan, "n/a: the UDP probe's loss is unknown"
        probe_lost = 0.0
    expected = queue_drops - probe_lost
    difference = retrans - expected
    if netem_drops and not math.isnan(netem_drops):
        return difference, (
            f"not compared: random loss (netem dropped {netem_drops:g} packets, both directions) also causes "
            "retransmissions"
        )
    tolerance = max(DROP_TOLERANCE_PKTS, DROP_TOLERANCE_FRACTION * max(expected, retrans))
    if abs(difference) <= tolerance:
        return difference, "consistent: every queue drop was retransmitted once"
    if difference > 0:
        return difference, "more retransmissions than drops (spurious retransmissions, e.g. after a timeout)"
    return (
        difference,
        "more drops than retransmissions (losses not repaired before the end, or drops of other traffic)",
    )


# ---------------------------------------------------------------------------------------- writing


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    write_text_atomic(path, frame.to_csv(index=False, float_format="%.10g"))
