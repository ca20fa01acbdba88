"""``testbed regress``: did TCP congestion control get worse on a new kernel? (issue 7)

The same suite runs on a baseline and a candidate kernel, each in its own virtme-ng guest (KVM where
it works, TCG otherwise), repetition by repetition and kernel by kernel in turn: baseline 1,
candidate 1, baseline 2, candidate 2, ... so that whatever drifts on the machine during the hours
of a run hits both kernels alike. Repetition r runs every point of the suite with seed r (the seed
drives loss models and start jitter, so repetition r sees the same random losses on both kernels).

Every run lands in ``results/regress/<UTC time>-<baseline>-vs-<candidate>/{baseline,candidate}/``
(and in the results catalog). Then analysis/regression.py compares, per point x algorithm x metric,
the candidate's repetitions with the baseline's, and this writes next to them:

* ``regress.txt``: the terminal table (also printed);
* ``report.html``: the verdicts, the effect sizes, and the distributions side by side;
* ``junit.xml``: one test case per point x algorithm x metric (a regression is a failure, a point
  that could not be compared is skipped) for CI systems;
* ``regress.json``: every comparison with its samples.

A suite's **positive controls** (testbed/scenario/suite.py: an entry with ``control``) run a point once more
on the candidate with a harm known in advance given to its flows, compared with the baseline's runs
of that point (which the baseline does not run twice). Their verdicts are not regressions of the
kernel; each control must come out as a regression of some metric, or the run has shown that
it cannot see a change of that size.

Exit status: 0 when nothing regressed, 1 when something did, 2 when the run itself failed (a kernel
that cannot be had or does not boot, a run that did not complete: such a point is listed as failing
on one kernel or both, never as a regression of a metric; or a positive control that was missed).
"""

from __future__ import annotations

import math
import random
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis import claims, regression
from analysis.plots import figure_png
from testbed import PROJECT
from testbed.host import kernels
from testbed.host.session import log, run_session
from testbed.plan.estimate import GUEST_BOOT_S, estimate_s
from testbed.report.pages import Badge, render, table
from testbed.report.session import text_table, write_session_report
from testbed.results import rundir
from testbed.scenario.algorithms import lookup
from testbed.scenario.load import scenario_from_dict
from testbed.scenario.points import ScenarioFile
from testbed.scenario.suite import FlowHarm

SIDES = ("baseline", "candidate")
#: per-flow options a candidate can be given to inject a known regression (tests, demonstrations):
#: those of a suite's positive controls, name -> bool or int
FLOW_OPTIONS = {name: bool if field.annotation == (bool | None) else int
                for name, field in FlowHarm.model_fields.items()}  # fmt: skip


@dataclass
class RegressResult:
    directory: Path
    comparisons: list = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: one line per positive control: detected or missed, and by which metrics
    controls: list[str] = field(default_factory=list)
    exit_code: int = 0


def parse_flow_options(items: list[str], option: str = "--candidate-flow-option") -> dict:
    """``sack=false`` -> {"sack": False}; a bad name or value names the valid ones."""
    options = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in FLOW_OPTIONS:
            raise ValueError(f"{option} {item!r}: expected NAME=VALUE with NAME one of {', '.join(FLOW_OPTIONS)}")
        kind = FLOW_OPTIONS[name]
        if kind is bool:
            if value.lower() not in ("true", "false"):
                raise ValueError(f"{option} {item!r}: {name} is true or false")
            options[name] = value.lower() == "true"
        else:
            try:
                options[name] = int(value)
            except ValueError:
                raise ValueError(f"{option} {item!r}: {name} is a whole number") from None
    return options


def control_base(suite: ScenarioFile, point_id: str) -> str | None:
    """The point a positive control repeats, when the suite runs that point too (then the baseline
    need not run the control: unharmed, it is that point)."""
    base = point_id.removesuffix(".control")
    return base if base != point_id and any(p.point_id == base for p in suite.points) else None


def variant(suite: ScenarioFile, seed: int | list[int], flow_options: dict | None = None,
            candidate: bool = False) -> ScenarioFile:  # fmt: skip
    """The suite with every point's seeds set to ``[seed]`` (or the list) and ``flow_options`` on every flow. For
    the ``candidate``, the positive controls' options on their points' flows too; for the baseline,
    without the controls whose point the suite runs anyway (the judge compares with that point)."""
    points = []
    for point in suite.points:
        if not candidate and point.point_id in suite.controls and control_base(suite, point.point_id):
            continue
        data = point.scenario.model_dump(mode="json", exclude_none=True)
        data["seeds"] = [seed] if isinstance(seed, int) else list(seed)
        options = {**(flow_options or {}), **(suite.controls.get(point.point_id, {}) if candidate else {})}
        for flow in data["flows"]:
            flow.update(options)
        (changed,) = scenario_from_dict(data, name=point.scenario_name).points
        points.append(replace(point, scenario=changed.scenario))
    return ScenarioFile(suite.name, suite.path, suite.profile, suite.description, points, controls=suite.controls)


def _label(kernel: str) -> str:
    return Path(kernel).name.replace("/", "_") if "/" in kernel else kernel


def regress(
    baseline: str,
    candidate: str,
    suite: ScenarioFile,
    repeat: int,
    results_root: Path = PROJECT / "results",
    candidate_flow_options: dict | None = None,
    vcpus: int | None = None,
    cluster: str | None = None,
) -> RegressResult:
    """Run the suite ``repeat`` times on each kernel, interleaved, and judge (module doc). With ``cluster``,
    each session's runs spread over its workers, and a point's run goes to the same host on both kernels
    (one placement seed for the whole comparison, recorded): host differences cancel in the pair."""

    if repeat < 2:
        raise ValueError(f"--repeat {repeat}: a comparison needs at least 2 repetitions per kernel (default 5)")
    # both kernels are settled (downloaded, or refused with the list of versions) before anything runs
    for kernel in (baseline, candidate):
        kernels.fetch(kernel, log=log)
    directory = results_root / "regress" / f"{rundir.utc_stamp()}-{_label(baseline)}-vs-{_label(candidate)}"
    directory.mkdir(parents=True)
    plan = [(rep, side) for rep in range(1, repeat + 1) for side in SIDES]
    per_session_s = sum(estimate_s(r) for r in variant(suite, 1).runs()) + GUEST_BOOT_S
    kernel_of = {"baseline": baseline, "candidate": candidate}
    sessions: dict[str, set[Path]] = {side: set() for side in SIDES}
    placement_seed = random.SystemRandom().randrange(2**31) if cluster else None
    if cluster:
        rundir.write_json_atomic(directory / "placement.json", {"cluster": cluster, "placement_seed": placement_seed})
    started = time.monotonic()
    for done, (rep, side) in enumerate(plan):
        left = (len(plan) - done) * per_session_s
        if done:
            left = (time.monotonic() - started) / done * (len(plan) - done)
        log(f"regress: {done + 1}/{len(plan)}: {side} {kernel_of[side]}, repetition {rep}/{repeat} "
            f"(ETA {left / 60:.0f} min)")  # fmt: skip
        candidate_side = side == "candidate"
        scenario = variant(suite, rep, candidate_flow_options if candidate_side else None, candidate=candidate_side)
        result = run_session(scenario, backend="guest", kernel_version=kernel_of[side],
                             results_root=directory / side, vcpus=vcpus, cluster=cluster,
                             placement_seed=placement_seed)  # fmt: skip
        sessions[side].add(result.directory)
    bases = {control: control_base(suite, control) for control in suite.controls}
    return judge(directory, sessions, baseline, candidate, repeat, candidate_flow_options, suite.controls,
                 {control: base for control, base in bases.items() if base})  # fmt: skip


def side_metrics_of(session_dirs: set[Path]):
    """Analyse every run of a side: (run_metrics frame, {point: [statuses]})."""


    frames, statuses = [], {}
    for session in sorted(session_dirs):
        report = write_session_report(session)
        for analysis in report.runs:
            point = analysis.manifest.get("point_id") or analysis.run_dir.parent.name
            statuses.setdefault(point, []).append((analysis.status, analysis.reason))
        flows = claims.flow_rows(report.runs)
        if not flows.empty:
            frames.append(regression.run_metrics(flows))
        latency = regression.latency_metrics(report.runs)
        if not latency.empty:
            frames.append(latency)
    metrics = pd.concat(frames, ignore_index=True) if frames else regression.run_metrics(pd.DataFrame())
    return metrics, statuses


def options_text(options: dict) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())


def _check_controls(result: RegressResult, controls: dict) -> None:
    """One line per positive control in ``result.controls``; a missed one is also a failure."""
    for point, options in controls.items():
        mine = [c for c in result.comparisons if c.point == point]
        found = [c for c in mine if c.verdict == "regression"]
        what = f"positive control {point} (candidate flows with {options_text(options)})"
        if found:
            metrics = ", ".join(f"{c.cc} {c.metric} {c.change:+.1%} (p = {c.p_value:.2g}, Cohen's d = {c.cohen_d:.2g})"
                                for c in found)  # fmt: skip
            result.controls.append(f"{what}: detected: {metrics}")
        elif mine and all(c.verdict != "too few runs" for c in mine):
            smallest = min((c.detectable for c in mine if not math.isnan(c.detectable)), default=math.nan)
            missed = (f"{what}: missed: no metric regressed (smallest detectable change {detectable_text(smallest)}); "
                      f"these repetitions cannot see a regression of that size: raise --repeat")  # fmt: skip
            result.controls.append(missed)
            result.failures.append(missed)
        else:
            result.controls.append(f"{what}: not judged (its runs did not complete on both kernels)")


def judge(directory: Path, sessions: dict, baseline: str, candidate: str, repeat: int,
          flow_options: dict | None = None, controls: dict | None = None,
          control_bases: dict | None = None) -> RegressResult:  # fmt: skip
    """Compare the two sides' runs and write the outputs (module doc). ``controls``: the suite's
    positive controls, point id -> the options their candidate runs had; ``control_bases``: control
    -> the point whose baseline runs are the control's baseline (the baseline did not run it)."""

    controls = controls or {}

    result = RegressResult(directory)
    side_metrics, side_status = {}, {}
    for side in SIDES:
        side_metrics[side], side_status[side] = side_metrics_of(sessions[side])
    base_frame = side_metrics["baseline"]
    for control, base in (control_bases or {}).items():
        copied = base_frame[base_frame["point"] == base].assign(point=control)
        base_frame = pd.concat([base_frame, copied], ignore_index=True)
    side_metrics["baseline"] = base_frame
    result.comparisons = regression.compare(side_metrics["baseline"], side_metrics["candidate"])
    for point in sorted(set(side_status["baseline"]) | set(side_status["candidate"])):
        failed = {side: [reason for status, reason in side_status[side].get(point, []) if status != "complete"]
                  for side in SIDES}  # fmt: skip
        if failed["baseline"] and failed["candidate"]:
            where = "on both kernels"
        elif failed["baseline"] or failed["candidate"]:
            where = f"on the {'baseline' if failed['baseline'] else 'candidate'} only"
        else:
            continue
        reasons = "; ".join(sorted({r or "no reason recorded" for r in failed["baseline"] + failed["candidate"]}))
        result.failures.append(f"{point}: {len(failed['baseline'])} baseline and {len(failed['candidate'])} "
                               f"candidate runs did not complete ({where}): {reasons}")  # fmt: skip
    _check_controls(result, controls)
    regressed = any(c.verdict == "regression" and c.point not in controls for c in result.comparisons)
    result.exit_code = 2 if result.failures else (1 if regressed else 0)
    table = _table(result.comparisons, controls)
    header = (f"regress: baseline {baseline} vs candidate {candidate}, {repeat} repetitions each"
              + (f"; candidate flows with {flow_options}" if flow_options else ""))  # fmt: skip
    counts = regression.counts([c for c in result.comparisons if c.point not in controls])
    summary = header + "\n" + table + "\n" + ", ".join(f"{n} {v}" for v, n in counts.items())
    summary += "".join(f"\n{line}" for line in result.controls)
    summary += "".join(f"\nfailed: {f}" for f in result.failures if f not in result.controls)
    meaning = ["nothing regressed", "a regression", "the run failed"][result.exit_code]
    summary += f"\nexit status {result.exit_code} ({meaning})"
    print(summary)
    (directory / "regress.txt").write_text(summary + "\n")
    rundir.write_json_atomic(directory / "regress.json", {
        "baseline": baseline, "candidate": candidate, "repeat": repeat, "candidate_flow_options": flow_options or {},
        "exit_code": result.exit_code, "failures": result.failures,
        "controls": controls, "control_checks": result.controls,
        "comparisons": [{**c.__dict__, "name": c.name} for c in result.comparisons],
    })  # fmt: skip
    _junit(directory / "junit.xml", result, baseline, candidate, controls)
    _html(directory / "report.html", result, header, side_metrics, controls)
    print(f"report: {directory / 'report.html'}\njunit: {directory / 'junit.xml'}")
    return result


def fmt_value(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def detectable_text(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "> 1000%" if value > 10 else f"{value:.1%}"


def _rows(comparisons, controls: dict) -> list[dict]:
    rows = []
    for c in comparisons:
        control = " (positive control)" if c.point in controls else ""
        mean = lambda v: sum(v) / len(v) if v else math.nan  # noqa: E731
        rows.append({
            "point": c.point, "cc": c.cc, "metric": c.metric,
            "baseline": f"{fmt_value(mean(c.baseline))} (n={len(c.baseline)})",
            "candidate": f"{fmt_value(mean(c.candidate))} (n={len(c.candidate)})",
            "change": "n/a" if math.isnan(c.change) else f"{c.change:+.1%}",
            "p": fmt_value(c.p_value, 2), "Cohen's d": fmt_value(c.cohen_d, 2),
            "detectable": detectable_text(c.detectable),
            "test": c.test, "verdict": c.verdict + control,
        })  # fmt: skip
    return rows


def _table(comparisons, controls: dict) -> str:


    return text_table(pd.DataFrame(_rows(comparisons, controls))) if comparisons else "(nothing to compare)"


def _junit(path: Path, result: RegressResult, baseline: str, candidate: str, controls: dict) -> None:
    suites = ET.Element("testsuites", name=f"cc-testbed regress {baseline} vs {candidate}")
    by_point: dict[str, list] = {}
    for c in result.comparisons:
        by_point.setdefault(c.point, []).append(c)
    for point, comparisons in by_point.items():
        if point in controls:  # one case: the control must be detected
            line = next(line for line in result.controls if line.startswith(f"positive control {point} "))
            suite = ET.SubElement(suites, "testsuite", name=point, tests="1",
                                  failures=str(int(": missed:" in line)), errors="0")  # fmt: skip
            case = ET.SubElement(suite, "testcase", classname=point, name="positive control detected")
            if ": missed:" in line:
                ET.SubElement(case, "failure", message="positive control missed").text = line
            else:
                ET.SubElement(case, "system-out").text = line
            continue
        failures = sum(c.verdict == "regression" for c in comparisons)
        skipped = sum(c.verdict == "too few runs" for c in comparisons)
        suite = ET.SubElement(suites, "testsuite", name=point, tests=str(len(comparisons)),
                              failures=str(failures), skipped=str(skipped), errors="0")  # fmt: skip
        for c in comparisons:
            case = ET.SubElement(suite, "testcase", classname=point, name=f"{c.cc} / {c.metric}")
            detail = (f"{c.metric} of {c.cc}: baseline {c.baseline}, candidate {c.candidate}; change "
                      f"{c.change:+.2%}, p = {c.p_value:.3g}, Cohen's d = {c.cohen_d:.2f}")  # fmt: skip
            if c.verdict == "regression":
                ET.SubElement(case, "failure", message=f"regression: {c.change:+.1%}").text = detail
            elif c.verdict == "too few runs":
                ET.SubElement(case, "skipped", message="too few complete runs on a side to compare")
            else:
                ET.SubElement(case, "system-out").text = f"{c.verdict}: {detail}"
    for failure in (f for f in result.failures if f not in result.controls):
        suite = ET.SubElement(suites, "testsuite", name="runs", tests="1", failures="0", errors="1")
        case = ET.SubElement(suite, "testcase", classname="runs", name=failure.split(":")[0])
        ET.SubElement(case, "error", message="runs did not complete").text = failure
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _spread_png(chosen, metric: str) -> bytes:
    """Every repetition of ``metric`` per point and algorithm, baseline (circles) beside candidate (triangles)."""


    groups = list(dict.fromkeys(zip(chosen["point"], chosen["cc"], strict=True)))
    fig = Figure(figsize=(max(6, 1.1 * len(groups) + 2), 4))
    ax = fig.add_subplot()
    for i, (point, cc) in enumerate(groups):
        for offset, side, marker in ((-0.15, "baseline", "o"), (0.15, "candidate", "^")):
            values = chosen[(chosen["point"] == point) & (chosen["cc"] == cc) & (chosen["side"] == side)]["value"]
            ax.scatter([i + offset] * len(values), values, color=lookup(cc).colour, marker=marker,
                       alpha=0.8, label=side if i == 0 else None)  # fmt: skip
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{p}\n{lookup(c).label}" for p, c in groups], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel({"goodput": "sender goodput, Mbit/s", "retrans_ratio": "retransmitted / sent"}[metric])
    ax.set_title(f"{metric}: every repetition, baseline (circles) and candidate (triangles)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


def _html(path: Path, result: RegressResult, header: str, side_metrics: dict, controls: dict) -> None:
    """report.html (testbed/report/templates/regress.html.j2): failures, controls, the comparisons, the spreads."""


    css = {"regression": "bad", "improvement": "good", "no change": "", "too few runs": "warn"}
    rows = _rows(result.comparisons, controls)
    for row in rows:
        row["verdict"] = Badge(row["verdict"], css.get(row["verdict"].split(" (")[0], ""))
    both = pd.concat([side_metrics[s].assign(side=s) for s in SIDES], ignore_index=True)
    plots = []
    for metric in ("goodput", "retrans_ratio"):
        chosen = both[both["metric"] == metric].dropna(subset=["value"])
        if not chosen.empty:
            plots.append((_spread_png(chosen, metric), f"{metric} per repetition"))
    page = render("regress.html.j2", title="regress", header=header, failures=result.failures,
                  controls=result.controls, comparisons=table(pd.DataFrame(rows)), plots=plots)  # fmt: skip
    path.write_text(page)
