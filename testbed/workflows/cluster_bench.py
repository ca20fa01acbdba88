"""``testbed bench --part cluster``: what spreading runs over a Dask cluster costs. Numbers, not assertions.

* the engine's overhead per task: the round trip of one empty task with the ``run=1`` resource (submit to
  result, one at a time), and the scheduler's time per task when many are queued at once (wall time of
  200 empty tasks x workers / 200);
* shipping a run home: a real cluster session of one run that keeps a capture of about 20 MB (two Reno
  flows, 20 s at 100 Mbit/s on the workers' own kernel), as ``cluster.json`` recorded it: bytes, archive
  bytes (tar.gz, level 1), the worker's packing and the controller's unpacking and checking; the capture's
  own compression ratio and rate, and what they mean for the papers' largest capture (376 MB).

Printed and written to ``bench/cluster-<UTC time>.json``.
"""

from __future__ import annotations

import gzip
import json
import statistics
import time
from pathlib import Path

from testbed import PROJECT
from testbed.host import cluster, clusterspec, daskcluster
from testbed.host.session import run_session
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict

#: the papers' largest capture (200 flows, 1000 s, headers only; docs/cluster.md)
LARGEST_CAPTURE_MB = 376.0
#: the shipped run: 2 Reno flows for 20 s at 100 Mbit/s on the host kernel keep a capture of about 20 MB
#: (a guest worker is limited to 20 Mbit/s under TCG: use a smaller rate there)
SHIP_RATE_MBIT = 100
SHIP_DURATION_S = 20
ROUND_TRIPS = 30
QUEUED = 200


def empty_task(i: int) -> int:
    return i


def bench_cluster(spec_text: str = "local:2", out_dir: Path = PROJECT / "bench") -> dict:
    spec = clusterspec.parse(spec_text)
    figures: dict = {"cluster": clusterspec.spec_text(spec)}
    with daskcluster.running(spec) as client:
        figures["workers"] = workers = len(client.scheduler_info()["workers"])
        figures["engine"] = _engine_overhead(client, workers)
    figures["shipping"] = _shipping(spec_text, out_dir)
    figures["status"] = figures["shipping"].get("status", "failed")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"cluster-{rundir.utc_stamp()}.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    print(f"written: {path}")
    return figures


def _engine_overhead(client, workers: int) -> dict:
    trips = []
    for i in range(ROUND_TRIPS):
        started = time.perf_counter()
        client.submit(empty_task, i, resources={"run": 1}, pure=False).result()
        trips.append(time.perf_counter() - started)
    started = time.perf_counter()
    client.gather([client.submit(empty_task, i, resources={"run": 1}, pure=False) for i in range(QUEUED)])
    wall = time.perf_counter() - started
    return {
        "round_trip_ms_median": round(statistics.median(trips) * 1000, 2),
        "round_trip_ms_max": round(max(trips) * 1000, 2),
        "queued_tasks": QUEUED,
        "queued_wall_s": round(wall, 3),
        "scheduler_ms_per_task": round(wall * workers / QUEUED * 1000, 2),
    }


def _shipping(spec_text: str, out_dir: Path) -> dict:
    """A real session on the cluster whose run keeps a large capture: what its shipping cost, from cluster.json."""
    scenario = scenario_from_dict(
        {
            "description": "make bench: one run with a capture of some 20 MB, shipped home from a worker",
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": SHIP_RATE_MBIT, "queue_pkts": 100}},
            "flows": [{"cc": "reno", "rtt_ms": 0, "count": 2}],
            "duration_s": SHIP_DURATION_S,
        },
        name="bench-cluster-shipping",
    )
    result = run_session(scenario, results_root=out_dir / "results", force=True, cluster=spec_text)
    (run,) = result.runs
    (where,) = rundir.read_json(result.directory / cluster.CLUSTER_JSON)["runs"].values()
    if "archive_bytes" not in where:
        return {"status": where.get("status"), "reason": where.get("reason")}
    return {
        "run_folder": str(run),
        "status": result.statuses[str(run)],
        "host": where["host"],
        "bytes": where["unpacked_bytes"],
        "archive_bytes": where["archive_bytes"],
        "ratio": round(where["archive_bytes"] / where["unpacked_bytes"], 3),
        "pack_s": where["pack_s"],
        "fetch_s": where["fetch_s"],
        "unpack_and_check_s": where["unpack_s"],
        **_capture_compression(run),
    }


def _capture_compression(folder: Path) -> dict:
    """How the folder's captures compress at the worker's level, and what that says of a 376 MB capture."""
    pcaps = sorted(folder.rglob("*.pcap*"))
    raw = sum(p.stat().st_size for p in pcaps)
    if not raw:
        return {"capture_bytes": 0}
    started = time.perf_counter()
    packed = sum(len(gzip.compress(p.read_bytes(), compresslevel=1)) for p in pcaps)
    rate = raw / 1e6 / max(time.perf_counter() - started, 1e-9)
    return {
        "capture_bytes": raw,
        "capture_ratio": round(packed / raw, 3),
        "capture_gzip_MB_per_s": round(rate, 1),
        "largest_capture": {
            "MB": LARGEST_CAPTURE_MB,
            "gzip_s": round(LARGEST_CAPTURE_MB / rate, 1),
            "archive_MB": round(LARGEST_CAPTURE_MB * packed / raw, 1),
        },
    }
