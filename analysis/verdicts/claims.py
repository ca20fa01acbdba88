"""The papers' claims and their verdicts, computed from the runs (issue 6's reproduction report).

A claim (``analysis/verdicts/claims.yaml``, one entry per claim the papers state) compares one metric of two
groups of flows: side ``a`` and side ``b``, each chosen by algorithm (``westwood`` takes the flows of
``westwood_ml`` too, the same algorithm instrumented: the registry's ``algorithm``; ``westwood_paper``
is another algorithm) and, where needed, by the flow's index in the scenario (the parking lot's C1 is
flow 0) and by whether another algorithm shares the run (paper 001's friendliness: Reno with
Westwood+ vs Reno with Reno). Runs are paired by their
**condition**: experiment, profile and swept parameters other than the algorithms (``cc``,
``flows.1.cc``, ...), so Westwood+ at Bad = 10 ms is compared with New Reno at Bad = 10 ms.

The metric of a side in one run (complete and trustworthy runs only: ``judge``):

* ``goodput``: the mean sender goodput of its flows (paper 000 §3.1);
* ``recv_goodput``: the mean receiver goodput of its flows (what the receiving application read;
  paper 004's end-to-end throughput);
* ``total_goodput``: their sum (000 §3.2);
* ``jain``: Jain's index over its flows (000 §3.2; needs two flows or more);
* ``retrans_ratio``: their retransmitted / sent bytes.

**The rule**, written once here, printed next to every verdict and checked by simulation
(tests/unit/test_verdict_rule.py; docs/results.md states it for a reviewer). At each condition the
**effect** is side a relative to side b, tested on the log scale (analysis/verdicts/stats.py ``Effect``). Both
sides of a condition run the same seeds, and a seed gives both the same random numbers (its loss
pattern, its schedules), so the effect is **paired by seed** (``stats.seeded_effect``): the mean of the
seeds' log ratios ``ln(a_s / b_s)``, the paired t-test, ``d`` the geometric mean of the seeds' ratios
minus 1; the seed-to-seed spread both sides share drops out. A seed run twice on a side (two sessions
at the same seeds) is one replicate: its runs are averaged before pairing. Where the runs do not pair up
(fewer than two seeds on both) ``d = mean(a) / mean(b) - 1`` over the seeds' means with Welch's test
(delta method, Welch's degrees of freedom). Each verdict line says which. The kernel is part of a
condition: runs of two kernels are never paired nor pooled. Each claim states its bounds in
claims.yaml: higher/lower claims a practical ``margin`` (threshold, default 5 %) and ``paper_effect``,
the smallest effect the paper reports; similar, not_lower and near claims an equivalence or
non-inferiority ``margin`` with its reason. At each condition, one-sided t-tests at alpha = 0.05:

* ``higher``: **holds** when d is shown above +margin; **opposite** when shown below -margin;
  **absent** when shown below +margin (the practical threshold shown not reached); **short** when shown
  below the paper's effect (its interval excludes the paper's) with the threshold neither shown reached
  nor shown missed. Shown both above the margin and below the paper's effect, the claim holds and is
  marked **smaller than the paper's effect**. ``lower``: the mirror image. A label names what was
  shown: the same estimate reads "short of the paper's effect" at any precision that does not show the
  threshold missed, never "not reproduced".
* ``similar`` and ``near`` (a against the claim's ``value``): **holds** when d is shown inside the
  margin by two one-sided tests (TOST); **absent** when shown outside it (either way, Bonferroni over
  the two directions). No opposite.
* ``not_lower``: **holds** when d is shown above -margin (non-inferiority); **opposite** when shown
  below it. Where the paper reports a gain (``paper_effect``), the margin must be below it, and the
  direction is tested too: d shown below 0 is **absent** (the paper's gain shown not there), whatever
  the non-inferiority test says, so an effect shown in the other direction is never reproduced.
* Otherwise the condition is **undecided**, with the runs per side that would decide it at the
  measured noise with 80 % power, were the measured effect the truth.

Over a claim's conditions each finding's p-values are adjusted by Holm's procedure, so that the chance
of any wrong finding among them is at most 0.05. Then:

* **reproduced**: holds at more than half of the conditions, and no condition shows the opposite or an
  absence;
* **opposite**: the opposite shown at more than half of the conditions;
* **not reproduced**: the opposite or an absence shown at some condition (the effect is shown not there);
* **short of the paper**: nothing shown against the claim nor holding at more than half, and at some
  condition the effect shown short of the paper's (the threshold not shown either way);
* **undecided**: nothing shown against the claim, but not shown to hold at more than half (too few
  runs for the noise): the verdict says how many runs would decide it, and what that costs;
* **no data**: no condition had runs on both sides (the experiment, or its comparison, did not run).

A verdict is never typed in: it is always this rule applied to the runs' numbers.

Past 500 lines because a claim's model (what claims.yaml may say, checked as it loads) and the rule
that judges it read each other's fields at every step; where more runs would decide is
analysis/verdicts/seedplan.py, a claim's effect over windows of its runs analysis/verdicts/lengths.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from analysis.runs import metrics
from analysis.verdicts import stats
from analysis.verdicts.factors import ABLATE_PARAM, Ablations
from analysis.verdicts.flowrows import WINDOWED_METRICS, Window, flow_rows, windowed_flows
from testbed.scenario.algorithms import algorithm_of, is_cc_param

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
#: the setting of an explain run that is today's setup (analysis/verdicts/ablation.py): the only one claims judge
BASELINE_SETTING = "baseline"
ALPHA = stats.ALPHA
#: higher / lower claims: the practical threshold an effect must be shown beyond, unless the claim sets its own
THRESHOLD = 0.05
VERDICTS = ("reproduced", "opposite", "not reproduced", "short of the paper", "undecided")
#: verdicts a sequential design keeps looking past: more runs can still decide the claim's threshold
UNSETTLED = ("undecided", "short of the paper", "no data")

RULE = (
    "at each condition (same experiment, profile and parameters but the algorithm) the effect d is a's runs "
    "relative to b's on the log scale: paired by seed where both sides ran the same seeds (the geometric mean of "
    "the seeds' ratios, paired t-test), else mean(a) / mean(b) - 1 with Welch's test. One-sided tests at "
    f"{ALPHA:g} (at a look of a sequential design, that look's share of it), Holm-adjusted over the claim's "
    "conditions: higher/lower claims hold where the effect is shown "
    f"beyond the claim's threshold ({THRESHOLD:.0%} unless stated), are opposite where shown beyond it the other "
    "way, absent where shown within the threshold, short where shown smaller than the paper's effect with the "
    "threshold not shown (holds and short: reproduced, smaller than the paper's effect); similar/near claims hold "
    "where equivalence within the claim's margin is shown (TOST), absent where a difference beyond it is shown; "
    "not_lower claims hold where non-inferiority within the margin is shown, and where the paper reports a gain "
    "are absent where shown below no difference. Reproduced: holds at more than half of the conditions and "
    "nothing shown against it; opposite: the opposite at more than half; not reproduced: the opposite or an "
    "absence shown at some condition; short of the paper: otherwise, short of the paper's effect at some "
    "condition; undecided: otherwise (with the runs per side that would decide it)."
)

Metric = Literal["goodput", "recv_goodput", "total_goodput", "jain", "retrans_ratio"]
Expect = Literal["higher", "lower", "similar", "not_lower", "near"]


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


class Confirmation(BaseModel):
    """A warm-up chosen on some seeds' runs, confirmed on others' (issue 61: an analysis is fixed before
    the data that judge it)."""

    model_config = ConfigDict(extra="forbid")
    chosen_on: list[int] = Field(min_length=1, description="the seeds whose runs chose the warm-up")
    seeds: list[int] = Field(min_length=2, description="the seeds it was confirmed on, none of chosen_on")
    session: str = Field(min_length=1, description="the confirmation's session (suite file and seeds, or folder)")
    result: str = Field(min_length=1, description="what the confirmation measured, with the warm-up left out")

    @model_validator(mode="after")
    def _fresh(self):
        if overlap := sorted(set(self.seeds) & set(self.chosen_on)):
            raise ValueError(f"seeds {overlap} chose the warm-up: confirm it on seeds that took no part in choosing")
        return self


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
    margin: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="similar, not_lower, near: the equivalence / non-inferiority margin (relative, e.g. 0.1: "
        "within -9 % to +10 %); higher, lower: the practical threshold (default 0.05)",
    )
    margin_reason: str = Field(
        default="",
        description="why this margin: what difference would matter, and "
        "why it is smaller than the effects the paper reports",
    )
    paper_effect: float | None = Field(
        default=None,
        description="higher, lower: the smallest effect the paper "
        "reports (relative, signed: 0.34 for +34 %, -0.5 for half); not_lower: the "
        "gain the paper reports, which the margin must stay below",
    )
    paper_effect_from: str = Field(default="", description="where paper_effect comes from in the paper")
    warmup_s: float | None = Field(
        default=None,
        gt=0,
        description="goodput claims: the first seconds of each run "
        "left out of the metric (slow start's transient; testbed lengths measures it)",
    )
    warmup_from: str = Field(default="", description="what showed the warm-up to be needed and enough")
    warmup_confirmed: Confirmation | None = Field(
        default=None, description="warmup_s: its confirmation on seeds that took no part in choosing it"
    )
    not_here: str | None = Field(
        default=None, description="why the quick reproduction cannot decide it on a machine like ours (2 cores, TCG)"
    )
    note: str = ""
    ablations: Ablations | None = Field(
        default=None, description="where and how testbed explain ablates it (analysis/verdicts/factors.py)"
    )

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
        if self.expect in ("higher", "lower"):
            self.margin = THRESHOLD if self.margin is None else self.margin
            sign = 1 if self.expect == "higher" else -1
            if self.paper_effect is None or not self.paper_effect_from:
                raise ValueError(
                    f"expect {self.expect} needs paper_effect (the smallest effect the paper reports, "
                    "e.g. 0.34 for +34 %) and paper_effect_from (where it comes from)"
                )
            if sign * self.paper_effect <= self.margin:
                raise ValueError(
                    f"paper_effect {self.paper_effect:+g} is not {self.expect} than the threshold "
                    f"{sign * self.margin:+g}: nothing could tell the paper's effect from no "
                    "effect"
                )
        elif self.margin is None or not self.margin_reason:
            raise ValueError(
                f"expect {self.expect} needs margin (the equivalence or non-inferiority margin, e.g. 0.1) "
                "and margin_reason (why that margin)"
            )
        if self.warmup_s is not None and (self.metric not in WINDOWED_METRICS or not self.warmup_from):
            raise ValueError(
                f"warmup_s needs a goodput metric ({', '.join(WINDOWED_METRICS)}), not {self.metric}, "
                "and warmup_from (what showed it)"
            )
        if self.warmup_s is not None and self.warmup_confirmed is None:
            raise ValueError(
                "warmup_s needs warmup_confirmed: chosen_on (the seeds that chose it), seeds (others it "
                "was confirmed on), session and result; a window chosen on runs is confirmed on "
                "seeds that took no part in choosing it"
            )
        if self.expect == "not_lower" and self.paper_effect is not None:
            # a margin as large as the paper's gain would pass an a below b by what the paper has it above
            if not self.paper_effect_from or not 0 < self.margin < self.paper_effect:
                raise ValueError(
                    f"not_lower: the margin {self.margin:g} must be below the paper's gain "
                    f"paper_effect {self.paper_effect:g} (and paper_effect_from say where it comes "
                    "from); give a smaller margin, or leave paper_effect out where the paper reports "
                    "no gain"
                )
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


def condition_of(experiment, profile, params: dict, ignoring=()) -> tuple:
    """What runs are paired by: experiment, profile and params but the algorithms (and ``ignoring``)."""
    kept = ((k, repr(v)) for k, v in params.items() if not is_cc_param(k) and k not in ignoring)
    return (experiment, profile, tuple(sorted(kept)))


def _condition_text(condition: tuple) -> str:
    """'loss_pct=5, 30 s runs' or 'loss_pct=5, 5-20 s of 20 s runs': the parameters, and the runs' length
    and the window measured where known."""
    params = ", ".join(f"{k}={v}" for k, v in condition[2]) or "-"
    duration, start = (condition[3], condition[4]) if len(condition) > 4 else (None, None)
    if duration is None:
        return params
    if not start:
        return f"{params}, {duration:g} s runs"
    return f"{params}, {start:g}-{duration:g} s of {duration:g} s runs"


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

#: what a condition can show, per claim kind (module doc): ``holds`` (the claim's effect), ``opposite``,
#: ``absent`` (the threshold shown missed; similar and near: a difference beyond the margin; not_lower
#: with a paper's gain: shown below no difference) and ``short`` (higher, lower: shown short of the paper's
#: effect, the threshold not shown). In this order of precedence where several are shown at one condition,
#: but a condition where the claim holds and is shown short too is "holds, smaller than the paper's".
FINDINGS = ("opposite", "absent", "holds", "short")


@dataclass
class ConditionResult:
    """One condition of a claim: both sides' runs, the effect with its interval and what it shows."""

    condition: str
    a: list[float]
    b: list[float]
    effect: stats.Effect | None
    finding: str  # holds / opposite / absent / short / undecided
    p_values: dict[str, float] = field(default_factory=dict)  # finding -> Holm-adjusted one-sided p
    seeds_needed: int | None = None  # per side, to decide it at the measured noise (undecided only)
    wall_s: float = math.nan  # one run's mean wall time here
    against_value: bool = False  # b is the claim's value, not runs
    points: dict[str, int] = field(default_factory=dict)  # point id -> its runs at this condition
    #: higher / lower: the claim holds here and the effect is also shown short of the paper's
    smaller: bool = False
    #: the level its tests were made at (a sequential design's look: less than 0.05); its intervals follow it
    alpha: float = ALPHA

    @property
    def difference(self) -> float:
        return self.effect.relative if self.effect else math.nan

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        return self.effect.interval(confidence) if self.effect else (math.nan, math.nan)

    def text(self, claim: Claim) -> str:
        """'bad_s=0.1: 1.06 vs 0.676 Mbit/s, +57 % (95 % interval +18 % to +114 %), 3 vs 3 runs: shown above +5 %
        (p = 0.010)'."""
        metric = claim.metric
        scale = 100 if metric == "retrans_ratio" else 1
        unit = " %" if metric == "retrans_ratio" else (" Mbit/s" if "goodput" in metric else "")
        ma, mb = sum(self.a) / len(self.a) * scale, sum(self.b) / len(self.b) * scale
        runs = (
            f"{len(self.a)} run{'s' * (len(self.a) != 1)} vs the paper's value"
            if self.against_value
            else f"{len(self.a)} vs {len(self.b)} runs"
        )
        if self.effect is not None and not self.against_value:
            runs += f", {self.effect.test}" if self.effect.paired else ", Welch (unpaired)"
        low, high = self.interval(1 - self.alpha)  # two-sided at the look's level: 95 % at 0.05
        shown = f"{self.difference:+.0%}" if self.effect else "no ratio (a mean of 0)"
        if not math.isnan(low):
            shown += f" ({_percent_level(1 - self.alpha)} interval {low:+.0%} to {high:+.0%})"
        return f"{self.condition}: {ma:.3g} vs {mb:.3g}{unit}, {shown}, {runs}: {finding_text(claim, self)}"


def _percent_level(confidence: float) -> str:
    """'95 %', '98.2 %': a confidence level as the interval's label."""
    return f"{100 * confidence:.3g} %"


def bounds(claim: Claim) -> dict[str, float]:
    """The relative bounds the claim's tests use: ``low``/``high`` the margin around no difference (for
    similar, not_lower and near: ``high = margin`` and ``low = 1 / (1 + margin) - 1``, symmetric on the
    log scale; for higher and lower the practical threshold), ``paper`` the paper's effect."""
    margin = claim.margin
    return {
        "low": 1 / (1 + margin) - 1,
        "high": margin,
        "paper": claim.paper_effect if claim.paper_effect is not None else math.nan,
    }


def one_sided_p(claim: Claim, effect: stats.Effect) -> dict[str, float]:
    """The one-sided p of each finding the claim can have at one condition, before the correction (module doc)."""
    b = bounds(claim)
    if claim.expect == "higher":
        return {
            "holds": effect.p_above(b["high"]),
            "opposite": effect.p_below(b["low"]),
            "absent": effect.p_below(b["high"]),
            "short": effect.p_below(b["paper"]),
        }
    if claim.expect == "lower":
        return {
            "holds": effect.p_below(b["low"]),
            "opposite": effect.p_above(b["high"]),
            "absent": effect.p_above(b["low"]),
            "short": effect.p_above(b["paper"]),
        }
    if claim.expect == "not_lower":
        # where the paper reports a gain, an effect shown below no difference is against it (module doc)
        against = effect.p_below(0.0) if claim.paper_effect is not None else math.nan
        return {
            "holds": effect.p_above(b["low"]),
            "opposite": effect.p_below(b["low"]),
            "absent": against,
            "short": math.nan,
        }
    # similar and near: equivalence by two one-sided tests; a difference beyond the margin either way
    outside = min(1.0, 2 * min(effect.p_above(b["high"]), effect.p_below(b["low"])))
    return {
        "holds": max(effect.p_above(b["low"]), effect.p_below(b["high"])),
        "opposite": math.nan,
        "absent": outside,
        "short": math.nan,
    }


def seeds_needed(claim: Claim, effect: stats.Effect | None, alpha: float) -> int | None:
    """Runs per side at which the finding nearest to the measured effect would be shown at ``alpha`` with
    80 % power, were the measured effect and noise the truth; None when no number of seeds decides it."""
    if effect is None:
        return None
    b = bounds(claim)
    if claim.expect in ("similar", "near"):
        # both one-sided tests must succeed: each at power 90 % so that both do at 80 % at least
        both = 1 - (1 - stats.POWER) / 2
        inside = [
            effect.seeds_to_show(b["low"], True, alpha, both),
            effect.seeds_to_show(b["high"], False, alpha, both),
        ]
        options = [max(inside)] if None not in inside else []
        options += [effect.seeds_to_show(b["high"], True, alpha / 2), effect.seeds_to_show(b["low"], False, alpha / 2)]
    elif claim.expect in ("higher", "lower"):
        # the threshold decides (holds, or absent: shown missed); short of the paper's effect decides nothing
        threshold = b["high"] if claim.expect == "higher" else b["low"]
        options = [effect.seeds_to_show(threshold, True, alpha), effect.seeds_to_show(threshold, False, alpha)]
    else:  # not_lower: non-inferiority or the opposite; with a paper's gain, shown below no difference too
        options = [effect.seeds_to_show(b["low"], True, alpha), effect.seeds_to_show(b["low"], False, alpha)]
        if claim.paper_effect is not None:
            options.append(effect.seeds_to_show(0.0, False, alpha))
    found = [n for n in options if n is not None]
    return min(found) if found else None


def finding_text(claim: Claim, result: ConditionResult) -> str:
    """What one condition shows, with its test's adjusted p; undecided with the seeds that would decide it."""
    b, p = bounds(claim), result.p_values
    if result.effect is None:
        return "undecided (no ratio: a side's mean is 0)"
    if math.isnan(result.effect.se):
        return "undecided (one run on a side: no noise estimate)"
    texts = {
        ("higher", "holds"): f"shown above {b['high']:+.0%}",
        ("lower", "holds"): f"shown below {b['low']:+.0%}",
        ("not_lower", "holds"): f"shown not below {b['low']:+.0%} (non-inferiority)",
        ("higher", "opposite"): f"shown below {b['low']:+.0%}: the opposite",
        ("lower", "opposite"): f"shown above {b['high']:+.0%}: the opposite",
        ("not_lower", "opposite"): f"shown below {b['low']:+.0%}: the opposite",
        ("higher", "absent"): f"shown below {b['high']:+.0%}: the threshold missed",
        ("lower", "absent"): f"shown above {b['low']:+.0%}: the threshold missed",
        ("not_lower", "absent"): f"shown below 0, against the paper's gain of {b['paper']:+.0%}",
        ("higher", "short"): f"shown below the paper's {b['paper']:+.0%}, the {b['high']:+.0%} threshold not shown",
        ("lower", "short"): f"shown above the paper's {b['paper']:+.0%}, the {b['low']:+.0%} threshold not shown",
    }
    kind = "similar" if claim.expect in ("similar", "near") else claim.expect
    if kind == "similar":
        texts[(kind, "holds")] = f"shown within {b['low']:+.0%} to {b['high']:+.0%} (equivalence, TOST)"
        texts[(kind, "absent")] = f"shown outside {b['low']:+.0%} to {b['high']:+.0%}"
    if result.smaller:
        return (
            f"{texts[(kind, 'holds')]} (p = {p['holds']:.3g}), and short of the paper's {b['paper']:+.0%} "
            f"(p = {p['short']:.3g}): smaller than the paper's effect"
        )
    if result.finding in FINDINGS:
        return f"{texts[(kind, result.finding)]} (p = {p[result.finding]:.3g})"
    needed = result.seeds_needed
    if needed is None:
        return "undecided (no number of seeds decides it at this estimate)"
    if needed > stats.SEED_LIMIT:
        return f"undecided (more than {stats.SEED_LIMIT} runs per side would be needed)"
    return f"undecided (about {needed} runs per side would decide it)"


@dataclass
class Verdict:
    claim: Claim
    verdict: str  # reproduced / opposite / not reproduced / undecided / no data
    conditions: list[ConditionResult] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    #: the conclusion of the claim's latest `testbed explain` (analysis/verdicts/ablation.py), set by the report
    explained: str = ""
    #: the level its tests were made at (less than 0.05 at a look of a sequential design)
    alpha: float = ALPHA
    #: runs left out because their fidelity checks failed: why (the failed checks) -> how many
    left_out: dict[str, int] = field(default_factory=dict)
    #: the verdict those runs would have given, had they counted ('' when none was left out)
    with_untrusted: str = ""
    #: how the session's design judged it, where that is not simply "this look": decided at an earlier look
    #: (which, on how many runs), provisional, or exploratory (analysis/verdicts/sequential.py)
    design_note: str = ""

    def left_out_text(self) -> str:
        """'2 untrustworthy runs left out (cpu headroom: 2); with them: reproduced, the same verdict'."""
        if not self.left_out:
            return ""
        runs = sum(self.left_out.values())
        why = "; ".join(f"{reason}: {n}" for reason, n in sorted(self.left_out.items()))
        same = "the same verdict" if self.with_untrusted == self.verdict else "a different verdict"
        return (
            f"{runs} untrustworthy run{'s' * (runs != 1)} left out ({why}); with them the verdict would be "
            f"{self.with_untrusted}: {same}"
        )

    @property
    def smaller(self) -> bool:
        """Reproduced, and at some condition the effect is shown short of the paper's."""
        return self.verdict == "reproduced" and any(c.smaller or c.finding == "short" for c in self.conditions)

    @property
    def label(self) -> str:
        """The verdict as shown: 'reproduced, smaller than the paper's effect' where that is shown too."""
        if self.verdict == "short of the paper":
            return "short of the paper's effect (threshold not shown)"
        return "reproduced, smaller than the paper's effect" if self.smaller else self.verdict

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
        return "; ".join(c.text(self.claim) for c in self.conditions)

    def cost(self) -> tuple[int, float]:
        """(runs, seconds here) to bring every undecided condition to the runs per side that would decide
        it; (0, 0) when none can be decided by more seeds within ``stats.SEED_LIMIT``."""
        runs, seconds = 0, 0.0
        for c in self.conditions:
            if c.finding in ("undecided", "short") and c.seeds_needed and c.seeds_needed <= stats.SEED_LIMIT:
                more = max(0, c.seeds_needed - len(c.a)) + (0 if c.against_value else max(0, c.seeds_needed - len(c.b)))
                runs += more
                seconds += more * (c.wall_s if not math.isnan(c.wall_s) else 0.0)
        return runs, seconds

    def cost_text(self, hosts: int = 4) -> str:
        """'24 more runs (about 12 min here, 3 min on 4 hosts)', '' when nothing is undecided."""
        runs, seconds = self.cost()
        if self.verdict not in ("undecided", "short of the paper") or not runs:
            return ""
        return (
            f"{runs} more runs would decide it (about {seconds / 60:.0f} min here, {seconds / 60 / hosts:.0f} min "
            f"on {hosts} hosts)"
        )


def decide(claim: Claim, results: list[ConditionResult], alpha: float = ALPHA, plan: bool = True) -> str:
    """Adjust each finding's p over the claim's conditions (Holm), classify each condition and combine them
    into the claim's verdict (module doc). Fills in each result's ``finding``, ``p_values`` and, with ``plan``,
    ``seeds_needed``."""
    raw = [one_sided_p(claim, r.effect) if r.effect else dict.fromkeys(FINDINGS, math.nan) for r in results]
    for finding in FINDINGS:
        for r, adjusted in zip(results, stats.holm([p[finding] for p in raw]), strict=True):
            r.p_values[finding] = adjusted
    for r in results:
        r.alpha = alpha
        r.finding = next((f for f in FINDINGS if r.p_values[f] < alpha), "undecided")
        r.smaller = r.finding == "holds" and r.p_values["short"] < alpha
        if plan and r.finding in ("undecided", "short"):  # Holm's first step is Bonferroni's: alpha over them
            r.seeds_needed = seeds_needed(claim, r.effect, alpha / len(results))
    findings = [r.finding for r in results]
    half = len(findings) / 2
    if findings.count("opposite") > half:
        return "opposite"
    if "opposite" in findings or "absent" in findings:
        return "not reproduced"
    if findings.count("holds") > half:
        return "reproduced"
    return "short of the paper" if "short" in findings else "undecided"


def judge(claim: Claim, flows: pd.DataFrame, alpha: float = ALPHA) -> Verdict:
    """The verdict of one claim on the flows of ``flow_rows`` (module doc), its tests at ``alpha`` (less
    than 0.05 at a look of a sequential design: analysis/verdicts/sequential.py). Only trustworthy runs decide:
    the runs whose fidelity checks failed are left out and counted by why, and the claim is judged again
    with them to say whether they would have changed the verdict."""
    left = flows["untrusted"].astype(bool) if not flows.empty and "untrusted" in flows else None
    if left is None or not left.any():
        return _judge(claim, flows, alpha)
    untrusted = flows[left]
    result = _judge(claim, flows[~left], alpha)
    for _run, run_flows in untrusted[untrusted["experiment"] == claim.experiment].groupby("run", sort=True):
        first = run_flows.iloc[0]
        if _matches_point(claim, first["params"], first["profile"]):
            result.left_out[first["untrusted"]] = result.left_out.get(first["untrusted"], 0) + 1
    if result.left_out:
        result.with_untrusted = _judge(claim, flows, alpha).verdict
    return result


def _judge(claim: Claim, flows: pd.DataFrame, alpha: float) -> Verdict:
    """:func:`judge` on the runs given, whatever their fidelity."""
    result = Verdict(claim=claim, verdict="no data")
    if flows.empty:
        return result
    sides, points, kernels, profiles = _gather(claim, flows[flows["experiment"] == claim.experiment])
    several_kernels = len({c[5] for c in sides}) > 1
    for condition in sorted(sides, key=lambda c: ([(k, _num(v)) for k, v in c[2]], c[5])):
        a_runs, b_runs, walls = sides[condition]
        text = _condition_text(condition) + (f", kernel {condition[5]}" if several_kernels else "")
        a, b = [v for _, v in a_runs], [v for _, v in b_runs]
        wall = sum(walls) / len(walls) if walls else math.nan
        counted = points.get(condition, {})
        if claim.expect == "near" and a:
            effect = stats.ratio_to_value(a, claim.value)
            result.conditions.append(
                ConditionResult(
                    text, a, [claim.value], effect, "undecided", wall_s=wall, against_value=True, points=counted
                )
            )
        elif a and b:
            effect = stats.seeded_effect(a_runs, b_runs)
            result.conditions.append(ConditionResult(text, a, b, effect, "undecided", wall_s=wall, points=counted))
    result.kernels, result.profiles = sorted(kernels), sorted(profiles)
    if result.conditions:
        result.verdict = decide(claim, result.conditions, alpha)
        result.alpha = alpha
    return result


def _gather(claim: Claim, own: pd.DataFrame) -> tuple[dict, dict, set, set]:
    """The claim's runs by condition: per condition its sides' (seed, value) and its runs' wall times, the
    runs per point, and the kernels and profiles that gave a value."""
    sides: dict[tuple, tuple[list[tuple], list[tuple], list[float]]] = {}  # (seed, value) per side, walls
    points: dict[tuple, dict[str, int]] = {}
    kernels, profiles = set(), set()
    for _run, run_flows in own.groupby("run", sort=True):
        first = run_flows.iloc[0]
        if not _matches_point(claim, first["params"], first["profile"]):
            continue
        if first["params"].get(ABLATE_PARAM, BASELINE_SETTING) != BASELINE_SETTING:
            continue  # a `testbed explain` run with a factor set as the paper had it: not today's setup
        condition = _run_condition(claim, first)
        a_value = side_value(run_flows, claim.a, claim.metric)
        b_value = side_value(run_flows, claim.b, claim.metric) if claim.b is not None else math.nan
        slot = sides.setdefault(condition, ([], [], []))
        seed = first.get("seed")
        if not math.isnan(a_value):
            slot[0].append((seed, a_value))
        if not math.isnan(b_value):
            slot[1].append((seed, b_value))
        if not (math.isnan(a_value) and math.isnan(b_value)):
            kernels.add(str(first["kernel"]))
            profiles.add(str(first["profile"]))
            slot[2].append(float(first.get("wall_s", math.nan)))
            counted = points.setdefault(condition, {})
            counted[str(first.get("point"))] = counted.get(str(first.get("point")), 0) + 1
    return sides, points, kernels, profiles


def _run_condition(claim: Claim, first: pd.Series) -> tuple:
    """A run's condition, its window and its kernel: runs that share it are pooled (and paired by seed)."""
    condition = condition_of(first["experiment"], first["profile"], first["params"], claim.pair_ignoring)
    # runs of another length are another experiment (the effect moves with it: docs/experiments.md)
    duration = metrics.number_or_nan(first.get("duration_s"))
    start = metrics.number_or_nan(first.get("window_from_s"))
    # None and 0, not NaN: NaN != NaN as a key
    condition += (None if math.isnan(duration) else duration, 0.0 if math.isnan(start) else start)
    return condition + (str(first["kernel"]),)  # two kernels' runs are never paired nor pooled


def _num(text: str):
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def verdicts(
    analyses,
    claims: list[Claim] | None = None,
    flows: pd.DataFrame | None = None,
    alpha: float | Callable[[str], float] = ALPHA,
) -> list[Verdict]:
    """The verdict of every claim about an experiment that ran in ``analyses`` (or ``flows``, their
    ``flow_rows``, when already made), at ``alpha`` (or ``alpha(claim id)``: a sequential design's level for
    that claim, analysis/verdicts/sequential.py)."""
    claims = load_claims() if claims is None else claims
    flows = flow_rows(analyses) if flows is None else flows
    ran = set(flows["experiment"]) if not flows.empty else set()
    level = alpha if callable(alpha) else (lambda _claim_id: alpha)
    return [
        judge(claim, measured_flows(claim, flows, analyses), level(claim.id))
        for claim in claims
        if claim.experiment in ran
    ]


def measured_flows(claim: Claim, flows: pd.DataFrame, analyses) -> pd.DataFrame:
    """The flows a claim is judged on: with ``warmup_s``, each run's goodput after its warm-up (from the
    runs' traces: analysis/verdicts/flowrows.py); the whole runs when there are no analyses to window (the flows
    alone) or the claim has no warm-up."""
    if claim.warmup_s is None or analyses is None:
        return flows
    own = [a for a in analyses if a.status == "complete" and a.manifest.get("scenario") == claim.experiment]
    return windowed_flows(own, Window(claim.warmup_s, None))


def verdict_counts(results: list[Verdict]) -> dict[str, int]:
    """Claims per verdict; ``smaller``: the reproduced ones whose effect is shown short of the paper's."""
    counts: dict[str, int] = {}
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    if smaller := sum(result.smaller for result in results):
        counts["smaller"] = smaller
    return counts


def effects_table(results: list[Verdict]) -> pd.DataFrame:
    """One row per judged condition: the claim, its verdict, the effect with its two-sided interval at the
    claim's level (95 % at 0.05; ``low``/``high``) and the one the one-sided tests decide by (90 % at 0.05;
    ``low90``/``high90``), at a sequential design's look both at that look's level, the level itself, the
    paper's effect, the margin's bounds and what the condition shows (the forest plot's and the summary's
    table)."""
    rows = []
    for v in results:
        b = bounds(v.claim) if v.conditions else {}
        for c in v.conditions:
            low, high = c.interval(1 - v.alpha)
            low90, high90 = c.interval(1 - 2 * v.alpha)
            paper = b["paper"] if v.claim.expect in ("higher", "lower") else math.nan
            rows.append(
                {
                    "claim": v.claim.id,
                    "condition": c.condition,
                    "verdict": v.verdict,
                    "expect": v.claim.expect,
                    "effect": c.difference,
                    "low": low,
                    "high": high,
                    "low90": low90,
                    "high90": high90,
                    "paper": paper,
                    "margin_low": b["low"],
                    "margin_high": b["high"],
                    "finding": c.finding,
                    "alpha": v.alpha,
                    "runs": f"{len(c.a)} vs {'value' if c.against_value else len(c.b)}",
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "claim",
            "condition",
            "verdict",
            "expect",
            "effect",
            "low",
            "high",
            "low90",
            "high90",
            "paper",
            "margin_low",
            "margin_high",
            "finding",
            "alpha",
            "runs",
        ],
    )
