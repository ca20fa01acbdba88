"""A session's runs spread over many hosts through Dask: the controller's side (``--cluster SPEC``).

:class:`ClusterBackend` is one more :class:`~testbed.host.backends.Backend`, so a cluster session is a
session like any other: the same plan, resume, catalog and report. It starts the Dask cluster the spec
names (:mod:`testbed.host.daskcluster`: ``LocalCluster``, ``SSHCluster``, dask-jobqueue's ``SLURMCluster``),
asks every worker for its host, CPU and kernel (one kernel per session, as on one machine), then
submits one task per run (:func:`testbed.host.clusterwork.run_task`) with the worker resource
``run=1``: one run per worker at a time. Runs go in an order shuffled with a recorded seed, so points
do not land on hosts by their place in the sweep. Dask reruns a task whose worker dies; each folder
that comes home is checked (the archive's sha256, then every file against the manifest's list) and
unpacked into the session folder; ``cluster.json`` records which host ran which run, with the times
and sizes. A folder that fails its check runs once more.

We use Dask rather than a scheduler of our own: it gives the work queue, worker resources, reruns on
worker loss, a dashboard, and the same client code on one host, SSH hosts and batch systems.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from testbed.host import clusterspec, daskcluster, packing, timebase
from testbed.host.backends import Artefacts
from testbed.host.clusterspec import ClusterError, ClusterSpec, LocalSpec
from testbed.host.clusterwork import (
    WORKER_BACKENDS,
    Shipment,
    WorkRequest,
    clean_scratch,
    run_task,
    unpack,
    worker_facts,
)
from testbed.host.remote import Observer
from testbed.plan import estimate
from testbed.plan.plan import Plan, PlanRun
from testbed.plan.progress import RunEnded, format_line
from testbed.results import rundir
from testbed.results.manifest import Manifest, read_manifest, write_manifest
from testbed.scenario.points import RunSpec

#: the session folder's record of where each run ran
CLUSTER_JSON = "cluster.json"
#: the fidelity checks of a host that failed this many runs are named in the log and cluster.json
SUSPECT_HOST_UNTRUSTWORTHY = 2


class ClusterBackend:
    """Runs spread over the workers of a Dask cluster, each run on its worker's own backend."""

    name = "cluster"
    label = "cluster"
    failures: tuple[type[Exception], ...] = (ClusterError,)
    runs_here = False
    observers: tuple[Observer, ...] = ()  # the runners' lines stay on the workers; the report reads the folders
    at_once = 1  # a plan of one run per worker at a time (the workers' spread is in wall_s)

    def __init__(
        self,
        spec: ClusterSpec,
        inner: str,
        runs: list[RunSpec],
        kernel_version: str | None = None,
        vcpus: int | None = None,
        log=print,
        placement_seed: int | None = None,
        clock: str = "auto",
    ) -> None:
        if inner not in WORKER_BACKENDS:
            raise ClusterError(
                f"--backend {inner} with --cluster: a worker runs on its host's own kernel (local) "
                f"or in guests (guest), or picks one (auto); the lab VM is one per checkout"
            )
        self.spec, self.inner, self.runs = spec, inner, runs
        #: set: each run goes to a host drawn from its point, seed and this number (the same in another
        #: session: ``regress`` runs both kernels of a repetition on one host); None: to any free worker
        self.placement_seed = placement_seed
        self.kernel_version, self.vcpus, self.log = kernel_version, vcpus, log
        #: one clock for the whole session, settled here (a worker's own KVM does not change it: the sides of a
        #: comparison must share it); auto: virtual time where every experiment was shown equivalent
        self.clock = clock
        self.cluster = self.client = None
        self.facts: dict[str, dict] = {}
        self.pinning: dict[str, list[int]] = {}

    def prepare(self) -> str:
        cores = sorted(os.sched_getaffinity(0))
        if isinstance(self.spec, LocalSpec) and self.inner == "guest":
            check_pinned_guests(self.spec.workers, cores)  # before any worker starts
        self.log(f"cluster: starting {clusterspec.spec_text(self.spec)}")
        self.cluster, self.client = daskcluster.connect(self.spec, self.log)
        self.facts = self._ask_workers()
        if isinstance(self.spec, LocalSpec):
            if self.inner == "auto" and self._worker_backend() == "guest":  # auto chose guests: known only now
                check_pinned_guests(self.spec.workers, cores)
            self.pinning = share_cores(cores, list(self.facts))
        self._settle_clock()
        return self._common_release()

    def _settle_clock(self) -> None:
        if self._worker_backend() != "guest":
            if self.clock == "virtual":
                raise ClusterError("--clock virtual needs guests on the workers: give --backend guest")
            self.clock = "real"
            return
        experiments = {run.scenario_name for run in self.runs}
        self.clock, why = timebase.choose(self.clock, experiments, kvm_usable=lambda: False)
        self.log(f"cluster: the workers' guests run in {self.clock} time ({why})")

    def _ask_workers(self) -> dict[str, dict]:
        """Every worker's host, CPU, backend and kernel release, asked of each worker itself."""
        workers = self.client.scheduler_info()["workers"]
        futures = {
            address: self.client.submit(
                worker_facts, self.inner, self.kernel_version, self.runs, workers=[address], pure=False
            )
            for address in workers
        }
        facts = {
            str(workers[address]["name"]): {**future.result(), "address": address}
            for address, future in futures.items()
        }
        refused = [f"{f['host']} ({name}): {f['error']}" for name, f in facts.items() if "error" in f]
        if refused:
            raise ClusterError("cluster: workers cannot run these runs: " + "; ".join(refused))
        return facts

    def _common_release(self) -> str:
        """One kernel per session (its runs resume, compare and report as one); else which host has which."""
        releases = {(f["backend"], f["release"]) for f in self.facts.values()}
        if len(releases) > 1:
            seen = ", ".join(f"{f['host']}: {f['backend']} {f['release']}" for f in self.facts.values())
            raise ClusterError(
                f"cluster: the workers would run different kernels ({seen}); a session runs on "
                f"one kernel: give --backend guest --kernel VERSION, or provision the hosts with "
                f"the same kernel_version (playbooks/site.yml)"
            )
        ((backend, release),) = releases
        self.log(
            f"cluster: {len(self.facts)} workers on {len({f['host'] for f in self.facts.values()})} host(s), "
            f"runs on {backend} kernel {release}"
        )
        return release

    def record(self) -> dict:
        backend, release = next((f["backend"], f["release"]) for f in self.facts.values())
        return {
            "kind": self.name,
            "cluster": clusterspec.spec_text(self.spec),
            "spec": self.spec.model_dump(),
            "worker_backend": backend,
            "kernel_release": release,
            "dashboard": self.client.dashboard_link,
            "workers": self.facts,
            "clock": self.clock,
        }

    def build(self, runs: list[RunSpec], release: str) -> Artefacts:
        return Artefacts({}, {}, None)  # each worker builds what its run needs for its own kernel

    def wall_s(
        self, estimates: list[float], boot_s: float | None = None, experiments: list[str] | None = None
    ) -> float:
        # a worker boots on its own host: the boot measured here (``boot_s``) is not its
        boot = estimate.GUEST_BOOT_S if self._worker_backend() == "guest" else 0.0
        return spread_s([e + boot for e in estimates], max(1, len(self.facts)))

    def _worker_backend(self) -> str:
        return next((f["backend"] for f in self.facts.values()), self.inner)

    def execute(self, plan: Plan, plan_path: Path, session: Path, total_s: float) -> dict:
        from distributed import as_completed

        order_seed = random.SystemRandom().randrange(2**31)
        runs = list(plan.runs)
        random.Random(order_seed).shuffle(runs)
        record = _Record(session, order_seed, len(runs), self.log)
        record.data["placement_seed"] = self.placement_seed
        pending: dict[str, tuple[PlanRun, int]] = {}  # a task's key -> its run and attempt
        futures = as_completed([self._submit(plan, session, run, 1, pending) for run in runs])
        started = time.monotonic()
        try:
            for future in futures:
                run, attempt = pending.pop(future.key)
                if future.status == "error":
                    record.failed(run, session, _worker_error(future))
                elif record.arrived(run, _fetched(future), session, attempt, started):
                    futures.add(self._submit(plan, session, run, attempt + 1, pending))
        except BaseException:
            self.client.cancel(list(pending))
            raise
        return {"cluster": record.finish(self.facts)}

    def _submit(self, plan: Plan, session: Path, run: PlanRun, attempt: int, pending: dict):
        request = WorkRequest(
            session=session.name,
            run=run,
            context=plan.context,
            backend=self._worker_backend(),
            kernel_version=self.kernel_version,
            vcpus=self.vcpus,
            pinning=self.pinning,
            attempt=attempt,
            clock=self.clock,
        )
        placed = self._placed(run)
        future = self.client.submit(
            run_task,
            request,
            resources={"run": 1},
            pure=False,
            key=f"run-{run.run_dir}-{attempt}",
            workers=placed,
            allow_other_workers=placed is not None,
        )
        pending[future.key] = (run, attempt)
        return future

    def _placed(self, run: PlanRun) -> list[str] | None:
        """The workers of the host this run is drawn to (loosely: if that host is lost, any worker takes it)."""
        if self.placement_seed is None:
            return None
        hosts = sorted({f["host"] for f in self.facts.values()})
        host = random.Random(f"{self.placement_seed}/{run.point_id}/{run.seed}").choice(hosts)
        return [f["address"] for f in self.facts.values() if f["host"] == host]

    def close(self) -> None:
        if self.cluster is not None:
            daskcluster.disconnect(self.cluster, self.client)
            if isinstance(self.spec, LocalSpec):  # the workers were here: what a stopped one left goes now
                clean_scratch()
        self.client = self.cluster = None


class _Record:
    """``cluster.json`` as the runs come home, and the progress line."""

    def __init__(self, session: Path, order_seed: int, total: int, log) -> None:
        self.session, self.total, self.log = session, total, log
        self.data: dict[str, Any] = {"order_seed": order_seed, "runs": {}}
        self.done = 0

    def arrived(
        self, run: PlanRun, fetched: tuple[Shipment, float], session: Path, attempt: int, started: float
    ) -> bool:
        """Unpack a shipment; True when it failed its check and the run should go once more."""
        shipment, fetch_s = fetched
        directory = session / run.run_dir
        began = time.monotonic()
        try:
            unpack(shipment, directory)
        except ValueError as err:
            self.log(f"cluster: {err}")
            if attempt == 1:
                from testbed.plan import resume

                resume.set_aside(directory, session)
                return True
            self.failed(run, session, str(err))
            return False
        if not (directory / rundir.MANIFEST).exists():
            self.failed(
                run,
                session,
                f"the worker on {shipment.host} wrote no manifest; its log ended: {shipment.log_tail[-600:]}",
            )
            return False
        status = read_manifest(directory).run_status
        self.data["runs"][run.run_dir] = {
            "host": shipment.host,
            "worker": shipment.worker,
            "cpu": shipment.cpu,
            "attempt": attempt,
            "run_s": shipment.run_s,
            "pack_s": shipment.pack_s,
            "fetch_s": round(fetch_s, 3),
            "unpack_s": round(time.monotonic() - began, 3),
            "archive_bytes": len(shipment.archive),
            "unpacked_bytes": shipment.unpacked_bytes,
            "status": status,
            "trustworthy": _trustworthy(directory),
        }
        self._progress(run, status, shipment.host, started)
        return False

    def failed(self, run: PlanRun, session: Path, reason: str) -> None:
        directory = session / run.run_dir
        try:
            manifest = read_manifest(directory)
        except rundir.LoadError:
            manifest = Manifest(
                scenario=run.scenario_name,
                point_id=run.point_id,
                params=run.params,
                seed=run.seed,
                resolved=run.scenario,
            )
        if manifest.status not in ("complete", "failed"):
            directory.mkdir(parents=True, exist_ok=True)
            write_manifest(directory, manifest.model_copy(update={"status": "failed", "reason": reason}))
        self.data["runs"][run.run_dir] = {"status": "failed", "reason": reason}
        self._progress(run, "failed", None, None, reason)

    def _progress(self, run: PlanRun, status: str, host: str | None, started: float | None, reason=None) -> None:
        self.done += 1
        self.log(format_line(RunEnded(index=self.done, total=self.total, status=status, reason=reason)))
        if host and started:
            elapsed = time.monotonic() - started
            eta = elapsed / self.done * (self.total - self.done)
            self.log(
                f"cluster: {run.point_id} seed={run.seed} came home from {host}; {self.done}/{self.total} "
                f"done, ETA {eta / 60:.1f} min"
            )
        rundir.write_json_atomic(self.session / CLUSTER_JSON, self.data)

    def finish(self, facts: dict[str, dict]) -> dict:
        """Name hosts whose runs failed their fidelity checks repeatedly; the timing summary for session.json."""
        untrustworthy = Counter(r["host"] for r in self.data["runs"].values() if r.get("trustworthy") is False)
        suspects = sorted(host for host, n in untrustworthy.items() if n >= SUSPECT_HOST_UNTRUSTWORTHY)
        for host in suspects:
            self.log(f"cluster: {untrustworthy[host]} runs on {host} failed their fidelity checks: look at that host")
        self.data.update({"suspect_hosts": suspects, "workers": facts})
        rundir.write_json_atomic(self.session / CLUSTER_JSON, self.data)
        shipped = [r for r in self.data["runs"].values() if "archive_bytes" in r]
        return {
            "workers": len(facts),
            "runs_shipped": len(shipped),
            "archive_bytes": sum(r["archive_bytes"] for r in shipped),
        }


def _fetched(future) -> tuple[Shipment, float]:
    """The shipment from its worker, and how long it took to come over (the archive crosses the network here)."""
    began = time.monotonic()
    shipment = future.result()
    return shipment, time.monotonic() - began


def _trustworthy(directory: Path) -> bool | None:
    fidelity = read_manifest(directory).fidelity
    return None if fidelity is None else fidelity.trustworthy


def _worker_error(future) -> str:
    error = future.exception()
    kind = type(error).__name__
    if kind == "KilledWorker":
        return f"every worker that took this run died ({error}); the cluster's hosts or their logs say why"
    return f"the worker failed: {kind}: {error}"


def spread_s(costs: list[float], workers: int) -> float:
    """The wall time of these run costs on ``workers`` workers: the longest first, each to the least loaded."""
    return packing.makespan_s(costs, workers)


def check_pinned_guests(workers: int, cores: list[int]) -> None:
    """``local:N`` guests are trusted because each is pinned to cores of its own and judged on them
    (:mod:`testbed.host.hostload`); N guests on fewer than N cores would share cores, and each would see
    the others as contention. :class:`ClusterError` naming what this host allows."""
    if workers > len(cores):
        raise ClusterError(
            f"--cluster local:{workers} --backend guest: each worker's guest is pinned to cores of its own, and "
            f"this process may use {len(cores)} core(s) ({','.join(map(str, cores))}): at most "
            f"local:{len(cores)} here (one core per guest), or the local backend, or more hosts (ssh:, slurm:)"
        )


def share_cores(cores: list[int], workers: list[str]) -> dict[str, list[int]]:
    """Each worker its own cores (round robin when there are more workers than cores)."""
    if len(workers) > len(cores):
        return {name: [cores[i % len(cores)]] for i, name in enumerate(workers)}
    per = len(cores) // len(workers)
    return {name: cores[i * per : (i + 1) * per] for i, name in enumerate(workers)}
