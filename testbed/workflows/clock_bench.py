"""``testbed bench --part clock``: what virtual time and runs side by side buy, and whether they answer as
runs alone in real time do.

Runs a suite (the default suite unless told another) four times in new sessions, at the same seeds: in one
guest in real time, one run at a time; in one guest in real time, two runs side by side (``--side-by-side
2``: :func:`testbed.host.packing.run_side_by_side`); in one guest in virtual time (QEMU's icount); and packed
in virtual time (``--guests``, one guest per core: :mod:`testbed.host.packing`). It prints the seconds of
traffic per second of wall clock each way (boot included) and per experiment the twin-by-twin equivalence of
:mod:`analysis.verdicts.equivalence` (paired TOST per metric, the claims' verdicts): side by side and virtual
time against real time alone, and packed guests against one guest alone, and each experiment's seconds of
traffic per second of
its runs' wall time on the host each way (``host.run_wall_s``: boot and the other experiments not counted; a
packed guest's runs on its own core). Numbers, not assertions:
printed and written to ``bench/clock-<UTC time>.json``; nothing is recorded for ``--clock auto`` (that is
``testbed equivalence --record``'s, on sessions a person chose to decide by).
"""

from __future__ import annotations

import os
from pathlib import Path

from testbed import PROJECT
from testbed.host.session import run_session
from testbed.scenario.suite import find_suite, load_suite
from testbed.workflows import equivalence
from testbed.workflows.bench import write_figures

SUITE = "default"
#: packed guests, one per core (fewer on a host with fewer cores)
PACKED_GUESTS = 2


def bench_clock(kernel_version: str | None = None, suite_name: str = SUITE, out_dir: Path = PROJECT / "bench") -> dict:
    suite = load_suite(find_suite(suite_name, PROJECT / "scenarios" / "suites"), PROJECT / "scenarios")
    guests = min(PACKED_GUESTS, len(os.sched_getaffinity(0)))
    sessions, failed = {}, 0
    ways = (("real", "real", 1, 1), ("side_by_side", "real", 1, 2), ("virtual", "virtual", 1, 1))
    for way, clock, packed, at_once in (*ways, ("packed", "virtual", guests, 1)):
        result = run_session(
            suite,
            backend="guest",
            kernel_version=kernel_version,
            force=True,
            clock=clock,
            guests=packed,
            side_by_side=at_once,
            results_root=out_dir / "results" / f"clock-{way}",
        )
        sessions[way], failed = equivalence.load_side(result.directory), failed + len(result.failed)
    real, virtual, packed = sessions["real"], sessions["virtual"], sessions["packed"]
    figures = {
        "suite": suite_name,
        **{f"traffic_s_per_wall_s_{way}": round(side.speed, 3) for way, side in sessions.items()},
        "speedup": round(virtual.speed / real.speed, 2) if real.speed else None,
        "side_by_side_speedup": round(sessions["side_by_side"].speed / real.speed, 2) if real.speed else None,
        "packed_guests": guests,
        "packed_speedup": round(packed.speed / real.speed, 2) if real.speed else None,
        "wall_s": {way: round(side.wall_s, 1) for way, side in sessions.items()},
        # per experiment, over its runs only (host.run_wall_s): packed guests each count their own core's time
        "traffic_s_per_run_wall_s": _per_experiment(sessions),
        "experiments": _judged(equivalence.judge_twins(real, virtual)),
        "side_by_side_against_alone": _judged(equivalence.judge_twins(real, sessions["side_by_side"])),
        "packed_against_alone": _judged(equivalence.judge_twins(virtual, packed)),
        "sessions": {way: str(side.directory) for way, side in sessions.items()},
    }
    return write_figures(out_dir, "clock", {**figures, "status": "incomplete" if failed else "complete"})


def _per_experiment(sessions: dict) -> dict:
    names = sorted(set().union(*(side.run_speeds for side in sessions.values())))
    return {name: {way: side.run_speeds.get(name) for way, side in sessions.items()} for name in names}


def _judged(results: list) -> dict:
    return {
        r.experiment: {"equivalent": r.equivalent, "tests": [m.line() for m in r.metrics], "problems": r.problems}
        for r in results
    }
