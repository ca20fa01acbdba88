"""Suites: chosen points of several experiments, run together in one session, one guest and one report.

A suite file is ``scenarios/suites/<name>.yaml``::

    description: one representative point of each experiment
    profile: quick        # the profile every scenario file is loaded with
    traffic_s: 15         # optional: each point compressed to this much traffic (its time_scale)
    seeds: [1]            # optional: replaces each point's seeds
    run_as: {westwood: westwood_ml}   # optional: every flow of a key's algorithm runs the value's
    experiments:
      - scenario: reverse-onoff
        point: cc=westwood    # a point id as `testbed check` prints it; default: the file's first point
      - scenario: mobile-bernoulli
        points: ["loss_pct=5,cc=westwood", "loss_pct=5,cc=reno"]   # several points of one file, not with point
        seeds: [1, 2, 3]      # optional: this entry's seeds instead of the suite's
        traffic_s: 10         # optional: this entry's traffic instead of the suite's
      - scenario: wireless-gilbert
        profile: full-cross   # optional: this entry's own profile; its id becomes wireless-gilbert@full-cross.<point>
      - scenario: regression/upload
        control: {initcwnd_segs: 1}   # `testbed regress` only: a positive control (below)

Compressing a point scales its duration and every flow's start, stop and ON/OFF periods together
(the scenario files' ``time_scale``), so the point keeps its shape; RTTs, rates, sizes and loss
states are not scaled. ``make experiment`` runs the suite ``default``; ``testbed suite NAME`` any.

``run_as`` maps a registry algorithm to another (testbed/scenario/algorithms.py; both names must be
there): the points are chosen by the scenario file's own ids (``cc=westwood``), then every flow whose
``cc`` is a key runs the value instead, and the point's params and id say so (``cc=westwood_ml``),
so no run claims to be what it was not. A mapped flow that no swept ``cc`` shows adds the parameter
``run_as.cc`` (e.g. ``run_as.cc=westwood_ml``), which pairs like any algorithm parameter.

An entry with ``control`` is a **positive control** for ``testbed regress``: on the candidate kernel
the point runs again under its own id (``<id>.control``) with the given options on its flows, a harm
known in advance, and is compared with the baseline's runs of the point (when the suite has the
point too; else the baseline runs the control unharmed). The regression verdict must find it, or the
run is reported as unable to see a regression of that size (exit 2). Outside ``testbed regress``
such an entry runs the point once more, as is.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import Field, ValidationError

from testbed.scenario.algorithms import REGISTRY as CC_REGISTRY
from testbed.scenario.algorithms import is_cc_param
from testbed.scenario.errors import Problem, ScenarioError, _did_you_mean, _format_value
from testbed.scenario.load import find_scenario, knobs_left, load_scenario, scenario_from_dict
from testbed.scenario.messages import validation_problems
from testbed.scenario.points import Point, ScenarioFile
from testbed.scenario.sweep import _id_key, _safe, _shorten
from testbed.scenario.yamlfile import compose_yaml, read_yaml_text
from topologies.base import StrictModel

#: the parameter that shows mapped flows no swept ``cc`` shows (a cc key: it pairs like ``cc``)
RUN_AS_PARAM = "run_as.cc"


class FlowHarm(StrictModel):
    """Flow options that hurt a flow in a way known in advance (a positive control's injection)."""

    sack: bool | None = Field(default=None, description="false: SACK off on the flow's hosts")
    delayed_ack: bool | None = Field(default=None, description="false: the receiver ACKs every segment")
    initcwnd_segs: int | None = Field(default=None, ge=1, le=1000, description="the sender's initial window")
    window_kb: int | None = Field(default=None, ge=4, le=1_000_000, description="socket buffers capping the window")

    def options(self) -> dict:
        return self.model_dump(exclude_none=True)


class SuiteEntry(StrictModel):
    scenario: str = Field(description="a scenario name in scenarios/ or a path to a scenario file")
    point: str | None = Field(default=None, description="a point id of that file; default: its first point")
    profile: str | None = Field(default=None, description="this entry's profile instead of the suite's")
    control: FlowHarm | None = Field(default=None, description="testbed regress: the candidate's flows get these")
    # a comparison (Westwood+ and New Reno at one point) reads as one entry
    points: list[str] | None = Field(default=None, min_length=1, max_length=200, description="several point ids")
    seeds: list[int] | None = Field(default=None, min_length=1, description="this entry's seeds instead of the suite's")
    traffic_s: float | None = Field(default=None, gt=0, le=100_000, description="this entry's traffic instead")


class Suite(StrictModel):
    description: str = ""
    profile: str | None = Field(default="quick", description="profile each scenario file is loaded with")
    traffic_s: float | None = Field(default=None, gt=0, le=100_000, description="compress each point to this")
    seeds: list[int] | None = Field(default=None, min_length=1)
    run_as: dict[str, str] = Field(default_factory=dict, description="algorithm -> the algorithm its flows run")
    chosen_on: list[int] | None = Field(
        default=None,
        min_length=1,
        description="seeds whose runs chose a window, "
        "warm-up or run length this suite's claims use: the suite never judges them",
    )
    confirmed_on: list[int] | None = Field(
        default=None,
        min_length=1,
        description="seeds, none of chosen_on, on "
        "which those choices were confirmed (the session is named in the file)",
    )
    # each entry loads a scenario file: far more than any suite needs, few enough to load in seconds
    experiments: list[SuiteEntry] = Field(min_length=1, max_length=200)


#: a positive control's point id: the point it repeats, with this suffix
CONTROL_SUFFIX = ".control"


def is_control(point_id: str) -> bool:
    """A positive control's run: one side of a comparison runs it (the candidate, harmed), maybe both."""
    return point_id.endswith(CONTROL_SUFFIX)


def compress(
    point: Point, traffic_s: float | None, seeds: list[int] | None = None, profile: str | None = None
) -> Point:
    """The same point with ``traffic_s`` seconds of traffic (and ``seeds``), its id prefixed by its scenario
    (and by ``profile``, the entry's own, as ``<scenario>@<profile>``)."""
    data = point.scenario.model_dump(mode="json", exclude_none=True)
    if traffic_s is not None:
        data["time_scale"] = traffic_s / data["duration_s"]
    if seeds is not None:
        data["seeds"] = list(seeds)
    (compressed,) = scenario_from_dict(data, name=point.scenario_name).points
    prefix = f"{point.scenario_name}@{profile}" if profile else point.scenario_name
    return Point(point.scenario_name, f"{prefix}.{point.point_id}", point.params, compressed.scenario, profile)


def run_as(point: Point, mapping: dict[str, str]) -> Point:
    """The point (as loaded from its scenario file, before :func:`compress`) with every flow of a ``mapping``
    key's algorithm running the value's, its params and id showing the algorithms run (module doc); the
    point itself when no flow is mapped."""
    flows = point.scenario.flows
    mapped = sorted({mapping[flow.cc] for flow in flows if flow.cc in mapping})
    if not mapped:
        return point
    scenario = point.scenario.model_copy(
        update={"flows": [flow.model_copy(update={"cc": mapping.get(flow.cc, flow.cc)}) for flow in flows]}
    )
    params = {k: mapping.get(v, v) if is_cc_param(k) and isinstance(v, str) else v for k, v in point.params.items()}
    if not set(mapped) <= {v for k, v in params.items() if is_cc_param(k)}:
        params[RUN_AS_PARAM] = "+".join(mapped)
    parts = [f"{_safe(_id_key(k))}={_safe(_format_value(v))}" for k, v in params.items()]
    return replace(point, point_id=_shorten(",".join(parts)), params=params, scenario=scenario)


def _chosen_problems(suite: Suite, lines: dict) -> list[Problem]:
    """A suite judges no seed that chose its windows (``chosen_on``), and confirms on others: an analysis
    fixed before the data that judge it (issue 61)."""
    chosen = set(suite.chosen_on or [])
    problems = []
    if overlap := sorted(chosen & set(suite.confirmed_on or [])):
        problems.append(
            Problem(
                lines.get(("confirmed_on",)),
                "confirmed_on",
                f"seeds {overlap} are in chosen_on too: a confirmation is made on seeds that took "
                "no part in the choice",
            )
        )
    uses = [("seeds", lines.get(("seeds",)), suite.seeds)]
    uses += [
        (f"experiments[{i}].seeds", lines.get(("experiments", i)), entry.seeds)
        for i, entry in enumerate(suite.experiments)
    ]
    for where, line, seeds in uses:
        if overlap := sorted(chosen & set(seeds or [])):
            problems.append(
                Problem(
                    line,
                    where,
                    f"seeds {overlap} chose this suite's windows (chosen_on "
                    f"{sorted(chosen)}): judge seeds that took no part in choosing them, such as "
                    "confirmed_on",
                )
            )
    return problems


def find_suite(name_or_path: str, suites_dir: Path) -> Path:
    given = Path(name_or_path)
    if given.suffix in (".yaml", ".yml") or len(given.parts) > 1:
        if given.is_file():
            return given
        raise ScenarioError(name_or_path, [Problem(None, "", "no such file")])
    candidate = suites_dir / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    available = sorted(p.stem for p in suites_dir.glob("*.yaml"))
    message = f"no suite named '{name_or_path}' in {suites_dir}; available: {', '.join(available) or '(none)'}"
    raise ScenarioError(name_or_path, [Problem(None, "", message)])


def _run_as_problems(suite: Suite, lines: dict) -> list[Problem]:
    """Both names of every ``run_as`` pair must be registry algorithms (a misspelling must not run stock)."""
    problems = []
    valid = ", ".join(CC_REGISTRY)
    for key, value in suite.run_as.items():
        line = lines.get(("run_as", key), lines.get(("run_as",)))
        for name in (key, value):
            if name not in CC_REGISTRY:
                message = f"'{name}' is not a known congestion-control algorithm; valid: {valid}"
                problems.append(Problem(line, f"run_as.{key}", message + _did_you_mean(name, CC_REGISTRY)))
    return problems


def _chosen(entry: SuiteEntry, scenario: ScenarioFile, profile: str | None, line, where: str):
    """The entry's points of the loaded scenario file (by the file's own ids), and the problems."""
    if entry.point is not None and entry.points is not None:
        return [], [Problem(line, where, "give point or points, not both")]
    if entry.point is None and entry.points is None:
        return [scenario.points[0]], []
    ids = [p.point_id for p in scenario.points]
    wanted, field = ([entry.point], "point") if entry.point is not None else (entry.points, "points")
    chosen, problems = [], []
    for point_id in wanted:
        if point_id in ids:
            chosen.append(scenario.points[ids.index(point_id)])
            continue
        message = f"'{point_id}' is not a point of {entry.scenario} ({profile or 'no'} profile); "
        problems.append(Problem(line, f"{where}.{field}", message + f"valid: {', '.join(ids)}"))
    return chosen, problems


def _entry_points(suite: Suite, entry: SuiteEntry, scenarios_dir: Path, line, where: str):
    """The suite points of one entry: chosen, compressed, mapped by ``run_as``; and the problems."""
    own_profile = entry.profile if entry.profile not in (None, suite.profile) else None
    profile = own_profile or suite.profile
    try:
        scenario = load_scenario(find_scenario(entry.scenario, scenarios_dir), profile=profile)
    except ScenarioError as error:
        return [], [Problem(line, f"{where}.scenario", f"{entry.scenario}: {p}") for p in error.problems]
    chosen, problems = _chosen(entry, scenario, profile, line, where)
    traffic_s = entry.traffic_s if entry.traffic_s is not None else suite.traffic_s
    seeds = entry.seeds if entry.seeds is not None else suite.seeds
    points = [compress(run_as(point, suite.run_as), traffic_s, seeds, own_profile) for point in chosen]
    return points, problems


def load_suite(path: Path, scenarios_dir: Path) -> ScenarioFile:
    """Load a suite file into one :class:`ScenarioFile` whose points come from several scenario files.

    Every problem (a misspelled field, an unknown scenario, point id or ``run_as`` algorithm, a
    scenario file that does not load) is collected and raised together as one :class:`ScenarioError`,
    with its line. The file is read as scenario files are: bounded in size and depth, duplicate keys
    refused.
    """
    source = str(path)
    data, lines, problems = compose_yaml(read_yaml_text(Path(path)), source)
    if knobs := knobs_left(data, (), lines):  # a lab's starter suite (labs/reproduce)
        raise ScenarioError(source, [*problems, *knobs])
    try:
        suite = Suite.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(source, [*problems, *validation_problems(error, data, lines, Suite)]) from None
    problems += _run_as_problems(suite, lines) + _chosen_problems(suite, lines)
    if problems:
        raise ScenarioError(source, problems)
    points: list[Point] = []
    controls: dict[str, dict] = {}
    for i, entry in enumerate(suite.experiments):
        where, line = f"experiments[{i}]", lines.get(("experiments", i))
        found, entry_problems = _entry_points(suite, entry, scenarios_dir, line, where)
        problems += entry_problems
        for point in found:
            if entry.control is not None:
                if not entry.control.options():
                    valid = ", ".join(FlowHarm.model_fields)
                    problems.append(Problem(line, f"{where}.control", f"names no option; valid: {valid}"))
                    break
                point = replace(point, point_id=point.point_id + CONTROL_SUFFIX)
                controls[point.point_id] = entry.control.options()
            if point.point_id in (p.point_id for p in points):
                problems.append(Problem(line, where, f"{point.point_id} is already in the suite"))
                continue
            points.append(point)
    if problems:
        raise ScenarioError(source, problems)
    name = f"suite-{Path(path).stem}"
    return ScenarioFile(name, Path(path), suite.profile, suite.description.strip(), points, controls=controls)
