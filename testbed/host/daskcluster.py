"""The Dask cluster a ``--cluster`` spec names (:mod:`testbed.host.clusterspec`), started, joined and
closed: ``LocalCluster`` on this host (loopback only), ``SSHCluster`` over SSH and dask-jobqueue's
``SLURMCluster``, the remote ones with the session's own mutual TLS (:mod:`testbed.host.clustertls`).
What runs on it, and how the runs come home, is :mod:`testbed.host.cluster`."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from urllib.parse import urlparse

from testbed.host import clusterspec, clustertls
from testbed.host.clusterspec import ClusterError, ClusterSpec, LocalSpec, SlurmSpec, SSHSpec
from testbed.host.clusterwork import DASK_DIRECTORY

#: how long the workers may take to join (Slurm jobs wait in the queue)
JOIN_TIMEOUT_S = 300
#: a worker (or an SSH scheduler) without its scheduler (or any client) for this long ends itself:
#: what a controller killed with SIGKILL leaves on remote hosts goes away by itself
ORPHAN_TIMEOUT_S = 60


def slurm_logs() -> Path:
    """Where the Slurm jobs' output goes (a worker that never joined says why there)."""
    from testbed.guest.build import cache_base

    return cache_base() / "slurm-logs"


def _expected_workers(spec: ClusterSpec) -> int:
    return len(spec.hosts) if isinstance(spec, SSHSpec) else spec.jobs


def connect(spec: ClusterSpec, log=print):
    """The spec's cluster started and a client of it, every worker joined (the dashboard's address logged
    first: a Slurm queue can be watched there); :class:`ClusterError` when they do not all join in time."""
    from distributed import Client

    dask_cluster = start(spec)
    client = Client(dask_cluster)
    log(f"cluster: Dask dashboard at {_dashboard(spec, client.dashboard_link)}")
    wanted = spec.workers if isinstance(spec, LocalSpec) else _expected_workers(spec)
    try:
        client.wait_for_workers(wanted, timeout=JOIN_TIMEOUT_S)
    except TimeoutError:
        joined = len(client.scheduler_info()["workers"])
        disconnect(dask_cluster, client)
        raise ClusterError(
            f"cluster: {joined} of {wanted} workers joined within {JOIN_TIMEOUT_S} s "
            f"({clusterspec.spec_text(spec)}); their logs say why (Slurm: the jobs' output in "
            f"{slurm_logs()}; SSH: the lines above)"
        ) from None
    return dask_cluster, client


def _dashboard(spec: ClusterSpec, link: str) -> str:
    """Where the dashboard is; an SSH cluster's listens on the scheduler host's loopback only (Dask's link
    names the host's address), reached from here by an SSH tunnel."""
    if not isinstance(spec, SSHSpec):
        return link  # local and Slurm: the scheduler runs here
    port = urlparse(link).port
    where = f"-p {spec.scheduler.port} {spec.scheduler.user or 'root'}@{spec.scheduler.address}"
    return (
        f"http://127.0.0.1:{port}/status on the scheduler host's loopback only "
        f"(from here: ssh -N -L {port}:127.0.0.1:{port} {where})"
    )


def disconnect(dask_cluster, client) -> None:
    """The cluster closed before its client: an SSH cluster's scheduler ends when its last client leaves
    (clustertether), and the cluster's own close needs it. Then the session's TLS files are removed."""
    try:
        dask_cluster.close()
        client.close()
    finally:
        cleanup = getattr(dask_cluster, TLS_CLEANUP, None)
        if cleanup is not None:
            cleanup()


#: the attribute of a started cluster that removes its session's TLS files (clustertls)
TLS_CLEANUP = "testbed_tls_cleanup"


@contextlib.contextmanager
def running(spec: ClusterSpec, log=print):
    """:func:`connect` for a ``with`` block."""
    dask_cluster, client = connect(spec, log)
    try:
        yield client
    finally:
        disconnect(dask_cluster, client)


def start(spec: ClusterSpec):
    """The Dask cluster of a spec (its scheduler and workers running; Slurm jobs submitted)."""
    import dask

    dask.config.set({"temporary-directory": str(DASK_DIRECTORY)})  # the scheduler's too, not /tmp
    clustertls.remove_stale(DASK_DIRECTORY)  # a SIGKILLed controller's credentials, here
    worker_options = {
        "nthreads": 1,
        "resources": {"run": 1},
        "death_timeout": ORPHAN_TIMEOUT_S,
        "local_directory": str(DASK_DIRECTORY),
    }
    if isinstance(spec, LocalSpec):
        from distributed import LocalCluster

        # loopback only, scheduler, workers and dashboard: Dask's default TCP has no authentication, and its
        # tasks run as root here (the dashboard's default is every interface)
        return LocalCluster(
            n_workers=spec.workers,
            threads_per_worker=1,
            processes=True,
            resources={"run": 1},
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
            local_directory=str(DASK_DIRECTORY),
        )
    if isinstance(spec, SSHSpec):
        return _ssh_cluster(spec, worker_options)
    return _slurm_cluster(spec)


def _ssh_cluster(spec: SSHSpec, worker_options: dict):
    import dask
    from distributed import SSHCluster

    everyone = [spec.scheduler, *spec.hosts]
    first = everyone[0]
    directory = None
    try:
        # mutual TLS with the session's own certificate, its files on every host (clustertls)
        security = clustertls.credentials()
        directory = clustertls.install_over_ssh(everyone, security)
        # a plain Worker, not a Nanny: a worker that dies stays gone and its run goes to another host
        with dask.config.set(clustertls.file_config(directory)):  # what the remote processes inherit
            dask_cluster = SSHCluster(
                hosts=[h.address for h in everyone],
                connect_options=[h.connect_options() for h in everyone],
                remote_python=[h.python for h in everyone],
                worker_class="distributed.Worker",
                worker_options=worker_options,
                security=security,
                scheduler_options={
                    "port": 0,
                    "dashboard_address": "127.0.0.1:0",
                    "idle_timeout": ORPHAN_TIMEOUT_S,
                    "preload": ["testbed.host.clustertether"],
                    "protocol": "tls",
                },
            )
    except (OSError, Exception) as err:  # asyncssh's errors, a refused connection, a worker that never started
        if directory is not None:
            clustertls.remove_over_ssh(everyone, directory)
        raise ClusterError(
            f"cluster {spec.inventory}: cannot start Dask over SSH: {type(err).__name__}: {err} "
            f"(check that 'ssh -p {first.port} {first.user or 'root'}@{first.address}' works without "
            f"a password and that playbooks/site.yml provisioned the hosts)"
        ) from None
    setattr(dask_cluster, TLS_CLEANUP, lambda: clustertls.remove_over_ssh(everyone, directory))
    return dask_cluster


def _slurm_cluster(spec: SlurmSpec):
    from dask_jobqueue import SLURMCluster

    checkout = spec.checkout or str(Path(__file__).resolve().parents[2])
    # mutual TLS with the session's own certificate; the jobs read it from a folder of mode 0700 (clustertls)
    folder = clustertls.slurm_folder(DASK_DIRECTORY)
    try:
        cluster = SLURMCluster(
            queue=spec.partition,
            account=spec.account,
            cores=spec.cores,
            processes=1,
            memory=spec.memory,
            walltime=spec.walltime,
            python=f"{checkout}/.venv/bin/python",
            job_extra_directives=spec.extra_directives,
            worker_extra_args=["--resources", "run=1", "--death-timeout", str(ORPHAN_TIMEOUT_S)],
            scheduler_options={"dashboard_address": "127.0.0.1:0"},
            silence_logs=logging.ERROR,
            log_directory=str(slurm_logs()),
            local_directory=str(DASK_DIRECTORY),
            protocol="tls://",
            security=clustertls.credentials(),
            shared_temp_directory=str(folder),
        )
    except BaseException:
        clustertls.remove_folder(folder)
        raise
    setattr(cluster, TLS_CLEANUP, lambda: clustertls.remove_jobqueue_copies(cluster, folder))
    cluster.scale(jobs=spec.jobs)
    return cluster
