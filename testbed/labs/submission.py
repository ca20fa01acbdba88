"""A student's lab folder packed for handing in (``testbed lab pack NAME``): what grading reads, and
nothing it does not.

Grading holds each run to its evidence (testbed/labs/evidence.py), so a run goes with its
``raw/`` folder whole: the captures (headers only: tcpdump keeps 128 bytes a packet), the iperf3
and ping outputs, the traces and the loss timelines the manifest lists by sha256. What grading never
reads stays home: the reports (``report.html``), ``series.csv``, the report cache, the guest's
console log, the catalog (grading builds its own). Gradescope takes the zip as the submission; the
autograder finds ``answers.md`` in it wherever it lies.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from testbed.labs.definition import LabError
from testbed.results import rundir

#: a run folder's files grading reads, besides raw/
RUN_FILES = ("manifest.json", "flows.csv", "latency.csv")
#: a session folder's files grading reads, besides its figures
SESSION_FILES = ("session.json",)


@dataclass
class Packed:
    path: Path
    files: int
    runs: int
    bytes: int  # the zip's size
    raw_bytes: int  # of which the runs' raw/ folders, before compression


def pack(work: Path, destination: Path) -> Packed:
    """Zip the lab folder ``work`` (its top-level files and what grading reads of ``results/``) into
    ``destination``."""
    if not (work / "lab.yaml").is_file():
        raise LabError(f"{work}: not a lab folder (no lab.yaml): give the folder 'testbed lab start' made (--work)")
    chosen = sorted(set(_chosen(work, destination)))
    runs = sum(1 for path in chosen if path.name == rundir.MANIFEST)
    raw = sum(path.stat().st_size for path in chosen if "raw" in path.relative_to(work).parts)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in chosen:
            archive.write(path, Path(work.name) / path.relative_to(work))
    partial.replace(destination)
    return Packed(destination, len(chosen), runs, destination.stat().st_size, raw)


def _chosen(work: Path, destination: Path):
    """The files handed in: the folder's own (the answers, the scenario file, lab-start.json, ...) and,
    under results/, each session's record and figures and each run's files with its raw/ folder."""
    for path in work.iterdir():
        if path.is_file() and path.suffix not in (".zip", ".part") and path != destination:
            yield path
    results = work / "results"
    if not results.is_dir():
        return
    for manifest in results.rglob(rundir.MANIFEST):
        run = manifest.parent
        yield from (run / name for name in RUN_FILES if (run / name).is_file())
        yield from (p for p in sorted((run / "raw").rglob("*")) if p.is_file())
    for name in SESSION_FILES:
        yield from results.rglob(name)
    for figures in results.rglob("figures"):
        yield from (p for p in figures.iterdir() if p.is_file())
