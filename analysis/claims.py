"""The papers' claims and their verdicts, computed from the runs (issue 6's reproduction report).

A claim (``analysis/claims.yaml``, one entry per claim the papers state) compares one metric of two
groups of flows: side ``a`` and side ``b``, each chosen by algorithm (``westwood`` takes the flows of
``westwood_ml`` too, the same algorithm instrumented: the registry's ``algorithm``; ``westwood_paper``
is another algorithm) and, where needed, by the flow's index in the scenario (the parking lot's C1 is
flow 0) and by whether another algorithm shares the run (paper 001's friendliness: Reno with
Westwood+ vs Reno with Reno). Runs are paired by their
**condition**: experiment, profile and swept parameters other than the algorithms (``cc``,
``flows.1.cc``, ...), so Westwood+ at Bad = 10 ms is compared with New Reno at Bad = 10 ms.

The metric of a side in one run (complete runs only):

* ``goodput``: the mean sender goodput of its flows (paper 000 §3.1);
* ``recv_goodput``: the mean receiver goodput of its flows (what the receiving application read;
  paper 004's end-to-end throughput);
* ``total_goodput``: their sum (000 §3.2);
* ``jain``: Jain's index over its flows (000 §3.2; needs two flows or more);
* ``retrans_ratio``: their retransmitted / sent bytes.

**The rule**, written once here and printed next to every verdict. At each condition, side a's mean
over its runs is compared with side b's: the relative difference ``d = mean_a / mean_b - 1``.

* With two or more runs on each side, a difference counts when ``|d| > 5 %`` and Welch's t-test
  gives ``p < 0.05`` (the noise is estimated from the seeds).
* With one run on a side, there is no noise estimate: a difference counts when ``|d| > 10 %``.

Each condition is then ``higher``, ``lower`` or ``similar`` (no difference that counts). A claim
expects one of ``higher`` (a above b), ``lower``, ``similar``, or ``not_lower`` (a not below b,
e.g. "Westwood+ does not take Reno's share"):

* **reproduced**: the expected outcome holds at more than half of the conditions and the opposite
  one at none (for ``similar``: similar at more than half; for ``not_lower``: lower at none);
* **opposite**: the opposite outcome (``lower`` for ``higher`` and ``not_lower``, ``higher`` for
  ``lower``) holds at more than half of the conditions;
* **not reproduced**: anything else;
* **no data**: no condition had runs on both sides (the experiment, or its comparison, did not run).

``near`` claims (e.g. "the total goodput approaches the link capacity") compare a's mean with the
claim's ``value``: near when within 10 %; reproduced when near at more than half of the conditions.

A verdict is never typed in: it is always this rule applied to the runs' numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from analysis import metrics, regression
from testbed.scenario.algorithms import algorithm_of, is_cc_param

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
#: a difference counts above this with two runs or more per side (and p < ALPHA) ...
PRACTICAL = 0.05
#: ... and above this with a single run on a side (no noise estimate)
SINGLE_RUN = 0.10
ALPHA = 0.05
#: ``near``: a's mean within this of the claim's value
NEAR = 0.10

RULE = (
    "at each condition (same experiment, profile and parameters but the algorithm), d = mean(a) / mean(b) - 1; "
    f"a difference counts when |d| > {PRACTICAL:.0%} and Welch's p < {ALPHA} (2+ runs per side), or |d| > "
    f"{SINGLE_RUN:.0%} (one run: no noise estimate). Reproduced: the expected outcome at more than half of the "
    "conditions and the opposite at none; opposite: the opposite outcome at more than half; else not reproduced. "
    f"'near' claims: a's mean within {NEAR:.0%} of the paper's value at more than half of the conditions."
)

Metric = Literal["goodput", "recv_goodput", "total_goodput", "jain", "retrans_ratio"]
Expect = Literal["higher", "lower", "similar", "not_lower", "near"]
OPPOSITE = {"higher": "lower", "lower": "higher", "not_lower": "lower", "similar": None, "near": None}


class Side(BaseModel):
    """The flows of one side of a claim."""

    model_config = ConfigDict(extra="forbid")
    cc: str = Field(description="kernel algorithm name of the flows")
    direction: Literal["forward", "reverse"] = "forward"
    flow: int | None = Field(default=None, ge=0, description="only this flow index of the scenario (parking lot C1: 0)")
    with_cc: str | None = Field(default=None, description="only runs where flows of this algorithm also run")
    without_cc: str | None = Field(default=None, description="only runs with no flow of this algorithm")
    params: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="only runs with these parameter values (e.g. sack: true for TCP SACK)"
    )

    def label(self) -> str:
        text = self.cc + (f" (flow {self.flow})" if self.flow is not None else "")
        if self.with_cc:
            text += f" with {self.with_cc}"
        if self.without_cc:
            text += f" without {self.without_cc}"
        if self.params:
            text += " (" + ", ".join(f"{k}={v}" for k, v in self.params.items()) + ")"
        return text


class Claim(BaseModel):
    """One claim of a paper (module doc)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    experiment: str
    source: str
    quote: str
    paper_numbers: str
    metric: Metric
    expect: Expect
    a: Side
    b: Side | None = Field(default=None, description="required unless expect is near")
    value: float | None = Field(default=None, description="expect near: the value a's mean should be near")
    pair_ignoring: list[str] = Field(
        default_factory=list, description="parameters left out of the condition (a side's params choose them)"
    )
    where: dict[str, list] = Field(default_factory=dict, description="parameter -> the values the claim is about")
    below: dict[str, float] = Field(default_factory=dict, description="parameter -> the claim is about values below")
    profiles: list[str] | None = Field(default=None, description="only runs of these profiles (default: any)")
    not_here: str | None = Field(
        default=None, description="why the quick reproduction cannot decide it on a machine like ours (2 cores, TCG)"
    )
    note: str = ""

    @field_validator("where", mode="before")
    @classmethod
    def _listify(cls, value):
        return {k: v if isinstance(v, list) else [v] for k, v in (value or {}).items()}

    @model_validator(mode="after")
    def _sides(self):
        if self.expect == "near" and self.value is None:
            raise ValueError("expect near needs value (what a's mean should be near)")
        if self.expect != "near" and self.b is None:
            raise ValueError(f"expect {self.expect} needs side b (what a is compared with)")
        return self

    def compared(self) -> str:
        if self.expect == "near":
            return f"{self.a.label()} {self.metric} near {self.value:g}"
        return f"{self.a.label()} vs {self.b.label()}, {self.metric}: expect {self.expect}"


class ClaimsError(Exception):
    """claims.yaml is not valid."""


def load_claims(path: Path = CLAIMS_FILE) -> list[Claim]:
    """The claims file, every entry validated; a bad entry names its index, id and field."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, list):
        raise ClaimsError(f"{path}: expected a list of claims")
    claims, problems = [], []
    for index, entry in enumerate(data):
        try:
            claims.append(Claim.model_validate(entry))
        except ValidationError as exc:
            name = entry.get("id", "?") if isinstance(entry, dict) else "?"
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"])
                problems.append(f"claim {index} ({name}): {where}: {error['msg']}")
    ids = [c.id for c in claims]
    problems += [f"claim id {i!r} appears twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    if problems:
        raise ClaimsError(f"{path}: " + "; ".join(problems))
    return claims


# ------------------------------------------------------------------------------------- the data


def flow_rows(analyses) -> pd.DataFrame:
    """One row per flow of every complete run: experiment, profile, params, seed, run, the flow's
    index, algorithm, direction and totals (metrics.flow_totals)."""
    frames = []
    for analysis in analyses:
        if analysis.status != "complete" or analysis.flow_totals.empty:
            continue
        manifest = analysis.manifest
        totals = analysis.flow_totals.copy()
        totals["experiment"] = manifest.get("scenario")
        totals["profile"] = manifest.get("profile")
        totals["params"] = [manifest.get("params") or {}] * len(totals)
        totals["point"] = manifest.get("point_id")
        totals["seed"] = manifest.get("seed")
        totals["run"] = str(analysis.run_dir)
        totals["kernel"] = (manifest.get("kernel") or {}).get("release")
        frames.append(totals)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def condition_of(experiment, profile, params: dict, ignoring=()) -> tuple:
    """What runs are paired by: experiment, profile and params but the algorithms (and ``ignoring``)."""
    kept = ((k, repr(v)) for k, v in params.items() if not is_cc_param(k) and k not in ignoring)
    return (experiment, profile, tuple(sorted(kept)))


def _condition_text(condition: tuple) -> str:
    params = ", ".join(f"{k}={v}" for k, v in condition[2])
    return params or "-"


def _matches_point(claim: Claim, params: dict, profile) -> bool:
    if claim.profiles is not None and profile not in claim.profiles:
        return False
    for key, values in claim.where.items():
        if key not in params or not any(_same_param(key, params[key], value) for value in values):
            return False
    for key, limit in claim.below.items():
        value = params.get(key)
        if not isinstance(value, int | float) or not value < limit:
            return False
    return True


def _same_param(key: str, value, wanted) -> bool:
    """A parameter's value is the wanted one; an algorithm parameter's by algorithm (westwood_ml is westwood)."""
    if is_cc_param(key) and isinstance(value, str) and isinstance(wanted, str):
        return algorithm_of(value) == algorithm_of(wanted)
    return value == wanted


def side_value(run_flows: pd.DataFrame, side: Side, metric: str) -> float:
    """The metric of a side's flows in one run (module doc); NaN when the run has none of them.

    Flows are matched by algorithm, not kernel name (``algorithm_of``): a side ``cc: westwood`` takes
    the instrumented ``westwood_ml`` flows too, never ``westwood_paper``'s (the papers' variant)."""
    params = run_flows["params"].iloc[0]
    if any(not _same_param(k, params.get(k), v) for k, v in side.params.items()):
        return math.nan
    algorithms = run_flows["cc"].map(algorithm_of)
    forward_algorithms = set(algorithms[run_flows["direction"] == "forward"])
    if side.with_cc and algorithm_of(side.with_cc) not in forward_algorithms:
        return math.nan
    if side.without_cc and algorithm_of(side.without_cc) in forward_algorithms:
        return math.nan
    chosen = run_flows[(algorithms == algorithm_of(side.cc)) & (run_flows["direction"] == side.direction)]
    if side.flow is not None:
        chosen = chosen[chosen["flow"] == side.flow]
    return metrics.group_metric(chosen, metric)


# ----------------------------------------------------------------------------------- the verdicts


@dataclass
class ConditionResult:
    condition: str
    a: list[float]
    b: list[float]
    difference: float  # mean(a) / mean(b) - 1
    p_value: float  # NaN with a single run on a side
    outcome: str  # higher / lower / similar (near: near / higher / lower)
    against_value: bool = False  # b is the claim's value, not runs

    def text(self, metric: str) -> str:
        unit = " Mbit/s" if "goodput" in metric else ""
        scale = 100 if metric == "retrans_ratio" else 1
        unit = " %" if metric == "retrans_ratio" else unit
        ma, mb = sum(self.a) / len(self.a) * scale, sum(self.b) / len(self.b) * scale
        runs = f"{len(self.a)} run{'s' * (len(self.a) != 1)} vs the paper's value" if self.against_value else (
            f"{len(self.a)} vs {len(self.b)} runs"
        )
        p = f", p = {self.p_value:.3f}" if not math.isnan(self.p_value) else ""
        noise = "" if self.against_value else _noise_text(self.a, self.b)
        shown = f"{self.difference:+.0%}, {runs}{p}{noise}"
        return f"{self.condition}: {ma:.3g} vs {mb:.3g}{unit} ({shown}): {self.outcome}"


def _noise_text(a: list[float], b: list[float]) -> str:
    """', noise N %, detectable D %': the runs' spread (pooled standard deviation over b's mean) and the
    smallest difference Welch's test finds at this spread and these sizes with 80 % power, as
    ``testbed regress`` reports it; '' with fewer than 2 runs a side (no spread to speak of)."""
    detectable = regression.detectable_change(b, a)
    if math.isnan(detectable) or math.isinf(detectable):
        return ""
    noise = detectable / (regression.power_factor(len(a) + len(b) - 2) * math.sqrt(1 / len(a) + 1 / len(b)))
    return f", noise {noise:.0%}, detectable {detectable:.0%}"


@dataclass
class Verdict:
    claim: Claim
    verdict: str  # reproduced / not reproduced / opposite / no data
    conditions: list[ConditionResult] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)

    @property
    def measured(self) -> str:
        if not self.conditions and self.claim.not_here:
            return f"not decided here: {self.claim.not_here}"
        if not self.conditions:
            if self.claim.b is None:
                return f"no run had {self.claim.a.label()} flows in {self.claim.experiment}"
            return (
                f"no run had both {self.claim.a.label()} and {self.claim.b.label()} flows at the same condition "
                f"of {self.claim.experiment}"
            )
        return "; ".join(c.text(self.claim.metric) for c in self.conditions)


def outcome(a: list[float], b: list[float]) -> tuple[float, float, str]:
    """(d, p, higher/lower/similar) of one condition by the module's rule."""
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    if mean_b == 0:
        difference = 0.0 if mean_a == 0 else math.inf
    else:
        difference = mean_a / mean_b - 1
    p_value = metrics.welch_t_test(a, b).p_value
    if len(a) >= 2 and len(b) >= 2:
        counts = abs(difference) > PRACTICAL and p_value < ALPHA
    else:
        counts = abs(difference) > SINGLE_RUN
    if not counts:
        return difference, p_value, "similar"
    return difference, p_value, "higher" if difference > 0 else "lower"


def judge(claim: Claim, flows: pd.DataFrame) -> Verdict:
    """The verdict of one claim on the flows of ``flow_rows`` (module doc)."""
    result = Verdict(claim=claim, verdict="no data")
    if flows.empty:
        return result
    own = flows[flows["experiment"] == claim.experiment]
    sides: dict[tuple, tuple[list[float], list[float]]] = {}
    kernels, profiles = set(), set()
    for _run, run_flows in own.groupby("run", sort=True):
        first = run_flows.iloc[0]
        if not _matches_point(claim, first["params"], first["profile"]):
            continue
        condition = condition_of(first["experiment"], first["profile"], first["params"], claim.pair_ignoring)
        a_value = side_value(run_flows, claim.a, claim.metric)
        b_value = side_value(run_flows, claim.b, claim.metric) if claim.b is not None else math.nan
        slot = sides.setdefault(condition, ([], []))
        if not math.isnan(a_value):
            slot[0].append(a_value)
        if not math.isnan(b_value):
            slot[1].append(b_value)
        if not (math.isnan(a_value) and math.isnan(b_value)):
            kernels.add(str(first["kernel"]))
            profiles.add(str(first["profile"]))
    for condition in sorted(sides, key=lambda c: [(k, _num(v)) for k, v in c[2]]):
        a, b = sides[condition]
        if claim.expect == "near" and a:
            difference = (sum(a) / len(a)) / claim.value - 1
            kind = "near" if abs(difference) <= NEAR else ("higher" if difference > 0 else "lower")
            result.conditions.append(ConditionResult(_condition_text(condition), a, [claim.value], difference,
                                                     math.nan, kind, against_value=True))  # fmt: skip
        elif a and b:
            difference, p_value, kind = outcome(a, b)
            result.conditions.append(ConditionResult(_condition_text(condition), a, b, difference, p_value, kind))
    result.kernels, result.profiles = sorted(kernels), sorted(profiles)
    if not result.conditions:
        return result
    outcomes = [c.outcome for c in result.conditions]
    half = len(outcomes) / 2
    expected = {"not_lower": "higher"}.get(claim.expect, claim.expect)
    opposite = OPPOSITE[claim.expect]
    if claim.expect == "not_lower":
        agree = opposite not in outcomes
    else:
        agree = outcomes.count(expected) > half and (opposite is None or opposite not in outcomes)
    if agree:
        result.verdict = "reproduced"
    elif opposite is not None and outcomes.count(opposite) > half:
        result.verdict = "opposite"
    else:
        result.verdict = "not reproduced"
    return result


def _num(text: str):
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def verdicts(analyses, claims: list[Claim] | None = None, flows: pd.DataFrame | None = None) -> list[Verdict]:
    """The verdict of every claim about an experiment that ran in ``analyses`` (or ``flows``, their
    ``flow_rows``, when already made)."""
    claims = load_claims() if claims is None else claims
    flows = flow_rows(analyses) if flows is None else flows
    ran = set(flows["experiment"]) if not flows.empty else set()
    return [judge(claim, flows) for claim in claims if claim.experiment in ran]


def verdict_counts(results: list[Verdict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    return counts
