"""What loading a scenario file gives: a :class:`ScenarioFile` of :class:`Point` (one per combination of sweep
values), each with one :class:`RunSpec` per seed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.scenario.errors import Problem, ScenarioError, _did_you_mean, _format_value
from testbed.scenario.schema import Scenario
from testbed.scenario.sweep import _canonical, _id_key

#: flow options added after runs were made: left at their default they are not part of a run's
#: identity, so that adding a switch does not turn every finished run into a new one (resume, labs)
LATER_FLOW_OPTIONS = {"rack": True, "tlp": True, "frto": True}


@dataclass(frozen=True)
class RunSpec:
    """One run: a point of a scenario with one seed."""

    scenario_name: str
    point_id: str
    params: dict[str, object]
    seed: int
    scenario: Scenario
    #: the profile the point was loaded with when not its session's (a suite entry's own profile)
    profile: str | None = None

    def identity(self) -> str:
        """sha256 of what determines the run's result (the caller adds the kernel).

        ``seeds`` and ``description`` are left out: adding a seed or rewording the description
        must not turn finished runs into new ones (an interrupted sweep resumes by identity).
        """
        resolved = self.scenario.model_dump(mode="json", exclude={"seeds", "description"})
        for flow in resolved.get("flows", []):
            for option, default in LATER_FLOW_OPTIONS.items():
                if flow.get(option) == default:
                    del flow[option]
        canonical = json.dumps([self.scenario_name, resolved, self.seed], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Point:
    """One combination of sweep values, resolved and validated."""

    scenario_name: str
    point_id: str
    params: dict[str, object]
    scenario: Scenario
    #: the profile the point was loaded with when not its session's (a suite entry's own profile)
    profile: str | None = None

    def runs(self) -> list[RunSpec]:
        return [
            RunSpec(self.scenario_name, self.point_id, self.params, seed, self.scenario, self.profile)
            for seed in self.scenario.seeds
        ]


@dataclass(frozen=True)
class ScenarioFile:
    """A loaded scenario file: every point of its sweep, under one profile."""

    name: str
    path: Path
    profile: str | None
    description: str
    points: list[Point] = field(default_factory=list)
    #: every profile the file defines (to run a file under each of them)
    profiles: tuple[str, ...] = ()
    #: a suite's positive controls for ``testbed regress``: point id -> the candidate's flow options
    controls: dict[str, dict] = field(default_factory=dict)

    def runs(self) -> list[RunSpec]:
        return [run for point in self.points for run in point.runs()]

    def select(self, only: Sequence[str] = (), seeds: Sequence[int] = ()) -> ScenarioFile:
        """The part of the sweep to run: the points whose swept values match every ``KEY=VALUE[,VALUE...]``
        of ``only`` (KEY as in the point ids: ``cc``, ``flows.0.cc``) and, with ``seeds``, only those
        of the file's seeds. For one point of a full profile, or one seed. Runs keep their identity, so
        a later run of the whole sweep resumes around them. Raises :class:`ScenarioError` naming the
        swept parameters, values and seeds that exist."""
        swept: dict[str, list[str]] = {}
        for point in self.points:
            for key, value in point.params.items():
                values = swept.setdefault(_id_key(key), [])
                if _format_value(value) not in values:
                    values.append(_format_value(value))
        problems: list[Problem] = []
        wanted: dict[str, set[str]] = {}
        for condition in only:
            key, sep, values = condition.partition("=")
            key = _id_key(key.strip())
            given = {_canonical(v.strip(), swept.get(key, [])) for v in values.split(",")}
            if not sep or not key or not values.strip():
                message = f"'{condition}': expected KEY=VALUE[,VALUE...], e.g. cc=westwood"
            elif key not in swept:
                names = ", ".join(swept) or "none: the file sweeps nothing"
                message = f"'{key}' is not swept here; swept: {names}{_did_you_mean(key, list(swept))}"
            elif missing := sorted(given - set(swept[key])):
                message = f"{key} has no value {', '.join(missing)}; its values: {', '.join(swept[key])}"
            else:
                wanted.setdefault(key, set()).update(given)
                continue
            problems.append(Problem(None, "--only", message))
        file_seeds = sorted({seed for point in self.points for seed in point.scenario.seeds})
        if extra := sorted(set(seeds) - set(file_seeds)):
            listed = ", ".join(map(str, file_seeds))
            message = f"seed {', '.join(map(str, extra))} is not in this profile; its seeds: {listed}"
            problems.append(Problem(None, "--seed", message))
        if problems:
            raise ScenarioError(str(self.path), problems)
        points = []
        for point in self.points:
            if all(_format_value(v) in wanted.get(_id_key(k), {_format_value(v)}) for k, v in point.params.items()):
                kept = [seed for seed in point.scenario.seeds if not seeds or seed in seeds]
                if kept:
                    scenario = point.scenario.model_copy(update={"seeds": kept})
                    points.append(dataclasses.replace(point, scenario=scenario))
        if not points:
            message = "no point of the sweep has all of these values (and seeds)"
            raise ScenarioError(str(self.path), [Problem(None, "--only", message)])
        return dataclasses.replace(self, points=points)
