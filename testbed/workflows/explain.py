"""``testbed explain CLAIM``: which difference between the paper's setup and today's Linux moves a claim,
by experiment (issue 43; the rule is analysis/verdicts/ablation.py's).

The claim's deciding condition is taken from the suite ``make reproduce`` runs (its points of the claim's
experiment at the claim's condition, ``ablations.at`` in analysis/verdicts/claims.yaml where it has several), and
run as one session under each *setting*: the baseline (today's defaults), each factor alone at the
paper's setting, and all of them together; each setting is a point of its own (parameter ``ablate``), the
same seeds in each, so that a setting's runs pair with the baseline's. The session lands in
``results/explain-<claim>/<time>-<sha>/`` (resumed when run again, like any session) with its usual report,
and next to it:

* ``explanation.json``: the conclusion, and per setting the effect, its interval, what the claim shows and
  the move from the baseline (:class:`ExplanationRecord`);
* ``explanation.md`` and ``figures/explain.png``: the conclusion first, then the effects as a forest plot
  (the paper's effect marked, the claim's threshold or margin shaded) and as a table.

``make reproduce``'s report shows, beside each claim not reproduced or opposite, the conclusion of the
claim's latest explanation here (analysis/verdicts/ablation.py ``latest``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from analysis.figures.plots import forest_png
from analysis.verdicts import ablation, claims, sequential
from analysis.verdicts.ablation import ABLATE_PARAM, ALL, BASELINE, EXPLANATION, ExplanationRecord, SettingRecord
from analysis.verdicts.factors import Factor
from testbed import PROJECT
from testbed.results import rundir
from testbed.scenario import variants
from testbed.scenario.algorithms import algorithm_of, is_cc_param
from testbed.scenario.errors import _format_value
from testbed.scenario.points import Point, ScenarioFile
from testbed.scenario.suite import load_suite
from testbed.scenario.sweep import _id_key, _safe, _shorten

REPRODUCE_SUITE = PROJECT / "scenarios" / "suites" / "reproduce.yaml"
#: the forest plot's colour per setting is the claim's finding there, in the claims' colours
FINDING_AS_VERDICT = {
    "holds": "reproduced",
    "opposite": "opposite",
    "absent": "not reproduced",
    "short": "short of the paper",
    "undecided": "undecided",
}


def find_claim(claim_id: str) -> claims.Claim:
    """The claim by id, with ablations; an unknown id or a claim without them names the valid ones."""
    known = claims.load_claims()
    by_id = {c.id: c for c in known}
    if claim_id not in by_id:
        raise ValueError(
            f"no claim {claim_id!r} in analysis/verdicts/claims.yaml; with ablations: "
            f"{', '.join(c.id for c in known if c.ablations)}"
        )
    claim = by_id[claim_id]
    if claim.ablations is None:
        raise ValueError(
            f"claim {claim_id!r} has no ablations in analysis/verdicts/claims.yaml (add its factors there); "
            f"claims with them: {', '.join(c.id for c in known if c.ablations)}"
        )
    if claim.b is None:
        raise ValueError(f"claim {claim_id!r} compares with a value, not with other flows: nothing to ablate")
    return claim


def _serves(side: claims.Side, point: Point) -> bool:
    """The point has flows of the side (its algorithm, direction, company and parameters)."""
    algorithms = {algorithm_of(f.cc) for f in point.scenario.flows if f.cc and f.direction == side.direction}
    every = {algorithm_of(f.cc) for f in point.scenario.flows if f.cc}
    return (
        algorithm_of(side.cc) in algorithms
        and (side.with_cc is None or algorithm_of(side.with_cc) in every)
        and (side.without_cc is None or algorithm_of(side.without_cc) not in every)
        and all(claims._same_param(k, point.params.get(k), v) for k, v in side.params.items())
    )


def deciding_points(claim: claims.Claim, suite: ScenarioFile) -> list[Point]:
    """The suite's points of the claim's deciding condition (both sides' points); a ValueError names the
    conditions when there are several and ``ablations.at`` does not choose one."""
    at = claim.ablations.at
    chosen: dict[tuple, list[Point]] = {}
    for point in suite.points:
        profile = point.profile or suite.profile
        if point.scenario_name != claim.experiment or not claims._matches_point(claim, point.params, profile):
            continue
        if any(not claims._same_param(k, point.params.get(k), v) for k, v in at.items()):
            continue
        if not (_serves(claim.a, point) or _serves(claim.b, point)):
            continue
        condition = claims.condition_of(point.scenario_name, profile, point.params, claim.pair_ignoring)
        chosen.setdefault(condition, []).append(point)
    if len(chosen) != 1:
        found = "; ".join(claims._condition_text(c) for c in chosen) or "none"
        raise ValueError(
            f"claim {claim.id}: {len(chosen)} conditions in {REPRODUCE_SUITE.name} ({found}); set "
            "ablations.at in analysis/verdicts/claims.yaml to the parameters of the one to explain"
        )
    return next(iter(chosen.values()))


def ablated(point: Point, setting: str, factors: dict[str, Factor], seeds: list[int]) -> Point:
    """The point with ``factors`` set as the paper had them, its ``ablate`` parameter naming the setting."""
    params = dict(point.params)
    if "variant" in factors:
        renamed = factors["variant"].setting()
        params = {
            k: renamed if is_cc_param(k) and isinstance(v, str) and algorithm_of(v) == "westwood" else v
            for k, v in params.items()
        }
    params[ABLATE_PARAM] = setting
    changed = variants.derive(point, seeds, edit=lambda data: _as_the_paper(data, factors))
    ids = ",".join(f"{_safe(_id_key(k))}={_safe(_format_value(v))}" for k, v in params.items())
    prefix = f"{point.scenario_name}@{point.profile}" if point.profile else point.scenario_name
    return replace(changed, point_id=_shorten(f"{prefix}.{ids}"), params=params)


def _as_the_paper(data: dict, factors: dict[str, Factor]) -> None:
    """A scenario's data (changed in place) with each of ``factors`` set as the paper had it."""
    for name, factor in factors.items():
        if name == "variant":
            for flow in data["flows"]:
                if flow.get("cc") and algorithm_of(flow["cc"]) == "westwood":
                    flow["cc"] = factor.setting()
        elif name == "length":
            data["time_scale"] = factor.setting() / data["duration_s"]
        else:
            for flow in data["flows"]:
                flow.update(ablation.flow_changes(name, factor))


def plan(
    claim: claims.Claim, seeds: int, chosen: list[str] | None = None, suite_path: Path = REPRODUCE_SUITE
) -> ScenarioFile:
    """The explain session: the deciding points under each setting (module doc)."""
    if seeds < 2:
        raise ValueError(f"--seeds {seeds}: a setting's effect needs at least 2 runs a side for its interval")
    factors = claim.ablations.runnable(chosen)
    suite = load_suite(suite_path, PROJECT / "scenarios")
    points = deciding_points(claim, suite)
    seed_list = list(range(1, seeds + 1))
    settings = {BASELINE: {}, **{name: {name: f} for name, f in factors.items()}}
    if len(factors) > 1:
        settings[ALL] = factors
    ablated_points = [
        ablated(p, name, chosen_factors, seed_list) for name, chosen_factors in settings.items() for p in points
    ]
    description = f"testbed explain {claim.id}: {', '.join(settings)}"
    return ScenarioFile(f"explain-{claim.id}", suite.path, suite.profile, description, ablated_points)


def variant_of(claim: claims.Claim) -> str | None:
    factor = claim.ablations.factors.get("variant") if claim.ablations else None
    return factor.setting() if factor is not None and factor.unavailable is None else None


def plan_design(session: Path) -> None:
    """An explain session's design (``sequential.EXPLAIN_LOOKS`` looks), recorded before anything judges its
    runs, so that its report and its explanation judge by the same one."""
    if sequential.read_record(session) is None:
        record = sequential.Record(sequential.Design(sequential.EXPLAIN_LOOKS))
        rundir.write_json_atomic(session / sequential.RECORD_FILE, record.to_json())


def explain_session(claim: claims.Claim, session: Path, analyses) -> ablation.Explanation:
    """Judge an explain session's runs and write explanation.json, explanation.md and figures/explain.png.

    Run again with more ``--seeds``, the same session grows and is judged again: each judgement of more
    runs is a look of one sequential design (``sequential.EXPLAIN_LOOKS`` looks spending 0.05,
    ``sequential.json``), so more seeds do not buy an explanation; past the last look the runs are kept
    and the last look's explanation stands."""
    record = sequential.read_record(session) or sequential.Record(sequential.Design(sequential.EXPLAIN_LOOKS))
    complete = sum(a.status == "complete" for a in analyses)
    look = record.look_at(complete)
    if look is None:
        raise ValueError(
            f"{session}: this session's {record.design.max_looks} looks are spent "
            f"({record.design.summary()}); its explanation.md is the last look's. Start a new "
            "session (--force) to explain the claim anew"
        )
    rundir.write_json_atomic(session / sequential.RECORD_FILE, record.to_json())
    flows = claims.measured_flows(claim, claims.flow_rows(analyses), analyses)  # after its warm-up, if any
    samples, walls = ablation.samples_of(claim, flows, variant_of(claim)) if not flows.empty else ({}, {})
    factors = {name: f for name, f in claim.ablations.factors.items() if name in samples}
    result = ablation.judge_settings(claim, samples, factors, walls, alpha=record.design.alpha_at(look))
    if look > 1:
        result.conclusion += f" (look {look} of {record.design.max_looks}, at alpha {record.design.alpha_at(look):.3g})"
    frame = ablation.table(result)
    record = ExplanationRecord(
        claim=claim.id,
        conclusion=result.conclusion,
        kind=ablation.kind(result.conclusion),
        paper_effect=result.target,
        factors=factors,
        settings=[SettingRecord(**_plain(row)) for row in frame.to_dict("records")],
    )
    rundir.write_json_atomic(session / EXPLANATION, record.model_dump(mode="json"))
    figure = session / "figures" / "explain.png"
    figure.parent.mkdir(exist_ok=True)
    figure.write_bytes(_figure(claim, frame))
    rundir.write_text_atomic(session / "explanation.md", _markdown(claim, result, frame, figure.relative_to(session)))
    return result


def _plain(row: dict) -> dict:
    keep = SettingRecord.model_fields
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items() if k in keep}


def _figure(claim: claims.Claim, frame) -> bytes:
    effects = frame.assign(
        claim=frame["setting"], condition=frame["runs"] + " runs", verdict=frame["finding"].map(FINDING_AS_VERDICT)
    )
    title = f"testbed explain {claim.id}: the effect under each setting (diamond: the paper's)"
    return forest_png(effects, title=title, legend="the claim at that setting")


def _markdown(claim: claims.Claim, result: ablation.Explanation, frame, figure: Path) -> str:
    lines = [
        f"# Why {claim.id}?",
        "",
        f"**{result.conclusion}**",
        "",
        f"Claim: {claim.compared()}; paper: {claim.paper_numbers}",
        "",
        f"![the effect under each setting]({figure})",
        "",
        "| setting | effect (95 % interval) | runs | the claim there | moved from the baseline (95 % interval) | "
        "what the move shows |",
        "|---|---|---|---|---|---|",
    ]
    for row in frame.itertuples():
        moved = "" if math.isnan(row.moved) else f"{row.moved:+.0%} ({row.moved_low:+.0%} to {row.moved_high:+.0%})"
        lines.append(
            f"| {row.setting} | {row.effect:+.0%} ({row.low:+.0%} to {row.high:+.0%}) | {row.runs} | "
            f"{row.finding} | {moved} | {row.outcome} |"
        )
    lines += ["", "Factors (the paper's setting, and why it could matter):", ""]
    lines += [f"- **{name}** = {f.setting()!r}: {f.why}" for name, f in result.factors.items()]
    lines += [
        "",
        "Each line in full:",
        "",
        *[f"    {line}" for line in result.lines()],
        "",
        f"The rule: analysis/verdicts/ablation.py (module doc); the claims' tests: {claims.RULE}",
    ]
    return "\n".join(lines) + "\n"
