"""One connection's row of flows.csv and its time series: the sender's side from the capture, the
receiver's from iperf3, the mean RTT, tcp_probe's window and RTT series and the receiver's goodput
per interval (analysis/runs/analyze.py's module doc says what each column is).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.raw.loaders import (
    INFINITE_SSTHRESH,
    Iperf3Result,
    LoadError,
    TcpProbeTrace,
    display_path,
    load_iperf3,
)
from analysis.raw.pcap import PcapAccounting
from analysis.runs import metrics

#: series.csv's columns (tidy: one row per connection, time, metric)
SERIES_COLUMNS = ["conn", "t_s", "metric", "value"]


def concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c in ("t_s", "value") else "object") for c in columns})
    return pd.concat(frames, ignore_index=True)[columns]


def load_iperf3_or_none(path: Path, problems: list[str]) -> Iperf3Result | None:
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


def nan_of(value) -> float:
    return math.nan if value is None else float(value)


#: the manifest's fields of a connection that flows.csv repeats
CONNECTION_FIELDS = [
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
]


def connection_row(
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
    server = load_iperf3_or_none(raw / f"iperf3-{conn['id']}-server.json", problems)
    client = load_iperf3_or_none(raw / f"iperf3-{conn['id']}-client.json", problems)
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
        row.update(
            sent_pkts=direction.data_pkts,
            sent_bytes=direction.data_bytes,
            retrans_pkts=direction.rexmit_pkts,
            retrans_bytes=direction.rexmit_bytes,
            unique_bytes=direction.unique_bytes,
            transfer_s=direction.transfer_s,
            cwr_segments=direction.cwr_count,
        )
        # the ACKs pass the same router on their way back: those that echo a CE mark (ECN)
        acks = capture.direction(
            conn.get("receiver_ip"), conn.get("server_port"), conn.get("sender_ip"), conn.get("client_port")
        )
        row["ece_acks"] = acks.ece_count if acks is not None else None
    row["goodput_mbit"] = metrics.goodput_mbit(row.get("sent_bytes"), row.get("retrans_bytes"), row.get("transfer_s"))
    row["retrans_ratio"] = metrics.retransmission_ratio(row.get("retrans_bytes"), row.get("sent_bytes"))
    return row


def _receiver_side(server: Iperf3Result | None, client: Iperf3Result | None) -> dict:
    """Bytes received and their time, from the iperf3 server (else the server's report the client got)."""
    row: dict = {}
    if server is not None and "received_bytes" in server.totals:
        row.update(
            recv_bytes=server.totals["received_bytes"],
            recv_s=server.totals.get("received_s"),
            recv_source="iperf3 server",
        )
    elif client is not None and "received_bytes" in client.totals:
        # the client's end section carries the server's own totals, sent back at the end of the test
        row.update(
            recv_bytes=client.totals["received_bytes"],
            recv_s=client.totals.get("received_s"),
            recv_source="iperf3 client (server's report)",
        )
    row["recv_goodput_mbit"] = metrics.receiver_goodput_mbit(row.get("recv_bytes"), row.get("recv_s"))
    return row


def _receiver_samples(conn: dict, server: Iperf3Result | None) -> pd.DataFrame:
    """The server's interval byte counts on the run's clock (the connection's start + iperf3's own)."""
    if server is None or server.intervals.empty:
        return pd.DataFrame(columns=["conn", "t_start_s", "t_end_s", "bytes"])
    offset = nan_of(conn.get("start_s"))
    offset = 0.0 if math.isnan(offset) else offset
    intervals = server.intervals
    return pd.DataFrame(
        {
            "conn": conn["id"],
            "t_start_s": intervals["start_s"] + offset,
            "t_end_s": intervals["end_s"] + offset,
            "bytes": intervals["bytes"],
        }
    )


def _mean_rtt(conn: dict, probe: TcpProbeTrace | None, client: Iperf3Result | None, problems: list[str]) -> dict:
    """The sender kernel's srtt at every ACK (tcp_probe), else iperf3's mean of its samples."""
    events = _probe_events(conn, probe)
    if events is not None and events.empty:
        problems.append(
            f"raw/tcp_probe.txt: no events of {conn['id']} (source {conn.get('sender_ip')}:{conn.get('client_port')})"
        )
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


def probe_series(conn: dict, probe: TcpProbeTrace, t0: float | None) -> pd.DataFrame:
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
    frames = [pd.DataFrame({"conn": conn["id"], "t_s": t_s, "metric": name, "value": values}) for name, values in parts]
    return concat(frames, SERIES_COLUMNS)


def _unwrapped_seq(values: np.ndarray) -> np.ndarray:
    """Sequence numbers (mod 2**32) as bytes since the first one, unwrapped: each step is taken as the
    shortest way round the sequence space (paper 000 Figs 14-16 plot sequence numbers vs time)."""
    steps = np.diff(values % (1 << 32)) % (1 << 32)
    steps = np.where(steps >= 1 << 31, steps - (1 << 32), steps)
    return np.concatenate([[0], np.cumsum(steps)]).astype(float)


def goodput_series(samples: pd.DataFrame) -> pd.DataFrame:
    if samples.empty:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    seconds = samples["t_end_s"] - samples["t_start_s"]
    value = (samples["bytes"] * metrics.BITS_PER_BYTE / seconds / metrics.BITS_PER_MBIT).where(seconds > 0)
    return pd.DataFrame(
        {"conn": samples["conn"], "t_s": samples["t_end_s"], "metric": "recv_goodput_mbit", "value": value}
    )
