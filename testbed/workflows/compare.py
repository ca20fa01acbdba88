"""How kernels are compared: the one place ``regress``, ``regress --series`` and ``bisect`` share.

A comparison runs one suite on several kernels (its *sides*), each in its own guest session, and
judges them paired by seed. This module holds every step they have in common, in the order they run:

1. **What runs**: a side's scenario is the suite with its repetition's seed and, where asked, flow
   options that harm it on purpose (:func:`variant`, through testbed/scenario/variants.py: the one
   way every workflow derives a point from another). Repetition r runs seed r on every side, so
   each side sees the same seeded losses and the sides pair by seed.
2. **The schedule** (:func:`run_interleaved`, :func:`schedule`): in real time repetition by repetition and
   side by side in turn (baseline 1, candidate 1, baseline 2, ...), so whatever drifts on the machine
   during hours of runs hits every side alike. In virtual time the host's load and drift do not reach
   the guest's clock (testbed.host.timebase), so each side's repetitions are one session (seeds 1 to
   ``repeat``), as a bisection step's are: one boot per side instead of one per repetition, and a
   point's network kept from seed to seed (testbed.guest.keeper). On a cluster one placement seed
   sends a point's run to the same host on every side (host differences cancel in the pair). A side
   whose kernel refuses the suite, or on which nothing of its first repetition completes, is dropped
   with why; with fewer than two sides left nothing more runs.
3. **Resuming** (:class:`ComparisonFolder`): the comparison's folder is a session of sessions;
   ``comparison.json`` records what is compared and each sub-session once it ends. Started again with
   the same kernels, suite and options, a killed comparison goes on in its folder: sub-sessions whose
   runs all completed are not run again, and the one that was killed (or one with failed runs)
   resumes its own runs, only those not complete (testbed.plan.resume).
4. **Judging and writing** stay with each workflow (what it compares and how it decides), built from
   the parts here: the sides' metrics (:func:`side_metrics`), the runs that failed
   (:func:`failed_runs`), the positive controls (:func:`control_line`), the exit status
   (:func:`exit_code`) and the text of numbers (:func:`fmt_value`, :func:`detectable_text`); JUnit in
   testbed.report.pages.junit and figures in analysis.figures.plots.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.kernels import regression
from analysis.verdicts import claims
from analysis.verdicts.flowrows import untrusted_because
from testbed.guest.lossbpf import LossChannelError
from testbed.guest.modules import ModuleBuildError
from testbed.host import kernels, kernelsource
from testbed.host.session import log, run_session
from testbed.host.virtme import GuestError
from testbed.plan import resume
from testbed.plan.estimate import GUEST_BOOT_S, estimate_s
from testbed.report.pages.sessionpage import write_session_report
from testbed.results import rundir
from testbed.scenario.points import ScenarioFile
from testbed.scenario.suite import CONTROL_SUFFIX, FlowHarm
from testbed.scenario.variants import derive
from testbed.workflows.sessions import Where

STATE_FILE = "comparison.json"
#: what a session raises when its kernel cannot run the suite at all (a module that does not build for it,
#: headers apt cannot find, a guest that cannot start, a loss channel its kernel lacks): that side is dropped
KERNEL_REFUSALS = (ModuleBuildError, GuestError, kernels.KernelError, LossChannelError)
#: per-flow options a side can be given to inject a known regression (tests, demonstrations): those of a
#: suite's positive controls, name -> bool or int
FLOW_OPTIONS = {
    name: bool if field.annotation == (bool | None) else int for name, field in FlowHarm.model_fields.items()
}
EXIT_MEANINGS = ("nothing regressed", "a regression", "the run failed")


# -- what runs -----------------------------------------------------------------------------------------


def label(kernel: str) -> str:
    """A kernel as a folder name: the version, a vmlinuz's or .deb's file name, or a source's
    (``tree-linux-1a2b3c4d5e6f``, ``6.1+patch-fix``)."""
    if kernelsource.is_source(kernel):
        return kernelsource.label(kernel)
    return Path(kernel).name if "/" in kernel else kernel


def check_labels(kernels: list[str]) -> None:
    """Every kernel of a comparison in a folder of its own: two patches of one file name (a/fix.patch,
    b/fix.patch) or two trees of one folder name at one revision would share one, and their runs mix."""
    if twice := sorted({k for k in kernels if kernels.count(k) > 1}):
        raise ValueError(f"{', '.join(twice)} named twice: name each kernel once")
    seen: dict[str, str] = {}
    for kernel in kernels:
        other = seen.setdefault(label(kernel), kernel)
        if other != kernel:
            raise ValueError(
                f"{other} and {kernel} would share the folder {label(kernel)}: give one of them "
                "another file or folder name (a copy of the patch, a clone of the tree)"
            )


def check_repeat(repeat: int) -> None:
    if repeat < 2:
        raise ValueError(f"--repeat {repeat}: a comparison needs at least 2 repetitions per kernel (default 5)")


def parse_flow_options(items: list[str], option: str = "--candidate-flow-option") -> dict:
    """``sack=false`` -> {"sack": False}; a bad name or value names the valid ones."""
    options = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in FLOW_OPTIONS:
            raise ValueError(f"{option} {item!r}: expected NAME=VALUE with NAME one of {', '.join(FLOW_OPTIONS)}")
        if FLOW_OPTIONS[name] is bool:
            if value.lower() not in ("true", "false"):
                raise ValueError(f"{option} {item!r}: {name} is true or false")
            options[name] = value.lower() == "true"
        else:
            try:
                options[name] = int(value)
            except ValueError:
                raise ValueError(f"{option} {item!r}: {name} is a whole number") from None
    return options


def options_text(options: dict) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())


def control_base(suite: ScenarioFile, point_id: str) -> str | None:
    """The point a positive control repeats, when the suite runs that point too (then a side need not run
    the control unharmed: that point is its unharmed run)."""
    base = point_id.removesuffix(CONTROL_SUFFIX)
    return base if base != point_id and any(p.point_id == base for p in suite.points) else None


def variant(
    suite: ScenarioFile, seed: int | list[int], flow_options: dict | None = None, candidate: bool = False
) -> ScenarioFile:
    """The suite with every point's seeds set to ``[seed]`` (or the list) and ``flow_options`` on every flow. For
    the ``candidate``, the positive controls' options on their points' flows too; for any other side,
    without the controls whose point the suite runs anyway (the judge compares with that point)."""
    points = []
    for point in suite.points:
        if not candidate and point.point_id in suite.controls and control_base(suite, point.point_id):
            continue
        options = {**(flow_options or {}), **(suite.controls.get(point.point_id, {}) if candidate else {})}
        points.append(derive(point, [seed] if isinstance(seed, int) else list(seed), options))
    return ScenarioFile(suite.name, suite.path, suite.profile, suite.description, points, controls=suite.controls)


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


# -- a session of sessions ---------------------------------------------------------------------------------


@dataclass
class ComparisonFolder:
    """A comparison's folder and ``comparison.json``: what it compares (``spec``), where its runs go on a
    cluster (``placement_seed``), each sub-session that ended (side -> repetition -> folder, relative),
    those of them with runs that did not complete (run again on resume: only those runs) and each side
    dropped with why."""

    directory: Path
    spec: dict
    placement_seed: int | None = None
    sessions: dict[str, dict[str, str]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)  # "side/repetition" of sub-sessions with failed runs
    finished: bool = False
    resumed: bool = False

    @classmethod
    def open(
        cls, root: Path, kind: str, name: str, spec: dict, force: bool = False, folder: str | None = None
    ) -> ComparisonFolder:
        """The newest unfinished comparison of this ``kind`` and ``spec`` under ``root/folder`` (``folder``
        defaults to the kind) resumed, said so; else a new folder ``root/folder/<UTC time>-<name>``;
        ``force``: always a new one."""
        spec = {"kind": kind, **spec}
        parent = root / (folder or kind)
        for path in [] if force else sorted(parent.glob(f"*/{STATE_FILE}"), reverse=True):
            state = rundir.read_json(path)
            if state.get("spec") == spec and not state.get("finished"):
                done = sum(len(reps) for reps in state.get("sessions", {}).values())
                log(f"{kind}: resuming {path.parent} ({done} sub-sessions complete; --force starts a new one)")
                return cls(
                    path.parent,
                    spec,
                    state.get("placement_seed"),
                    state.get("sessions", {}),
                    state.get("dropped", {}),
                    state.get("incomplete", []),
                    resumed=True,
                )
            changed = _changed_inputs(state.get("spec") or {}, spec) if not state.get("finished") else []
            if changed and path == _newest(parent, kind):
                raise ValueError(
                    f"{kind} {path.parent.name} was started with other contents of {', '.join(changed)} "
                    "(each patch and diff is pinned by its sha256 when a comparison starts): put them "
                    "back to resume it, or --force a new comparison of what they hold now"
                )
        directory = parent / f"{rundir.utc_stamp()}-{name}"
        for n in range(2, 100):  # two started within a second (a test, a script) each get their own
            if not directory.exists():
                break
            directory = parent / f"{rundir.utc_stamp()}-{name}-{n}"
        directory.mkdir(parents=True)
        seed = random.SystemRandom().randrange(2**31) if spec.get("cluster") else None
        comparison = cls(directory, spec, seed)
        comparison.save()
        if seed is not None:
            rundir.write_json_atomic(directory / "placement.json", {"cluster": spec["cluster"], "placement_seed": seed})
        return comparison

    def save(self) -> None:
        rundir.write_json_atomic(
            self.directory / STATE_FILE,
            {
                "spec": self.spec,
                "placement_seed": self.placement_seed,
                "sessions": self.sessions,
                "dropped": self.dropped,
                "incomplete": self.incomplete,
                "finished": self.finished,
            },
        )

    def session(self, side: str, repetition: int) -> Path | None:
        """The sub-session of ``side``'s ``repetition`` whose runs all completed, if there is one."""
        relative = self.sessions.get(side, {}).get(str(repetition))
        return self.directory / relative if relative and f"{side}/{repetition}" not in self.incomplete else None

    def record(self, side: str, repetition: int, session: Path, complete: bool = True) -> None:
        """A sub-session that ended; ``complete``: every run of it completed (else it runs again on resume)."""
        self.sessions.setdefault(side, {})[str(repetition)] = str(session.relative_to(self.directory))
        key = f"{side}/{repetition}"
        self.incomplete = [k for k in self.incomplete if k != key] + ([] if complete else [key])
        self.save()

    def drop(self, side: str, why: str) -> None:
        self.dropped[side] = why[:400]
        self.save()
        log(f"{self.spec['kind']}: {side}: {self.dropped[side]}; dropped")

    def side_sessions(self, side: str) -> set[Path]:
        return {self.directory / relative for relative in self.sessions.get(side, {}).values()}

    def finish(self) -> None:
        self.finished = True
        self.save()


@dataclass(frozen=True)
class KernelSide:
    name: str  # its folder in the comparison: "baseline", "candidate" or the kernel's label
    kernel: str


def schedule(sides: list[KernelSide], repeat: int, clock: str) -> list[tuple[list[int], KernelSide]]:
    """The sub-sessions in the order they run, each (its repetitions, its side): interleaved one repetition
    at a time on any clock but ``virtual``, where each side's repetitions are one session (module doc)."""
    if clock == "virtual":
        return [(list(range(1, repeat + 1)), side) for side in sides]
    return [([rep], side) for rep in range(1, repeat + 1) for side in sides]


def run_interleaved(
    comparison: ComparisonFolder,
    sides: list[KernelSide],
    repeat: int,
    scenario_for: Callable[[KernelSide, list[int]], ScenarioFile],
    where: Where,
) -> dict[str, set[Path]]:
    """Every side's ``repeat`` repetitions as :func:`schedule` orders them (``scenario_for``: a side's suite
    at these repetitions' seeds), skipping the sub-sessions already complete; returns each side's sessions
    (a dropped side has none). Each sub-session runs where ``where`` says: its vCPUs, cluster and clock,
    its runs packed as ``testbed suite`` packs a session's."""
    kind = comparison.spec["kind"]
    plan = schedule(sides, repeat, where.clock)
    per_session_s = sum(estimate_s(r) for r in scenario_for(sides[-1], plan[-1][0]).runs()) + GUEST_BOOT_S
    started, ran = time.monotonic(), 0

    def left(reps: list[int], side: KernelSide) -> bool:
        return side.name not in comparison.dropped and not all(comparison.session(side.name, r) for r in reps)

    for done, (reps, side) in enumerate(plan):
        if len([s for s in sides if s.name not in comparison.dropped]) < 2:
            break  # nothing left to compare with
        if not left(reps, side):
            continue
        each = (time.monotonic() - started) / ran if ran else per_session_s
        which = (
            f"repetition {reps[0]}/{repeat}" if len(reps) == 1 else f"repetitions {reps[0]}-{reps[-1]} in one session"
        )
        log(
            f"{kind}: {done + 1}/{len(plan)}: {side.name} {side.kernel}, {which} "
            f"(ETA {each * sum(left(r, s) for r, s in plan[done:]) / 60:.0f} min)"
        )
        try:
            session = run_session(
                scenario_for(side, reps),
                backend="guest",
                kernel_version=side.kernel,
                results_root=comparison.directory / side.name,
                vcpus=where.cpus,
                cluster=where.cluster,
                placement_seed=comparison.placement_seed,
                clock=where.clock,
                guests=where.guests,
                side_by_side=where.side_by_side,
            ).directory
        except KERNEL_REFUSALS as err:  # this kernel cannot run the suite: the other sides still can
            comparison.drop(side.name, f"it refused the suite before any run ({err})")
            continue
        ran += 1
        complete, reasons = completed_runs(session)
        if 1 in reps and not complete:
            comparison.drop(side.name, f"no run of its first repetition completed ({'; '.join(sorted(set(reasons)))})")
            continue
        for rep in reps:
            comparison.record(side.name, rep, session, complete=not reasons)
    return {side.name: comparison.side_sessions(side.name) for side in sides}


def completed_runs(session: Path) -> tuple[int, list[str]]:
    """(complete runs, reasons of the others) of one session folder."""
    done, reasons = 0, []
    for path in session.rglob("manifest.json"):
        if resume.ATTEMPTS in path.relative_to(session).parts:  # an attempt set aside: its run ran again
            continue
        manifest = rundir.read_json(path)
        if manifest.get("status") == "complete":
            done += 1
        else:
            reasons.append(manifest.get("reason") or "no reason recorded")
    return done, reasons


#: a pinned input in a kernel's name (testbed.host.kernelsource.pin)
_PIN = re.compile(r"(patch:[^+@]+)@sha256:([0-9a-f]{64})")


def _newest(parent: Path, kind: str) -> Path | None:
    """The state file of the newest comparison of ``kind`` under ``parent`` (an older unfinished one whose
    inputs changed is abandoned: it blocks nothing)."""
    found = [
        p
        for p in sorted(parent.glob(f"*/{STATE_FILE}"), reverse=True)
        if rundir.read_json(p).get("spec", {}).get("kind") == kind
    ]
    return found[0] if found else None


def _changed_inputs(earlier: dict, spec: dict) -> list[str]:
    """The inputs (patch files, a tree's diff) whose contents differ between two specs that are otherwise
    the same: a comparison resumed after one of its patches was edited."""
    before, now = json.dumps(earlier, sort_keys=True), json.dumps(spec, sort_keys=True)
    if before == now or _PIN.sub(r"\1", before) != _PIN.sub(r"\1", now):
        return []
    pins = dict(_PIN.findall(before))
    changed = {name for name, sha in _PIN.findall(now) if name in pins and pins[name] != sha}
    return sorted(name.removeprefix("patch:") for name in changed)


# -- judging: the parts every comparing workflow uses ------------------------------------------------------


def side_metrics(
    session_dirs: set[Path], untrusted: bool = False
) -> tuple[pd.DataFrame, dict[str, list[tuple[str, str]]]]:
    """Analyse every run of a side: (its run metrics, point -> [(status, reason)] of its runs). Only
    trustworthy runs are measured: a run whose fidelity checks failed has the status "untrustworthy"
    with the checks as its reason (:func:`left_out_runs`), like the claims' verdicts. ``untrusted``:
    the metrics of every complete run, untrustworthy ones too (the sensitivity line: :func:`sensitivity`)."""
    frames, statuses = [], {}
    for session in sorted(session_dirs):
        report = write_session_report(session)
        measured = []
        for analysed in report.runs:
            point = analysed.manifest.get("point_id") or analysed.run_dir.parent.name
            why = untrusted_because(analysed.manifest) if analysed.status == "complete" else ""
            statuses.setdefault(point, []).append(("untrustworthy", why) if why else (analysed.status, analysed.reason))
            if not why or untrusted:
                measured.append(analysed)
        flows = claims.flow_rows(measured)
        if not flows.empty:
            frames.append(regression.run_metrics(flows))
        latency = regression.latency_metrics(measured)
        if not latency.empty:
            frames.append(latency)
    metrics = pd.concat(frames, ignore_index=True) if frames else regression.run_metrics(pd.DataFrame())
    return metrics, statuses


def failed_runs(point: str, statuses: dict[str, list[tuple[str, str]]]) -> list[str]:
    """The reasons of ``point``'s runs that did not complete on a side (``side_metrics``' statuses)."""
    return [
        reason or "no reason recorded"
        for status, reason in statuses.get(point, [])
        if status not in ("complete", "untrustworthy")
    ]


def left_out_runs(statuses: dict[str, list[tuple[str, str]]], side: str = "") -> list[str]:
    """One line per point with runs left out as untrustworthy (complete, but their fidelity checks failed)."""
    lines = []
    for point in sorted(statuses):
        why = [reason for status, reason in statuses[point] if status == "untrustworthy"]
        if why:
            lines.append(
                f"{side + ': ' if side else ''}{point}: {len(why)} untrustworthy run(s) left out "
                f"({'; '.join(sorted(set(why)))[:300]})"
            )
    return lines


def sensitivity(judged: dict[str, str], with_untrusted: dict[str, str]) -> list[str]:
    """Whether the runs left out as untrustworthy would change a verdict: one line per comparison whose
    verdict they change (``judged``: comparison -> its verdict without them; ``with_untrusted``: with
    them), or one line saying none would. Said, never acted on: verdicts stand on trustworthy runs only."""
    changed = [
        f"with the untrustworthy runs, {name} would be {verdict} (without them: {judged[name]})"
        for name, verdict in with_untrusted.items()
        if name in judged and judged[name] != verdict
    ]
    return changed or ["with the untrustworthy runs included, no verdict would change"]


def control_line(what: str, comparisons: list) -> tuple[str, bool]:
    """A positive control's line (``what`` names it) and whether it was missed: it must come out as a
    regression of some metric, or the runs have shown they cannot see a change of that size."""
    found = [c for c in comparisons if c.verdict == "regression"]
    if found:
        metrics = ", ".join(
            f"{c.cc} {c.metric} {c.change:+.1%} (p = {c.p_value:.2g}, Cohen's d = {c.cohen_d:.2g})" for c in found
        )
        return f"{what}: detected: {metrics}", False
    if comparisons and all(c.verdict != "too few runs" for c in comparisons):
        smallest = min((c.detectable for c in comparisons if not math.isnan(c.detectable)), default=math.nan)
        return (
            f"{what}: missed: no metric regressed (smallest detectable change {detectable_text(smallest)}); "
            f"these repetitions cannot see a regression of that size: raise --repeat"
        ), True
    return f"{what}: not judged (its runs did not complete on both sides)", False


def exit_code(failures: list[str], regressed: bool) -> int:
    """0: nothing regressed; 1: a regression; 2: the comparison itself failed (EXIT_MEANINGS)."""
    return 2 if failures else (1 if regressed else 0)


def fmt_value(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def detectable_text(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "> 1000%" if value > 10 else f"{value:.1%}"
