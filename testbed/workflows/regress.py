"""``testbed regress``: did TCP congestion control get worse on a new kernel? (issue 7)

The same suite runs on a baseline and a candidate kernel, each in its own virtme-ng guest (KVM where it
works, TCG otherwise), repetition by repetition and kernel by kernel in turn: baseline 1, candidate 1,
baseline 2, candidate 2, ... so that whatever drifts on the machine during the hours of a run hits both
kernels alike (in virtual time, which that drift does not reach, each kernel's repetitions are one
session: testbed.workflows.compare.schedule). Repetition r runs every point of the suite with seed r
(the seed drives loss models and start jitter, so repetition r sees the same random losses on both
kernels).

Every run lands in ``results/regress/<UTC time>-<baseline>-vs-<candidate>/{baseline,candidate}/``
(and in the results catalog). How the runs are scheduled, resumed after a kill (started again with the
same kernels, suite and options, the comparison goes on in its folder; ``--force`` starts a new one) and
how its parts are judged is testbed/workflows/compare.py, shared with ``--series`` and ``bisect``.
Then analysis/kernels/regression.py compares, per point x algorithm x metric, the candidate's repetitions with
the baseline's, and this writes next to them:

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

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.figures import kernel_plots
from analysis.kernels import regression
from testbed.host import kernels
from testbed.host.session import log
from testbed.report.pages import junit
from testbed.report.pages.points import text_table
from testbed.report.pages.templating import Badge, render, table
from testbed.results import rundir
from testbed.scenario.points import ScenarioFile
from testbed.workflows import compare
from testbed.workflows.compare import control_base, detectable_text, fmt_value, options_text, variant
from testbed.workflows.sessions import Where, refuse_runaway

SIDES = ("baseline", "candidate")


@dataclass
class RegressResult:
    directory: Path
    comparisons: list = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: runs left out as untrustworthy, one line per side and point (compare.left_out_runs)
    left_out: list[str] = field(default_factory=list)
    #: whether those runs would change a verdict (compare.sensitivity); empty when none was left out
    sensitivity: list[str] = field(default_factory=list)
    #: one line per positive control: detected or missed, and by which metrics
    controls: list[str] = field(default_factory=list)
    exit_code: int = 0


def regress(
    baseline: str,
    candidate: str,
    suite: ScenarioFile,
    repeat: int,
    where: Where | None = None,
    candidate_flow_options: dict | None = None,
) -> RegressResult:
    """Run the suite ``repeat`` times on each kernel, as compare.schedule orders them, and judge (module doc).
    An unfinished comparison of the same kernels, suite and options resumes (``force``: a new one). With
    ``cluster``, each session's runs spread over its workers, a point's run on the same host on both
    kernels. ``where``: its results root, vCPUs, cluster, clock, --force and --yes
    (testbed.workflows.sessions.Where)."""
    where = where or Where()
    cluster, clock = where.cluster, where.clock
    compare.check_repeat(repeat)
    refuse_runaway(variant(suite, list(range(1, repeat + 1)), candidate=True).runs() * 2, where, [baseline, candidate])
    # both kernels are settled (downloaded, or refused with the list of versions) before anything runs
    baseline, candidate = kernels.pinned(baseline), kernels.pinned(candidate)  # a tree at its commit now
    for kernel in (baseline, candidate):
        kernels.fetch(kernel, log=log)
    spec = {
        "baseline": baseline,
        "candidate": candidate,
        "suite": suite.name,
        "points": [p.point_id for p in suite.points],
        "repeat": repeat,
        "candidate_flow_options": candidate_flow_options or {},
        "cluster": cluster,
        "clock": clock,
    }
    name = f"{compare.label(baseline)}-vs-{compare.label(candidate)}"
    comparison = compare.ComparisonFolder.open(where.results, "regress", name, spec, force=where.force)

    def scenario_for(side: compare.KernelSide, reps: list[int]) -> ScenarioFile:
        harmed = side.name == "candidate"
        return variant(suite, reps, candidate_flow_options if harmed else None, candidate=harmed)

    sides = [compare.KernelSide("baseline", baseline), compare.KernelSide("candidate", candidate)]
    sessions = compare.run_interleaved(comparison, sides, repeat, scenario_for, where)
    bases = {control: control_base(suite, control) for control in suite.controls}
    result = judge_comparison(
        comparison.directory,
        sessions,
        baseline,
        candidate,
        repeat,
        candidate_flow_options,
        suite.controls,
        {control: base for control, base in bases.items() if base},
        dropped=comparison.dropped,
    )
    comparison.finish()
    return result


def _check_controls(result: RegressResult, controls: dict) -> None:
    """One line per positive control in ``result.controls``; a missed one is also a failure."""
    for point, options in controls.items():
        what = f"positive control {point} (candidate flows with {options_text(options)})"
        line, missed = compare.control_line(what, [c for c in result.comparisons if c.point == point])
        result.controls.append(line)
        if missed:
            result.failures.append(line)


def _sensitivity(comparisons: list, sessions: dict, control_bases: dict | None) -> list[str]:
    """The verdicts judged again with the left-out (untrustworthy) runs put back: which would change."""
    every = {side: compare.side_metrics(sessions[side], untrusted=True)[0] for side in SIDES}
    again = regression.compare(_with_control_bases(every["baseline"], control_bases), every["candidate"])
    return compare.sensitivity({c.name: c.verdict for c in comparisons}, {c.name: c.verdict for c in again})


def judge_comparison(
    directory: Path,
    sessions: dict,
    baseline: str,
    candidate: str,
    repeat: int,
    flow_options: dict | None = None,
    controls: dict | None = None,
    control_bases: dict | None = None,
    dropped: dict | None = None,
) -> RegressResult:
    """Compare the two sides' runs and write the outputs (module doc). ``controls``: the suite's
    positive controls, point id -> the options their candidate runs had; ``control_bases``: control
    -> the point whose baseline runs are the control's baseline (the baseline did not run it);
    ``dropped``: a side whose kernel could not run the suite, with why."""
    controls = controls or {}
    result = RegressResult(directory)
    result.failures += [f"{side}: {why}" for side, why in (dropped or {}).items()]
    side_metrics, side_status = {}, {}
    for side in SIDES:
        side_metrics[side], side_status[side] = compare.side_metrics(sessions[side])
    side_metrics["baseline"] = _with_control_bases(side_metrics["baseline"], control_bases)
    result.comparisons = regression.compare(side_metrics["baseline"], side_metrics["candidate"])
    result.failures += _failed_points(side_status)
    result.left_out = [line for side in SIDES for line in compare.left_out_runs(side_status[side], side)]
    if result.left_out:
        result.sensitivity = _sensitivity(result.comparisons, sessions, control_bases)
    _check_controls(result, controls)
    regressed = any(c.verdict == "regression" and c.point not in controls for c in result.comparisons)
    result.exit_code = compare.exit_code(result.failures, regressed)
    header = f"regress: baseline {baseline} vs candidate {candidate}, {repeat} repetitions each" + (
        f"; candidate flows with {flow_options}" if flow_options else ""
    )
    summary = _summary(result, header, controls)
    print(summary)
    (directory / "regress.txt").write_text(summary + "\n")
    rundir.write_json_atomic(
        directory / "regress.json",
        {
            "baseline": baseline,
            "candidate": candidate,
            "repeat": repeat,
            "candidate_flow_options": flow_options or {},
            "exit_code": result.exit_code,
            "failures": result.failures,
            "left_out": result.left_out,
            "sensitivity": result.sensitivity,
            "controls": controls,
            "control_checks": result.controls,
            "comparisons": [{**c.__dict__, "name": c.name} for c in result.comparisons],
        },
    )
    suites = _junit_suites(result, controls)
    junit.write(directory / "junit.xml", f"cc-testbed regress {baseline} vs {candidate}", suites)
    _html(directory / "report.html", result, header, side_metrics, controls)
    print(f"report: {directory / 'report.html'}\njunit: {directory / 'junit.xml'}")
    return result


def _with_control_bases(baseline: pd.DataFrame, control_bases: dict | None) -> pd.DataFrame:
    """The baseline's metrics with each control's base point copied as the control's baseline (the
    baseline kernel does not run the controls)."""
    for control, base in (control_bases or {}).items():
        baseline = pd.concat([baseline, baseline[baseline["point"] == base].assign(point=control)], ignore_index=True)
    return baseline


def _failed_points(side_status: dict) -> list[str]:
    """One line per point with runs that did not complete, saying on which kernel and why."""
    lines = []
    for point in sorted(set(side_status["baseline"]) | set(side_status["candidate"])):
        failed = {side: compare.failed_runs(point, side_status[side]) for side in SIDES}
        if not failed["baseline"] and not failed["candidate"]:
            continue
        where = (
            "on both kernels"
            if failed["baseline"] and failed["candidate"]
            else f"on the {'baseline' if failed['baseline'] else 'candidate'} only"
        )
        reasons = "; ".join(sorted(set(failed["baseline"] + failed["candidate"])))
        lines.append(
            f"{point}: {len(failed['baseline'])} baseline and {len(failed['candidate'])} "
            f"candidate runs did not complete ({where}): {reasons}"
        )
    return lines


def _summary(result: RegressResult, header: str, controls: dict) -> str:
    counts = regression.counts([c for c in result.comparisons if c.point not in controls])
    lines = [header, _table(result.comparisons, controls), ", ".join(f"{n} {v}" for v, n in counts.items())]
    lines += result.controls
    lines += [f"failed: {f}" for f in result.failures if f not in result.controls]
    lines += [f"left out: {line}" for line in result.left_out]
    lines += [f"sensitivity: {line}" for line in result.sensitivity]
    lines.append(f"exit status {result.exit_code} ({compare.EXIT_MEANINGS[result.exit_code]})")
    return "\n".join(lines)


def _rows(comparisons, controls: dict) -> list[dict]:
    rows = []
    for c in comparisons:
        control = " (positive control)" if c.point in controls else ""
        mean = lambda v: sum(v) / len(v) if v else float("nan")  # noqa: E731
        rows.append(
            {
                "point": c.point,
                "cc": c.cc,
                "metric": c.metric,
                "baseline": f"{fmt_value(mean(c.baseline))} (n={len(c.baseline)})",
                "candidate": f"{fmt_value(mean(c.candidate))} (n={len(c.candidate)})",
                "change": f"{c.change:+.1%}" if c.change == c.change else "n/a",
                "p": fmt_value(c.p_value, 2),
                "Cohen's d": fmt_value(c.cohen_d, 2),
                "detectable": detectable_text(c.detectable),
                "test": c.test,
                "verdict": c.verdict + control,
            }
        )
    return rows


def _table(comparisons, controls: dict) -> str:
    return text_table(pd.DataFrame(_rows(comparisons, controls))) if comparisons else "(nothing to compare)"


def _junit_suites(result: RegressResult, controls: dict) -> dict[str, list[junit.Case]]:
    """A suite per point, a case per algorithm x metric (a regression fails, too few runs is skipped); a
    positive control is one case that must be detected; a run that failed is an error."""
    suites: dict[str, list[junit.Case]] = {}
    for c in result.comparisons:
        if c.point in controls:
            line = next(line for line in result.controls if line.startswith(f"positive control {c.point} "))
            missed = ": missed:" in line
            suites[c.point] = [
                junit.Case(
                    c.point,
                    "positive control detected",
                    "failure" if missed else "passed",
                    message="positive control missed",
                    detail=line,
                )
            ]
            continue
        detail = (
            f"{c.metric} of {c.cc}: baseline {c.baseline}, candidate {c.candidate}; change "
            f"{c.change:+.2%}, p = {c.p_value:.3g}, Cohen's d = {c.cohen_d:.2f}"
        )
        outcome = {"regression": "failure", "too few runs": "skipped"}.get(c.verdict, "passed")
        message = {"failure": f"regression: {c.change:+.1%}", "skipped": "too few complete runs on a side to compare"}
        suites.setdefault(c.point, []).append(
            junit.Case(
                c.point,
                f"{c.cc} / {c.metric}",
                outcome,
                message.get(outcome, ""),
                detail if outcome != "passed" else f"{c.verdict}: {detail}",
            )
        )
    failed = [f for f in result.failures if f not in result.controls]
    if failed:
        suites["runs"] = [junit.Case("runs", f.split(":")[0], "error", "runs did not complete", f) for f in failed]
    return suites


def _html(path: Path, result: RegressResult, header: str, side_metrics: dict, controls: dict) -> None:
    """report.html (testbed/report/pages/templates/regress.html.j2): failures, controls, comparisons, spreads."""
    css = {"regression": "bad", "improvement": "good", "no change": "", "too few runs": "warn"}
    rows = _rows(result.comparisons, controls)
    for row in rows:
        row["verdict"] = Badge(row["verdict"], css.get(row["verdict"].split(" (")[0], ""))
    both = pd.concat([side_metrics[s].assign(side=s) for s in SIDES], ignore_index=True)
    plots = []
    for metric in ("goodput", "retrans_ratio"):
        chosen = both[both["metric"] == metric].dropna(subset=["value"])
        if not chosen.empty:
            plots.append((kernel_plots.spread_png(chosen, metric), f"{metric} per repetition"))
    page = render(
        "regress.html.j2",
        title="regress",
        header=header,
        failures=result.failures,
        controls=result.controls,
        comparisons=table(pd.DataFrame(rows)),
        plots=plots,
    )
    path.write_text(page)


def regress_or_series(
    suite: ScenarioFile,
    repeat: int,
    where,
    baseline: str | None = None,
    candidate: str | None = None,
    series_spec: str | None = None,
    latest: str | None = None,
    flow_options: dict | None = None,
    inject: dict | None = None,
    inject_from: str | None = None,
) -> int:
    """``testbed regress`` in its three modes (a pair, ``--series``, ``--latest``), run where ``where``
    (testbed.workflows.sessions.Where) says; returns the exit status (module doc)."""
    from testbed.workflows import series

    modes = [
        name for name, given in (("--series", series_spec), ("--latest", latest), ("--candidate", candidate)) if given
    ]
    if len(modes) != 1:
        raise ValueError(
            "testbed regress: give one of --baseline/--candidate (a pair), --series (a kernel series) "
            f"or --latest SERIES (the newest kernel of a series); got {', '.join(modes) or 'none'}"
        )
    if where.allow_dirty:  # a dirty tree's diff read once, now (kernels.pinned); later steps build those bytes
        baseline, candidate, inject_from = (
            kernels.pinned(k, allow_dirty=True) if k else k for k in (baseline, candidate, inject_from)
        )
    if series_spec:
        if baseline:
            raise ValueError("--series names every kernel: leave --baseline out")
        chosen = [kernels.pinned(k, where.allow_dirty) for k in kernels.expand_series(series_spec)]
        return series.run_series(chosen, suite, repeat, where, inject=inject, inject_from=inject_from).exit_code
    if latest:
        candidate = kernels.newest(latest)
        baseline = baseline or series.baseline_from_history(where.results, latest, candidate)
        if done := series.already_compared(where.results, baseline, candidate):
            print(
                f"regress --latest {latest}: {candidate} was already compared with {baseline} in {done.parent} "
                f"(its regress.txt); nothing new to run"
            )
            return int(rundir.read_json(done).get("exit_code", 2))
        print(f"regress --latest {latest}: candidate {candidate} (newest installable), baseline {baseline}")
    elif not baseline:
        raise ValueError("--candidate needs --baseline (the kernel to compare with)")
    return regress(baseline, candidate, suite, repeat, where, candidate_flow_options=flow_options).exit_code
