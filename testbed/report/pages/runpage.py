"""One run's page, ``report.html``: self-contained (plots inline as PNG), written beside its manifest.

:func:`report_run` analyses a run folder (``analysis.runs.analyze.analyze_run``: flows.csv, series.csv) and
writes the page: the trust banner, provenance, fidelity checks, per-flow tables and the time series.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.figures import plots
from analysis.runs import metrics
from analysis.runs.analyze import RunAnalysis, analyze_run, write_text_atomic
from analysis.runs.westwood import WESTWOOD_FLOW_COLUMNS, mss_bytes
from testbed.report.pages.templating import Table, fmt, is_missing, render, table
from testbed.scenario.algorithms import lookup


def report_run(run_dir: Path) -> RunAnalysis:
    """Analyse one run folder and write flows.csv, series.csv and report.html into it."""
    analysed = analyze_run(run_dir)
    analysed.report_path = Path(run_dir) / "report.html"
    write_text_atomic(analysed.report_path, run_report_html(analysed))
    return analysed


# ------------------------------------------------------------------------------------ the page's data


def provenance_items(manifest: dict, session: dict | None = None) -> list[tuple[str, str]]:
    """(label, text) pairs: scenario, point, seed, kernel, backend + accel, profile, git sha."""
    source = manifest or session or {}
    backend = source.get("backend") or {}
    git = source.get("git") or {}
    kernel = (manifest.get("kernel") or {}).get("release") if manifest else None
    kernel = kernel or backend.get("kernel_release")
    backend_text = " ".join(str(x) for x in [backend.get("kind"), backend.get("tool")] if x) or None
    if backend_text and backend.get("accel"):
        backend_text += f", accel {backend['accel']}"
    if backend_text and backend.get("vcpus"):
        backend_text += f", {backend['vcpus']} vCPU"
    if backend_text and backend.get("clock") == "virtual":
        backend_text += f", virtual time (icount shift {backend.get('icount_shift')})"
    sha = git.get("sha")
    git_text = (sha[:12] + (" (dirty)" if git.get("dirty") else "")) if sha else ("none recorded" if git else None)
    items = [
        ("scenario", source.get("scenario")),
        ("profile", source.get("profile") or ("none" if source else None)),
    ]
    if manifest:
        params = manifest.get("params")
        items += [
            ("point", manifest.get("point_id")),
            (
                "params",
                (", ".join(f"{k}={v}" for k, v in params.items()) or "none") if isinstance(params, dict) else None,
            ),
            ("seed", manifest.get("seed")),
        ]
    items += [("kernel", kernel), ("backend", backend_text), ("git", git_text)]
    if manifest and manifest.get("cluster"):  # ran on a cluster's worker (testbed.host.clusterwork)
        where = manifest["cluster"]
        items.append(("host", f"{where.get('host')} ({where.get('cpu')}, {where.get('cores')} cores)"))
    if manifest:
        items += [("started", manifest.get("started_utc")), ("ended", manifest.get("ended_utc"))]
    elif session:
        items += [("started", session.get("started_utc"))]
    return [(label, "n/a" if is_missing(value) or value == "" else str(value)) for label, value in items]


def _fidelity(manifest: dict) -> dict | None:
    """The trust banner's word and colour and the checks' table; None when the manifest has none."""
    fidelity = manifest.get("fidelity")
    if not isinstance(fidelity, dict):
        return None
    trustworthy = fidelity.get("trustworthy")
    checks = pd.DataFrame(fidelity.get("checks") or [], columns=["name", "ok", "measured", "expected", "detail"])
    return {
        "word": "n/a" if trustworthy is None else ("yes" if trustworthy else "no"),
        "css": "warn" if trustworthy is None else ("good" if trustworthy else "bad"),
        "checks": table(
            checks, formats={"ok": lambda v: "n/a" if is_missing(v) else ("ok" if v else "FAILED")}, digits=5
        ),
    }


def _flat(value) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {'' if v is None else v}" for k, v in value.items())
    return "" if value is None else str(value)


def _first_event_note(analysed: RunAnalysis) -> str:
    """How late each connection's first tcp_probe event came after its start_s (iperf3's clock lags less)."""
    cwnd = analysed.series[analysed.series["metric"] == "cwnd_pkts"]
    if cwnd.empty or analysed.flows.empty:
        return ""
    first = cwnd.groupby("conn")["t_s"].min()
    parts = []
    for conn, start in zip(analysed.flows["conn"], analysed.flows["start_s"], strict=True):
        if conn in first.index and not is_missing(start):
            parts.append(f"{conn} {fmt(first[conn] - start)} s")
    if not parts:
        return ""
    shown = ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")
    return f" (first tcp_probe event after the connection's start_s: {shown})"


def _bottleneck_rate_mbit(manifest: dict, direction) -> float | None:
    bottlenecks = (manifest.get("topology") or {}).get("bottlenecks") or []
    rates = [b.get("rate_mbit") for b in bottlenecks if b.get("direction") == direction] or [
        b.get("rate_mbit") for b in bottlenecks
    ]
    rates = [r for r in rates if isinstance(r, int | float) and r > 0]
    return float(rates[0]) if rates else None


def _events_table(events: pd.DataFrame) -> Table:
    """The module's congestion events, ssthresh in segments ("infinite" before the first loss)."""
    shown = events.copy()
    shown["est_mbit"] = shown["est_Bps"] * metrics.BITS_PER_BYTE / metrics.BITS_PER_MBIT
    shown["rtt_min_ms"] = shown["rtt_min_us"] / 1000
    columns = [
        "conn",
        "t_s",
        "variant",
        "kind",
        "cwnd_before",
        "cwnd_after",
        "ssthresh_before",
        "ssthresh_after",
        "est_mbit",
        "rtt_min_ms",
        "expected",
        "diff_segments",
    ]
    return table(
        shown[columns],
        headers={
            "t_s": "t s",
            "est_mbit": "estimate Mbit/s",
            "rtt_min_ms": "RTT_min ms",
            "expected": "expected ssthresh (paper)",
            "diff_segments": "diff segments",
        },
        formats={
            "t_s": lambda v: "n/a" if is_missing(v) else f"{v:.3f}",
            "ssthresh_before": lambda v: "infinite" if is_missing(v) else fmt(v),
            "ssthresh_after": lambda v: "infinite" if is_missing(v) else fmt(v),
        },
    )


def _westwood(analysed: RunAnalysis) -> dict:
    """The module trace's section: estimate plot, real-ssthresh plot, congestion events."""
    samples, events = analysed.westwood_samples, analysed.congestion_events
    flows = analysed.flows
    traced = flows[flows["conn"].isin(set(samples["conn"]) | set(events["conn"]))] if not flows.empty else flows
    conns = (traced if not traced.empty else flows)[["conn", "cc", "direction", "recv_goodput_mbit"]]
    direction = conns["direction"].iloc[0] if not conns.empty else None
    rate = _bottleneck_rate_mbit(analysed.manifest, direction)
    mss = mss_bytes(analysed.manifest)
    return {
        "mss": mss,
        "limit": fmt(metrics.tcp_goodput_limit_mbit(rate, mss) if rate else math.nan),
        "estimate_png": plots.estimate_png(analysed.series, conns, rate, mss),
        "ssthresh_png": plots.real_ssthresh_png(analysed.series, conns, events, samples),
        "events": _events_table(events),
    }


_CONNECTION_COLUMNS = [
    "conn",
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
    "capture",
    *WESTWOOD_FLOW_COLUMNS,
]
_GOODPUT_HEADERS = {
    "goodput_mbit": "sender goodput Mbit/s (paper)",
    "recv_goodput_mbit": "receiver goodput Mbit/s (iperf3)",
}


def _connections_table(flows: pd.DataFrame) -> Table:
    # ECN's columns only where a connection saw any (a run without ECN has none)
    ecn = [c for c in ("ece_acks", "cwr_segments") if c in flows and flows[c].fillna(0).astype(float).sum() > 0]
    shown = flows[[c for c in _CONNECTION_COLUMNS + ecn if c in flows.columns]].copy()
    shown["cc"] = [lookup(cc).label if isinstance(cc, str) else cc for cc in shown["cc"]]
    return table(
        shown,
        headers=_GOODPUT_HEADERS
        | {
            "retrans_ratio": "retrans. ratio %",
            "iperf3_retransmits": "kernel retrans. (iperf3)",
            "mean_rtt_ms": "mean srtt ms",
            "bwe_mbit_final": "Westwood+ estimate Mbit/s (last half)",
            "bwe_error_pct": "estimate vs sender goodput %",
            "ece_acks": "ACKs echoing CE (ECE)",
            "cwr_segments": "CWR segments",
        },
        formats={"retrans_ratio": lambda v: fmt(v * 100 if not is_missing(v) else v)},
    )


def _time_series(analysed: RunAnalysis) -> list[tuple[bytes, str]]:
    """(PNG, alt text) of the four time-series plots."""
    conns = analysed.flows[["conn", "cc"]]
    return [
        (plots.cwnd_ssthresh_png(analysed.series, conns), "cwnd and ssthresh_current vs time"),
        (plots.srtt_png(analysed.series, conns), "srtt vs time"),
        (plots.sequence_png(analysed.series, analysed.flows[["conn", "cc", "direction"]]), "acknowledged data vs time"),
        (plots.interval_goodput_png(analysed.intervals, conns), "receiver goodput per interval"),
    ]


def _latency(analysed: RunAnalysis) -> dict | None:
    """The latency section: per ping or requests flow its percentiles, and the latency-vs-time plot
    (also shown for a run without such flows whose queues have an AQM: its delay is the point)."""
    aqm = not analysed.queue_delays.empty and analysed.queue_delays["marks"].notna().any()
    if analysed.latency.empty and not aqm:
        return None
    headers = {
        "p50_ms": "p50 ms",
        "p90_ms": "p90 ms",
        "p99_ms": "p99 ms",
        "mean_ms": "mean ms",
        "lost": "lost / failed",
    }
    return {
        "table": table(analysed.latency, headers=headers),
        "png": plots.latency_png(analysed.latency_samples, analysed.queue_delays),
    }


def _details(manifest: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """The manifest's sysctls, modules and tool versions, folded away at the bottom of the page."""
    sections = []
    for key, label in [("sysctls", "sysctls"), ("modules", "modules"), ("tools", "tool versions")]:
        value = manifest.get(key)
        if isinstance(value, dict) and value:
            sections.append((label, [(str(k), _flat(v)) for k, v in value.items()]))
    return sections


def run_report_html(analysed: RunAnalysis) -> str:
    """The run's self-contained report page (templates/run.html.j2)."""
    m = analysed.manifest
    heading = " / ".join(str(x) for x in [m.get("scenario"), m.get("point_id"), f"seed={m.get('seed')}"] if x) or str(
        analysed.run_dir
    )
    totals = analysed.flow_totals
    several = len(totals) > 1 or (not totals.empty and totals["connections"].max() > 1)
    return render(
        "run.html.j2",
        title=f"Run {heading}",
        heading=heading,
        status=analysed.status,
        reason=analysed.reason or "no reason recorded",
        prov=provenance_items(m),
        problems=analysed.problems,
        fidelity=_fidelity(m),
        drop_checks=table(analysed.drop_checks, headers=_DROP_HEADERS),
        connections=_connections_table(analysed.flows),
        flow_totals=table(totals, headers=_GOODPUT_HEADERS) if several else None,
        jain=[(direction, fmt(index, 4)) for direction, index in analysed.jain.items()],
        plots=_time_series(analysed),
        first_event_note=_first_event_note(analysed),
        westwood=_westwood(analysed) if analysed.westwood_samples is not None else None,
        latency=_latency(analysed),
        details=_details(m),
    )


_DROP_HEADERS = {
    "queue_drops": "queue drops (tc)",
    "udp_probe_lost": "UDP probe lost",
    "netem_drops": "netem drops (all links)",
    "tcp_retrans_pkts": "TCP retransmitted segments",
    "difference": "retransmitted - (drops - probe)",
}
