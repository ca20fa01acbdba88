"""The plan (``plan.json``): what the runner executes, written by the host's session, read where the runs go.

A plan is the runs still to do, each with its resolved scenario and the folder it writes into
(relative to the plan's folder, so the plan runs wherever its session folder is: here, in a
virtme-ng guest, or copied into the lab VM), and the context every run shares: the checkout's git
state, the backend, the project's modules, the compiled BPF objects and the hold library.

The file keeps the keys it had before it was typed, plus ``schema_version``: a lab VM running an
older checkout reads a new plan, and this one reads plans without a version (version 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from testbed.results.rundir import LoadError, read_json, write_json_atomic
from testbed.scenario.points import RunSpec
from testbed.scenario.schema import Scenario

SCHEMA_VERSION = 1
#: the plan's file in a session folder
PLAN = "plan.json"
#: beside a plan, written by the runner that ran it: the number of its runs not complete
PLAN_DONE = "plan.done"


class PlanRun(BaseModel):
    """One run of a plan."""

    model_config = ConfigDict(extra="allow")

    scenario_name: str
    point_id: str
    params: dict[str, Any]
    seed: int
    profile: str | None = None
    scenario: dict[str, Any]  # the resolved scenario as JSON data (Scenario.model_dump(mode="json"))
    run_dir: str  # relative to the plan's folder
    estimate_s: float  # the model's, in the guest's seconds: what the run's deadline counts on
    #: the host's wall seconds this run is expected to take, as earlier runs measured it (testbed.plan.costs);
    #: None where nothing was measured: the estimate then stands for it
    cost_s: float | None = None
    #: how busy runs of its experiment kept their guest's CPU during traffic, alone (its cpu headroom check,
    #: testbed.plan.costs); None: not measured. Runs side by side are admitted by it (testbed.host.packing)
    busy_pct: float | None = None

    @property
    def expected_s(self) -> float:
        """What the run will take on the host's clock, as best known: measured, else the model's."""
        return self.estimate_s if self.cost_s is None else self.cost_s

    def spec(self) -> RunSpec:
        """The run as the runner executes it."""
        return RunSpec(
            scenario_name=self.scenario_name,
            point_id=self.point_id,
            params=self.params,
            seed=self.seed,
            scenario=Scenario.model_validate(self.scenario),
            profile=self.profile,
        )


class PlanContext(BaseModel):
    """What every run of a plan shares."""

    model_config = ConfigDict(extra="allow")

    git: dict[str, Any] = Field(default_factory=dict)
    backend: dict[str, Any] = Field(default_factory=dict)
    #: module name -> .ko path, or None: build it where the runs go (the lab VM)
    project_modules: dict[str, str | None] = Field(default_factory=dict)
    #: BPF program name -> compiled object; empty: build them where the runs go
    bpf_objects: dict[str, str] = Field(default_factory=dict)
    #: the shim that holds clients at their first connect(); None: build it where the runs go
    hold_library: str | None = None
    #: a run's network is kept for the next run when it would build the same one (testbed.guest.keeper);
    #: False (``--fresh-networks``): every run builds its own
    keep_networks: bool = True
    #: how often the bottleneck queues are read during traffic (``--queue-hz``; testbed.guest.queues)
    queue_hz: float = 10.0
    #: this plan's place among plans run side by side on one kernel (testbed.guest.sidebyside): its runs take
    #: their own block of ports (testbed.plan.connections) and tracing instances; None: the kernel is its alone
    slot: int | None = None


class Plan(BaseModel):
    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    context: PlanContext = Field(default_factory=PlanContext)
    runs: list[PlanRun]

    def write(self, path: Path) -> None:
        """Write the plan atomically (the guest or the lab VM may read it at any time after)."""
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: Path) -> Plan:
        """The plan in ``path``; :class:`LoadError` naming the file when it is not one."""
        data = read_json(path)
        try:
            return cls.model_validate(data)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise LoadError(path, f"not a plan: {exc}") from None

    def with_runs(self, runs: list[PlanRun]) -> Plan:
        """The same plan for only these runs."""
        return self.model_copy(update={"runs": runs})
