"""A run's manifest (``manifest.json``): the model, its one reader and its one writer, and a run's status.

The runner writes the manifest (``testbed.guest.runner``); the host marks runs a backend did not
finish (``testbed.host.session``) and adds its load figures (``testbed.host.hostload``); resume,
the catalog, the analysis and bench read it. :class:`Manifest` types the fields those readers use
and keeps every other key as it is (``extra="allow"``), so nothing a runner writes is lost when a
manifest is read and written again.

Every field may be missing: a run that failed early has few, and the folders made by older
checkouts must still load. ``schema_version`` says which shape a file has; files written before
it existed have ``"schema": 1`` (or nothing) and read as version 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from testbed.results.rundir import MANIFEST, LoadError, read_json, write_json_atomic

#: the shape written today; a file without ``schema_version`` is of version 1 (its old key: ``schema``)
SCHEMA_VERSION = 1

__all__ = ["MANIFEST", "SCHEMA_VERSION", "Manifest", "read_manifest", "run_status", "write_manifest"]


class _Open(BaseModel):
    """A part of the manifest: the keys readers use are typed, every other key is kept."""

    model_config = ConfigDict(extra="allow")


class KernelRecord(_Open):
    release: str | None = None
    version: str | None = None


class Git(_Open):
    sha: str | None = None
    dirty: bool | None = None


class BackendRecord(_Open):
    kind: str | None = None
    kernel_release: str | None = None
    accel: str | None = None
    clock: str | None = None  # "real" or "virtual" (QEMU's icount); missing: real


class Fidelity(_Open):
    trustworthy: bool | None = None
    problems: list[str] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list)


class Manifest(_Open):
    """One run's record. The fields are declared in the order the runner writes them (the file keeps it)."""

    schema_version: int = SCHEMA_VERSION
    status: str | None = None
    reason: str | None = None
    scenario: str | None = None
    profile: str | None = None
    point_id: str | None = None
    params: dict[str, Any] | None = None
    seed: int | None = None
    identity: str | None = None
    resolved: dict[str, Any] | None = None
    started_utc: str | None = None
    backend: BackendRecord = Field(default_factory=BackendRecord)
    git: Git = Field(default_factory=Git)
    kernel: KernelRecord = Field(default_factory=KernelRecord)
    topology: dict[str, Any] | None = None
    connections: list[dict[str, Any]] | None = None
    timing: dict[str, Any] = Field(default_factory=dict)
    t0_monotonic: float | None = None
    t0_unix_s: float | None = None
    fidelity: Fidelity | None = None
    host: dict[str, Any] | None = None
    ended_utc: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        # version 1 files named the key "schema"; a file with neither is of version 1 too
        if isinstance(data, dict) and "schema_version" not in data:
            data = {"schema_version": data.get("schema", 1), **{k: v for k, v in data.items() if k != "schema"}}
        return data

    @property
    def run_status(self) -> str:
        """complete / failed / incomplete: a run still marked running (its process is gone, or it
        would not be read) or whose writer never said how it ended is incomplete."""
        return "incomplete" if self.status in (None, "running") else self.status

    def to_data(self) -> dict[str, Any]:
        """The manifest as JSON data: the keys it was made or read with, none added."""
        return self.model_dump(exclude_unset=True)


def read_manifest(run_dir: Path) -> Manifest:
    """The manifest of ``run_dir``; :class:`LoadError` naming the file when it is missing, not JSON or
    not a manifest (a value of the wrong type)."""
    path = Path(run_dir) / MANIFEST
    data = read_json(path)
    if not isinstance(data, dict):
        raise LoadError(path, "not a JSON object")
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise LoadError(path, f"not a manifest: {_first_error(exc)}") from None


def write_manifest(run_dir: Path, manifest: Manifest | dict[str, Any]) -> None:
    """Write the manifest of ``run_dir`` atomically; a dict (the runner builds one as the run goes)
    is checked through the model first, so what is written always reads back."""
    if isinstance(manifest, dict):
        manifest = Manifest.model_validate(manifest)
    write_json_atomic(Path(run_dir) / MANIFEST, manifest.to_data())


def run_status(run_dir: Path) -> str:
    """complete / failed / incomplete, or missing (the folder holds no manifest: the run never began).

    "missing" and not "unknown": a folder without a manifest is a fact about the folder (nothing
    was ever recorded there; resume runs it), not doubt about a record. The analysis, which reports
    what a record says, shows a run without a readable manifest as "unknown" instead. A manifest that
    cannot be read is incomplete: the runner writes it atomically, so only a run cut off by something
    outside it leaves such a file."""
    if not (Path(run_dir) / MANIFEST).exists():
        return "missing"
    try:
        return read_manifest(run_dir).run_status
    except LoadError:
        return "incomplete"


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {error['msg']}{more}"
