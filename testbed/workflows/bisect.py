"""``testbed bisect``: which Debian kernel version between a good and a bad one first moved a metric
(issue 40), or with ``--tree PATH`` which commit of a source tree (issue 55: each commit reached is
built here, testbed.host.kernelbuild; builds are kept by commit, so a step is built once). The
search and its statistics are analysis/kernels/bisection.py's; this runs its measurements:
each time a kernel needs more seeds, one guest session on that kernel runs the suite's points (or
the one asked for) with those seeds, and its runs' metrics come back.

A positive control proves the search: ``--inject window_kb=32 --inject-from 6.1.0-53`` gives every
flow that option on 6.1.0-53 and every later version, a regression of known size at a known
version, which the bisection must name.

Output in ``results/bisect/<UTC time>-<good>..<bad>/``: ``bisect.txt`` (the steps with their evidence,
also printed), ``bisect.json``, ``bisect.png`` (the followed metric per version tried, every seed),
each kernel's sessions in a folder of its own, and the runs in the catalog. Killed and started again
with the same arguments, it goes on in that folder, every kernel and seeds already run kept
(testbed/workflows/compare.py; ``--force`` starts afresh). Exit 0 when a first bad version is named, 2
when nothing could be bisected (the ends do not differ) or a run failed.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.figures import kernel_plots
from analysis.kernels import bisection
from testbed.host import kernels, kernelsource
from testbed.host.session import log, run_session
from testbed.plan.connections import AUTO_SLOTS
from testbed.results import rundir
from testbed.scenario.points import ScenarioFile
from testbed.workflows import compare
from testbed.workflows.compare import KERNEL_REFUSALS, label, options_text
from testbed.workflows.sessions import Where, refuse_runaway


class BisectError(ValueError):
    """Bad input or a failed run: the message says which and what would do."""


def versions_between(good: str, bad: str, available: list[str] | None = None) -> list[str]:
    """Every installable version from ``good`` to ``bad``, both included, oldest first."""
    available = kernels.available_versions() if available is None else available
    for option, end in (("--good", good), ("--bad", bad)):
        if end not in available:
            raise BisectError(
                f"{option} {end}: not an installable Debian kernel version here; versions: "
                f"{', '.join(available) or 'none (run apt-get update)'}"
            )
    if available.index(good) >= available.index(bad):
        raise BisectError(
            f"--good {good} is not older than --bad {bad}: give the older kernel as --good "
            f"(--good {bad} --bad {good} if the older one is the good one)"
        )
    versions = available[available.index(good) : available.index(bad) + 1]
    if len(versions) < 3:
        raise BisectError(f"{good} and {bad} are adjacent versions: nothing between them to bisect")
    return versions


def tree_versions(
    tree: Path, good: str, bad: str, first_parent: bool = False
) -> tuple[list[str], dict[str, list[str]]]:
    """``--tree``: the tree's commits from ``good`` to ``bad`` as kernels built here, and their parents: the
    commit graph as ``git bisect`` walks it, merged branches included, or its first-parent line
    (testbed.host.kernelsource.tree_graph)."""
    try:
        versions, parents = kernelsource.tree_graph(tree, good, bad, first_parent)
    except kernelsource.SourceError as err:
        raise BisectError(str(err)) from err
    if len(versions) < 3:
        raise BisectError(f"--good {good} and --bad {bad} are adjacent commits of {tree}: nothing between them")
    return versions, parents


def only_points(suite: ScenarioFile, point: str | None) -> ScenarioFile:
    """The suite without its positive controls, and only ``point`` when one is named."""
    points = [p for p in suite.points if p.point_id not in suite.controls]
    if point:
        chosen = [p for p in points if p.point_id == point]
        if not chosen:
            raise BisectError(
                f"--point {point}: not in suite {suite.name}; its points: {', '.join(p.point_id for p in points)}"
            )
        points = chosen
    return replace(suite, points=points, controls={})


class Measurer:
    """analysis.kernels.bisection's ``measure``: one guest session per call, on that kernel, with those seeds."""

    def __init__(
        self,
        suite: ScenarioFile,
        versions: list[str],
        directory: Path,
        inject: dict | None,
        inject_from: str | None,
        vcpus: int | None,
        cluster: str | None,
        clock: str = "auto",
        guests: int = 1,
        side_by_side: int = 1,
    ) -> None:
        self.suite, self.versions, self.directory = suite, versions, directory
        self.inject, self.inject_from, self.vcpus, self.cluster = inject, inject_from, vcpus, cluster
        self.clock, self.guests, self.side_by_side = clock, guests, side_by_side
        self.sessions = 0
        self.started = time.monotonic()
        #: (kernel, seeds) -> the session's metrics with its untrustworthy runs too, when it had any
        self.with_untrusted: dict[tuple[str, tuple[int, ...]], pd.DataFrame] = {}
        self.measured: dict[tuple[str, tuple[int, ...]], pd.DataFrame] = {}

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        self.sessions += 1
        log(
            f"bisect: session {self.sessions} ({(time.monotonic() - self.started) / 60:.0f} min so far): {kernel}, "
            f"seeds {seeds[0]}-{seeds[-1]}"
        )
        options = compare.injected(kernel, self.versions, self.inject, self.inject_from)
        scenario = compare.variant(self.suite, seeds, options)
        try:
            session = run_session(
                scenario,
                backend="guest",
                kernel_version=kernel,
                results_root=self.directory / label(kernel),
                vcpus=self.vcpus,
                cluster=self.cluster,
                clock=self.clock,
                guests=self.guests,
                side_by_side=self.side_by_side,
            ).directory
        except KERNEL_REFUSALS as err:  # it does not build, boot or run the suite: skipped (an end: no answer)
            log(f"bisect: {kernel} skipped: {err}")
            raise bisection.Skip(kernel, f"refused the suite ({str(err)[:300]})") from err
        frame, statuses = compare.side_metrics({session})
        for line in compare.left_out_runs(statuses, kernel):
            log(f"bisect: left out: {line}")
        failed = {point: compare.failed_runs(point, statuses) for point in statuses}
        if any(failed.values()):
            reasons = "; ".join(sorted({r for rs in failed.values() for r in rs}))[:400]
            log(f"bisect: {kernel} skipped: runs did not complete ({reasons}); see {session}")
            raise bisection.Skip(kernel, f"runs did not complete ({reasons}); see {session}")
        self.measured[kernel, tuple(seeds)] = frame
        if compare.left_out_runs(statuses):
            self.with_untrusted[kernel, tuple(seeds)] = compare.side_metrics({session}, untrusted=True)[0]
        return frame

    def sensitivity(self, result: bisection.Bisection, wanted: dict, repeat: int, max_repeat: int) -> list[str]:
        """Whether the runs left out as untrustworthy would change the answer: the search replayed on the
        same sessions with them included (empty when none was left out; said when the replay would have
        needed a session that was not run)."""
        if not self.with_untrusted:
            return []
        every = {**self.measured, **self.with_untrusted}

        skipped = {kernel for kernel, _ in result.skipped}

        def replayed(kernel: str, seeds: list[int]) -> pd.DataFrame:
            if kernel in skipped:  # it could not be run in the search either
                raise bisection.Skip(kernel, "could not be run")
            if (kernel, tuple(seeds)) not in every:
                raise BisectError(f"{kernel} with seeds {seeds[0]}-{seeds[-1]}, not run")
            return every[kernel, tuple(seeds)]

        try:
            again = bisection.bisect(result.versions, replayed, wanted, repeat, max_repeat, result.parents)
        except (BisectError, bisection.NothingToBisect) as err:
            return [f"with the untrustworthy runs the search would have gone elsewhere ({err}): not known"]
        if again.first_bad == result.first_bad:
            return ["with the untrustworthy runs included, the answer would be the same"]
        return [
            f"with the untrustworthy runs the first bad version would be {again.first_bad} (without them: "
            f"{result.first_bad})"
        ]


def run_bisect(
    good: str,
    bad: str,
    suite: ScenarioFile,
    where: Where,
    point: str | None = None,
    cc: str | None = None,
    metric: str | None = None,
    repeat: int = 3,
    max_repeat: int = 9,
    inject: dict | None = None,
    inject_from: str | None = None,
    tree: Path | None = None,
    first_parent: bool = False,
) -> tuple[bisection.Bisection | None, Path, int]:
    """Bisect (module doc) where ``where`` says (its results root, vCPUs, cluster, clock, --force, --yes):
    (the bisection or None, its folder, the exit status)."""
    cluster, clock = where.cluster, where.clock
    if first_parent and not tree:
        raise BisectError("--first-parent: only with --tree (Debian's versions are one line already)")
    versions, parents = tree_versions(tree, good, bad, first_parent) if tree else (versions_between(good, bad), None)
    good, bad = versions[0], versions[-1]
    compare.check_injection(inject, inject_from, versions)
    chosen = only_points(suite, point)
    # the planned steps and both ends, each with the most seeds a step may take
    planned = compare.variant(chosen, list(range(1, max_repeat + 1))).runs()
    steps = bisection.planned_steps(len(versions)) + 2
    refuse_runaway(planned * steps, where, versions, builds_at_most=steps)
    for kernel in (good, bad):  # the ends settled before anything runs; the middle ones when reached
        kernels.fetch(kernel, log=log)
    asked = {"cc": cc, "metric": metric, "repeat": repeat, "max_repeat": max_repeat, "inject": inject or {}}
    asked |= {"inject_from": inject_from, "cluster": cluster, "clock": clock, "first_parent": first_parent}
    spec = {"versions": versions, "suite": suite.name, "points": [p.point_id for p in chosen.points], **asked}
    # started again after a kill, the same bisection goes on in its folder: every session of a kernel and
    # seeds it already ran comes back from there (testbed.plan.resume) instead of running again
    comparison = compare.ComparisonFolder.open(
        where.results, "bisect", f"{label(good)}..{label(bad)}", spec, force=where.force
    )
    directory = comparison.directory
    measure = Measurer(
        chosen, versions, directory, inject, inject_from, where.cpus, cluster, clock, where.guests, where.side_by_side
    )
    log(f"bisect: {len(versions)} versions, {bisection.planned_steps(len(versions))} steps planned")
    try:
        wanted = {"point": point, "cc": cc, "metric": metric}
        result = bisection.bisect(versions, measure, wanted, repeat, max_repeat, parents)
    except (bisection.NothingToBisect, BisectError) as err:
        (directory / "bisect.txt").write_text(f"{err}\n")
        print(err)
        comparison.finish()
        return None, directory, 2
    wanted = dict(zip(("point", "cc", "metric"), result.key, strict=True))  # the metric step 0 chose, too
    again = [f"sensitivity: {line}" for line in measure.sensitivity(result, wanted, repeat, max_repeat)]
    packing = {"guests": where.guests, "side_by_side": where.side_by_side}
    reproduce = reproduce_lines(spec, result, suite.name.removeprefix("suite-"), point, tree, packing)
    _write(directory, result, measure, inject, inject_from, again + reproduce)
    comparison.finish()
    return result, directory, 2 if result.between or result.confirmed is False else 0


def reproduce_lines(
    spec: dict,
    result: bisection.Bisection,
    suite: str,
    point: str | None,
    tree: Path | None,
    packing: dict | None = None,
) -> list[str]:
    """How to run this again, whole: the bisection with every option it ran with, and the comparison of its
    answer alone (the pair as ``testbed regress`` judges it, at the most seeds a step may take), on the same
    clock and ``packing`` (guests, runs side by side: not the folder's identity, so a resume may change it)."""
    versions = spec["versions"]
    packing = packing or {}
    guests, slots = packing.get("guests", 1), packing.get("side_by_side", AUTO_SLOTS)
    packed = (f" --guests {guests}" if guests != 1 else "") + (
        f" --side-by-side {slots}" if slots != AUTO_SLOTS else ""
    )
    clock = f" --clock {spec['clock']}" if spec["clock"] != "auto" else ""
    options = [
        ("--tree", tree),
        ("--suite", suite),
        ("--point", point),
        ("--cc", spec["cc"]),
        ("--metric", spec["metric"]),
        ("--repeat", spec["repeat"]),
        ("--max-repeat", spec["max_repeat"]),
        *(("--inject", f"{k}={v}") for k, v in spec["inject"].items()),
        ("--inject-from", spec["inject_from"]),
        ("--clock", spec["clock"] if spec["clock"] != "auto" else None),
    ]
    given = "".join(f" {flag} {value}" for flag, value in options if value is not None)
    given += (" --first-parent" if spec.get("first_parent") else "") + packed
    ends = (versions[0], versions[-1])
    good, bad = (kernelsource.parse(v).rev for v in ends) if tree else ends  # --tree takes commits
    lines = [f"reproduce the bisection: testbed bisect --good {good} --bad {bad}{given}"]
    if result.first_bad and result.last_good:
        harm = (
            "".join(f" --candidate-flow-option {k}={v}" for k, v in spec["inject"].items())
            if spec["inject_from"]
            else ""
        )
        lines.append(
            f"reproduce its answer: testbed regress --baseline {result.last_good} --candidate "
            f"{result.first_bad} --suite {suite} --repeat {spec['max_repeat']}{harm}{clock}{packed} (then read its "
            f"{point or 'every point'}, {result.key[1]} {result.key[2]} line)"
        )
    return lines


def _confirmation(result: bisection.Bisection) -> list[str]:
    """The answer's confirmation on fresh seeds (analysis/kernels/bisection.py), one line."""
    if result.confirmed is None:
        return []
    seeds = f"{result.confirmation_seeds[0]}-{result.confirmation_seeds[-1]}"
    verdict = "confirmed" if result.confirmed else "UNCONFIRMED: the change did not hold there"
    if result.confirmation is None:
        return [f"confirmation on fresh seeds {seeds}: {verdict} ({result.confirmation_note})"]
    c = result.confirmation
    return [
        f"confirmation on fresh seeds {seeds}: {result.first_bad} against {result.last_good}: {c.metric} "
        f"{c.change:+.1%} (p = {c.p_value:.2g}, at 0.05 / {result.planned_steps}): {verdict}"
    ]


def _answer(result: bisection.Bisection) -> str:
    """The first bad version, or the range skipped versions leave it in."""
    if result.between:
        return (
            f"first bad version: one of {', '.join([*result.between, result.first_bad])} (last good: "
            f"{result.last_good}; {', '.join(result.between)} could not be run)"
        )
    return f"first bad version: {result.first_bad} (last good: {result.last_good})"


def _write(
    directory: Path,
    result: bisection.Bisection,
    measure: Measurer,
    inject: dict | None,
    inject_from: str | None,
    reproduce: list[str],
) -> None:
    """The bisection's answer: ``bisect.txt`` (also printed), ``bisect.json`` and ``bisect.png``."""
    text = "\n".join(_summary_lines(result, measure, inject, inject_from) + reproduce)
    print(text)
    (directory / "bisect.txt").write_text(text + "\n")
    rundir.write_json_atomic(directory / "bisect.json", _record(result, measure, inject, inject_from))
    (directory / "bisect.png").write_bytes(kernel_plots.bisect_png(result))


def _summary_lines(
    result: bisection.Bisection, measure: Measurer, inject: dict | None, inject_from: str | None
) -> list[str]:
    """What was bisected, the answer, the test each step used and its error rate, the steps."""
    point, cc, metric = result.key
    injected = f"; flows with {options_text(inject)} from {inject_from} on" if inject else ""
    detours = (
        ""
        if result.decisions <= result.planned_steps
        else f"; {result.decisions} steps were needed to go round skipped versions, so a wrong step is bounded "
        f"by {result.decisions} x 0.05 / {result.planned_steps}, not 5 %"
    )
    lines = [
        f"bisect {result.versions[0]}..{result.versions[-1]} ({len(result.versions)} versions): "
        f"{point} {cc} {metric}{injected}",
        _answer(result) + f", {len(result.steps)} steps ({result.planned_steps} planned), {measure.sessions} "
        "guest sessions",
        f"each step: paired t-test by seed against both ends, p < 0.05 / {result.planned_steps} "
        f"(Bonferroni over the planned steps) and a change beyond 5 %{detours}",
    ]
    lines += [f"skipped: {kernel}: {why}" for kernel, why in result.skipped]
    lines += _confirmation(result)
    lines += [f"  step {i}: {e.line()}" for i, e in enumerate(result.steps)]
    change = bisection.change_at(result)
    if change is not None:
        low, high = change.interval()
        lines.append(
            f"{result.first_bad} against {result.last_good}: {metric} {change.relative:+.1%} (95 % interval "
            f"{low:+.1%} to {high:+.1%}, {change.test})"
        )
    return lines


def _record(result: bisection.Bisection, measure: Measurer, inject: dict | None, inject_from: str | None) -> dict:
    """bisect.json: the search, its steps and its confirmation, for a program to read."""
    return {
        "versions": result.versions,
        "parents": result.parents,  # null: the versions are one line
        "key": list(result.key),
        "first_bad": result.first_bad,
        "last_good": result.last_good,
        "planned_steps": result.planned_steps,
        "sessions": measure.sessions,
        "inject": inject or {},
        "inject_from": inject_from,
        "skipped": [list(s) for s in result.skipped],
        "between": result.between,
        "confirmed": result.confirmed,
        "confirmation_seeds": result.confirmation_seeds,
        "confirmation": result.confirmation.__dict__ if result.confirmation else None,
        "steps": [
            {
                "kernel": e.kernel,
                "side": e.side,
                "note": e.note,
                "seeds": e.seeds,
                "vs_good": e.vs_good.__dict__,
                "vs_bad": e.vs_bad.__dict__ if e.vs_bad else None,
            }
            for e in result.steps
        ],
    }
