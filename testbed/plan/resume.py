"""Resuming a session: which runs of a results folder are done, and where an older session can go on.

A run is done when its manifest says complete for the same resolved scenario and seed on the same
kernel (its ``identity``); anything else runs again, its old files set aside under ``.attempts/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.results import rundir
from testbed.results.manifest import Git, read_manifest
from testbed.scenario.points import RunSpec


def run_dirs(session: Path, runs: list[RunSpec]) -> list[str]:
    return [str(rundir.run_dir(session, r.point_id, r.seed).relative_to(session)) for r in runs]


def is_done(directory: Path, run: RunSpec, release: str, clock: str = "real") -> bool:
    """A run that need not run again: complete, of the same resolved scenario and seed, on the same kernel
    and clock (real or virtual time: a session mixes no clocks, its sides are compared run by run)."""
    try:
        manifest = read_manifest(directory)
    except rundir.LoadError:
        return False
    same_clock = (manifest.backend.clock or "real") == clock
    return (
        manifest.status == "complete"
        and manifest.identity == run.identity()
        and manifest.kernel.release == release
        and same_clock
    )


def find_resumable(
    results_root: Path, scenario_name: str, runs: list[RunSpec], release: str, clock: str = "real"
) -> Path | None:
    """The newest session of this scenario on the same kernel and clock that already holds some of these runs.

    Resuming continues in that folder: runs complete there (same resolved scenario, seed and kernel)
    are kept and only the others run; a sweep that gained seeds or points grows in place."""
    for path in sorted((results_root / scenario_name).glob("*/" + rundir.SESSION), reverse=True):
        session = path.parent
        try:
            info = rundir.read_json(path)
        except rundir.LoadError:
            continue
        backend = info.get("backend", {})
        if backend.get("kernel_release") != release or backend.get("clock", "real") != clock:
            continue
        if any(identity(rundir.run_dir(session, r.point_id, r.seed)) == r.identity() for r in runs):
            return session
    return None


def note_older_code(session: Path, kept: list[RunSpec], git: dict, log: Callable[[str], object] = print) -> None:
    """Say when kept runs were made by other code: resume identity is the resolved scenario, seed and
    kernel, not the commit, so a code change alone does not rerun them (``--force`` does)."""

    def label(state: Git) -> str:
        return f"{(state.sha or 'unknown')[:7]}{' (dirty)' if state.dirty else ''}"

    commits: dict[str, int] = {}
    for run in kept:
        try:
            made = label(read_manifest(rundir.run_dir(session, run.point_id, run.seed)).git)
        except rundir.LoadError:
            continue
        commits[made] = commits.get(made, 0) + 1
    here = label(Git.model_validate(git))
    other = {label: n for label, n in commits.items() if label != here}
    if other:
        made_at = ", ".join(f"{n} at {label}" for label, n in sorted(other.items()))
        log(
            f"note: kept runs were made by other code ({made_at}; this checkout: {here}); "
            f"--force runs them again with this code"
        )


def identity(directory: Path) -> str | None:
    try:
        return read_manifest(directory).identity
    except rundir.LoadError:
        return None


#: where a run's earlier attempts are kept, in its session folder
ATTEMPTS = ".attempts"


def set_aside(directory: Path, session: Path) -> None:
    """Move an unfinished run's files out of the way before it runs again (kept under .attempts/)."""
    if directory.exists():
        point = directory.relative_to(session).parent
        target = session / ATTEMPTS / point / f"{directory.name}-{rundir.utc_stamp()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        directory.rename(target)
