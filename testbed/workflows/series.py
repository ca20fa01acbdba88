"""``testbed regress --series``: a suite across a series of kernels, and the versions after which a metric
moved (issue 40).

The suite runs on every kernel, repetition by repetition: kernel 1, kernel 2, ..., kernel N with seed 1,
then all of them with seed 2, ..., so that whatever drifts on the machine during the hours of a series
hits every kernel alike, and repetition r shares seed r (and its seeded losses) on every kernel. In
virtual time, where the host's drift does not reach the guest, each kernel's repetitions are one session
instead (testbed.workflows.compare.schedule). A kernel that cannot be had stops the series before
anything runs (with the versions that can be had; a source name, its tree, revision or patches); one
built from source is built when its first session starts, so a series of a tree's commits starts at
once; a kernel that does not build, or on which no run of its first repetition completes (it does not
boot), is reported and the series goes on without it. The suite's positive controls run on the last
kernel (its flows harmed) and are compared with that kernel's own runs of their point.

Then analysis/kernels/series.py compares each kernel with the one before (and the first with the last),
paired by seed, Holm over the whole series, and this writes in
``results/regress/<UTC time>-series-<first>..<last>/``: ``series.txt`` (also printed), ``report.html``
(the change points first, then one figure per metric across the versions with 95 % intervals,
then every comparison), ``trend.csv``, ``series.json`` and ``junit.xml``; the runs are in the catalog.
Killed and started again with the same kernels, suite and options, the series goes on in its folder
without running its complete sub-sessions again (testbed/workflows/compare.py, shared with ``regress``
and ``bisect``).

Exit status: 0 when no metric regressed at a change point (or between first and last), 1 when one
did, 2 when the series itself failed (a kernel dropped, a run that did not complete, a control missed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.figures import kernel_plots
from analysis.kernels import regression, series
from testbed.host import kernels
from testbed.host.session import log
from testbed.report.pages import junit
from testbed.report.pages.points import text_table
from testbed.report.pages.templating import Badge, render, table
from testbed.results import rundir
from testbed.scenario.points import ScenarioFile
from testbed.workflows import compare
from testbed.workflows.compare import label, options_text
from testbed.workflows.sessions import Where, refuse_runaway


@dataclass
class SeriesResult:
    directory: Path
    kernels: list[str]
    steps: list[series.Step] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    #: runs left out as untrustworthy, one line per kernel and point (compare.left_out_runs)
    left_out: list[str] = field(default_factory=list)
    #: whether those runs would change a step's verdict (compare.sensitivity); empty when none was left out
    sensitivity: list[str] = field(default_factory=list)
    exit_code: int = 0

    @property
    def change_points(self) -> list[series.Step]:
        return series.change_points(self.steps)


def _version_of(release: str) -> str:
    """``6.1.0-55-amd64`` -> ``6.1.0-55``; ``6.12.117+deb12-amd64`` -> ``6.12.117+deb12``."""
    return release.removesuffix(f"-{kernels.FLAVOUR}")


def baseline_from_history(results_root: Path, series_name: str, candidate: str) -> str:
    """The newest kernel of ``series_name`` older than ``candidate`` with a complete run in the results
    catalog: what ``regress --latest`` compares the newest installable kernel with."""
    from analysis.runs.catalog import ingest, runs

    ingest(results_root)
    history = runs(results_root, status="complete")
    order = kernels.available_versions()
    seen = {_version_of(r) for r in history.get("kernel_release", pd.Series(dtype=str)).dropna()}
    older = [v for v in order[: order.index(candidate)] if v in seen and _in_series(v, series_name)]
    if not older:
        raise ValueError(
            f"--latest {series_name}: no kernel of that series older than {candidate} has a complete "
            f"run in {results_root} (catalog.sqlite); give --baseline VERSION for the first comparison"
        )
    return older[-1]


def _in_series(version: str, series_name: str) -> bool:
    return version == series_name or any(version.startswith(series_name + sep) for sep in ".-+")


def already_compared(results_root: Path, baseline: str, candidate: str) -> Path | None:
    """The newest complete ``regress`` of exactly this pair under ``results_root`` (its regress.json), if any."""
    for found in sorted(
        (results_root / "regress").glob(f"*-{label(baseline)}-vs-{label(candidate)}/regress.json"), reverse=True
    ):
        if rundir.read_json(found).get("exit_code") in (0, 1):
            return found
    return None


def run_series(
    kernel_list: list[str],
    suite: ScenarioFile,
    repeat: int,
    where: Where | None = None,
    inject: dict | None = None,
    inject_from: str | None = None,
) -> SeriesResult:
    """Run the suite ``repeat`` times on every kernel, interleaved, and judge (module doc), where ``where``
    says (testbed.workflows.sessions.Where). An unfinished series of the same kernels, suite and options
    resumes in its folder (``where.force``: a new one)."""
    where = where or Where()
    cluster, clock = where.cluster, where.clock
    compare.check_repeat(repeat)
    kernel_list = [kernels.pinned(k) for k in kernel_list]  # a tree at its commit now
    compare.check_labels(kernel_list)
    inject_from = kernels.pinned(inject_from) if inject_from else None
    compare.check_injection(inject, inject_from, kernel_list)
    every_seed = compare.variant(suite, list(range(1, repeat + 1)), candidate=True).runs()
    refuse_runaway(every_seed * len(kernel_list), where, kernel_list)
    for n, kernel in enumerate(kernel_list, 1):  # every kernel downloaded or refused before runs; builds when reached
        log(f"series: kernel {n} of {len(kernel_list)}: {kernel}")
        kernels.settle(kernel, log=log)
    spec = {
        "kernels": list(kernel_list),
        "suite": suite.name,
        "points": [p.point_id for p in suite.points],
        "repeat": repeat,
        "inject": inject or {},
        "inject_from": inject_from,
        "cluster": cluster,
        "clock": clock,
    }
    name = f"series-{label(kernel_list[0])}..{label(kernel_list[-1])}"
    comparison = compare.ComparisonFolder.open(where.results, "series", name, spec, force=where.force, folder="regress")
    by_name = {label(k): k for k in kernel_list}

    def scenario_for(side: compare.KernelSide, reps: list[int]) -> ScenarioFile:
        harm = compare.injected(side.kernel, kernel_list, inject, inject_from)
        return compare.variant(suite, reps, harm, candidate=side.kernel == kernel_list[-1])

    sides = [compare.KernelSide(name, kernel) for name, kernel in by_name.items()]
    sessions = compare.run_interleaved(comparison, sides, repeat, scenario_for, where)
    result = SeriesResult(comparison.directory, list(kernel_list))
    for side, why in comparison.dropped.items():
        result.failures.append(f"{by_name[side]}: {why}; the series goes on without it")
    kept = [k for k in kernel_list if label(k) not in comparison.dropped]
    if len(kept) < 2:
        result.exit_code = 2
        _write(result, suite, repeat, {}, [], inject, inject_from)
    else:
        judge_series(result, kept, {k: sessions[label(k)] for k in kept}, suite, repeat, inject, inject_from)
    comparison.finish()
    return result


def _control_steps(frame: pd.DataFrame, kernel: str, suite: ScenarioFile) -> list[series.Step]:
    """Each positive control of the suite on the last kernel against that kernel's own runs of its point."""
    steps = []
    for control in suite.controls:
        base = compare.control_base(suite, control)
        if base is None:
            continue
        plain = frame[frame["point"] == base].assign(point=control)
        harmed = frame[frame["point"] == control]
        steps += [
            series.Step(kernel, f"{kernel} + control", "control", c)
            for c in regression.compare(plain, harmed, adjusted=False)
        ]
    return steps


def _verdicts(steps: list) -> dict[str, str]:
    return {f"{s.before} -> {s.after}: {s.comparison.name}": s.comparison.verdict for s in steps if s.kind != "control"}


def judge_series(
    result: SeriesResult,
    kept: list[str],
    sessions: dict,
    suite: ScenarioFile,
    repeat: int,
    inject: dict | None = None,
    inject_from: str | None = None,
) -> SeriesResult:
    """Compare the kernels' runs (analysis/kernels/series.py) and write the outputs (module doc)."""
    frames, statuses = {}, {}
    for kernel in kept:
        frames[kernel], statuses[kernel] = compare.side_metrics(sessions[kernel])
    controls = _control_steps(frames[kept[-1]], kept[-1], suite)
    plain = {k: f[~f["point"].isin(list(suite.controls))] for k, f in frames.items()}
    result.steps = series.compare_series(plain, kept, extra=controls)
    for kernel in kept:
        result.left_out += compare.left_out_runs(statuses[kernel], kernel)
        for point in sorted(statuses[kernel]):
            if failed := compare.failed_runs(point, statuses[kernel]):
                result.failures.append(
                    f"{kernel}: {len(failed)} run(s) of {point} did not complete: "
                    f"{'; '.join(sorted(set(failed)))[:300]}"
                )
    if result.left_out:
        every = {k: compare.side_metrics(sessions[k], untrusted=True)[0] for k in kept}
        again = series.compare_series({k: f[~f["point"].isin(list(suite.controls))] for k, f in every.items()}, kept)
        result.sensitivity = compare.sensitivity(_verdicts(result.steps), _verdicts(again))
    _check_controls(result, suite)
    regressed = any(
        s.comparison.verdict == "regression" for s in result.steps if s.kind in (series.ADJACENT, series.OVERALL)
    )
    result.exit_code = compare.exit_code(result.failures, regressed)
    _write(result, suite, repeat, frames, kept, inject, inject_from)
    return result


def _check_controls(result: SeriesResult, suite: ScenarioFile) -> None:
    for control in suite.controls:
        mine = [s.comparison for s in result.steps if s.kind == "control" and s.comparison.point == control]
        what = f"positive control {control} (last kernel, flows with {options_text(suite.controls[control])})"
        line, missed = compare.control_line(what, mine)
        result.controls.append(line)
        if missed:
            result.failures.append(line)


def _step_rows(steps: list[series.Step]) -> list[dict]:
    rows = []
    for s in sorted(steps, key=lambda s: (not s.moved, s.kind != series.ADJACENT)):
        c = s.comparison
        rows.append(
            {
                "from": s.before,
                "to": s.after,
                "kind": s.kind,
                "point": c.point,
                "cc": c.cc,
                "metric": c.metric,
                "change": f"{c.change:+.1%}" if c.change == c.change else "n/a",
                "p (Holm)": compare.fmt_value(c.p_value, 2),
                "detectable": compare.detectable_text(c.detectable),
                "test": c.test,
                "verdict": c.verdict,
            }
        )
    return rows


def _summary(result: SeriesResult, repeat: int, inject: dict | None, inject_from: str | None) -> str:
    n_steps = sum(s.kind != "control" for s in result.steps)
    lines = [
        f"regress --series: {' -> '.join(result.kernels)}, {repeat} repetitions each"
        + (f"; flows with {options_text(inject)} from {inject_from} on" if inject else "")
    ]
    points = result.change_points
    lines.append(
        f"change points: {len(points)} of {n_steps} comparisons (adjacent kernels and first vs last, paired "
        f"by seed, Holm over all: at most 5 % of series with no change raise any)"
    )
    for s in points:
        c = s.comparison
        lines.append(
            f"  after {s.before}, at {s.after}: {c.point} {c.cc} {c.metric} {c.change:+.1%} "
            f"({c.verdict}, p = {c.p_value:.2g}, {c.test})"
        )
    drift = [s for s in result.steps if s.kind == series.OVERALL and s.moved]
    for s in drift:
        c = s.comparison
        lines.append(f"  first vs last: {c.point} {c.cc} {c.metric} {c.change:+.1%} ({c.verdict}, p = {c.p_value:.2g})")
    lines += result.controls
    lines += [f"failed: {f}" for f in result.failures if f not in result.controls]
    lines += [f"left out: {line}" for line in result.left_out]
    lines += [f"sensitivity: {line}" for line in result.sensitivity]
    lines.append(f"exit status {result.exit_code} ({compare.EXIT_MEANINGS[result.exit_code]})")
    return "\n".join(lines)


def _write(
    result: SeriesResult,
    suite: ScenarioFile,
    repeat: int,
    frames: dict,
    kept: list[str],
    inject: dict | None,
    inject_from: str | None,
) -> None:
    directory = result.directory
    summary = _summary(result, repeat, inject, inject_from)
    rows = _step_rows(result.steps)
    text = summary + "\n\n" + (text_table(pd.DataFrame(rows)) if rows else "(nothing to compare)")
    print(text)
    (directory / "series.txt").write_text(text + "\n")
    trend = series.trend(frames, kept) if kept else pd.DataFrame(columns=series.TREND_COLUMNS)
    trend.to_csv(directory / "trend.csv", index=False)
    rundir.write_json_atomic(
        directory / "series.json",
        {
            "kernels": result.kernels,
            "compared": kept,
            "repeat": repeat,
            "exit_code": result.exit_code,
            "inject": inject or {},
            "inject_from": inject_from,
            "failures": result.failures,
            "left_out": result.left_out,
            "sensitivity": result.sensitivity,
            "controls": result.controls,
            "steps": [
                {"before": s.before, "after": s.after, "kind": s.kind, **s.comparison.__dict__} for s in result.steps
            ],
        },
    )
    junit.write(
        directory / "junit.xml",
        f"cc-testbed regress --series {result.kernels[0]}..{result.kernels[-1]}",
        _junit_suites(result),
    )
    plots = [
        (kernel_plots.trend_png(trend, kept, metric, result.change_points), f"{metric} across the kernels")
        for metric in dict.fromkeys(trend["metric"])
    ]
    for row in rows:
        css = {"regression": "bad", "improvement": "good", "too few runs": "warn"}.get(row["verdict"], "")
        row["verdict"] = Badge(row["verdict"], css)
    page = render(
        "series.html.j2",
        title="regress --series",
        summary=summary.splitlines(),
        plots=plots,
        comparisons=table(pd.DataFrame(rows)),
    )
    (directory / "report.html").write_text(page)
    print(f"report: {directory / 'report.html'}\njunit: {directory / 'junit.xml'}")


def _junit_suites(result: SeriesResult) -> dict[str, list[junit.Case]]:
    """A case per comparison: a regression at a change point (or first vs last) fails; a missed control
    fails; a kernel dropped or a run that failed is an error."""
    suites: dict[str, list[junit.Case]] = {}
    for s in result.steps:
        c = s.comparison
        failing = c.verdict == "regression" and s.kind != "control"
        detail = f"{c.verdict}: {c.change:+.2%}, p = {c.p_value:.3g} (Holm), {c.test}"
        suites.setdefault(f"{s.before} -> {s.after}", []).append(
            junit.Case(
                f"{s.before} -> {s.after}",
                f"{c.point} / {c.cc} / {c.metric}",
                "failure" if failing else "passed",
                f"regression: {c.change:+.1%}" if failing else "",
                detail,
            )
        )
    if result.failures:
        suites["runs"] = [
            junit.Case("runs", f.split(":")[0], "error", "the series failed here", f) for f in result.failures
        ]
    return suites
