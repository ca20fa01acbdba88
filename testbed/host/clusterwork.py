"""A cluster worker's side: one run on this host, and its folder shipped home.

Dask calls :func:`run_task` in a worker thread, once per run. The run itself goes to a child process
(``python -m testbed.host.clusterwork REQUEST``) because the runner needs a main thread (its watchdog is
SIGALRM) and because a child can be made to die with the worker (``PR_SET_PDEATHSIG``): a worker that
is killed takes its run down with it, tears the network down (SIGTERM is the runner's Ctrl-C), and
Dask gives the run to another worker. The child runs the one-run plan on this host's backend (its own
kernel, or a guest pinned to the worker's cores) in a scratch session folder; :func:`run_task` then
packs the run folder (tar.gz) with the sha256 of the archive for the controller to check.

Two runs on one kernel cannot share it (each run's start kills the previous run's leftover processes,
and both would build on the same interfaces), so runs on the host's own kernel take
:data:`LOCAL_KERNEL_LOCK` for their whole length; guests need no such lock. Fetching a kernel and
building the modules take :data:`BUILD_LOCK`: two workers of one host share their caches.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from testbed import PROJECT
from testbed.guest import parentdeath
from testbed.host import backends, virtme
from testbed.host.choice import host_can_run
from testbed.plan.plan import PLAN, Plan, PlanContext, PlanRun
from testbed.plan.progress import configure_logging
from testbed.results import rundir
from testbed.results.manifest import read_manifest, write_manifest
from testbed.scenario.points import RunSpec

#: where a worker keeps its runs until they are shipped, and its host-wide locks
SCRATCH = Path("/var/tmp/cc-testbed-cluster")
LOCAL_KERNEL_LOCK = SCRATCH / "local-kernel.lock"
#: the Dask workers' own scratch space (Dask keeps it tidy; here rather than in /tmp/dask-scratch-space)
DASK_DIRECTORY = SCRATCH / "dask"
BUILD_LOCK = SCRATCH / "build.lock"
#: the backends a worker can run on (the lab VM is one per checkout, driven from its host)
WORKER_BACKENDS = ("auto", "local", "guest")


class WorkRequest(BaseModel):
    """What the controller sends for one run."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    session: str  # the controller's session folder name (the scratch folder is named after it)
    run: PlanRun
    context: PlanContext  # git, keep_networks, queue_hz; the worker adds its backend and artefacts
    backend: str
    kernel_version: str | None = None
    vcpus: int | None = None
    #: worker name -> cores its run is pinned to (local:N); a worker not named is not pinned
    pinning: dict[str, list[int]] = {}
    attempt: int = 1
    clock: str = "real"  # the guest's, settled by the controller for the whole session


class Shipment(BaseModel):
    """One run's folder on its way home, and where and how it ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    run_dir: str
    archive: bytes  # tar.gz of the run folder, paths relative to it
    archive_sha256: str
    worker: str
    host: str
    cpu: str
    run_s: float
    pack_s: float
    unpacked_bytes: int
    log_tail: str = ""


def machine() -> dict[str, Any]:
    """This host as manifests record it: its name, CPU model and core count."""
    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"host": socket.gethostname(), "cpu": model, "cores": os.cpu_count() or 1}


def worker_facts(backend: str, kernel_version: str | None, specs: list[RunSpec]) -> dict[str, Any]:
    """What the controller asks every worker before the session: its host, CPU, backend and kernel release.

    ``auto`` is decided here as on a single machine, except that a lab VM is never chosen."""
    if backend == "auto":
        local_ok, why = host_can_run(specs)
        backend = "local" if local_ok else "guest"
    else:
        local_ok, why = host_can_run(specs) if backend == "local" else (True, "")
    clean_scratch()
    facts = {**machine(), "backend": backend, "why": why}
    if backend == "local" and not local_ok:
        return {**facts, "error": f"--backend local: {why}"}
    with host_lock(BUILD_LOCK):
        facts["release"] = backends.create(backend, kernel_version, log=lambda _m: None).prepare()
    return facts


@contextlib.contextmanager
def host_lock(path: Path):
    """An exclusive lock of this host (released when its holder dies, however it dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle


def clean_scratch() -> list[Path]:
    """Remove the scratch folders of workers that died before they shipped their run (their lock is free)."""
    removed = []
    for folder in sorted(SCRATCH.glob("[0-9]*/")):  # runs' folders are named after their session (a UTC time)
        with open(folder / ".lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a worker is at work in it
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def run_task(request: WorkRequest) -> Shipment:
    """Dask's task: the run in a child process on this host, its folder packed for the controller."""
    from distributed import get_worker

    worker = get_worker()
    cores = request.pinning.get(str(worker.name))
    scratch = SCRATCH / f"{request.session}-{uuid.uuid4().hex[:8]}"  # made and locked at once by host_lock
    try:
        # held while the folder is in use, by the run's child too (it inherits the descriptor and may
        # outlive a killed worker): clean_scratch leaves the folder alone until both are gone
        with host_lock(scratch / ".lock") as lock:
            return _run_and_pack(request, worker, cores, scratch, lock.fileno())
    finally:
        # what a killed worker of this host left (its run went to another worker, which may be this one)
        clean_scratch()


def _run_and_pack(request: WorkRequest, worker, cores: list[int] | None, scratch: Path, lock_fd: int) -> Shipment:
    try:
        (scratch / "request.json").write_text(request.model_dump_json())
        started = time.monotonic()
        log_tail = _run_child(scratch, cores, request.run.estimate_s * 3 + 900, worker, lock_fd)
        run_s = time.monotonic() - started
        directory = scratch / "session" / request.run.run_dir
        _record_where(directory, worker.address, request.attempt)
        started = time.monotonic()
        archive, size = pack(directory)
        return Shipment(
            run_dir=request.run.run_dir,
            archive=archive,
            archive_sha256=hashlib.sha256(archive).hexdigest(),
            worker=worker.address,
            host=socket.gethostname(),
            cpu=machine()["cpu"],
            run_s=round(run_s, 2),
            pack_s=round(time.monotonic() - started, 3),
            unpacked_bytes=size,
            log_tail=log_tail,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_child(scratch: Path, cores: list[int] | None, timeout_s: float, worker, lock_fd: int) -> str:
    """``python -m testbed.host.clusterwork`` on the request; the last lines of its log. The child is
    stopped (SIGTERM: the runner's orderly stop) when it outlives its time or the worker begins to close
    (the scheduler said so: the controller is gone)."""

    def in_child() -> None:
        # dies with the worker (SIGTERM: the runner's orderly stop); pinned to the worker's cores
        parentdeath.die_with_parent(signal.SIGTERM)
        if cores:
            os.sched_setaffinity(0, cores)

    log = scratch / "worker.log"
    deadline = time.monotonic() + timeout_s
    with open(log, "w") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "testbed.host.clusterwork", str(scratch / "request.json")],
            cwd=PROJECT,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=in_child,
            pass_fds=(lock_fd,),
        )
        while child.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)
            closing = worker.status.name not in ("running", "paused")
            if child.poll() is None and (closing or time.monotonic() > deadline):
                why = "its worker is closing" if closing else f"the run took longer than {timeout_s:.0f} s"
                out.write(f"\n[clusterwork] stopping the run: {why}\n")
                out.flush()
                child.terminate()
                child.wait()
    return "\n".join(log.read_text(errors="replace").splitlines()[-15:])


def _record_where(directory: Path, worker: str, attempt: int) -> None:
    """The manifest names the host and CPU the run had (the files' sha256 list is left as the runner wrote it)."""
    if not (directory / rundir.MANIFEST).exists():
        return
    manifest = read_manifest(directory)
    cluster = {**machine(), "worker": worker, "attempt": attempt}
    if os.environ.get("SLURM_JOB_ID"):
        cluster["slurm_job"] = os.environ["SLURM_JOB_ID"]
    write_manifest(directory, manifest.model_copy(update={"cluster": cluster}))


def pack(directory: Path) -> tuple[bytes, int]:
    """The folder as tar.gz bytes (fast compression: captures and traces shrink several times) and its size."""
    buffer = io.BytesIO()
    size = 0
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        if directory.is_dir():
            for path in sorted(directory.rglob("*")):
                archive.add(path, arcname=str(path.relative_to(directory)), recursive=False)
                size += path.stat().st_size if path.is_file() else 0
    return buffer.getvalue(), size


def unpack(shipment: Shipment, directory: Path) -> None:
    """The shipped folder at ``directory``; ValueError when the archive or a file is not what was sent."""
    if hashlib.sha256(shipment.archive).hexdigest() != shipment.archive_sha256:
        raise ValueError(f"{shipment.run_dir}: the archive from {shipment.host} changed on its way (sha256)")
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(shipment.archive), mode="r:gz") as archive:
        members = archive.getmembers()
        # Debian 12's Python 3.11.2 predates extractall(filter="data"): the same rule, by hand
        unsafe = [
            m.name
            for m in members
            if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in Path(m.name).parts
        ]
        if unsafe:
            raise ValueError(
                f"{shipment.run_dir}: the archive from {shipment.host} holds paths outside a run "
                f"folder or links: {', '.join(unsafe[:5])}"
            )
        archive.extractall(directory, members=members)
    if not (directory / rundir.MANIFEST).exists():
        return
    listed = read_manifest(directory).model_extra.get("files") or {}
    wrong = [
        name
        for name, digest in listed.items()
        if not (directory / name).is_file() or rundir.sha256_file(directory / name) != digest
    ]
    if wrong:
        raise ValueError(
            f"{shipment.run_dir}: {len(wrong)} file(s) differ from the manifest's sha256 list after "
            f"shipping from {shipment.host}: {', '.join(wrong[:5])}"
        )


_CHILD_PID = os.getpid()


def _interrupt(signum, frame) -> None:
    """The first SIGTERM stops the run in order (the runner's Ctrl-C); the next ones are ignored, because
    a worker that closes sends one and its death another (PR_SET_PDEATHSIG), and a second one would cut
    the teardown short (iperf3's scratch folder and the trace instance were left). pyroute2's netns
    helpers are forks of this process: they just end."""
    if os.getpid() != _CHILD_PID:
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The child: one run of the request on this host's backend, into ``<scratch>/session``."""
    request_path = Path((argv or sys.argv[1:])[0])
    worker = os.getppid()
    try:
        return _run_request(request_path)
    finally:
        if os.getppid() != worker:  # the worker died (the run was stopped): nobody will ship or remove the folder
            shutil.rmtree(request_path.parent, ignore_errors=True)


def _run_request(request_path: Path) -> int:
    request = WorkRequest.model_validate_json(request_path.read_text())
    configure_logging()
    signal.signal(signal.SIGTERM, _interrupt)
    session = request_path.parent / "session"
    session.mkdir()
    virtme.stop_orphans()  # a guest left by a worker killed earlier must not compete with this run
    # a guest pinned to the worker's cores gets one vCPU per core (the cores were set before this process began)
    # (in virtual time one vCPU, whatever the cores: QEMU's icount runs one)
    pinned = len(os.sched_getaffinity(0)) if request.pinning else None
    vcpus = request.vcpus or (1 if request.clock == "virtual" else pinned)
    backend = backends.create(
        request.backend,
        request.kernel_version,
        vcpus,
        clock=request.clock,
        experiments=frozenset({request.run.scenario_name}),
    )
    # the worker ships back the run's folder only: a run again for the host's contention would lose its first
    # attempt (testbed.host.contended); a contended run is left out, and says why
    backend.contended_again = False
    host_kernel = host_lock(LOCAL_KERNEL_LOCK) if backend.name == "local" else contextlib.nullcontext()
    with contextlib.closing(backend), host_kernel:
        with host_lock(BUILD_LOCK):
            release = backend.prepare()
            artefacts = backend.build([request.run.spec()], release)
        context = request.context.model_copy(update={"backend": backend.record(), **artefacts._asdict()})
        plan = Plan(context=context, runs=[request.run])
        plan.write(session / PLAN)
        try:
            backend.execute(plan, session / PLAN, session, backend.wall_s([request.run.estimate_s]))
        except backend.failures as err:
            print(f"[clusterwork] {backend.label} failed: {err}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
