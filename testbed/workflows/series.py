"""``testbed regress --series``: a suite across a series of kernels, and the versions after which a metric
moved (issue 40).

The suite runs on every kernel, repetition by repetition: kernel 1, kernel 2, ..., kernel N with seed
1, then all of them with seed 2, ..., so that whatever drifts on the machine during the hours of a
series hits every kernel alike, and repetition r shares seed r (and its seeded losses) on every
kernel. A kernel that cannot be had stops the series before anything runs (with the versions that
can be had); a kernel on which no run of its first repetition completes (it does not boot) is
reported and the series goes on without it. The suite's positive controls run on the last kernel
(its flows harmed) and are compared with that kernel's own runs of their point.

Then analysis/series.py compares each kernel with the one before (and the first with the last),
paired by seed, Holm over the whole series, and this writes in
``results/regress/<UTC time>-series-<first>..<last>/``: ``series.txt`` (also printed), ``report.html``
(the change points first, then one figure per metric across the versions with 95 % intervals,
then every comparison), ``trend.csv``, ``series.json`` and ``junit.xml``; the runs are in the catalog.

Exit status: 0 when no metric regressed at a change point (or between first and last), 1 when one
did, 2 when the series itself failed (a kernel dropped, a run that did not complete, a control missed).
"""

from __future__ import annotations

import math
import random
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis import regression, series
from analysis.plots import figure_png
from testbed import PROJECT
from testbed.guest.lossbpf import LossChannelError
from testbed.guest.modules import ModuleBuildError
from testbed.host import kernels
from testbed.host.session import log, run_session
from testbed.host.virtme import GuestError
from testbed.plan.estimate import GUEST_BOOT_S, estimate_s
from testbed.report.pages import Badge, render, table
from testbed.report.session import text_table
from testbed.results import rundir
from testbed.scenario.algorithms import lookup
from testbed.scenario.points import ScenarioFile
from testbed.workflows import regress

#: what a session raises when its kernel cannot run the suite at all (a module that does not build for it,
#: headers apt cannot find, a guest that cannot start, a loss channel its kernel lacks): the kernel is dropped
KERNEL_REFUSALS = (ModuleBuildError, GuestError, kernels.KernelError, LossChannelError)


@dataclass
class SeriesResult:
    directory: Path
    kernels: list[str]
    steps: list[series.Step] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    exit_code: int = 0

    @property
    def change_points(self) -> list[series.Step]:
        return series.change_points(self.steps)


def label(kernel: str) -> str:
    return Path(kernel).name if "/" in kernel else kernel


def injected(kernel: str, order: list[str], inject: dict | None, inject_from: str | None) -> dict | None:
    """The flow options a kernel's runs get: ``inject`` from version ``inject_from`` on (a positive control
    of the series' or bisection's own: a regression of known size placed at a chosen version)."""
    if not inject or inject_from is None:
        return None
    return inject if order.index(kernel) >= order.index(inject_from) else None


def check_injection(inject: dict | None, inject_from: str | None, order: list[str]) -> None:
    """--inject and --inject-from come together, and the version is one of those run."""
    if bool(inject) != (inject_from is not None):
        raise ValueError("--inject NAME=VALUE and --inject-from KERNEL go together (the harm and where it starts)")
    if inject_from is not None and inject_from not in order:
        raise ValueError(f"--inject-from {inject_from}: not one of the kernels run ({', '.join(order)})")


def _version_of(release: str) -> str:
    """``6.1.0-55-amd64`` -> ``6.1.0-55``; ``6.12.117+deb12-amd64`` -> ``6.12.117+deb12``."""
    return release.removesuffix(f"-{kernels.FLAVOUR}")


def baseline_from_history(results_root: Path, series_name: str, candidate: str) -> str:
    """The newest kernel of ``series_name`` older than ``candidate`` with a complete run in the results
    catalog: what ``regress --latest`` compares the newest installable kernel with."""
    from analysis.catalog import ingest, runs

    ingest(results_root)
    history = runs(results_root, status="complete")
    order = kernels.available_versions()
    seen = {_version_of(r) for r in history.get("kernel_release", pd.Series(dtype=str)).dropna()}
    older = [v for v in order[: order.index(candidate)] if v in seen and _in_series(v, series_name)]
    if not older:
        raise ValueError(f"--latest {series_name}: no kernel of that series older than {candidate} has a complete "
                         f"run in {results_root} (catalog.sqlite); give --baseline VERSION for the first comparison")
    return older[-1]


def _in_series(version: str, series_name: str) -> bool:
    return version == series_name or any(version.startswith(series_name + sep) for sep in ".-+")


def already_compared(results_root: Path, baseline: str, candidate: str) -> Path | None:
    """The newest complete ``regress`` of exactly this pair under ``results_root`` (its regress.json), if any."""
    for found in sorted((results_root / "regress").glob(f"*-{label(baseline)}-vs-{label(candidate)}/regress.json"),
                        reverse=True):  # fmt: skip
        if rundir.read_json(found).get("exit_code") in (0, 1):
            return found
    return None


def _completed(session: Path) -> tuple[int, list[str]]:
    """(complete runs, reasons of the others) of one session folder."""
    done, reasons = 0, []
    for path in session.rglob("manifest.json"):
        manifest = rundir.read_json(path)
        if manifest.get("status") == "complete":
            done += 1
        else:
            reasons.append(manifest.get("reason") or "no reason recorded")
    return done, reasons


def run_series(kernel_list: list[str], suite: ScenarioFile, repeat: int, results_root: Path = PROJECT / "results",
               vcpus: int | None = None, cluster: str | None = None, inject: dict | None = None,
               inject_from: str | None = None) -> SeriesResult:  # fmt: skip
    """Run the suite ``repeat`` times on every kernel, interleaved, and judge (module doc)."""
    if repeat < 2:
        raise ValueError(f"--repeat {repeat}: a comparison needs at least 2 repetitions per kernel (default 5)")
    check_injection(inject, inject_from, kernel_list)
    for kernel in kernel_list:  # every kernel settled (downloaded, or refused with the list) before anything runs
        kernels.fetch(kernel, log=log)
    first, last = label(kernel_list[0]), label(kernel_list[-1])
    directory = results_root / "regress" / f"{rundir.utc_stamp()}-series-{first}..{last}"
    directory.mkdir(parents=True)
    result = SeriesResult(directory, list(kernel_list))
    sessions: dict[str, set[Path]] = {k: set() for k in kernel_list}
    placement_seed = random.SystemRandom().randrange(2**31) if cluster else None
    per_session_s = sum(estimate_s(r) for r in regress.variant(suite, 1).runs()) + GUEST_BOOT_S
    plan = [(rep, kernel) for rep in range(1, repeat + 1) for kernel in kernel_list]
    dropped: set[str] = set()
    started = time.monotonic()
    for done, (rep, kernel) in enumerate(plan):
        if kernel in dropped:
            continue
        left = (time.monotonic() - started) / done * (len(plan) - done) if done else (len(plan) - done) * per_session_s
        log(f"series: {done + 1}/{len(plan)}: {kernel}, repetition {rep}/{repeat} (ETA {left / 60:.0f} min)")
        is_last = kernel == kernel_list[-1]
        scenario = regress.variant(suite, rep, injected(kernel, kernel_list, inject, inject_from), candidate=is_last)
        try:
            session = run_session(scenario, backend="guest", kernel_version=kernel,
                                  results_root=directory / label(kernel), vcpus=vcpus, cluster=cluster,
                                  placement_seed=placement_seed).directory  # fmt: skip
        except KERNEL_REFUSALS as err:  # this kernel cannot run the suite: the others still can
            _drop(result, dropped, kernel, f"it refused the suite before any run ({err})")
            continue
        sessions[kernel].add(session)
        complete, reasons = _completed(session)
        if rep == 1 and not complete:
            why = "; ".join(sorted(set(reasons)))
            _drop(result, dropped, kernel, f"no run of its first repetition completed ({why})")
    kept = [k for k in kernel_list if k not in dropped]
    if len(kept) < 2:
        result.exit_code = 2
        _write(result, suite, repeat, {}, [], inject, inject_from)
        return result
    return judge(result, kept, sessions, suite, repeat, inject, inject_from)


def _drop(result: SeriesResult, dropped: set[str], kernel: str, why: str) -> None:
    dropped.add(kernel)
    result.failures.append(f"{kernel}: {why[:400]}; the series goes on without it")
    log(f"series: {result.failures[-1]}")


def _control_steps(frame: pd.DataFrame, kernel: str, suite: ScenarioFile) -> list[series.Step]:
    """Each positive control of the suite on the last kernel against that kernel's own runs of its point."""
    steps = []
    for control in suite.controls:
        base = regress.control_base(suite, control)
        if base is None:
            continue
        plain = frame[frame["point"] == base].assign(point=control)
        harmed = frame[frame["point"] == control]
        steps += [series.Step(kernel, f"{kernel} + control", "control", c)
                  for c in regression.compare(plain, harmed, adjusted=False)]  # fmt: skip
    return steps


def judge(result: SeriesResult, kept: list[str], sessions: dict, suite: ScenarioFile, repeat: int,
          inject: dict | None = None, inject_from: str | None = None) -> SeriesResult:  # fmt: skip
    """Compare the kernels' runs (analysis/series.py) and write the outputs (module doc)."""
    frames, statuses = {}, {}
    for kernel in kept:
        frames[kernel], statuses[kernel] = regress.side_metrics_of(sessions[kernel])
    controls = _control_steps(frames[kept[-1]], kept[-1], suite)
    plain = {k: f[~f["point"].isin(list(suite.controls))] for k, f in frames.items()}
    result.steps = series.compare_series(plain, kept, extra=controls)
    for kernel in kept:
        for point, seen in sorted(statuses[kernel].items()):
            failed = [reason or "no reason recorded" for status, reason in seen if status != "complete"]
            if failed:
                result.failures.append(f"{kernel}: {len(failed)} run(s) of {point} did not complete: "
                                       f"{'; '.join(sorted(set(failed)))[:300]}")  # fmt: skip
    _check_controls(result, suite)
    regressed = any(s.comparison.verdict == "regression" for s in result.steps
                    if s.kind in (series.ADJACENT, series.OVERALL))  # fmt: skip
    result.exit_code = 2 if result.failures else (1 if regressed else 0)
    _write(result, suite, repeat, frames, kept, inject, inject_from)
    return result


def _check_controls(result: SeriesResult, suite: ScenarioFile) -> None:
    for control in suite.controls:
        mine = [s.comparison for s in result.steps if s.kind == "control" and s.comparison.point == control]
        found = [c for c in mine if c.verdict == "regression"]
        what = f"positive control {control} (last kernel, flows with {regress.options_text(suite.controls[control])})"
        if found:
            result.controls.append(f"{what}: detected: " + ", ".join(
                f"{c.cc} {c.metric} {c.change:+.1%} (p = {c.p_value:.2g})" for c in found))  # fmt: skip
        elif mine and all(c.verdict != "too few runs" for c in mine):
            smallest = min((c.detectable for c in mine if not math.isnan(c.detectable)), default=math.nan)
            line = f"{what}: missed (smallest detectable change {smallest:.1%}): raise --repeat"
            result.controls.append(line)
            result.failures.append(line)
        else:
            result.controls.append(f"{what}: not judged (its runs did not complete)")


def _step_rows(steps: list[series.Step]) -> list[dict]:
    rows = []
    for s in sorted(steps, key=lambda s: (not s.moved, s.kind != series.ADJACENT)):
        c = s.comparison
        rows.append({"from": s.before, "to": s.after, "kind": s.kind, "point": c.point, "cc": c.cc, "metric": c.metric,
                     "change": "n/a" if math.isnan(c.change) else f"{c.change:+.1%}",
                     "p (Holm)": regress.fmt_value(c.p_value, 2), "detectable": regress.detectable_text(c.detectable),
                     "test": c.test, "verdict": c.verdict})  # fmt: skip
    return rows


def _summary(result: SeriesResult, repeat: int, inject: dict | None, inject_from: str | None) -> str:
    n_steps = sum(s.kind != "control" for s in result.steps)
    lines = [f"regress --series: {' -> '.join(result.kernels)}, {repeat} repetitions each"
             + (f"; flows with {regress.options_text(inject)} from {inject_from} on" if inject else "")]  # fmt: skip
    points = result.change_points
    lines.append(f"change points: {len(points)} of {n_steps} comparisons (adjacent kernels and first vs last, paired "
                 f"by seed, Holm over all: at most 5 % of series with no change raise any)")  # fmt: skip
    for s in points:
        c = s.comparison
        lines.append(f"  after {s.before}, at {s.after}: {c.point} {c.cc} {c.metric} {c.change:+.1%} "
                     f"({c.verdict}, p = {c.p_value:.2g}, {c.test})")  # fmt: skip
    drift = [s for s in result.steps if s.kind == series.OVERALL and s.moved]
    for s in drift:
        c = s.comparison
        lines.append(f"  first vs last: {c.point} {c.cc} {c.metric} {c.change:+.1%} ({c.verdict}, p = {c.p_value:.2g})")
    lines += result.controls
    lines += [f"failed: {f}" for f in result.failures if f not in result.controls]
    meaning = ["no regression", "a regression", "the series failed"][result.exit_code]
    lines.append(f"exit status {result.exit_code} ({meaning})")
    return "\n".join(lines)


def _write(result: SeriesResult, suite: ScenarioFile, repeat: int, frames: dict, kept: list[str],
           inject: dict | None, inject_from: str | None) -> None:  # fmt: skip
    directory = result.directory
    summary = _summary(result, repeat, inject, inject_from)
    rows = _step_rows(result.steps)
    text = summary + "\n\n" + (text_table(pd.DataFrame(rows)) if rows else "(nothing to compare)")
    print(text)
    (directory / "series.txt").write_text(text + "\n")
    trend = series.trend(frames, kept) if kept else pd.DataFrame(columns=series.TREND_COLUMNS)
    trend.to_csv(directory / "trend.csv", index=False)
    rundir.write_json_atomic(directory / "series.json", {
        "kernels": result.kernels, "compared": kept, "repeat": repeat, "exit_code": result.exit_code,
        "inject": inject or {}, "inject_from": inject_from, "failures": result.failures, "controls": result.controls,
        "steps": [{"before": s.before, "after": s.after, "kind": s.kind, **s.comparison.__dict__}
                  for s in result.steps],
    })  # fmt: skip
    _junit(directory / "junit.xml", result)
    plots = [(_trend_png(trend, kept, metric, result.change_points), f"{metric} across the kernels")
             for metric in dict.fromkeys(trend["metric"])]  # fmt: skip
    for row in rows:
        css = {"regression": "bad", "improvement": "good", "too few runs": "warn"}.get(row["verdict"], "")
        row["verdict"] = Badge(row["verdict"], css)
    page = render("series.html.j2", title="regress --series", summary=summary.splitlines(), plots=plots,
                  comparisons=table(pd.DataFrame(rows)))  # fmt: skip
    (directory / "report.html").write_text(page)
    print(f"report: {directory / 'report.html'}\njunit: {directory / 'junit.xml'}")


def _junit(path: Path, result: SeriesResult) -> None:
    """One test case per comparison: a regression at a change point (or first vs last) fails; a missed
    control fails; a kernel dropped is an error."""
    suites = ET.Element("testsuites", name=f"cc-testbed regress --series {result.kernels[0]}..{result.kernels[-1]}")
    by_pair: dict[str, list[series.Step]] = {}
    for s in result.steps:
        by_pair.setdefault(f"{s.before} -> {s.after}", []).append(s)
    for name, steps in by_pair.items():
        failing = [s for s in steps if s.comparison.verdict == "regression" and s.kind != "control"]
        suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(steps)), failures=str(len(failing)),
                              errors="0")  # fmt: skip
        for s in steps:
            c = s.comparison
            case = ET.SubElement(suite, "testcase", classname=name, name=f"{c.point} / {c.cc} / {c.metric}")
            detail = f"{c.verdict}: {c.change:+.2%}, p = {c.p_value:.3g} (Holm), {c.test}"
            if s in failing:
                ET.SubElement(case, "failure", message=f"regression: {c.change:+.1%}").text = detail
            else:
                ET.SubElement(case, "system-out").text = detail
    for failure in result.failures:
        suite = ET.SubElement(suites, "testsuite", name="runs", tests="1", failures="0", errors="1")
        case = ET.SubElement(suite, "testcase", classname="runs", name=failure.split(":")[0])
        ET.SubElement(case, "error", message="the series failed here").text = failure
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _trend_png(trend: pd.DataFrame, order: list[str], metric: str, points: list[series.Step]) -> bytes:
    """One line per point x algorithm: its mean across the kernels relative to the first kernel's, with
    95 % intervals; a change point is a red ring on the version where the metric moved."""
    relative = series.relative_trend(trend[trend["metric"] == metric], order)
    fig = Figure(figsize=(max(6, 0.9 * len(order) + 3), 4.2))
    ax = fig.add_subplot()
    groups = list(dict.fromkeys(zip(relative["point"], relative["cc"], strict=True)))
    for i, (point, cc) in enumerate(groups):
        mine = relative[(relative["point"] == point) & (relative["cc"] == cc)].set_index("kernel").reindex(order)
        x = [j + (i - len(groups) / 2) * 0.03 for j in range(len(order))]
        y, low, high = (100 * mine[c].to_numpy(dtype=float) for c in ("mean", "ci_low", "ci_high"))
        ax.errorbar(x, y, yerr=[y - low, high - y], marker="o", markersize=3, capsize=2, lw=1,
                    color=lookup(cc).colour if cc not in ("ping", "requests") else None, alpha=0.85,
                    label=f"{point} {cc}")  # fmt: skip
        for s in points:
            if (s.comparison.point, s.comparison.cc, s.comparison.metric) == (point, cc, metric):
                j = order.index(s.after)
                ax.scatter([x[j]], [y[j]], s=160, facecolors="none", edgecolors="red", linewidths=2, zorder=5)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{metric}, % vs {order[0]}")
    ax.set_title(f"{metric} across the kernels (mean, 95 % interval; red ring: a change point)", fontsize=10)
    ax.grid(alpha=0.3)
    if len(groups) <= 14:
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return figure_png(fig)
