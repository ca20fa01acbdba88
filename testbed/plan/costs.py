"""What a run costs this host, as measured: the wall time of earlier runs of the same experiment on the same clock.

The estimate (:mod:`testbed.plan.estimate`) models a run in real time: its traffic, its nodes and its
connections. In virtual time a run's wall time is its guest's CPU time instead, from 0.1 to 6 times its
traffic's length by experiment (docs/results.md), so a session priced by the model said 9 min for
what took 2, and packed guests (:mod:`testbed.host.packing`) were balanced on the wrong weights. So the
session asks the results folder. Every complete run whose manifest holds the host's wall time
(``host.run_wall_s``, :mod:`testbed.host.hostload`) gives the ratio of that time to the model's estimate
(its entry in its session's ``plan.json``). Per experiment and clock, the median ratio of the newest
such runs scales the model. An experiment never measured on the clock keeps the model as it is.

What it prices: the session's wall-time estimate, the split over packed guests, and the ETA a
virtual-time runner prints (its own clock cannot see the host's pace). It never shortens a deadline:
the guests' and the runs' budgets stay on the model (:func:`testbed.guest.runner.run_budget_s`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.plan.plan import PLAN
from testbed.results import rundir

#: the newest sessions read per folder of the results root (one folder per scenario or suite), and in all
RECENT_SESSIONS = 8
MAX_SESSIONS = 40
#: the newest measured runs an experiment's ratio is the median of
RECENT_RUNS = 40
#: the most plan.json entries read per session (a session of a runaway sweep is not read whole)
MAX_PLAN_RUNS = 2000
#: the largest session, plan or manifest file read (a 200-flow run's manifest is 0.25 MB, a plan 2.2 kB per
#: run: some 3,800 runs fit); a larger one, a link or a FIFO is skipped as unreadable (rundir.read_bounded),
#: so that a results folder can neither hang the session's start nor fill its memory
MAX_FILE_BYTES = 8 << 20


@dataclass(frozen=True)
class Costs:
    """Per experiment, measured wall time over the model's estimate on ``clock``, and how many runs say so."""

    clock: str
    ratios: dict[str, float] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)

    def cost_s(self, experiment: str, estimate_s: float) -> float | None:
        """A run's expected wall time here, measured; None where this experiment was never measured."""
        ratio = self.ratios.get(experiment)
        return None if ratio is None else round(estimate_s * ratio, 1)

    def expected_s(self, experiment: str, estimate_s: float) -> float:
        """A run's expected wall time here: measured where it was, else the model's estimate."""
        measured_s = self.cost_s(experiment, estimate_s)
        return estimate_s if measured_s is None else measured_s

    def describe(self) -> str:
        """One line for the session's log: what was measured, or that nothing was."""
        if not self.ratios:
            return f"costs: no earlier {self.clock}-time run measured here; the estimate is the model's"
        parts = [f"{name} {self.ratios[name]:.2f}x ({self.runs[name]} runs)" for name in sorted(self.ratios)]
        return f"costs: {self.clock} time measured at {', '.join(parts)} of the model's estimate"


def measured(results_root: Path, clock: str, experiments: Iterable[str]) -> Costs:
    """The costs of ``experiments`` on ``clock`` from the newest sessions under ``results_root``."""
    wanted = set(experiments)
    samples: dict[str, list[float]] = {name: [] for name in wanted}
    for session in _recent_sessions(Path(results_root)):
        if all(len(values) >= RECENT_RUNS for values in samples.values()):
            break
        if _session_clock(session) != clock:
            continue
        for experiment, ratio in _session_ratios(session, clock, wanted):
            if len(samples[experiment]) < RECENT_RUNS:
                samples[experiment].append(ratio)
    ratios = {name: round(statistics.median(values), 3) for name, values in samples.items() if values}
    return Costs(clock, ratios, {name: len(samples[name]) for name in ratios})


def measured_for(results_root: Path, backend: dict, runs: Iterable) -> Costs:
    """The costs of these runs' experiments on the clock of ``backend`` (a session's record of it)."""
    return measured(results_root, backend.get("clock", "real"), {run.scenario_name for run in runs})


def _recent_sessions(results_root: Path) -> list[Path]:
    """Session folders, the newest first (their names begin with the UTC time they started)."""
    if not results_root.is_dir():
        return []
    found = []
    for folder in results_root.iterdir():
        if folder.is_dir() and not folder.is_symlink():
            sessions = [s for s in folder.iterdir() if (s / PLAN).is_file() and not s.is_symlink()]
            found += sorted(sessions, key=lambda s: s.name, reverse=True)[:RECENT_SESSIONS]
    return sorted(found, key=lambda s: s.name, reverse=True)[:MAX_SESSIONS]


def _session_clock(session: Path) -> str | None:
    """The clock a session ran on (its ``session.json``'s backend), so that another clock's runs go unread."""
    try:
        backend = rundir.read_json(session / rundir.SESSION, MAX_FILE_BYTES).get("backend") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return backend.get("clock", "real")


def _session_ratios(session: Path, clock: str, wanted: set[str]) -> Iterable[tuple[str, float]]:
    """(experiment, measured / estimated) for each complete run of ``wanted`` on ``clock`` in ``session``."""
    try:
        entries = rundir.read_json(session / PLAN, MAX_FILE_BYTES).get("runs", [])[:MAX_PLAN_RUNS]
    except (OSError, ValueError, AttributeError):
        return
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("scenario_name") not in wanted:
            continue
        ratio = _ratio(session, entry, clock)
        if ratio is not None:
            yield entry["scenario_name"], ratio


def _ratio(session: Path, entry: dict, clock: str) -> float | None:
    run_dir, estimate_s = entry.get("run_dir"), entry.get("estimate_s")
    if not isinstance(run_dir, str) or ".." in Path(run_dir).parts or not isinstance(estimate_s, int | float):
        return None  # a plan written by hand or by another version: nothing to learn from it
    try:
        manifest = rundir.read_json(session / run_dir / rundir.MANIFEST, MAX_FILE_BYTES)
    except (OSError, ValueError):
        return None
    host, backend = manifest.get("host") or {}, manifest.get("backend") or {}
    wall_s = host.get("run_wall_s")
    if manifest.get("status") != "complete" or backend.get("clock", "real") != clock or not wall_s or estimate_s <= 0:
        return None
    return float(wall_s) / float(estimate_s)
