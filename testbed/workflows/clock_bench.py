"""``testbed bench --part clock``: what virtual time buys, and whether it answers as real time does.

Runs a suite (the default suite unless told another) twice in new sessions on a guest, alone in real time
and then in virtual time (QEMU's icount), at the same seeds, and prints per experiment the seconds of
traffic per second of wall clock each way (boot included) and the twin-by-twin equivalence of
:mod:`analysis.verdicts.equivalence` (paired TOST per metric, the claims' verdicts). Numbers, not assertions:
printed and written to ``bench/clock-<UTC time>.json``; nothing is recorded for ``--clock auto`` (that is
``testbed equivalence --record``'s, on sessions a person chose to decide by).
"""

from __future__ import annotations

from pathlib import Path

from testbed import PROJECT
from testbed.host.session import run_session
from testbed.scenario.suite import find_suite, load_suite
from testbed.workflows import equivalence
from testbed.workflows.bench import write_figures

SUITE = "default"


def bench_clock(kernel_version: str | None = None, suite_name: str = SUITE, out_dir: Path = PROJECT / "bench") -> dict:
    suite = load_suite(find_suite(suite_name, PROJECT / "scenarios" / "suites"), PROJECT / "scenarios")
    sessions, failed = {}, 0
    for clock in ("real", "virtual"):
        result = run_session(
            suite,
            backend="guest",
            kernel_version=kernel_version,
            force=True,
            clock=clock,
            results_root=out_dir / "results" / f"clock-{clock}",
        )
        sessions[clock], failed = equivalence.load_side(result.directory), failed + len(result.failed)
    real, virtual = sessions["real"], sessions["virtual"]
    results = equivalence.judge_twins(real, virtual)
    figures = {
        "suite": suite_name,
        "traffic_s_per_wall_s_real": round(real.speed, 3),
        "traffic_s_per_wall_s_virtual": round(virtual.speed, 3),
        "speedup": round(virtual.speed / real.speed, 2) if real.speed else None,
        "wall_s": {"real": round(real.wall_s, 1), "virtual": round(virtual.wall_s, 1)},
        "experiments": {
            r.experiment: {"equivalent": r.equivalent, "tests": [m.line() for m in r.metrics], "problems": r.problems}
            for r in results
        },
        "sessions": {clock: str(side.directory) for clock, side in sessions.items()},
    }
    return write_figures(out_dir, "clock", {**figures, "status": "incomplete" if failed else "complete"})
