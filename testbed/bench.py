"""``make bench``: how fast and how faithful the testbed is here. Numbers, not assertions.

One 30 s Reno flow over the default path (10 Mbit/s, base RTT 100 ms, queue = 1 BDP), run the
way ``make experiment`` runs (guest unless the local kernel has netem), then:

* command to guest-ready: from ``testbed`` starting the guest to the runner's first line;
* overhead of the run: its wall time minus its 30 s of traffic, split into guest boot, topology
  setup, fidelity check, collection + teardown, and analysis;
* steady-state goodput as a share of the 9.56 Mbit/s limit (receiver intervals from 10 s on);
* idle RTT error (ping min vs configured) and the UDP-probed bottleneck rate error;
* KVM or TCG.

Printed and written to ``bench/bench-<UTC time>.json``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from testbed import rundir
from testbed.scenario import scenario_from_dict
from testbed.session import run_session
from topologies.params import tcp_goodput_limit_mbit

PROJECT = Path(__file__).resolve().parent.parent
DURATION_S = 30
STEADY_FROM_S = 10
RATE_MBIT = 10


def bench(kernel_version: str | None = None, out_dir: Path = PROJECT / "bench") -> dict:
    scenario = scenario_from_dict(
        {
            "description": "make bench: one Reno flow over the default path",
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": RATE_MBIT, "queue_bdp": 1}},
            "flows": [{"cc": "reno", "rtt_ms": 100}],
            "duration_s": DURATION_S,
        },
        name="bench",
    )
    started = time.monotonic()
    result = run_session(scenario, kernel_version=kernel_version, results_root=out_dir / "results")
    runs_done = time.monotonic()
    from analysis.report import write_session_report

    write_session_report(result.directory)
    analysis_s = time.monotonic() - runs_done
    wall_s = time.monotonic() - started

    (run,) = result.runs
    manifest = rundir.read_json(run / rundir.MANIFEST)
    session = rundir.read_json(result.directory / rundir.SESSION)
    timing = manifest.get("timing", {})
    guest_timing = session.get("timing", {}).get("guest", {})
    server = json.loads((run / "raw" / "iperf3-c0-server.json").read_text())
    steady = [i["sum"]["bits_per_second"] / 1e6 for i in server["intervals"] if i["sum"]["start"] >= STEADY_FROM_S]
    checks = {c["name"]: c for c in manifest.get("fidelity", {}).get("checks", [])}
    rtt = checks.get("base RTT pair 0", {})
    rate = checks.get("bottleneck rate forward", {})
    limit = tcp_goodput_limit_mbit(RATE_MBIT)
    figures = {
        "status": manifest.get("status"),
        "backend": manifest.get("backend", {}).get("kind"),
        "accel": manifest.get("backend", {}).get("accel", "none (local kernel)"),
        "kernel": manifest.get("kernel", {}).get("release"),
        "command_to_guest_ready_s": guest_timing.get("ready_s"),
        "wall_s": round(wall_s, 1),
        "traffic_s": DURATION_S,
        "overhead_s": round(wall_s - DURATION_S, 1),
        "overhead_split_s": {
            "guest_boot_and_imports": guest_timing.get("ready_s"),
            "topology_setup": timing.get("setup_s"),
            "fidelity_check": timing.get("fidelity_check_s"),
            "traffic_schedule_beyond_30s": round(timing.get("traffic_s", DURATION_S) - DURATION_S, 2),
            "collect_and_teardown": timing.get("collect_teardown_s"),
            "analysis_and_report": round(analysis_s, 1),
        },
        "steady_goodput_mbit": round(statistics.mean(steady), 3) if steady else None,
        "steady_goodput_pct_of_limit": round(100 * statistics.mean(steady) / limit, 1) if steady else None,
        "goodput_limit_mbit": round(limit, 3),
        "idle_rtt_ms": rtt.get("measured"),
        "idle_rtt_error_ms": round(rtt["measured"] - rtt["expected"], 2) if rtt.get("measured") else None,
        "udp_rate_mbit": rate.get("measured"),
        "udp_rate_error_pct": round(100 * (rate["measured"] / rate["expected"] - 1), 2)
        if rate.get("measured")
        else None,
        "run_dir": str(run),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"bench-{rundir.utc_stamp()}.json"
    rundir.write_json_atomic(path, figures)
    for key, value in figures.items():
        print(f"{key:32} {value}")
    print(f"written: {path}")
    return figures
