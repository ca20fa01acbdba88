"""One run's page, ``report.html``: self-contained (plots inline as PNG), written beside its manifest.

:func:`report_run` analyses a run folder (``analysis.run.analyze_run``: flows.csv, series.csv) and
writes the page: the trust banner, provenance, fidelity checks, per-flow tables and the time series.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import metrics, plots
from analysis.run import WESTWOOD_FLOW_COLUMNS, RunAnalysis, analyze_run, mss_bytes, write_text_atomic
from testbed.scenario.algorithms import lookup


def report_run(run_dir: Path) -> RunAnalysis:
    """Analyse one run folder and write flows.csv, series.csv and report.html into it."""
    analysis = analyze_run(run_dir)
    analysis.report_path = Path(run_dir) / "report.html"
    write_text_atomic(analysis.report_path, run_report_html(analysis))
    return analysis


# ------------------------------------------------------------------------------------ HTML pieces

PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 75em; color: #222; padding: 0 1em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
.banner { padding: 0.7em 1em; margin: 1em 0; border-radius: 4px; font-weight: bold; }
.bad { background: #fde0dc; border: 1px solid #d62728; }
.good { background: #e3f4e1; border: 1px solid #2ca02c; }
.warn { background: #fff4d6; border: 1px solid #e0a800; }
.note { color: #555; font-size: 0.85em; } img { max-width: 100%; }
.verdict { padding: 0.1em 0.4em; border-radius: 3px; white-space: nowrap; font-weight: bold; }
.muted { background: #eee; border: 1px solid #bbb; }
dl.prov { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1em; font-size: 0.9em; }
dl.prov dt { font-weight: bold; } dl.prov dd { margin: 0; }
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def is_missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(isinstance(value, float | np.floating) and math.isnan(value))
    except TypeError:
        return False


def fmt(value, digits: int = 3) -> str:
    """A cell: ``n/a`` for missing, integers as integers, floats with ``digits`` significant digits."""
    if is_missing(value):
        return "n/a"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        value = float(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        decimals = max(0, digits - int(math.floor(math.log10(abs(value)))) - 1)
        return f"{value:.{decimals}f}"
    return str(value)


def _right_aligned(column: pd.Series) -> bool:
    """Numbers, and text columns that hold only numbers (e.g. "6.29 ±0.12") or n/a, align right."""
    if pd.api.types.is_bool_dtype(column):
        return False
    if pd.api.types.is_numeric_dtype(column):
        return True
    texts = [v for v in column if isinstance(v, str) and v != "n/a"]
    return bool(texts) and all(t[:1].isdigit() or t[:1] in "-+." for t in texts)


def html_table(
    frame: pd.DataFrame,
    headers: dict[str, str] | None = None,
    formats: dict | None = None,
    raw_html: set[str] | None = None,
    digits: int = 4,
) -> str:
    """An HTML table of ``frame``: ``headers`` renames columns, ``formats`` maps a column to a function
    value -> str, columns in ``raw_html`` are inserted unescaped (links); other numbers get ``digits``
    significant digits."""
    headers = headers or {}
    formats = formats or {}
    raw_html = raw_html or set()
    if frame.empty:
        return '<p class="note">(none)</p>'
    numeric = {c for c in frame.columns if _right_aligned(frame[c])}
    out = ["<table><thead><tr>"]
    for column in frame.columns:
        cls = "" if column in numeric else ' class="text"'
        out.append(f"<th{cls}>{esc(headers.get(column, column))}</th>")
    out.append("</tr></thead><tbody>")
    for values in frame.itertuples(index=False):
        out.append("<tr>")
        for column, value in zip(frame.columns, values, strict=True):
            cls = "" if column in numeric else ' class="text"'
            if column in raw_html:
                text = value if isinstance(value, str) else fmt(value)
            else:
                text = esc(formats[column](value) if column in formats else fmt(value, digits))
            out.append(f"<td{cls}>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def png_img(png: bytes, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def html_page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{PAGE_STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


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
    sha = git.get("sha")
    git_text = (
        (sha[:12] + (" (dirty)" if git.get("dirty") else "")) if sha else ("none recorded" if git else None)
    )
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
                (", ".join(f"{k}={v}" for k, v in params.items()) or "none")
                if isinstance(params, dict)
                else None,
            ),
            ("seed", manifest.get("seed")),
        ]
    items += [("kernel", kernel), ("backend", backend_text), ("git", git_text)]
    if manifest:
        items += [("started", manifest.get("started_utc")), ("ended", manifest.get("ended_utc"))]
    elif session:
        items += [("started", session.get("started_utc"))]
    return [(label, "n/a" if is_missing(value) or value == "" else str(value)) for label, value in items]


def provenance_html(items: list[tuple[str, str]]) -> str:
    return '<dl class="prov">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items) + "</dl>"


def _fidelity_html(manifest: dict) -> str:
    fidelity = manifest.get("fidelity")
    if not isinstance(fidelity, dict):
        return '<p class="banner warn">Fidelity: n/a (the manifest has no fidelity checks)</p>'
    trustworthy = fidelity.get("trustworthy")
    word = "n/a" if trustworthy is None else ("yes" if trustworthy else "no")
    cls = "warn" if trustworthy is None else ("good" if trustworthy else "bad")
    checks = pd.DataFrame(
        fidelity.get("checks") or [], columns=["name", "ok", "measured", "expected", "detail"]
    )
    return f'<p class="banner {cls}">Trustworthy: {word}</p>' + html_table(
        checks,
        formats={"ok": lambda v: "n/a" if is_missing(v) else ("ok" if v else "FAILED")},
        digits=5,
    )


def _conn_label(conn: str, cc) -> str:
    return f"{conn} ({lookup(cc).label})" if isinstance(cc, str) else str(conn)


def _flat(value) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {'' if v is None else v}" for k, v in value.items())
    return "" if value is None else str(value)


def _first_event_note(analysis: RunAnalysis) -> str:
    """How late each connection's first tcp_probe event came after its start_s (iperf3's clock lags less)."""
    cwnd = analysis.series[analysis.series["metric"] == "cwnd_pkts"]
    if cwnd.empty or analysis.flows.empty:
        return ""
    first = cwnd.groupby("conn")["t_s"].min()
    parts = []
    for conn, start in zip(analysis.flows["conn"], analysis.flows["start_s"], strict=True):
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


def _westwood_html(analysis: RunAnalysis) -> list[str]:
    """The module trace's section: estimate plot, real-ssthresh plot, congestion events."""
    samples, events = analysis.westwood_samples, analysis.congestion_events
    flows = analysis.flows
    traced = flows[flows["conn"].isin(set(samples["conn"]) | set(events["conn"]))] if not flows.empty else flows
    conns = (traced if not traced.empty else flows)[["conn", "cc", "direction", "recv_goodput_mbit"]]
    direction = conns["direction"].iloc[0] if not conns.empty else None
    rate = _bottleneck_rate_mbit(analysis.manifest, direction)
    mss = mss_bytes(analysis.manifest)
    limit = metrics.tcp_goodput_limit_mbit(rate, mss) if rate else math.nan
    body = ["<h2>Westwood+ bandwidth estimate and real ssthresh (module trace, raw/westwood_tb.txt)</h2>"]
    body.append(png_img(plots.estimate_png(analysis.series, conns, rate, mss), "bandwidth estimate vs time"))
    body.append(
        '<p class="note">The filtered estimate (line; westwood_paper: BWE of paper 000 eq. (1), westwood_ml: '
        "mainline's bw_est) after each bandwidth sample (dots), in Mbit/s of payload. Grey dotted line: the "
        f"bottleneck's TCP goodput limit, rate &times; {mss}/1514 = {esc(fmt(limit))} Mbit/s; dashed: the "
        "connection's receiver goodput (iperf3 server, whole test). In the connections table, the estimate "
        "is the mean over the samples of the connection's last half and its error is against the sender "
        "goodput of the whole transfer.</p>"
    )
    body.append(
        png_img(plots.real_ssthresh_png(analysis.series, conns, events, samples), "cwnd and real ssthresh vs time")
    )
    body.append(
        '<p class="note">The ssthresh drawn here is the <b>real</b> one (the kernel\'s snd_ssthresh as each '
        "congestion event of the module left it), not tcp_probe's ssthresh_current above; not drawn while "
        "infinite. cwnd from tcp_probe (every ACK) when the run has it, else from the module's samples (one "
        "per sampling window). Markers: congestion events by kind, at the cwnd they found.</p>"
    )
    body.append("<h3>Congestion events</h3>")
    body.append(
        '<p class="note">kind: recovery (fast recovery), cwr, loss (RTO), loss_repeat, complete_cwr (end of '
        "recovery/CWR), undo (kernel-patch/README.md). ssthresh in segments, real. For "
        "westwood_paper's recovery and loss events, expected = max(2, BWE &times; RTT_min / MSS) with "
        f"MSS {mss} bytes (paper 000 &sect;2.1 b, c) and diff = ssthresh_after - expected; the module "
        "truncates, so -1 &lt; diff &le; 0 is a match.</p>"
    )
    shown = events.copy()
    shown["est_mbit"] = shown["est_Bps"] * metrics.BITS_PER_BYTE / metrics.BITS_PER_MBIT
    shown["rtt_min_ms"] = shown["rtt_min_us"] / 1000
    shown = shown[
        [
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
    ]
    body.append(
        html_table(
            shown,
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
    )
    return body


def run_report_html(analysis: RunAnalysis) -> str:
    """The run's self-contained report page."""
    m = analysis.manifest
    title = " / ".join(
        str(x) for x in [m.get("scenario"), m.get("point_id"), f"seed={m.get('seed')}"] if x
    ) or str(analysis.run_dir)
    body = [f"<h1>Run: {esc(title)}</h1>"]
    if analysis.status != "complete":
        reason = analysis.reason or "no reason recorded"
        body.append(
            f'<p class="banner bad">Status: {esc(analysis.status.upper())} - {esc(reason)}<br>'
            "Numbers below come from whatever raw files exist; missing ones are n/a.</p>"
        )
    else:
        body.append('<p class="banner good">Status: complete</p>')
    body.append(provenance_html(provenance_items(m)))
    if analysis.problems:
        body.append("<h2>Problems with the raw files</h2><ul>")
        body += [f"<li>{esc(p)}</li>" for p in analysis.problems]
        body.append("</ul>")
    body.append("<h2>Fidelity checks (before and during traffic)</h2>")
    body.append(_fidelity_html(m))
    body.append("<h2>Post-run check: bottleneck queue drops vs retransmitted segments</h2>")
    body.append(
        '<p class="note">Queue drops from tc -s after the run; the UDP rate probe ran through the same '
        "queue before TCP started, so its lost packets are taken off; retransmitted segments from the "
        "capture next to the sender.</p>"
    )
    body.append(
        html_table(
            analysis.drop_checks,
            headers={
                "queue_drops": "queue drops (tc)",
                "udp_probe_lost": "UDP probe lost",
                "netem_drops": "netem drops (all links)",
                "tcp_retrans_pkts": "TCP retransmitted segments",
                "difference": "retransmitted - (drops - probe)",
            },
        )
    )
    body.append("<h2>Connections</h2>")
    body.append(
        '<p class="note">Sender goodput = (sent - retransmitted) / transfer time, paper 000 &sect;3.1, '
        "counted in the capture on the router next to the sender (transfer time: first to last data "
        "segment). Receiver goodput = bytes the iperf3 server read / its test time. Retransmission ratio = "
        "retransmitted / sent bytes.</p>"
    )
    shown = analysis.flows[
        [
            c
            for c in [
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
            if c in analysis.flows.columns
        ]
    ].copy()
    shown["cc"] = [lookup(cc).label if isinstance(cc, str) else cc for cc in shown["cc"]]
    body.append(
        html_table(
            shown,
            headers={
                "goodput_mbit": "sender goodput Mbit/s (paper)",
                "recv_goodput_mbit": "receiver goodput Mbit/s (iperf3)",
                "retrans_ratio": "retrans. ratio %",
                "iperf3_retransmits": "kernel retrans. (iperf3)",
                "mean_rtt_ms": "mean srtt ms",
                "bwe_mbit_final": "Westwood+ estimate Mbit/s (last half)",
                "bwe_error_pct": "estimate vs sender goodput %",
            },
            formats={"retrans_ratio": lambda v: fmt(v * 100 if not is_missing(v) else v)},
        )
    )
    if len(analysis.flow_totals) > 1 or (
        not analysis.flow_totals.empty and analysis.flow_totals["connections"].max() > 1
    ):
        body.append("<h3>Flows (the connections of a flow's ON periods added)</h3>")
        body.append(
            html_table(
                analysis.flow_totals,
                headers={
                    "goodput_mbit": "sender goodput Mbit/s (paper)",
                    "recv_goodput_mbit": "receiver goodput Mbit/s (iperf3)",
                },
            )
        )
    if analysis.jain:
        body.append(
            "<p>Jain fairness index over flows (paper 000 &sect;3.2, sender goodput): "
            + ", ".join(f"{esc(d)}: {fmt(j, 4)}" for d, j in analysis.jain.items())
            + "</p>"
        )
    body.append("<h2>Time series</h2>")
    conns = analysis.flows[["conn", "cc"]]
    body.append(png_img(plots.cwnd_ssthresh_png(analysis.series, conns), "cwnd and ssthresh_current vs time"))
    body.append(png_img(plots.srtt_png(analysis.series, conns), "srtt vs time"))
    body.append(png_img(plots.sequence_png(analysis.series, analysis.flows[["conn", "cc", "direction"]]),
                        "acknowledged data vs time"))  # fmt: skip
    body.append(
        png_img(plots.interval_goodput_png(analysis.intervals, conns), "receiver goodput per interval")
    )
    body.append(
        '<p class="note">ssthresh_current is what tcp_probe reports: the kernel\'s tcp_current_ssthresh() '
        "(outside recovery max(ssthresh, 3/4 cwnd)), not the real ssthresh; not drawn while infinite. "
        "Time zero is the run's t0 (CLOCK_MONOTONIC). Receiver goodput is on iperf3's clock: an interval "
        "is placed at the connection's start_s plus iperf3's own interval times, and iperf3 starts its clock "
        f"when the test starts, after its control exchange{_first_event_note(analysis)}.</p>"
    )
    if analysis.westwood_samples is not None:
        body += _westwood_html(analysis)
    for key, label in [("sysctls", "sysctls"), ("modules", "modules"), ("tools", "tool versions")]:
        value = m.get(key)
        if isinstance(value, dict) and value:
            items = "".join(
                f'<tr><td class="text">{esc(k)}</td><td class="text">{esc(_flat(v))}</td></tr>'
                for k, v in value.items()
            )
            body.append(f"<details><summary>{esc(label)}</summary><table>{items}</table></details>")
    return html_page(f"Run {title}", body)
