"""A session on a one-node Slurm (Debian's slurm-wlm and munge, started by the test without systemd):
dask-jobqueue submits one batch job per worker, each runs its runs on the host kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml

from testbed.host.clusterwork import DASK_DIRECTORY
from testbed.host.daskcluster import slurm_logs
from testbed.results import rundir
from tests import clusterhosts
from tests.conftest import PROJECT
from tests.prerequisites import require_files


@pytest.fixture(autouse=True)
def _needs_slurm():
    require_files(clusterhosts.SLURM_DAEMONS, "a one-node Slurm (slurm-wlm and munge)")


def test_a_sweep_runs_as_two_slurm_jobs_and_comes_home_as_one_session(tmp_path, clean_kernel):
    assert clusterhosts.slurm_processes() == [], "a Slurm of someone else's is running"
    started = time.time()
    scenario = clusterhosts.scenario_file(tmp_path / "batch.yaml", ["reno", "cubic"], duration_s=3)
    description = tmp_path / "cluster.yaml"
    description.write_text(
        yaml.safe_dump(
            {"slurm": {"partition": "test", "jobs": 2, "cores": 1, "memory": "1GiB", "walltime": "00:20:00"}}
        )
    )
    with clusterhosts.slurm(tmp_path / "slurm") as conf:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "testbed.cli",
                "run",
                str(scenario),
                "--backend",
                "local",
                "--no-report",
                "--cluster",
                f"slurm:{description}",
                "--results",
                str(tmp_path / "results"),
            ],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "SLURM_CONF": str(conf)},
        )
        queue = subprocess.run(
            ["squeue", "-h"], capture_output=True, text=True, env={**os.environ, "SLURM_CONF": str(conf)}
        ).stdout
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
    cluster_logs = slurm_logs()
    # the jobs' workers joined over mutual TLS (testbed/host/clustertls.py), and its credentials went after
    logs = [path.read_text() for path in cluster_logs.glob("dask-worker-*.err") if path.stat().st_mtime >= started]
    assert logs and all("Registered to:      tls://" in log for log in logs), logs
    assert list(DASK_DIRECTORY.glob("cc-testbed-tls-*")) == []
    assert clusterhosts.slurm_processes() == [] and clusterhosts.cluster_processes() == []
