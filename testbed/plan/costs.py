"""What a run costs this host, as measured: the wall time of earlier runs of the same experiment on the same clock.

The estimate (:mod:`testbed.plan.estimate`) models a run in real time: its traffic, its nodes and its
connections. In virtual time a run's wall time is its guest's CPU time instead, from 0.1 to 6 times its
traffic's length by experiment (docs/results.md), so a session priced by the model said 9 min for
what took 2, and packed guests (:mod:`testbed.host.packing`) were balanced on the wrong weights. So the
session asks the results folder. Every complete run whose manifest holds the host's wall time
(``host.run_wall_s``, :mod:`testbed.host.hostload`) gives the ratio of that time to the model's estimate
(its entry in its session's ``plan.json``). Per experiment and clock, the median ratio of the newest
such runs scales the model, apart for the runs that built their network and those that used the one the
run before them left (testbed.guest.keeper): in virtual time the default suite's first run took 15 s and
the others 5. An experiment never measured on the clock keeps the model as it is. A guest's boot is
the median of the newest sessions' (``ready_s`` in their ``session.json``), not the model's 12 s.

The same manifests say how busy each run kept its guest's CPU during its traffic (its ``cpu headroom``
check), when it ran alone: the median per experiment admits runs side by side (testbed.host.packing).

What it prices: the session's wall-time estimate, the split over packed guests, and the ETA a
virtual-time runner prints (its own clock cannot see the host's pace). It never shortens a deadline:
the guests' and the runs' budgets stay on the model (:func:`testbed.guest.runner.run_budget_s`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.plan import estimate
from testbed.plan.plan import PLAN
from testbed.results import rundir
from testbed.scenario.points import RunSpec

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
    """Per experiment, measured wall time over the model's estimate on ``clock``, and how many runs say so:
    ``ratios`` of the runs on a network kept from the run before, ``built`` of those that built theirs;
    ``boot_s``, a guest's measured boot on this clock (None: not measured), over ``boots`` guests;
    ``busy_pct``, how busy runs alone kept their guest's CPU during traffic (median, in %)."""

    clock: str
    ratios: dict[str, float] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    built: dict[str, float] = field(default_factory=dict)
    built_runs: dict[str, int] = field(default_factory=dict)
    boot_s: float | None = None
    boots: int = 0
    busy_pct: dict[str, float] = field(default_factory=dict)

    def cost_s(self, experiment: str, estimate_s: float, builds: bool = False) -> float | None:
        """A run's expected wall time here, measured (for a run that builds its network or not, or the other
        kind where only it was measured); None where this experiment was never measured."""
        kinds = (self.built, self.ratios) if builds else (self.ratios, self.built)
        ratio = next((kind[experiment] for kind in kinds if experiment in kind), None)
        return None if ratio is None else round(estimate_s * ratio, 1)

    def expected_s(self, experiment: str, estimate_s: float, builds: bool = False) -> float:
        """A run's expected wall time here: measured where it was, else the model's estimate."""
        measured_s = self.cost_s(experiment, estimate_s, builds)
        return estimate_s if measured_s is None else measured_s

    def describe(self) -> str:
        """One line for the session's log: what was measured, or that nothing was."""
        boot = f"; a guest's boot {self.boot_s:.1f} s ({self.boots} guests)" if self.boot_s is not None else ""
        if not self.ratios and not self.built:
            return f"costs: no earlier {self.clock}-time run measured here; the estimate is the model's{boot}"
        parts = []
        for name in sorted(set(self.ratios) | set(self.built)):
            kinds = [f"{self.ratios[name]:.2f}x ({self.runs[name]} runs)"] if name in self.ratios else []
            if name in self.built:
                kinds.append(f"{self.built[name]:.2f}x building its network ({self.built_runs[name]} runs)")
            parts.append(f"{name} {', '.join(kinds)}")
        return f"costs: {self.clock} time measured at {'; '.join(parts)} of the model's estimate{boot}"


def builds_network(runs: list[RunSpec], keep_networks: bool = True) -> list[bool]:
    """Which of these runs, in this order in one guest, will build their network: the first, and each whose
    network is not the one before it (testbed.guest.keeper keeps a network for the same description);
    every one when networks are not kept."""
    keys = [repr(estimate.netspec(run)) for run in runs]
    return [not keep_networks or i == 0 or key != keys[i - 1] for i, key in enumerate(keys)]


def measured(results_root: Path, clock: str, experiments: Iterable[str]) -> Costs:
    """The costs of ``experiments`` on ``clock`` from the newest sessions under ``results_root``."""
    wanted = set(experiments)
    kept: dict[str, list[float]] = {name: [] for name in wanted}
    built: dict[str, list[float]] = {name: [] for name in wanted}
    boots: list[float] = []
    busy: dict[str, list[float]] = {name: [] for name in wanted}
    for session in _recent_sessions(Path(results_root)):
        if all(len(values) >= RECENT_RUNS for values in kept.values()) and len(boots) >= RECENT_RUNS:
            break
        record = _session_record(session)
        if (record.get("backend") or {}).get("clock", "real") != clock:
            continue
        boots += _boots(record)
        for experiment, (ratio, builds, busy_pct) in _session_ratios(session, clock, wanted):
            samples = built if builds else kept
            if len(samples[experiment]) < RECENT_RUNS:
                samples[experiment].append(ratio)
            if busy_pct is not None and len(busy[experiment]) < RECENT_RUNS:
                busy[experiment].append(busy_pct)
    medians = [{name: round(statistics.median(v), 3) for name, v in kind.items() if v} for kind in (kept, built)]
    boot_s = round(statistics.median(boots[:RECENT_RUNS]), 1) if boots else None
    return Costs(
        clock,
        medians[0],
        {name: len(kept[name]) for name in medians[0]},
        medians[1],
        {name: len(built[name]) for name in medians[1]},
        boot_s,
        min(len(boots), RECENT_RUNS),
        {name: round(statistics.median(v), 1) for name, v in busy.items() if v},
    )


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


def _session_record(session: Path) -> dict:
    """A session's ``session.json`` (its backend says its clock, so that another clock's runs go unread;
    its timing, its guests' boots); empty when unreadable."""
    try:
        record = rundir.read_json(session / rundir.SESSION, MAX_FILE_BYTES)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and isinstance(record.get("backend") or {}, dict) else {}


def _boots(record: dict) -> list[float]:
    """Each guest's boot in a session (command to the runner's first line): one guest's, or each packed one's."""
    guest = (record.get("timing") or {}).get("guest")
    if not isinstance(guest, dict):
        return []
    timings = [guest] + [shard.get("timing") for shard in guest.get("shards") or [] if isinstance(shard, dict)]
    timings.append(guest.get("alone"))
    ready = [timing.get("ready_s") for timing in timings if isinstance(timing, dict)]
    return [float(r) for r in ready if isinstance(r, int | float) and r > 0]


def _session_ratios(session: Path, clock: str, wanted: set[str]) -> Iterable[tuple[str, tuple]]:
    """(experiment, (measured / estimated, whether it built its network, its guest's CPU busy % alone or None))
    for each complete run of ``wanted`` on ``clock`` in ``session``."""
    try:
        entries = rundir.read_json(session / PLAN, MAX_FILE_BYTES).get("runs", [])[:MAX_PLAN_RUNS]
    except (OSError, ValueError, AttributeError):
        return
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("scenario_name") not in wanted:
            continue
        measured_ratio = _ratio(session, entry, clock)
        if measured_ratio is not None:
            yield entry["scenario_name"], measured_ratio


def _ratio(session: Path, entry: dict, clock: str) -> tuple[float, bool, float | None] | None:
    run_dir, estimate_s = entry.get("run_dir"), entry.get("estimate_s")
    if not isinstance(run_dir, str) or ".." in Path(run_dir).parts or not isinstance(estimate_s, int | float):
        return None  # a plan written by hand or by another version: nothing to learn from it
    try:
        manifest = rundir.read_json(session / run_dir / rundir.MANIFEST, MAX_FILE_BYTES)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    host, backend = manifest.get("host") or {}, manifest.get("backend") or {}
    wall_s = host.get("run_wall_s")
    if manifest.get("status") != "complete" or backend.get("clock", "real") != clock or not wall_s or estimate_s <= 0:
        return None
    kept = (manifest.get("network") or {}).get("kept_from_earlier_runs", True)  # older runs: counted as kept
    return float(wall_s) / float(estimate_s), kept is False, _busy_alone(manifest)


def _busy_alone(manifest: dict) -> float | None:
    """How busy the run kept its guest's CPU during traffic (its cpu headroom check), if it ran alone in it."""
    beside = (manifest.get("backend") or {}).get("side_by_side") or {}
    if not isinstance(beside, dict) or beside.get("runs_at_once", 1) != 1:
        return None
    checks = (manifest.get("fidelity") or {}).get("checks") or []
    found = [c.get("measured") for c in checks if isinstance(c, dict) and c.get("name") == "cpu headroom"]
    return float(found[0]) if found and isinstance(found[0], int | float) else None
