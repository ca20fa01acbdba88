"""Why a claim is not reproduced, by experiment: the claim's deciding condition run with each way today's
setup differs from the paper's set back to the paper's, alone and all together (``testbed explain``).

A claim's **factors** (``ablations`` in ``analysis/verdicts/claims.yaml``) are switches the testbed can set on every
flow of a point: the algorithm's variant (mainline Westwood+ or the papers' pseudo-code, ``westwood_paper``),
SACK, RACK, TLP, F-RTO, delayed ACKs, the initial window, and the run's length; each with the paper's
setting and why it could matter. A factor the testbed or this kernel cannot switch names itself and says
why (``unavailable``); it is listed, never run.

**The rule**, on the effect the claim is about (``d = mean(a) / mean(b) - 1``, analysis/verdicts/stats.py ``Effect``),
at each *setting* (the baseline: today's defaults; each factor alone at the paper's setting; all of them
together):

* what the setting shows about the claim: the claim's own tests (analysis/verdicts/claims.py: holds, opposite,
  absent or undecided), Holm-adjusted over the settings as over a claim's conditions;
* how far the setting **moves** the effect from the baseline: the ratio of the two effects, on the log
  scale; every setting runs the same seeds, so the move is paired by seed (each seed's log ratio at the
  setting minus the baseline's at that seed, analysis/verdicts/stats.py ``effect_shift``; the two effects' combined
  error with Welch's degrees of freedom where the runs do not pair). Tested **two-sided** (a move either
  way), Holm-adjusted over the settings, at alpha = 0.05; a move shown is *towards* the paper's effect
  (the claim's ``paper_effect``, or no difference for similar and not_lower claims) or *away* from it by
  its sign. (A one-sided test in the direction the baseline happened to lie from the paper's would err
  about twice its alpha when the baseline sits at the paper's effect.) Where no move is shown, the
  smallest move the runs could have shown (80 % power) is given, so "no move shown" is never read as
  "no move".

A factor **explains** the claim when, set as the paper had it, the claim holds and the move towards the
paper's effect is shown. The conclusion: **explained by X** (one factor or more explain it); **partly
explained** (a factor, or all together, moves the effect towards the paper's, shown, without the claim then
holding; or only all together make it hold); **not explained by these factors** (no move towards the
paper's shown, with the smallest the runs could show); **nothing to explain** (the claim holds at the
baseline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel

from analysis.verdicts import claims, stats
from analysis.verdicts.claims import Claim, ConditionResult, Side
from analysis.verdicts.factors import ABLATE_PARAM, Factor
from testbed.results import rundir
from testbed.scenario.algorithms import algorithm_of

#: a setting's label for today's defaults, and for every factor at the paper's setting together
BASELINE = claims.BASELINE_SETTING
ALL = "all"


def flow_changes(name: str, factor: Factor) -> dict:
    """The flow fields a factor sets (``variant`` and ``length`` are set on the point, not as flow fields)."""
    return {} if name in ("variant", "length") else {name: factor.setting()}


def mapped_side(side: Side | None, variant: str | None) -> Side | None:
    """A claim's side as the ``variant`` setting runs it: its Westwood+ flows are the variant's."""
    if side is None or variant is None or algorithm_of(side.cc) != "westwood":
        return side
    return side.model_copy(update={"cc": variant})


# -------------------------------------------------------------------------------------------- judging


@dataclass
class SettingResult:
    """One setting: what the claim shows there and how far the effect moved from the baseline."""

    setting: str
    condition: ConditionResult
    shift: stats.Effect | None = None
    shift_p: float = math.nan  # Holm-adjusted, one-sided towards the paper's effect
    detectable_shift: float = math.nan  # the smallest move towards the paper's these runs show at 80 % power
    outcome: str = ""  # to the paper's / towards the paper's / away from the paper's / no move shown / baseline


@dataclass
class Explanation:
    claim: Claim
    conclusion: str
    settings: list[SettingResult] = field(default_factory=list)
    target: float = math.nan  # the paper's effect the moves are tested towards
    factors: dict[str, Factor] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The conclusion, then one line per setting (the terminal's and explanation.md's text)."""
        out = [f"{self.claim.id}: {self.conclusion}"]
        for s in self.settings:
            what = s.condition.text(self.claim)
            move = ""
            if s.setting != BASELINE and s.shift is not None:
                low, high = s.shift.interval()
                move = (
                    f"; moved {s.shift.relative:+.0%} from the baseline's effect (95 % interval {low:+.0%} to "
                    f"{high:+.0%}): {s.outcome}"
                )
            out.append(f"  {what}{move}")
        return out


def target_effect(claim: Claim) -> float:
    """The effect the paper reports (relative): ``paper_effect``, or no difference for similar and not_lower."""
    return claim.paper_effect if claim.paper_effect is not None else 0.0


Runs = list[tuple[object, float]]  # (seed, value) of one side at one setting


def judge_settings(
    claim: Claim,
    samples: dict[str, tuple[Runs, Runs]],
    factors: dict[str, Factor],
    walls: dict[str, float] | None = None,
    alpha: float = stats.ALPHA,
) -> Explanation:
    """The explanation from each setting's runs of side a and side b (``samples[setting] = (a, b)``, each
    a list of ``(seed, value)``, the baseline's among them): the module doc's rule."""
    walls = walls or {}
    order = [BASELINE, *[name for name in factors if name in samples], *([ALL] if ALL in samples else [])]
    results = [
        ConditionResult(
            name,
            [v for _, v in samples[name][0]],
            [v for _, v in samples[name][1]],
            stats.seeded_effect(*samples[name]),
            "undecided",
            wall_s=walls.get(name, math.nan),
        )
        for name in order
        if name in samples
    ]
    explanation = Explanation(
        claim, "not judged: the baseline has no runs on both sides", factors=factors, target=target_effect(claim)
    )
    if not results or results[0].condition != BASELINE or results[0].effect is None:
        return explanation
    claims.decide(claim, results, alpha)
    base = results[0]
    towards_up = math.log1p(explanation.target) > base.effect.log_ratio
    settings = [SettingResult(BASELINE, base, outcome="baseline")]
    raw = []
    for r in results[1:]:
        shift = stats.effect_shift(r.effect, base.effect) if r.effect else None
        raw.append(math.nan if shift is None else shift.p_two_sided(0.0))
        settings.append(SettingResult(r.condition, r, shift))
    for s, adjusted in zip(settings[1:], stats.holm(raw), strict=True):
        s.shift_p = adjusted
        s.outcome = _outcome(s, towards_up, alpha, len(raw))
    explanation.settings = settings
    explanation.conclusion = _conclusion(claim, settings)
    return explanation


def _outcome(s: SettingResult, towards_up: bool, alpha: float, tests: int) -> str:
    if s.shift is None or math.isnan(s.shift.se):
        return "no move can be shown (a side has fewer than two runs)"
    towards = (s.shift.log_ratio > 0) == towards_up
    if s.shift_p < alpha and towards:
        held = s.condition.finding == "holds"
        return (
            f"to the paper's: the claim holds (p = {s.shift_p:.3g})"
            if held
            else f"towards the paper's, the claim still not shown (p = {s.shift_p:.3g})"
        )
    if s.shift_p < alpha:
        return f"away from the paper's (p = {s.shift_p:.3g})"
    # Holm's first step is Bonferroni's; each direction of the two-sided test gets half
    s.detectable_shift = s.shift.detectable(alpha / tests, sides=2)
    text = f"no move shown (these runs would show one of {s.detectable_shift:.0%} or more"
    needed = s.shift.seeds_to_show(0.0, towards_up, alpha / tests / 2)  # were the measured move the truth
    if needed is not None and needed <= stats.SEED_LIMIT:
        text += f"; about {needed} runs a side would show the {s.shift.relative:+.0%} measured"
    return text + ")"


def _conclusion(claim: Claim, settings: list[SettingResult]) -> str:
    if settings[0].condition.finding == "holds":
        return "nothing to explain: the claim holds at the baseline"
    to_paper = [s.setting for s in settings[1:] if s.outcome.startswith("to the paper's")]
    towards = [s.setting for s in settings[1:] if s.outcome.startswith("towards the paper's")]
    alone = [name for name in to_paper if name != ALL]
    if alone:
        return (
            f"explained by {' and '.join(alone)}: set as the paper had it, the claim holds and the effect "
            "moves to the paper's (" + "; ".join(_moved(s) for s in settings if s.setting in alone) + ")"
        )
    if to_paper or towards:
        named = to_paper + towards
        detail = "; ".join(_moved(s) for s in settings if s.setting in named)
        together = " (only all together make the claim hold)" if ALL in to_paper else ""
        return f"partly explained by {' and '.join(named)}{together}: the effect moves towards the paper's ({detail})"
    smallest = min((s.detectable_shift for s in settings[1:] if not math.isnan(s.detectable_shift)), default=math.nan)
    could = f"; these runs could show moves of {smallest:.0%} or more" if not math.isnan(smallest) else ""
    against = all(s.condition.finding in ("short", "absent", "opposite") for s in settings)
    everywhere = (
        "; at every setting the effect is shown short of the paper's (or absent, or the opposite)" if against else ""
    )
    return f"not explained by these factors: none moves the effect towards the paper's{could}{everywhere}"


def _moved(s: SettingResult) -> str:
    low, high = s.shift.interval()
    return (
        f"{s.setting}: effect {s.condition.difference:+.0%}, moved {s.shift.relative:+.0%} ({low:+.0%} to {high:+.0%})"
    )


def samples_of(claim: Claim, flows: pd.DataFrame, variant: str | None) -> tuple[dict, dict]:
    """Each setting's samples of side a and b from ``claims.flow_rows`` of an explain session (a run's
    setting is its ``ablate`` parameter), and each setting's mean wall time per run."""
    samples: dict[str, tuple[Runs, Runs]] = {}
    walls: dict[str, list[float]] = {}
    for _run, run_flows in flows.groupby("run", sort=True):
        setting = run_flows["params"].iloc[0].get(ABLATE_PARAM)
        if setting is None:
            continue
        mapped = variant if setting in ("variant", ALL) else None
        a_side, b_side = mapped_side(claim.a, mapped), mapped_side(claim.b, mapped)
        slot = samples.setdefault(setting, ([], []))
        seed = run_flows["seed"].iloc[0]
        for values, side in zip(slot, (a_side, b_side), strict=True):
            value = claims.side_value(run_flows, side, claim.metric)
            if not math.isnan(value):
                values.append((seed, value))
        walls.setdefault(setting, []).append(float(run_flows["wall_s"].iloc[0]))
    return samples, {k: sum(v) / len(v) for k, v in walls.items()}


TABLE_COLUMNS = [
    "setting",
    "effect",
    "low",
    "high",
    "low90",
    "high90",
    "finding",
    "runs",
    "moved",
    "moved_low",
    "moved_high",
    "outcome",
    "paper",
    "margin_low",
    "margin_high",
]


def table(explanation: Explanation) -> pd.DataFrame:
    """One row per setting: the claim's effect there with its intervals, what it shows, the move from the
    baseline (the figure's and explanation.md's table)."""
    b = claims.bounds(explanation.claim)
    rows = []
    for s in explanation.settings:
        c = s.condition
        low, high = c.interval(0.95)
        low90, high90 = c.interval(0.90)
        shift_low, shift_high = s.shift.interval() if s.shift is not None else (math.nan, math.nan)
        rows.append(
            {
                "setting": s.setting,
                "effect": c.difference,
                "low": low,
                "high": high,
                "low90": low90,
                "high90": high90,
                "finding": c.finding,
                "runs": f"{len(c.a)} vs {len(c.b)}",
                "moved": s.shift.relative if s.shift is not None else math.nan,
                "moved_low": shift_low,
                "moved_high": shift_high,
                "outcome": s.outcome,
                "paper": explanation.target,
                "margin_low": b["low"],
                "margin_high": b["high"],
            }
        )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


Kind = Literal["explained", "partly", "not explained", "nothing to explain", "not judged"]


def kind(conclusion: str) -> Kind:
    """The conclusion's kind, for the reproduction report's line beside the verdict."""
    for prefix, name in (
        ("explained by", "explained"),
        ("partly", "partly"),
        ("not explained", "not explained"),
        ("nothing to explain", "nothing to explain"),
    ):
        if conclusion.startswith(prefix):
            return name
    return "not judged"


# ------------------------------------------------------------------------------------ the record kept

#: what ``testbed explain`` writes in its session's folder
EXPLANATION = "explanation.json"


class SettingRecord(BaseModel):
    setting: str
    effect: float
    low: float
    high: float
    finding: str
    runs: str
    moved: float | None = None
    moved_low: float | None = None
    moved_high: float | None = None
    outcome: str = ""


class ExplanationRecord(BaseModel):
    """``explanation.json``: what ``testbed explain`` found (read back by the reproduction report)."""

    schema_version: int = 1
    claim: str
    conclusion: str
    kind: str
    paper_effect: float
    settings: list[SettingRecord]
    factors: dict[str, Factor]


def latest(claim_id: str, results_root: Path) -> tuple[ExplanationRecord, Path] | None:
    """The claim's newest explanation under ``results_root`` (its record and folder), None without one."""
    for path in sorted((results_root / f"explain-{claim_id}").glob(f"*/{EXPLANATION}"), reverse=True):
        try:
            return ExplanationRecord.model_validate(rundir.read_json(path)), path.parent
        except (rundir.LoadError, ValueError):
            continue
    return None


def latest_text(claim_id: str, results_root: Path) -> str:
    """'explained by rack: ... (results/explain-.../explanation.md)', '' without an explanation."""
    found = latest(claim_id, results_root)
    if found is None:
        return ""
    record, folder = found
    return f"{record.conclusion} ({folder / 'explanation.md'})"
