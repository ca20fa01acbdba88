"""``make bench``: how fast and how faithful the testbed is here. Numbers, not assertions.

One 30 s Reno flow over the default path (10 Mbit/s, base RTT 100 ms, queue = 1 BDP), run the
way ``make experiment`` runs (guest unless the local kernel has netem), then:

* command to guest-ready: from ``testbed`` starting the guest to the runner's first line;
* overhead of the run: its wall time minus its 30 s of traffic, split into guest boot, topology
  setup, fidelity check, collection + teardown, and analysis;
* steady-state goodput as a share of the 9.56 Mbit/s limit (receiver intervals from 10 s on);
* idle RTT error (ping min vs configured) and the UDP-probed bottleneck rate error;
* KVM or TCG.

``scale`` (``make bench``'s second part, one guest for all of it):

* M = 200 forward flows with RTTs spread in [21.15, 250] ms plus 10 reverse New Reno flows on a
  10 Mbit/s bottleneck (``many_flows``: 5 nodes, a per-destination delay per flow): setup time (topology,
  then delay calibration and fidelity probes) and bottleneck utilization (bytes the receivers got
  over the traffic time, against the TCP limit);
* a 10-hop parking lot (C1 + one forward and one reverse cross flow per hop, 43 nodes): setup time;
* each loss model on a 10 Mbit/s dumbbell: realized vs configured loss (netem's counters for
  Bernoulli, Gilbert-Elliott and 4-state, the BPF channel's per-state counters for the timed model).

Printed and written to ``bench/bench-<UTC time>.json`` (and ``bench/scale-<UTC time>.json``).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis.raw.loaders import load_tc_stats
from analysis.raw.pcap import TCPTRACE_FIELDS, tcptrace_connection
from testbed import PROJECT
from testbed.host.session import run_session
from testbed.plan.estimate import netspec as _netspec
from testbed.report.pages.sessionpage import write_session_report
from testbed.results import rundir
from testbed.results.manifest import Manifest, read_manifest
from testbed.scenario.load import scenario_from_dict
from testbed.scenario.points import Point, RunSpec, ScenarioFile
from testbed.scenario.schema import Scenario
from topologies.lossmodel import FourStateLoss
from topologies.params import tcp_goodput_limit_mbit
from topologies.shaping import LOSSY_NETEM

DURATION_S = 30
STEADY_FROM_S = 10
RATE_MBIT = 10


SCALE_FLOWS = 200
SCALE_DURATION_S = 30
LOT_HOPS = 10
LOSS_DURATION_S = 20
#: loss model -> (the link's loss setting, the loss it should realize in %)
LOSS_MODELS = {
    "bernoulli 2 %": ({"loss_pct": 2}, 2.0),
    "gilbert_elliott p 2 %, r 40 %, Bad 100 %": (
        {"loss": {"model": "gilbert_elliott", "p_pct": 2, "r_pct": 40, "bad_loss_pct": 100}},
        100 * 2 / 42,
    ),
    "four_state p13 2 %, p31 60 %, p32 20 %, p23 60 %, p14 1 %": (
        {"loss": {"model": "four_state", "p13_pct": 2, "p31_pct": 60, "p32_pct": 20, "p23_pct": 60, "p14_pct": 1}},
        FourStateLoss(p13_pct=2, p31_pct=60, p32_pct=20, p23_pct=60, p14_pct=1).stationary_loss_pct(),
    ),
    "timed_two_state exp. 1 s / 0.5 s, 0 % / 10 %": (
        {
            "loss": {
                "model": "timed_two_state",
                "good_s": 1,
                "bad_s": 0.5,
                "durations": "exponential",
                "good_loss_pct": 0,
                "bad_loss_pct": 10,
            }
        },
        None,
    ),
}


def scale_points():

    def point(name: str, data: dict) -> Point:
        (resolved,) = scenario_from_dict(data, name=name).points
        return Point(name, name, {}, resolved.scenario)

    points = [
        point(
            "many-flows",
            {
                "topology": {"name": "many_flows", "bottleneck": {"rate_mbit": RATE_MBIT, "queue_bdp": 1}},
                "flows": [
                    {"cc": "reno", "count": SCALE_FLOWS, "rtt_ms": 20, "rtt_max_ms": 250},
                    {"cc": "reno", "count": 10, "rtt_ms": 20, "rtt_max_ms": 250, "direction": "reverse"},
                ],
                "duration_s": SCALE_DURATION_S,
            },
        ),
        point(
            "parking-lot-10",
            {
                "topology": {
                    "name": "parking_lot",
                    "hops": LOT_HOPS,
                    "hop": {"rate_mbit": RATE_MBIT, "delay_ms": 10, "queue_pkts": 125},
                    "access": {"delay_ms": 20},
                },
                "flows": [
                    {"cc": "reno", "path": "through"},
                    {"cc": "reno", "path": "hop"},
                    {"cc": "reno", "path": "hop", "direction": "reverse"},
                ],
                "duration_s": 10,
            },
        ),
    ]
    for i, (label, (loss, _)) in enumerate(LOSS_MODELS.items()):
        points.append(
            point(
                f"loss-{i}",
                {
                    "description": label,
                    "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": RATE_MBIT, "queue_pkts": 100, **loss}},
                    "flows": [{"cc": "cubic", "rtt_ms": 20}],
                    "duration_s": LOSS_DURATION_S,
                },
            )
        )
    return points


def bench_scale(kernel_version: str | None = None, out_dir: Path = PROJECT / "bench") -> dict:
    """The scale and loss-model figures (see the module's docstring)."""

    combined = ScenarioFile("bench-scale", PROJECT, None, "make bench: scale and loss models", scale_points())
    result = run_session(combined, kernel_version=kernel_version, results_root=out_dir / "results", force=True)
    figures: dict = {"status": "complete" if not result.failed else "incomplete", "runs": {}}
    for run in result.runs:
        manifest = read_manifest(run)
        timing = manifest.timing
        entry = {
            "status": manifest.status,
            "reason": manifest.reason,
            "nodes": None,
            "setup_s": timing.get("setup_s"),
            "fidelity_check_s": timing.get("fidelity_check_s"),
            "run_dir": str(run),
        }
        if manifest.status == "complete":
            entry.update(_scale_figures(run, manifest))
        figures["runs"][run.parent.name] = entry
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"scale-{rundir.utc_stamp()}.json"
    rundir.write_json_atomic(path, figures)
    for name, entry in figures["runs"].items():
        shown = {k: v for k, v in entry.items() if k != "run_dir"}
        print(f"{name:16} {shown}")
    print(f"written: {path}")
    return figures


def _scale_figures(run: Path, manifest: Manifest) -> dict:

    spec = RunSpec(manifest.scenario, manifest.point_id, {}, manifest.seed, Scenario.model_validate(manifest.resolved))
    out: dict = {"nodes": len(_netspec(spec).nodes)}
    name = run.parent.name
    if name == "many-flows":
        forward = [c for c in manifest.connections or [] if c["direction"] == "forward"]
        received, starts, ends = 0, [], []
        for c in forward:
            server = json.loads((run / "raw" / f"iperf3-{c['id']}-server.json").read_text())
            received += server["end"]["sum_received"]["bytes"]
            starts.append(server["start"]["timestamp"]["timesecs"])
            ends.append(starts[-1] + server["end"]["sum_received"]["seconds"])
        # over the time the forward flows actually ran (first start to last end), not the nominal 30 s
        window_s = max(ends) - min(starts)
        traffic_s = manifest.timing.get("traffic_s", SCALE_DURATION_S)
        out["forward_goodput_mbit"] = round(received * 8 / 1e6 / window_s, 3)
        out["flows_window_s"] = round(window_s, 1)
        out["utilization_pct_of_tcp_limit"] = round(
            100 * received * 8 / 1e6 / window_s / tcp_goodput_limit_mbit(RATE_MBIT), 1
        )
        out["traffic_wall_s"] = traffic_s
        lag = manifest.timing.get("data_start_lag_s") or {}
        out["data_start_lag_s"] = [min(lag.values()), max(lag.values())] if lag else None
        rtt = [c for c in manifest.fidelity.checks if c["name"].startswith("base RTT")]
        out["rtt_checks_ok"] = f"{sum(c['ok'] for c in rtt)}/{len(rtt)}"
        out["rtt_max_abs_error_ms"] = round(max(abs(c["measured"] - c["expected"]) for c in rtt if c["measured"]), 2)
    elif name.startswith("loss-"):
        label = manifest.resolved["description"]
        loss, expected = LOSS_MODELS[label]
        out["model"] = label
        if "timed_two_state" in label:
            data = json.loads((run / "raw" / "loss-rr-rr-eth1.json").read_text())
            out["per_state"] = {
                kind: {
                    "configured_pct": v["configured_loss_pct"],
                    "packets": v["seen"],
                    "realized_pct": None if v["realized_loss_pct"] is None else round(v["realized_loss_pct"], 3),
                }
                for kind, v in data["per_state"].items()
            }
        else:
            raw = run / "raw"
            tc = load_tc_stats(raw / "tc-stats.json", before=raw / "tc-stats-before.json")
            netem = tc[
                (tc["node"] == "rr")
                & (tc["intf"] == "rr-eth1")
                & (tc["kind"] == "netem")
                & (tc["handle"] == LOSSY_NETEM)
            ].iloc[0]
            seen = int(netem["packets"] + netem["drops"])
            out.update(
                {
                    "configured_pct": round(expected, 3),
                    "realized_pct": round(100 * netem["drops"] / seen, 3),
                    "packets": seen,
                }
            )
    return out


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

    write_session_report(result.directory)
    analysis_s = time.monotonic() - runs_done
    wall_s = time.monotonic() - started

    (run,) = result.runs
    figures = _basic_figures(run, rundir.read_json(result.directory / rundir.SESSION), wall_s, analysis_s)
    return write_figures(out_dir, "bench", figures)


def _basic_figures(run: Path, session: dict, wall_s: float, analysis_s: float) -> dict:
    """Where the basic run's time went and how close its emulation came (module doc)."""
    manifest = read_manifest(run)
    timing = manifest.timing
    guest_timing = session.get("timing", {}).get("guest", {})
    server = json.loads((run / "raw" / "iperf3-c0-server.json").read_text())
    steady = [i["sum"]["bits_per_second"] / 1e6 for i in server["intervals"] if i["sum"]["start"] >= STEADY_FROM_S]
    checks = {c["name"]: c for c in (manifest.fidelity.checks if manifest.fidelity else [])}
    rtt = checks.get("base RTT pair 0", {})
    rate = checks.get("bottleneck rate forward", {})
    limit = tcp_goodput_limit_mbit(RATE_MBIT)
    return {
        "status": manifest.status,
        "backend": manifest.backend.kind,
        "accel": manifest.backend.accel or "none (local kernel)",  # the local backend records none
        "kernel": manifest.kernel.release,
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


def write_figures(out_dir: Path, prefix: str, figures: dict, quiet: tuple[str, ...] = ()) -> dict:
    """Print the figures (but the ``quiet`` keys) and write them to ``out_dir/<prefix>-<UTC time>.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{prefix}-{rundir.utc_stamp()}.json"
    rundir.write_json_atomic(path, figures)
    for key, value in figures.items():
        if key not in quiet:
            print(f"{key:32} {value}")
    print(f"written: {path}")
    return figures


PCAP_RATE_MBIT = 100
PCAP_DURATION_S = 90
PCAP_REPEATS = 3
#: runs in a child process so that its peak RSS is the analyzer's own
_TIMED_ANALYSIS = """
import json, resource, sys, time
from pathlib import Path
from analysis.raw.pcap import account_pcap
from analysis.raw.pcapfast import account_pcap_fast
accounting = account_pcap_fast if sys.argv[1] == "fast" else account_pcap
started = time.perf_counter()
result = accounting(Path(sys.argv[2]))
elapsed = time.perf_counter() - started
started = time.perf_counter()
accounting(Path(sys.argv[2]))  # again, as the next capture of a report is: compiled code loaded, file cached
again = time.perf_counter() - started
rows = {f"{s.src}:{s.sport}": {k: v for k, v in s.result().items() if isinstance(v, int | float)}
        for s in result.directions.values()}
print(json.dumps({"s": elapsed, "again_s": again, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "records": result.records, "directions": rows}))
"""


def _timed(command: list[str]) -> tuple[float, float, str]:
    """Wall time, the child's peak RSS (MB: the kernel's VmHWM of the child after exec, read until it
    exits; wait4's ru_maxrss would count the forked Python before exec) and its output."""

    peak_kb = 0
    with tempfile.TemporaryFile(mode="w+") as out:
        started = time.perf_counter()
        with subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL) as child:
            status = Path(f"/proc/{child.pid}/status")
            while child.poll() is None:
                try:
                    for line in status.read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak_kb = max(peak_kb, int(line.split()[1]))
                except (OSError, ValueError, IndexError):
                    pass
                time.sleep(0.002)
        elapsed = time.perf_counter() - started
        out.seek(0)
        text = out.read()
    if child.returncode != 0:
        raise ValueError(f"{command[0]} exited with {child.returncode}")
    return elapsed, peak_kb / 1024, text


def bench_pcap(out_dir: Path = PROJECT / "bench") -> dict:
    """The pcap analysis against ``tcptrace -l -n`` on a capture of about a million packets that the
    testbed makes here: two Reno flows through a 100 Mbit/s dumbbell in network namespaces on the host
    kernel (no netem needed), 90 s. Best of three for each tool; the peak RSS of each (tcptrace's from
    its own process, ours from a child process that imports only the analysis); and the largest
    per-flow difference between our numbers and tcptrace's. Ours three ways: the child process's wall
    time (Python, numpy, pandas and numba start included), the first analysis in it (numba's compiled
    code loaded from its cache, or compiled on the very first use), and the same capture once more
    in it (what each further capture of a report costs)."""

    if shutil.which("tcptrace") is None:
        raise ValueError("tcptrace is not installed: run 'make setup'")
    scenario = scenario_from_dict(
        {
            "description": "make bench: a capture of about a million packets for the pcap analysis",
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": PCAP_RATE_MBIT, "queue_pkts": 100}},
            "flows": [{"cc": "reno", "rtt_ms": 0, "count": 2}],
            "duration_s": PCAP_DURATION_S,
        },
        name="bench-pcap",
    )
    result = run_session(scenario, backend="local", results_root=out_dir / "results")
    (run,) = result.runs
    manifest = read_manifest(run)
    pcap = run / "raw" / "rl.pcap"
    tcptrace = [_timed(["tcptrace", "-l", "-n", str(pcap)]) for _ in range(PCAP_REPEATS)]
    python = sys.executable
    fast = [_timed([python, "-c", _TIMED_ANALYSIS, "fast", str(pcap)]) for _ in range(PCAP_REPEATS)]
    streaming = _timed([python, "-c", _TIMED_ANALYSIS, "streaming", str(pcap)])
    figures = _pcap_figures(manifest, pcap, tcptrace, fast, streaming)
    write_figures(out_dir, "pcap", figures, quiet=("differences",))
    subprocess.run(["rm", "-f", str(pcap)], check=False)  # a hundred MB: the figures are what is kept
    return figures


def _pcap_figures(manifest, pcap: Path, tcptrace: list, fast: list, streaming: tuple) -> dict:
    """Best times, peak memory and the largest per-flow difference from tcptrace (bench_pcap's doc)."""
    ours = json.loads(fast[0][2])
    differences = _tcptrace_differences(manifest, ours, tcptrace[0][2])
    best_tcptrace = min(t[0] for t in tcptrace)
    best_fast = min(t[0] for t in fast)
    return {
        "status": manifest.status,
        "capture": str(pcap),
        "capture_mb": round(pcap.stat().st_size / 1e6, 1),
        "records": ours["records"],
        "tcptrace_s": round(best_tcptrace, 3),
        "tcptrace_peak_rss_mb": round(max(t[1] for t in tcptrace), 1),
        "ours_fast_s": round(best_fast, 3),
        "ours_fast_in_process_s": round(min(json.loads(t[2])["s"] for t in fast), 3),
        "ours_fast_again_s": round(min(json.loads(t[2])["again_s"] for t in fast), 3),
        "ours_fast_peak_rss_mb": round(max(json.loads(t[2])["rss_mb"] for t in fast), 1),
        "ours_streaming_s": round(streaming[0], 3),
        "speed_vs_tcptrace": round(best_tcptrace / best_fast, 2),
        "speed_vs_tcptrace_in_process_again": round(best_tcptrace / min(json.loads(t[2])["again_s"] for t in fast), 2),
        "largest_relative_difference": max(differences.values()) if differences else None,
        "differences": {k: round(v, 6) for k, v in differences.items()},
    }


def _tcptrace_differences(manifest, ours: dict, tcptrace_output: str) -> dict[str, float]:
    """Per connection and tcptrace field, the relative difference between our count and tcptrace's."""

    differences = {}
    for conn in manifest.connections or []:
        theirs = tcptrace_connection(tcptrace_output, conn["client_port"])
        mine = ours["directions"][f"{conn['sender_ip']}:{conn['client_port']}"]
        for label, name in TCPTRACE_FIELDS.items():
            reference = theirs[label]
            differences[f"{conn['id']} {label}"] = (
                0.0 if mine[name] == reference else abs(mine[name] - reference) / max(abs(reference), 1e-9)
            )
    return differences
