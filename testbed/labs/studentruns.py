"""A student's lab runs as the autograder reads them (testbed/labs/grading.py): the latest run of
each point and seed of their scenario file, the identity each run of the file has as it is now, when
``testbed lab start`` made the folder, and a metric of their runs (for a band or a question).

Results are read through the catalog (analysis/runs/catalog.py): a lab's results folder may hold several
sessions, and the latest run of each point and seed counts.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from analysis.runs import catalog, metrics
from analysis.verdicts import claims
from testbed import PROJECT
from testbed.labs import definition, evidence
from testbed.labs.definition import LATENCY_METRICS, Band, Lab, Measured
from testbed.results import rundir
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario
from testbed.scenario.suite import load_suite

#: latency metric -> (kind of flow, column of the catalog's latency table)
LATENCY_COLUMNS = {m: ("ping" if m.startswith("ping") else "requests", m.split("_", 1)[1]) for m in LATENCY_METRICS}


@dataclass
class Results:
    """A lab's runs and flows in a results folder: the latest run of each point and seed."""

    runs: pd.DataFrame
    flows: pd.DataFrame
    latency: pd.DataFrame
    seeds: dict[str, list[int]]  # point id -> the seeds the scenario file asks for
    problem: str | None = None  # why the scenario file gave no points (e.g. a knob left TODO)
    #: (point id, seed) -> the identity a run of the scenario file as it is now has (RunSpec.identity)
    identities: dict[tuple[str, int], str] = field(default_factory=dict)
    started_utc: str | None = None  # when ``testbed lab start`` made the folder (None: it did not)
    variant: float | None = None  # the lab's variant knob as the student's scenario file sets it


def load_results(work: Path, lab: Lab, results: Path, every_variant: bool = False) -> Results:
    """The lab's runs under ``results`` (its catalog brought up to date first): those of the lab's
    scenario file, or every run when the lab has none (the student runs the project's experiments).
    ``every_variant``: in a lab with a variant, the latest run of each value of its knob (the reference
    runs bands are made from), with the value in the runs' ``variant`` column."""
    seeds, identities, problem = _planned_runs(work, lab)
    started = definition.lab_started(work)
    variant = definition.file_knob(work / lab.scenario, lab.variant.knob) if lab.variant and lab.scenario else None
    if not results.is_dir():
        empty = pd.DataFrame()
        return Results(
            empty,
            empty,
            empty,
            seeds,
            problem or f"{results}: no results folder (run the lab's scenario)",
            identities,
            started,
            variant,
        )
    catalog.ingest(results)
    name = Path(lab.scenario).stem if lab.scenario else None
    runs = catalog.runs(results, scenario=name)
    if not runs.empty:
        # a run that never started (its guest did not boot) has no start time: any later attempt replaces it
        runs = runs.sort_values("started_utc", na_position="first")
        keys = ["scenario", "point_id", "seed"]
        if every_variant and lab.variant:
            runs = runs.assign(variant=[run_knob(Path(path), lab.variant.knob) for path in runs["path"]])
            keys.append("variant")
        runs = runs.drop_duplicates(keys, keep="last")
    if lab.scenario is None and lab.suite is None:
        seeds = (
            {point: sorted(set(group["seed"])) for point, group in runs.groupby("point_id")} if not runs.empty else {}
        )
    kept = set(runs["run_id"]) if not runs.empty else set()
    flows = _kept(catalog.flows(results, scenario=name), kept)
    latency = _kept(catalog.latency(results, scenario=name), kept)
    return Results(runs, flows, latency, seeds, problem, identities, started, variant)


def _planned_runs(work: Path, lab: Lab) -> tuple[dict[str, list[int]], dict[tuple[str, int], str], str | None]:
    """Point id -> the seeds the student's scenario file asks for, over the file's profiles (a lab may
    run one profile per task); each run's identity as the file is now; and why a profile gives none
    (e.g. a knob left TODO)."""
    if lab.scenario is None and lab.suite is None:
        return {}, {}, None
    if lab.scenario is None:
        return _planned_suite(work / lab.suite)
    path = work / lab.scenario
    seeds: dict[str, list[int]] = {}
    identities: dict[tuple[str, int], str] = {}
    problems = []
    for profile in [None, *_profiles(path)]:
        try:
            scenario = load_scenario(path, profile=profile)
        except ScenarioError as err:
            problems.append(str(err))
            continue
        seeds.update({p.point_id: list(p.scenario.seeds) for p in scenario.points})
        identities.update({(r.point_id, r.seed): r.identity() for r in scenario.runs()})
    return seeds, identities, "\n".join(problems) or None


def _planned_suite(path: Path) -> tuple[dict[str, list[int]], dict[tuple[str, int], str], str | None]:
    """The planned runs of a student's suite file (its points are the project's experiments')."""
    try:
        suite = load_suite(path, PROJECT / "scenarios")
    except ScenarioError as err:
        return {}, {}, str(err)
    seeds = {p.point_id: list(p.scenario.seeds) for p in suite.points}
    return seeds, {(r.point_id, r.seed): r.identity() for r in suite.runs()}, None


def _profiles(path: Path) -> list[str]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return []
    return sorted(data.get("profiles") or {}) if isinstance(data, dict) else []


def _kept(frame: pd.DataFrame, run_ids: set[str]) -> pd.DataFrame:
    return frame[frame["run_id"].isin(run_ids)] if not frame.empty else frame


def graded_run_ids(results: Results, points: set[str] | None = None) -> set[str]:
    """The run ids (catalog: <scenario>/<session>/<point>/seed=N) the grader counts: the latest run of each
    seed the student's file asks for, of ``points`` (all when None)."""
    return {
        r.run_id
        for r in results.runs.itertuples()
        if (points is None or r.point_id in points) and r.seed in results.seeds.get(r.point_id, [])
    }


def point_values(point: str, asked: Band | Measured, results: Results, seeds: list[int] | None = None) -> list[float]:
    """The metric ``asked`` of each of the student's latest complete runs of ``point``: of the seeds their
    scenario file asks for (``seeds`` when given: a hidden variant's), never another's."""
    return [value for _, value in seeded_values(point, asked, results, seeds)]


def seeded_values(
    point: str, asked: Band | Measured, results: Results, seeds: list[int] | None = None
) -> list[tuple[int, float]]:
    """:func:`point_values` with each run's seed: (seed, value)."""
    runs = results.runs
    if runs.empty:
        return []
    wanted = seeds if seeds is not None else results.seeds.get(point, [])
    runs = runs[(runs["point_id"] == point) & (runs["status"] == "complete") & runs["seed"].isin(wanted)]
    pairs = zip(runs["seed"], runs["run_id"], strict=True)
    values = ((int(seed), run_metric(asked, run_id, results)) for seed, run_id in pairs)
    return [(seed, v) for seed, v in values if not math.isnan(v)]


def run_metric(asked: Band | Measured, run_id: str, results: Results) -> float:
    """One run's value of a band's or a question's metric (NaN when it has none)."""
    if asked.metric in LATENCY_COLUMNS:
        kind, column = LATENCY_COLUMNS[asked.metric]
        rows = (
            results.latency[(results.latency["run_id"] == run_id) & (results.latency["kind"] == kind)]
            if not results.latency.empty
            else results.latency
        )
        return float(rows[column].mean()) if not rows.empty else math.nan
    flows = (
        results.flows[(results.flows["run_id"] == run_id) & (results.flows["direction"] == "forward")]
        if not results.flows.empty
        else results.flows
    )
    if asked.cc:
        flows = flows[flows["cc"] == asked.cc]
    return metrics.group_metric(flows, asked.metric) if not flows.empty else math.nan


def run_knob(run_dir: Path, knob: str) -> float | None:
    """A knob's value in what a run ran (its manifest's resolved scenario); None when it has none."""
    try:
        return definition.knob_value(rundir.read_json(run_dir / rundir.MANIFEST).get("resolved"), knob)
    except (rundir.LoadError, AttributeError):
        return None


def run_fingerprints(run_dir: Path) -> set[str]:
    """What tells a run from every other: the sha256 of each of its captures (``raw/*.pcap``, read from
    the files themselves: no two real runs share a capture, and renaming, relabelling or adding a file
    leaves it), and the sha256 of its manifest's list of files (the fingerprint of reference runs kept
    without their raw files). Empty when the run has neither."""
    found = {rundir.sha256_file(path) for path in sorted((run_dir / "raw").glob("*.pcap")) if _regular(path)}
    try:
        files = rundir.read_json(run_dir / rundir.MANIFEST).get("files") or {}
    except (rundir.LoadError, AttributeError):
        files = {}
    if files:
        found.add(hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest())
    return found


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def claim_flows(results: Results) -> pd.DataFrame:
    """The student's graded runs' flows as analysis/verdicts/claims.py judges them (its ``flow_rows``' columns),
    from the catalog: the latest run of each seed their file asks for."""
    runs = results.runs
    if runs.empty or results.flows.empty:
        return pd.DataFrame()
    flows = results.flows[results.flows["run_id"].isin(graded_run_ids(results))].copy()
    flows["experiment"], flows["point"], flows["run"] = flows["scenario"], flows["point_id"], flows["run_id"]
    flows["kernel"], flows["wall_s"] = flows["kernel_release"], math.nan
    params = dict(zip(runs["run_id"], runs["params"], strict=True))  # the catalog's flows leave them out
    flows["params"] = [params[r] for r in flows["run_id"]]
    return flows.reset_index(drop=True)


def decided_claims(results: Results) -> dict[str, claims.Verdict]:
    """Claim id -> its verdict on the student's graded runs, for the claims those runs decide: judged as
    the student's report judges them, a claim with a warm-up on the goodput after it (from the runs'
    analyses, testbed/labs/evidence.py), so that the numbers the report prints are the grader's."""
    flows = claim_flows(results)
    ran = set(flows["experiment"]) if not flows.empty else set()
    windowed = any(c.warmup_s is not None for c in claims.load_claims() if c.experiment in ran)
    graded = graded_run_ids(results)
    analyses = (
        [evidence.analysed(Path(r.path)) for r in results.runs.itertuples() if r.run_id in graded] if windowed else None
    )
    judged = claims.verdicts(analyses, flows=flows)
    return {v.claim.id: v for v in judged if v.verdict != "no data"}
