"""Suites: chosen points of several experiments, run together in one session, one guest and one report.

A suite file is ``scenarios/suites/<name>.yaml``::

    description: one representative point of each experiment
    profile: quick        # the profile every scenario file is loaded with
    traffic_s: 15         # optional: each point compressed to this much traffic (its time_scale)
    seeds: [1]            # optional: replaces each point's seeds
    experiments:
      - scenario: reverse-onoff
        point: cc=westwood    # a point id as `testbed check` prints it; default: the file's first point
      - scenario: wireless-gilbert
        profile: full-cross   # optional: this entry's own profile; its id becomes wireless-gilbert@full-cross.<point>
      - scenario: regression/upload
        control: {initcwnd_segs: 1}   # `testbed regress` only: a positive control (below)

Compressing a point scales its duration and every flow's start, stop and ON/OFF periods together
(the scenario files' ``time_scale``), so the point keeps its shape; RTTs, rates, sizes and loss
states are not scaled. ``make experiment`` runs the suite ``default``; ``testbed suite NAME`` any.

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

from testbed.scenario.errors import Problem, ScenarioError
from testbed.scenario.load import find_scenario, load_scenario, scenario_from_dict
from testbed.scenario.messages import validation_problems
from testbed.scenario.points import Point, ScenarioFile
from testbed.scenario.yamlfile import compose_yaml, read_yaml_text
from topologies.base import StrictModel


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


class Suite(StrictModel):
    description: str = ""
    profile: str | None = Field(default="quick", description="profile each scenario file is loaded with")
    traffic_s: float | None = Field(default=None, gt=0, le=100_000, description="compress each point to this")
    seeds: list[int] | None = Field(default=None, min_length=1)
    # each entry loads a scenario file: far more than any suite needs, few enough to load in seconds
    experiments: list[SuiteEntry] = Field(min_length=1, max_length=200)


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


def load_suite(path: Path, scenarios_dir: Path) -> ScenarioFile:
    """Load a suite file into one :class:`ScenarioFile` whose points come from several scenario files.

    Every problem (a misspelled field, an unknown scenario or point id, a scenario file that does
    not load) is collected and raised together as one :class:`ScenarioError`, with its line. The
    file is read as scenario files are: bounded in size and depth, duplicate keys refused.
    """
    source = str(path)
    data, lines, problems = compose_yaml(read_yaml_text(Path(path)), source)
    try:
        suite = Suite.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(source, [*problems, *validation_problems(error, data, lines, Suite)]) from None
    points: list[Point] = []
    controls: dict[str, dict] = {}
    for i, entry in enumerate(suite.experiments):
        where, line = f"experiments[{i}]", lines.get(("experiments", i))
        own_profile = entry.profile if entry.profile not in (None, suite.profile) else None
        profile = own_profile or suite.profile
        try:
            scenario = load_scenario(find_scenario(entry.scenario, scenarios_dir), profile=profile)
        except ScenarioError as error:
            problems += [Problem(line, f"{where}.scenario", f"{entry.scenario}: {p}") for p in error.problems]
            continue
        ids = [p.point_id for p in scenario.points]
        if entry.point is None:
            chosen = scenario.points[0]
        elif entry.point in ids:
            chosen = scenario.points[ids.index(entry.point)]
        else:
            message = f"'{entry.point}' is not a point of {entry.scenario} ({profile or 'no'} profile); "
            problems.append(Problem(line, f"{where}.point", message + f"valid: {', '.join(ids)}"))
            continue
        point = compress(chosen, suite.traffic_s, suite.seeds, own_profile)
        if entry.control is not None:
            if not entry.control.options():
                valid = ", ".join(FlowHarm.model_fields)
                problems.append(Problem(line, f"{where}.control", f"names no option; valid: {valid}"))
                continue
            point = replace(point, point_id=f"{point.point_id}.control")
            controls[point.point_id] = entry.control.options()
        if point.point_id in (p.point_id for p in points):
            problems.append(Problem(line, where, f"{point.point_id} is already in the suite"))
            continue
        points.append(point)
    if problems:
        raise ScenarioError(source, problems)
    name = f"suite-{Path(path).stem}"
    return ScenarioFile(name, Path(path), suite.profile, suite.description.strip(), points, controls=controls)
