"""A session on a one-node Slurm (Debian's slurm-wlm and munge, started by the test without systemd):
dask-jobqueue submits one batch job per worker, each runs its runs on the host kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from testbed.results import rundir
from tests import clusterhosts
from tests.conftest import PROJECT
from tests.prerequisites import require_files


@pytest.fixture(autouse=True)
def _needs_slurm():
    require_files(clusterhosts.SLURM_DAEMONS, "a one-node Slurm (slurm-wlm and munge)")


def test_a_sweep_runs_as_two_slurm_jobs_and_comes_home_as_one_session(tmp_path, clean_kernel):
    assert clusterhosts.slurm_processes() == [], "a Slurm of someone else's is running"
    scenario = clusterhosts.scenario_file(tmp_path / "batch.yaml", ["reno", "cubic"], duration_s=3)
    description = tmp_path / "cluster.yaml"
    description.write_text(yaml.safe_dump({"slurm": {"partition": "test", "jobs": 2, "cores": 1, "memory": "1GiB",
                                                     "walltime": "00:20:00"}}))  # fmt: skip
    with clusterhosts.slurm(tmp_path / "slurm") as conf:
        done = subprocess.run(
            [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--backend", "local", "--no-report",
             "--cluster", f"slurm:{description}", "--results", str(tmp_path / "results")],
            cwd=PROJECT, capture_output=True, text=True, timeout=300, env={**os.environ, "SLURM_CONF": str(conf)},
        )  # fmt: skip
        queue = subprocess.run(["squeue", "-h"], capture_output=True, text=True,
                               env={**os.environ, "SLURM_CONF": str(conf)}).stdout  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert queue.strip() == "", f"the workers' jobs outlived the session: {queue}"
    (session,) = [p.parent for p in (tmp_path / "results").glob("*/*/session.json")]
    record = rundir.read_json(session / "cluster.json")
    assert set(record["runs"]) == {"cc=reno/seed=1", "cc=cubic/seed=1"}
    jobs = set()
    for run_dir in record["runs"]:
        manifest = rundir.read_json(session / run_dir / "manifest.json")
        assert manifest["status"] == "complete", manifest.get("reason")
        jobs.add(manifest["cluster"]["slurm_job"])
    assert all(job.isdigit() for job in jobs)
    assert clusterhosts.slurm_processes() == [] and clusterhosts.cluster_processes() == []


def test_the_slurm_cluster_takes_only_its_sessions_certificate(tmp_path, monkeypatch):
    """Mutual TLS on Slurm (testbed/host/clustertls.py): the jobs' workers join over tls:// with the session's
    certificate, kept in a folder of mode 0700 removed after the session; a client without it is refused."""
    from distributed import Client
    from distributed.security import Security

    from testbed.host import cluster
    from testbed.host.clusterspec import SlurmSpec
    from testbed.host.clusterwork import DASK_DIRECTORY

    assert clusterhosts.slurm_processes() == [], "a Slurm of someone else's is running"
    spec = SlurmSpec(partition="test", jobs=1, cores=1, memory="1GiB", walltime="00:10:00")
    with clusterhosts.slurm(tmp_path / "slurm") as conf:
        monkeypatch.setenv("SLURM_CONF", str(conf))
        dask_cluster, client = cluster.connect(spec, log=lambda line: None)
        try:
            address = client.scheduler.address
            assert address.startswith("tls://"), address
            (folder,) = DASK_DIRECTORY.glob(f"cc-testbed-tls-{os.getpid()}-*")
            assert folder.stat().st_mode & 0o777 == 0o700
            assert client.submit(sum, [2, 3], resources={"run": 1}).result(timeout=60) == 5
            for security in (None, Security.temporary()):
                with pytest.raises((OSError, TypeError, ValueError)):
                    Client(address, security=security, timeout=5)
        finally:
            cluster.disconnect(dask_cluster, client)
    assert list(DASK_DIRECTORY.glob(f"cc-testbed-tls-{os.getpid()}-*")) == []
    assert clusterhosts.slurm_processes() == [] and clusterhosts.cluster_processes() == []
