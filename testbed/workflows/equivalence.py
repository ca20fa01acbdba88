"""``testbed equivalence REFERENCE CANDIDATE``: is a faster way of running equivalent to the reference?

The reference is a session alone in real time; the candidate the same experiments at the same seeds run
the faster way (``--clock virtual``, ``--side-by-side N``). Each experiment is judged by
:mod:`analysis.verdicts.equivalence` (paired TOST per metric, the claims' verdicts on both, untrustworthy runs);
the table is printed and written beside the candidate (``equivalence.md``), with each side's speed
(seconds of traffic per second of wall clock). ``--record`` writes the result into the file the faster
way's ``auto`` reads: ``scenarios/timebase/equivalence.yaml`` for virtual time (``--clock auto``,
:mod:`testbed.host.timebase`), ``scenarios/timebase/side-by-side.yaml`` for runs side by side
(``--side-by-side auto``, :mod:`testbed.host.slotchoice`). An experiment shown equivalent runs that way
from then on; one that failed keeps the old way, and the file says why.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from analysis.kernels import regression
from analysis.verdicts import equivalence
from analysis.verdicts.flowrows import flow_rows
from testbed.host import slotchoice, timebase
from testbed.report.pages.sessionpage import write_session_report
from testbed.results import rundir


@dataclass
class AnalysedSession:
    """One session, analysed: its trustworthy runs' metrics, untrustworthy counts and verdicts by experiment."""

    directory: Path
    clock: str
    wall_s: float
    traffic_s: float
    guest: dict = field(default_factory=dict)  # how a virtual-time guest ran (timebase.GUEST_KEYS)
    metrics: dict[str, pd.DataFrame] = field(default_factory=dict)
    untrustworthy: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, dict[str, str]] = field(default_factory=dict)  # experiment -> claim -> verdict
    #: per experiment, seconds of traffic per second of the host's wall clock over its runs (boot and the
    #: other experiments' runs not counted), where the host measured them (``host.run_wall_s``)
    run_speeds: dict[str, float] = field(default_factory=dict)
    #: the most runs that ran at once side by side in one guest (1: each alone), and that guest's
    #: accelerator and vCPUs (slotchoice.GUEST_KEYS)
    slots: int = 1
    machine: dict = field(default_factory=dict)

    @property
    def way(self) -> str:
        """How its runs ran, as the table's title says it."""
        if self.clock == "virtual":
            return "virtual time"
        return f"{self.slots} side by side in real time" if self.slots > 1 else "alone in real time"

    @property
    def speed(self) -> float:
        """Seconds of traffic per second of wall clock (boot included)."""
        return self.traffic_s / self.wall_s if self.wall_s else float("nan")


def load_side(session: Path) -> AnalysedSession:
    report = write_session_report(session)
    info = rundir.read_json(session / rundir.SESSION)
    timing = info.get("timing") or {}
    backend = info.get("backend") or {}
    side = AnalysedSession(
        session,
        backend.get("clock", "real"),
        float(timing.get("runs_wall_s") or 0),
        sum(float((a.manifest.get("resolved") or {}).get("duration_s") or 0) for a in report.runs),
        {key: backend.get(key) for key in timebase.GUEST_KEYS},
    )
    side.run_speeds = run_speeds([analysed.manifest for analysed in report.runs])
    side.slots = max((_runs_at_once(analysed.manifest) for analysed in report.runs), default=1)
    side.machine = {key: backend.get(key) for key in slotchoice.GUEST_KEYS}
    by_experiment: dict[str, list] = {}
    for analysed in report.runs:
        experiment = analysed.manifest.get("scenario") or "?"
        trusted = ((analysed.manifest.get("fidelity") or {}).get("trustworthy")) is True
        side.untrustworthy[experiment] = side.untrustworthy.get(experiment, 0) + (not trusted)
        if trusted:
            by_experiment.setdefault(experiment, []).append(analysed)
    for experiment, analyses in by_experiment.items():
        metrics = regression.run_metrics(flow_rows(analyses))
        latency = regression.latency_metrics(analyses)
        frame = pd.concat([metrics, latency], ignore_index=True) if not latency.empty else metrics
        frame["point"] = [_bare_point(point, experiment) for point in frame["point"]]
        side.metrics[experiment] = frame
    for verdict in report.verdicts:
        side.verdicts.setdefault(verdict.claim.experiment, {})[verdict.claim.id] = verdict.label
    return side


def _runs_at_once(manifest: dict) -> int:
    return int(((manifest.get("backend") or {}).get("side_by_side") or {}).get("runs_at_once") or 1)


def _bare_point(point: str, experiment: str) -> str:
    """A point's id without the suite's ``experiment[@profile].`` prefix: a suite's run twins a plain session's."""
    head, dot, rest = str(point).partition(".")
    return rest if dot and head.split("@")[0] == experiment else str(point)


def judge_twins(reference: AnalysedSession, candidate: AnalysedSession) -> list[equivalence.ExperimentEquivalence]:
    found = []
    for experiment in sorted(set(reference.untrustworthy) | set(candidate.untrustworthy)):
        empty = regression.run_metrics(pd.DataFrame())
        result = equivalence.compare(
            reference.metrics.get(experiment, empty), candidate.metrics.get(experiment, empty), experiment
        )
        result.untrustworthy = (reference.untrustworthy.get(experiment, 0), candidate.untrustworthy.get(experiment, 0))
        ours, theirs = reference.verdicts.get(experiment, {}), candidate.verdicts.get(experiment, {})
        result.verdicts = {
            claim: (ours.get(claim, "not judged"), theirs.get(claim, "not judged"))
            for claim in sorted(set(ours) | set(theirs))
        }
        found.append(result)
    return found


def run_speeds(manifests: list[dict]) -> dict[str, float]:
    """Per experiment, its runs' seconds of traffic per second of the host's wall clock (complete runs the
    host timed: ``host.run_wall_s``, testbed.host.hostload)."""
    sums: dict[str, list[float]] = {}
    for manifest in manifests:
        wall_s = (manifest.get("host") or {}).get("run_wall_s")
        traffic_s = (manifest.get("resolved") or {}).get("duration_s")
        if manifest.get("status") == "complete" and wall_s and traffic_s:
            total = sums.setdefault(manifest.get("scenario") or "?", [0.0, 0.0])
            total[0], total[1] = total[0] + float(traffic_s), total[1] + float(wall_s)
    return {experiment: round(traffic / wall, 3) for experiment, (traffic, wall) in sorted(sums.items())}


def judge_control(reference: AnalysedSession, control: AnalysedSession) -> dict[str, equivalence.ExperimentEquivalence]:
    """The reference's way against itself again at the same seeds (the control), by experiment: how far two
    sessions of the reference's own way stand apart. It decides nothing (the margins were fixed before any
    run): it says how much of a candidate's "not shown" the reference's own spread accounts for."""
    if control.way != reference.way:
        raise ValueError(
            f"--control is the reference's way run again at the same seeds: the reference ran {reference.way}, "
            f"the control {control.way}"
        )
    return {result.experiment: result for result in judge_twins(reference, control)}


def _answer(result: equivalence.ExperimentEquivalence) -> str:
    return "equivalent" if result.equivalent else "not shown equivalent: " + "; ".join(result.problems)


def text(
    reference: AnalysedSession,
    candidate: AnalysedSession,
    results: list[equivalence.ExperimentEquivalence],
    control: dict[str, equivalence.ExperimentEquivalence] | None = None,
) -> str:
    """The answer first (each experiment equivalent or not, and why, and the control's where there is one),
    then every test and the speeds."""
    control = control or {}
    lines = [f"# {candidate.way} against {reference.way}, twin runs at the same seeds", ""]
    for result in results:
        lines.append(f"- **{result.experiment}**: {_answer(result)}")
        if result.experiment in control:
            lines.append(f"  - control, {reference.way} run again: {_answer(control[result.experiment])}")
    lines += [
        "",
        "| experiment | metric | twins | change | 90 % interval | margin | TOST p | equivalent | twins to show it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result, label in [*((r, "") for r in results), *((r, " (control)") for r in control.values())]:
        for m in result.metrics:
            lines.append(
                f"| {result.experiment}{label} | {m.metric} | {m.pairs} | {m.change:+.1%} | {m.low:+.1%} to "
                f"{m.high:+.1%} | ±{m.margin:.0%} | {m.p_tost:.2g} | {'yes' if m.equivalent else 'no'} | "
                f"{m.twins_needed or ''} |"
            )
        for claim, (a, b) in result.verdicts.items():
            lines.append(f"| {result.experiment}{label} | claim {claim} | | | | | | {a} / {b} | |")
    lines += [
        "",
        f"Speed (seconds of traffic per second of wall clock, boot included): reference "
        f"{reference.speed:.2f} ({reference.traffic_s:.0f} s in {reference.wall_s:.0f} s), candidate "
        f"{candidate.speed:.2f} ({candidate.traffic_s:.0f} s in {candidate.wall_s:.0f} s).",
        *_run_speed_lines(reference, candidate),
        f"Reference: {reference.directory}",
        f"Candidate: {candidate.directory}",
    ]
    return "\n".join(lines) + "\n"


def _run_speed_lines(reference: AnalysedSession, candidate: AnalysedSession) -> list[str]:
    names = sorted(set(reference.run_speeds) | set(candidate.run_speeds))
    if not names:
        return []
    nan = float("nan")
    shown = [
        f"{name} {reference.run_speeds.get(name, nan):.2f} and {candidate.run_speeds.get(name, nan):.2f}"
        for name in names
    ]
    overlap = " (runs side by side: each run's own wall time, which theirs overlap)" if candidate.slots > 1 else ""
    return [
        f"Per experiment, over its runs' wall time (boot not counted){overlap}, reference and candidate: "
        f"{'; '.join(shown)}."
    ]


def record(
    reference: AnalysedSession,
    candidate: AnalysedSession,
    results: list[equivalence.ExperimentEquivalence],
    path: Path | None = None,
    control: tuple[AnalysedSession, dict[str, equivalence.ExperimentEquivalence]] | None = None,
) -> Path:
    """Each experiment's result into the file the candidate's way's ``auto`` reads (``path``: that file,
    by default the project's), with the control's beside it where there is one; returns the file."""
    if reference.way != "alone in real time" or candidate.way == reference.way:
        raise ValueError(
            f"--record keeps a faster way against runs alone in real time: the reference ran {reference.way} "
            f"and the candidate {candidate.way}"
        )
    side_by_side = candidate.clock == "real"
    path = path or (slotchoice.SIDE_BY_SIDE if side_by_side else timebase.EQUIVALENCE)
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    data = data or {}
    experiments = data.setdefault("experiments", {})
    for result in results:
        entry = _result_record(reference, candidate, result)
        if control and result.experiment in control[1]:
            entry["control"] = _control_record(control[0], control[1][result.experiment])
        # what the record holds for, a copy each (one dict shared would be written as a YAML alias)
        entry.update(
            {"slots": candidate.slots, "guest": dict(candidate.machine)}
            if side_by_side
            else {"guest": dict(candidate.guest)}
        )
        experiments[result.experiment] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    # the file's own comments (its header) are kept above the data
    lines = path.read_text().splitlines() if path.exists() else []
    header = "".join(line + "\n" for line in lines if line.startswith("#"))
    # leaf lists and maps inline, unicode as it is, lines that the project's yamllint accepts
    path.write_text(
        header + yaml.safe_dump(data, sort_keys=True, width=100, default_flow_style=None, allow_unicode=True)
    )
    timebase.equivalence.cache_clear()
    return path


def _result_record(
    reference: AnalysedSession, candidate: AnalysedSession, result: equivalence.ExperimentEquivalence
) -> dict:
    return {
        "equivalent": result.equivalent,
        "why": "every test passed" if result.equivalent else "; ".join(result.problems),
        "metrics": {m.metric: _metric_record(m) for m in result.metrics},
        "verdicts": {claim: list(pair) for claim, pair in result.verdicts.items()},
        "speed": {"reference": round(reference.speed, 3), "candidate": round(candidate.speed, 3)},
        "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "seeds": sorted({int(seed) for seed in candidate.metrics.get(result.experiment, {"seed": []})["seed"]}),
        "sessions": [reference.directory.name, candidate.directory.name],
    }


def _control_record(control: AnalysedSession, result: equivalence.ExperimentEquivalence) -> dict:
    """The reference's way against itself again: shown within the margins or not, per metric (it decides nothing)."""
    return {
        "within_margins": result.equivalent,
        "metrics": {m.metric: _metric_record(m) for m in result.metrics},
        "session": control.directory.name,
    }


def _metric_record(m: equivalence.MetricEquivalence) -> dict:
    return {
        "change_pct": round(100 * m.change, 2),
        "interval90_pct": [round(100 * m.low, 2), round(100 * m.high, 2)],
        "margin_pct": round(100 * m.margin),
        "p_tost": float(f"{m.p_tost:.3g}"),
        "twins": m.pairs,
        "twins_needed_if_equal": m.twins_needed,
    }


def run(reference_dir: Path, candidate_dir: Path, keep: bool = False, control_dir: Path | None = None) -> int:
    """Print and write the table; exit 0 when every experiment is equivalent, 1 otherwise. ``control_dir``:
    the reference's way run again at the same seeds, judged against the reference beside the candidate."""
    reference, candidate = load_side(Path(reference_dir)), load_side(Path(candidate_dir))
    results = judge_twins(reference, candidate)
    control_side = load_side(Path(control_dir)) if control_dir else None
    control = judge_control(reference, control_side) if control_side else {}
    table = text(reference, candidate, results, control)
    if control_side:
        table += f"Control: {control_side.directory}\n"
    print(table, end="")
    (Path(candidate_dir) / "equivalence.md").write_text(table)
    if keep:
        beside = (control_side, control) if control_side else None
        print(f"recorded in {record(reference, candidate, results, control=beside)}")
    return 0 if all(r.equivalent for r in results) else 1
