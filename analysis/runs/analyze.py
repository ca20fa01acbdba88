"""Analysis of one run folder: raw files in, ``flows.csv`` and ``series.csv`` out (its page:
``testbed.report.pages.runpage``).

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

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from analysis.raw.loaders import (
    LoadError,
    TcpProbeTrace,
    WestwoodTrace,
    display_path,
    load_iperf3,
    load_manifest,
    load_tcp_probe,
)
from analysis.raw.pcap import PcapAccounting
from analysis.raw.pcapfast import account_pcap_fast
from analysis.runs import metrics
from analysis.runs.connection import SERIES_COLUMNS, concat, connection_row, goodput_series, probe_series
from analysis.runs.dropcheck import DROP_CHECK_COLUMNS, drop_checks
from analysis.runs.latency import QUEUE_COLUMNS, SAMPLE_COLUMNS, SUMMARY_COLUMNS, latency_frames, queue_delays
from analysis.runs.westwood import (
    add_estimate_columns,
    congestion_table,
    load_westwood,
    mss_bytes,
    westwood_of,
    westwood_series,
)
from testbed.results.manifest import MANIFEST, Manifest
from testbed.results.pcapfile import PcapError
from testbed.results.rundir import write_text_atomic

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
    #: ping RTTs and request completion times (analysis.runs.latency.SAMPLE_COLUMNS), their summary per flow
    latency_samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    latency: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SUMMARY_COLUMNS))
    #: each bottleneck queue's delay over time (analysis.runs.latency.QUEUE_COLUMNS)
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
    (``testbed.report.pages.runpage.report_run`` also writes its report.html)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    raw = run_dir / "raw"
    problems: list[str] = []
    manifest, status = _manifest_of(run_dir, raw, problems)
    connections = _connections(manifest, raw, problems)
    probe = _load_probe(raw, connections, problems)
    westwood = load_westwood(raw, manifest, connections, problems)
    captures = _captures(raw, manifest, connections, problems)
    t0 = _t0(manifest, probe, problems, westwood)
    parts = _Parts()
    for conn in connections:
        parts.add(conn, manifest, raw, captures, probe, westwood, t0, problems)
    flows = _flows_frame(parts.rows)
    if westwood is not None:
        flows = add_estimate_columns(flows, connections, parts.westwood_samples)
    series = concat(parts.series, SERIES_COLUMNS)
    series = series.sort_values(["conn", "metric", "t_s"], kind="stable").reset_index(drop=True)
    analysed = RunAnalysis(
        run_dir=run_dir,
        manifest=manifest,
        flows=flows,
        series=series,
        problems=problems,
        status=status,
        reason=manifest.get("reason"),
    )
    if westwood is not None:
        analysed.westwood_samples = _concat_frames(parts.westwood_samples, westwood.samples)
        analysed.congestion_events = congestion_table(
            _concat_frames(parts.westwood_events, westwood.events), analysed.westwood_samples, mss_bytes(manifest)
        )
    if not flows.empty:
        analysed.flow_totals = metrics.flow_totals(flows)
        analysed.jain = metrics.jain_by_direction(analysed.flow_totals)
    analysed.intervals = _interval_goodput(parts.interval_samples, manifest, connections)
    analysed.drop_checks = drop_checks(raw, manifest, flows, problems)
    analysed.latency_samples, analysed.latency = latency_frames(raw, manifest)
    analysed.queue_delays = queue_delays(raw, manifest)
    if write:
        _write_csv(flows, run_dir / "flows.csv")
        _write_csv(series, run_dir / "series.csv")
        if not analysed.latency.empty:
            _write_csv(analysed.latency, run_dir / "latency.csv")
    return analysed


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

    def add(
        self,
        conn: dict,
        manifest: dict,
        raw: Path,
        captures: dict,
        probe: TcpProbeTrace | None,
        westwood: WestwoodTrace | None,
        t0: float | None,
        problems: list[str],
    ) -> None:
        node = capture_node(conn, manifest, raw)
        row, samples = connection_row(conn, raw, node, captures.get(node) if node else None, probe, problems)
        self.rows.append(row)
        self.interval_samples.append(samples)
        if probe is not None:
            self.series.append(probe_series(conn, probe, t0))
        self.series.append(goodput_series(samples))
        if westwood is not None:
            own_samples, own_events = westwood_of(conn, westwood, t0, problems)
            self.westwood_samples.append(own_samples)
            self.westwood_events.append(own_events)
            self.series.append(westwood_series(conn, own_samples, own_events))


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
        problems.append(f"{MANIFEST}: no t0_monotonic: tcp_probe times are relative to the trace's first event")
        return float(probe.events["t_mono_s"].min())
    if westwood is not None:
        problems.append(f"{MANIFEST}: no t0_monotonic: westwood_tb times are relative to the trace's first event")
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
    nodes = [b.get("node") for b in topology.get("bottlenecks") or [] if b.get("direction") == conn.get("direction")]
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


# ------------------------------------------------------------------- the module's trace (westwood_tb)


def _concat_frames(parts: list[pd.DataFrame], template: pd.DataFrame) -> pd.DataFrame:
    parts = [p for p in parts if not p.empty]
    if parts:
        return pd.concat(parts, ignore_index=True)
    empty = template.iloc[0:0].copy()
    empty.insert(0, "conn", pd.Series(dtype="object"))
    empty.insert(1, "t_s", pd.Series(dtype="float64"))
    return empty


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


# ---------------------------------------------------------------------------------------- writing


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    write_text_atomic(path, frame.to_csv(index=False, float_format="%.10g"))
