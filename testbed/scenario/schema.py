"""The schema of a scenario: :class:`Scenario` and its :class:`Flow` list (each topology's models are in topologies/).

Cross-field checks raise a ``scenario_check`` error that carries the exact sub-location of each problem,
so those name their line too.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, Strict, StrictFloat, field_validator, model_validator
from pydantic_core import PydanticCustomError

from testbed.scenario.algorithms import REGISTRY as CC_REGISTRY
from testbed.scenario.errors import _did_you_mean, _display_path, _num
from topologies import TOPOLOGY_PARAMS
from topologies.lossmodel import MAX_STATES, TimedTwoStateLoss, expected_states
from topologies.params import LinkParams, StrictModel

#: a timed loss channel's timeline covers the run plus this long (the runner's grace for late flows)
TIMELINE_SLACK_S = 30.0


def _scenario_check(problems: list[tuple[tuple, str]]) -> PydanticCustomError:
    """An error for a custom check; each problem keeps its location relative to the validated object.

    pydantic reports a validator's error at the validator's own level; the file loader uses the
    ``problems`` context to point each one at its exact field and line.
    """
    summary = "; ".join(f"{_display_path(at)}: {message}" if at else message for at, message in problems)
    return PydanticCustomError("scenario_check", "{summary}", {"summary": summary, "problems": tuple(problems)})


#: an ON period [start_s, stop_s]: YAML and JSON give the pair as a list, so the pair is read laxly
#: (a list makes a tuple) while its two numbers stay strict (a bool is never a time)
Period = Annotated[tuple[StrictFloat, StrictFloat], Strict(False)]


class Flow(StrictModel):
    """One flow (or ``count`` identical flows) with its algorithm, direction, base RTT and ON time."""

    kind: Literal["bulk", "ping", "requests"] = Field(
        default="bulk",
        description="bulk: an iperf3 transfer; ping: ICMP echoes every interval_ms (latency under load); "
        "requests: transfers of size_kb, each on a new connection, one after another with think_ms between",
    )
    cc: str | None = Field(
        default=None,
        description="congestion-control algorithm, a kernel name from testbed/scenario/algorithms.py "
        "(required for bulk and requests flows; a ping has none)",
    )
    direction: Literal["forward", "reverse"] = Field(
        default="forward",
        description="forward = left to right; reverse = sent from the right (receiver) side",
    )
    rtt_ms: float | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="base RTT of this flow's path (0: no added delay, e.g. on a kernel without netem); "
        "required on the dumbbell, not given where the topology's path sets it (parking_lot)",
    )
    path: str | None = Field(
        default=None,
        description="which of the topology's paths the flow takes (parking_lot: through, hop)",
    )
    rtt_max_ms: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="with count n: flow i (1..n) gets base RTT rtt_ms + (rtt_max_ms - rtt_ms) * i / n",
    )
    count: int = Field(default=1, ge=1, le=500, description="number of identical flows")
    size_mb: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="a fixed-size transfer of this many MB (10^6 bytes) per ON period instead of sending until "
        "its stop; the period's end is its deadline",
    )
    delayed_ack: bool = Field(default=True, description="false: the receiver ACKs every segment (route quickack)")
    sack: bool = Field(default=True, description="false: SACK off on the flow's hosts (net.ipv4.tcp_sack=0)")
    rack: bool = Field(
        default=True,
        description="false: RACK loss detection off on the flow's hosts (net.ipv4.tcp_recovery=0): "
        "losses are found by three duplicate ACKs, as in the papers' TCPs",
    )
    tlp: bool = Field(
        default=True, description="false: tail loss probes off on the flow's hosts (net.ipv4.tcp_early_retrans=0)"
    )
    frto: bool = Field(
        default=True,
        description="false: F-RTO (spurious timeout detection) off on the flow's hosts (net.ipv4.tcp_frto=0)",
    )
    ecn: bool = Field(
        default=False,
        description="true: the flow negotiates ECN (net.ipv4.tcp_ecn=1 on its hosts; else the kernel's 2, "
        "ECN only when asked), so an AQM with ecn marks its packets instead of dropping them",
    )
    initcwnd_segs: int | None = Field(
        default=None, ge=1, le=1000, description="initial congestion window in segments (route initcwnd)"
    )
    window_kb: int | None = Field(
        default=None,
        ge=4,
        le=1_000_000,
        description="socket buffers of this many KiB on both ends (iperf3 -w): the window stays about this "
        "size, so the flow's rate is at most window / RTT",
    )
    interval_ms: float | None = Field(
        default=None, ge=10, le=60_000, description="ping: time between echo requests; default 100 ms"
    )
    size_kb: float | None = Field(
        default=None, gt=0, le=1_000_000, description="requests: the size of each response in kB (10^3 bytes)"
    )
    think_ms: float = Field(default=0.0, ge=0, le=60_000, description="requests: pause after each response")
    start_s: float = Field(default=0.0, ge=0, description="start time")
    stop_s: float | None = Field(default=None, gt=0, description="stop time; None = the scenario's duration_s")
    periods: list[Period] | None = Field(
        default=None,
        min_length=1,
        description="ON periods as [start_s, stop_s] pairs instead of start_s/stop_s",
    )

    @field_validator("cc")
    @classmethod
    def _known_cc(cls, cc: str | None) -> str | None:
        if cc is not None and cc not in CC_REGISTRY:
            raise PydanticCustomError(
                "unknown_cc",
                "'{cc}' is not a known congestion-control algorithm; valid: {valid}{hint}",
                {"cc": cc, "valid": ", ".join(CC_REGISTRY), "hint": _did_you_mean(cc, CC_REGISTRY)},
            )
        return cc

    @field_validator("periods")
    @classmethod
    def _sorted_disjoint_periods(cls, periods: list[tuple[float, float]] | None):
        problems = []
        for i, (start, stop) in enumerate(periods or []):
            shown = f"period [{_num(start)}, {_num(stop)}]"
            if start < 0:
                problems.append(((i,), f"{shown} starts before 0 s"))
            if start >= stop:
                problems.append(((i,), f"{shown}: start must be before stop"))
            if i > 0 and start < periods[i - 1][1]:
                previous_stop = _num(periods[i - 1][1])
                message = f"{shown} starts before the previous period ends ({previous_stop} s)"
                problems.append(((i,), f"{message}; periods must be sorted and must not overlap"))
        if problems:
            raise _scenario_check(problems)
        return periods

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> Flow:
        """Each kind's own fields, and none of another's."""
        problems = []
        if self.kind != "ping" and self.cc is None:
            problems.append((("cc",), f"a {self.kind} flow needs cc, its congestion-control algorithm"))
        if self.kind == "ping" and self.cc is not None:
            problems.append((("cc",), "a ping flow sends ICMP echoes, not TCP: leave cc out"))
        if self.kind == "requests" and self.size_kb is None:
            problems.append((("size_kb",), "a requests flow needs size_kb, the size of each response"))
        # by value, not by "was it given" (a dumped-and-reloaded flow carries every default)
        own = {"interval_ms": ("ping", None), "size_kb": ("requests", None), "think_ms": ("requests", 0.0)}
        for name, (kind, default) in own.items():
            if getattr(self, name) != default and self.kind != kind:
                problems.append(((name,), f"{name} is a field of kind: {kind} flows (this flow is {self.kind})"))
        if self.kind != "bulk":
            for name in ("size_mb", "window_kb", "rtt_max_ms"):
                if getattr(self, name) is not None:
                    problems.append(((name,), f"{name} is a field of bulk flows (this flow is {self.kind})"))
        if problems:
            raise _scenario_check(problems)
        return self

    @property
    def ping_interval_ms(self) -> float:
        return self.interval_ms if self.interval_ms is not None else DEFAULT_PING_INTERVAL_MS

    @model_validator(mode="after")
    def _start_before_stop(self) -> Flow:
        # Compared by value, not by "was it given": a dumped-and-reloaded flow carries the defaults.
        if self.periods is not None and (self.start_s != 0 or self.stop_s is not None):
            raise _scenario_check([(("periods",), "give either periods or start_s/stop_s, not both")])
        if self.rtt_max_ms is not None and self.rtt_ms is not None and self.rtt_max_ms <= self.rtt_ms:
            message = f"rtt_max_ms ({_num(self.rtt_max_ms)}) must be above rtt_ms ({_num(self.rtt_ms)})"
            raise _scenario_check([(("rtt_max_ms",), message)])
        if self.stop_s is not None and self.start_s >= self.stop_s:
            raise _scenario_check(
                [(("stop_s",), f"stop_s ({_num(self.stop_s)}) must be after start_s ({_num(self.start_s)})")]
            )
        return self

    def rtts_ms(self) -> list[float]:
        """The base RTT of each of the ``count`` flows: all ``rtt_ms``, or spread up to ``rtt_max_ms``
        (paper 000 §3.2: M flows with RTTs uniform in [20 + 230/M, 250] ms is rtt_ms 20, rtt_max_ms 250)."""
        if self.rtt_max_ms is None or self.rtt_ms is None:
            return [self.rtt_ms] * self.count
        step = (self.rtt_max_ms - self.rtt_ms) / self.count
        return [round(self.rtt_ms + step * i, 6) for i in range(1, self.count + 1)]

    def on_periods(self, duration_s: float) -> list[tuple[float, float]]:
        """The effective ON periods ``[(start_s, stop_s), ...]`` in a scenario of ``duration_s``."""
        if self.periods is not None:
            return list(self.periods)
        return [(self.start_s, self.stop_s if self.stop_s is not None else duration_s)]


# Built from the registry so that a new topology module needs no change here.
TopologyParams = Annotated[Union[tuple(TOPOLOGY_PARAMS.values())], Field(discriminator="name")]  # noqa: UP007


#: a ping flow's interval when it gives none: ten echoes a second, as Flent's ping
DEFAULT_PING_INTERVAL_MS = 100.0

#: iperf3 times a flow in whole seconds (``-t`` is read with atoi, and ``-t 0`` runs without end)
MIN_TIMED_PERIOD_S = 1.0


def _sub_second_periods(index: int, flow, duration_s: float) -> list[tuple[tuple, str]]:
    """A timed ON period shorter than iperf3 can run (a fixed-size flow, ``size_mb``, is not timed)."""
    if flow.size_mb is not None or flow.kind != "bulk":
        return []
    problems = []
    for p, (start, stop) in enumerate(flow.on_periods(duration_s)):
        if 0 < stop - start < MIN_TIMED_PERIOD_S:
            at = ("flows", index, "periods", p) if flow.periods else ("flows", index, "stop_s")
            problems.append(
                (
                    at,
                    f"an ON period of {stop - start:.3g} s: iperf3 times a flow in whole "
                    f"seconds (its -t 0 would never end); give it at least 1 s",
                )
            )
    return problems


class Scenario(StrictModel):
    """One resolved experiment: a topology, its flows, how long, and which seeds."""

    description: str = Field(default="", description="free text shown in reports")
    topology: TopologyParams
    flows: list[Flow] = Field(min_length=1)
    duration_s: float = Field(gt=0, le=100_000, description="length of each run")
    seeds: list[int] = Field(default=[1], min_length=1, description="one run per seed")

    @property
    def algorithms(self) -> set[str]:
        """The congestion-control algorithms its flows use (a ping flow has none)."""
        return {flow.cc for flow in self.flows if flow.cc is not None}

    @field_validator("seeds")
    @classmethod
    def _valid_seeds(cls, seeds: list[int]) -> list[int]:
        problems = []
        for i, seed in enumerate(seeds):
            if seed < 0:
                problems.append(((i,), f"seed {seed} is out of range: must be at least 0"))
            if seed in seeds[:i]:
                problems.append(((i,), f"seed {seed} is listed twice; seeds must be unique"))
        if problems:
            raise _scenario_check(problems)
        return seeds

    @model_validator(mode="after")
    def _flows_fit(self) -> Scenario:
        problems: list[tuple[tuple, str]] = []
        end = f"the end of the run (duration_s {_num(self.duration_s)})"
        bottleneck = getattr(self.topology, "bottleneck", None)
        if all(flow.kind != "bulk" for flow in self.flows):
            problems.append(
                (
                    ("flows",),
                    "at least one flow must be kind: bulk (an iperf3 transfer); ping and "
                    "requests flows measure latency beside them",
                )
            )
        for i, flow in enumerate(self.flows):
            if flow.stop_s is not None and flow.stop_s > self.duration_s:
                problems.append((("flows", i, "stop_s"), f"stop_s {_num(flow.stop_s)} is after {end}"))
            if flow.stop_s is None and flow.periods is None and flow.start_s >= self.duration_s:
                problems.append((("flows", i, "start_s"), f"start_s {_num(flow.start_s)} is not before {end}"))
            if flow.periods and flow.periods[-1][1] > self.duration_s:
                last = len(flow.periods) - 1
                message = f"period ends at {_num(flow.periods[-1][1])} s, after {end}"
                problems.append((("flows", i, "periods", last), message))
            problems += _sub_second_periods(i, flow, self.duration_s)
            if isinstance(bottleneck, LinkParams) and flow.rtt_ms is not None and flow.rtt_ms < 2 * bottleneck.delay_ms:
                minimum = _num(2 * bottleneck.delay_ms)
                message = f"rtt_ms {_num(flow.rtt_ms)} is shorter than the bottleneck's own round trip: "
                problems.append(
                    (("flows", i, "rtt_ms"), f"{message}must be at least 2 x bottleneck delay_ms = {minimum}")
                )
        check_flows = getattr(type(self.topology), "check_flows", None)
        if check_flows is not None:
            problems += [(("flows", i, *at), message) for i, at, message in check_flows(self.topology, self.flows)]
        for name in type(self.topology).model_fields:
            link = getattr(self.topology, name)
            if isinstance(link, LinkParams) and isinstance(link.loss, TimedTwoStateLoss):
                horizon = self.duration_s + TIMELINE_SLACK_S
                states = expected_states(link.loss, horizon)
                if states > MAX_STATES / 2:
                    message = (
                        f"about {states:.0f} channel states in {_num(horizon)} s; at most {MAX_STATES // 2} "
                        f"fit: use longer good_s/bad_s or a shorter duration_s"
                    )
                    problems.append((("topology", name, "loss"), message))
        if problems:
            raise _scenario_check(problems)
        return self
