"""Latency under load: the ping and requests flows' samples, and the bottleneck queues' delay.

* ping (``raw/ping-<id>.txt``, ``ping -D``): one RTT per reply, stamped with the captures' clock; an
  echo without a reply is counted as lost.
* requests (``raw/requests-<id>.jsonl``, ``testbed/guest/shortflows.py``): one completion time per
  transfer, from ``connect()`` to the last byte; a failed transfer is counted as an error.
* the queues (``raw/queues.csv``, sampled at 10 Hz): the delay a packet joining a bottleneck queue
  would wait, its backlog over the link's rate (a drop-tail or AQM queue under HTB empties at the
  rate); where the discipline keeps its own (codel's last sojourn, pie's estimate) that too.

Times are seconds from the run's time zero (``manifest.json: t0_unix_s``), as every series of the run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

SAMPLE_COLUMNS = ["id", "kind", "flow", "t_s", "value_ms"]
SUMMARY_COLUMNS = ["id", "kind", "flow", "direction", "samples", "lost", "p50_ms", "p90_ms", "p99_ms", "mean_ms"]
QUEUE_COLUMNS = ["node", "intf", "direction", "t_s", "backlog_pkts", "delay_ms", "aqm_delay_ms", "drops", "marks"]
PERCENTILES = (50, 90, 99)

_REPLY = re.compile(r"^\[(?P<ts>\d+\.\d+)\] .*icmp_seq=(?P<seq>\d+).* time=(?P<rtt>[\d.]+) ms")
_TRANSMITTED = re.compile(r"(?P<sent>\d+) packets transmitted, (?P<received>\d+) received")


def ping_samples(text: str) -> tuple[list[tuple[float, float]], int]:
    """(reply time, RTT ms) of each reply in ``ping -D`` output, and the echoes that got none."""
    replies = [(float(m["ts"]), float(m["rtt"])) for m in map(_REPLY.match, text.splitlines()) if m]
    totals = _TRANSMITTED.search(text)
    lost = int(totals["sent"]) - int(totals["received"]) if totals else 0
    return replies, lost


def request_samples(text: str) -> tuple[list[tuple[float, float]], int]:
    """(start time, completion ms) of each transfer that completed, and the transfers that failed."""
    done, failed = [], 0
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed client
        if record.get("error"):
            failed += 1
        else:
            done.append((record["start_unix"], record["completion_s"] * 1000))
    return done, failed


def latency_frames(raw: Path, manifest: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The samples of every ping and requests flow of a run (``SAMPLE_COLUMNS``) and their summary
    per flow (``SUMMARY_COLUMNS``: percentiles of the RTT or completion time, lost or failed)."""
    t0 = manifest.get("t0_unix_s") or 0.0
    samples, summary = [], []
    for flow in manifest.get("latency_flows") or []:
        path = raw / (f"ping-{flow['id']}.txt" if flow["kind"] == "ping" else f"requests-{flow['id']}.jsonl")
        text = path.read_text(errors="replace") if path.exists() else ""
        values, lost = (ping_samples if flow["kind"] == "ping" else request_samples)(text)
        frame = pd.DataFrame(
            {
                "id": flow["id"],
                "kind": flow["kind"],
                "flow": flow["flow"],
                "t_s": [t - t0 for t, _ in values],
                "value_ms": [v for _, v in values],
            },
            columns=SAMPLE_COLUMNS,
        )
        samples.append(frame)
        summary.append(
            {
                "id": flow["id"],
                "kind": flow["kind"],
                "flow": flow["flow"],
                "direction": flow["direction"],
                "samples": len(frame),
                "lost": lost,
                **summarize(frame["value_ms"]),
            }
        )
    return (
        pd.concat(samples, ignore_index=True) if samples else pd.DataFrame(columns=SAMPLE_COLUMNS),
        pd.DataFrame(summary, columns=SUMMARY_COLUMNS),
    )


def summarize(values: pd.Series) -> dict[str, float]:
    """p50, p90, p99 and the mean in ms (NaN without samples)."""
    if values.empty:
        return {f"p{p}_ms": np.nan for p in PERCENTILES} | {"mean_ms": np.nan}
    return {f"p{p}_ms": float(np.percentile(values, p)) for p in PERCENTILES} | {"mean_ms": float(values.mean())}


def queue_delays(raw: Path, manifest: dict) -> pd.DataFrame:
    """Each bottleneck queue's samples with the delay it held (``QUEUE_COLUMNS``): backlog x 8 / rate,
    and the discipline's own delay and marks where it keeps them (empty on a drop-tail queue)."""
    path = raw / "queues.csv"
    if not path.exists():
        return pd.DataFrame(columns=QUEUE_COLUMNS)
    # the sampler's delay_ms is the discipline's own (runs before it have no such column, nor marks)
    queues = pd.read_csv(path).rename(columns={"delay_ms": "aqm_delay_ms"})
    for column in ("aqm_delay_ms", "marks"):
        if column not in queues:
            queues[column] = np.nan
    links = {(b["node"], b["intf"]): b for b in (manifest.get("topology") or {}).get("bottlenecks", [])}
    keys = list(zip(queues["node"], queues["intf"], strict=True))
    rate_mbit = pd.Series([links[k]["rate_mbit"] if k in links else np.nan for k in keys], index=queues.index)
    queues["direction"] = [links[k]["direction"] if k in links else None for k in keys]
    queues["delay_ms"] = queues["backlog_bytes"] * 8 / (rate_mbit * 1e3)
    return queues[QUEUE_COLUMNS]
