"""A session on a Dask cluster over SSH: two workers (this machine twice, through an sshd the test starts
with keys made for it), each running its runs on the host kernel, the folders shipped home and merged."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from testbed.results import rundir
from tests import clusterhosts
from tests.conftest import PROJECT
from tests.prerequisites import require_files


@pytest.fixture(autouse=True)
def _needs_sshd():
    require_files([clusterhosts.SSHD], "a cluster over SSH (openssh-server)")


@pytest.fixture(scope="module")
def ssh_inventory(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sshd")
    with clusterhosts.sshd(folder) as port:
        yield clusterhosts.inventory(folder, port)


def _testbed(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.cli", *args]


def _session(results):
    (session,) = [p.parent for p in results.glob("*/*/session.json")]
    return session


def test_a_sweep_over_two_ssh_workers_comes_home_whole_when_one_is_killed_during_its_run(
    tmp_path, ssh_inventory, clean_kernel
):
    scenario = clusterhosts.scenario_file(tmp_path / "killed.yaml", ["reno", "cubic"], duration_s=6)
    controller = subprocess.Popen(
        _testbed(
            "run",
            str(scenario),
            "--backend",
            "local",
            "--cluster",
            f"ssh:{ssh_inventory}",
            "--results",
            str(tmp_path / "results"),
        ),
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        children = clusterhosts.wait_until(clusterhosts.run_children, 120)
        assert children, "no run started on the workers"
        time.sleep(2)  # into the run
        victim = clusterhosts.parent_of(children[0])
        os.kill(victim, signal.SIGKILL)
        out, _ = controller.communicate(timeout=300)
    finally:
        if controller.poll() is None:
            controller.kill()
    assert controller.returncode == 0, out[-4000:]
    assert "cluster: Dask dashboard at http://" in out
    session = _session(tmp_path / "results")
    info = rundir.read_json(session / "session.json")
    assert info["backend"]["kind"] == "cluster" and info["backend"]["worker_backend"] == "local"
    assert len(info["backend"]["workers"]) == 2
    record = rundir.read_json(session / "cluster.json")
    assert set(record["runs"]) == {"cc=reno/seed=1", "cc=cubic/seed=1"}
    workers = {where["worker"] for where in record["runs"].values()}
    assert len(workers) == 1, f"both runs should have come home from the surviving worker: {record['runs']}"
    for run_dir, where in record["runs"].items():
        manifest = rundir.read_json(session / run_dir / "manifest.json")
        assert manifest["status"] == "complete", manifest.get("reason")
        assert manifest["cluster"]["host"] == where["host"] and manifest["cluster"]["cpu"]
        assert where["archive_bytes"] > 0 and where["unpacked_bytes"] >= where["archive_bytes"]
        assert "raw/iperf3-c0-server.json" in manifest["files"]
    # merged into one session: one report and the results catalog, as for a session on one machine
    assert (session / "report.html").exists() and (tmp_path / "results" / "catalog.sqlite").exists()
    assert clusterhosts.cluster_processes() == []
    assert list(clusterhosts.SCRATCH.glob("[0-9]*/")) == []  # the killed worker's folder went with the rerun


def test_a_controller_killed_mid_session_leaves_nothing_running_and_the_session_resumes(
    tmp_path, ssh_inventory, clean_kernel
):
    scenario = clusterhosts.scenario_file(tmp_path / "resumed.yaml", ["reno", "cubic"], duration_s=6)
    command = _testbed(
        "run",
        str(scenario),
        "--backend",
        "local",
        "--cluster",
        f"ssh:{ssh_inventory}",
        "--no-report",
        "--results",
        str(tmp_path / "results"),
    )
    controller = subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def one_run_home() -> list:
        return [p for p in (tmp_path / "results").glob("*/*/cluster.json") if rundir.read_json(p)["runs"]]

    # the runs take the host kernel in turn: when the first is home, the second is running
    assert clusterhosts.wait_until(one_run_home, 120), "no run came home"
    assert clusterhosts.wait_until(clusterhosts.run_children, 30), "the second run did not start"
    (first,) = rundir.read_json(one_run_home()[0])["runs"]
    session = one_run_home()[0].parent
    kept = (session / first / "manifest.json").read_bytes()
    time.sleep(2)
    controller.kill()  # SIGKILL: no close(), no guardian; the scheduler ends when its client's connection drops
    controller.wait()
    assert clusterhosts.wait_until(lambda: not clusterhosts.cluster_processes(), 30), clusterhosts.cluster_processes()
    from tests.conftest import leftovers

    assert leftovers() == []  # the runs were torn down (the runner's SIGTERM path) with their workers

    again = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming {session}: 1 of 2 runs complete" in again.stdout
    assert (session / first / "manifest.json").read_bytes() == kept  # the run that came home was not run again
    for run_dir in ("cc=reno/seed=1", "cc=cubic/seed=1"):
        assert rundir.read_json(session / run_dir / "manifest.json")["status"] == "complete"
    assert list(clusterhosts.SCRATCH.glob("[0-9]*/")) == []


async def _connects(address: str, security) -> bool:
    """A client connection to the scheduler with ``security``'s credentials gets an answer."""
    from distributed.comm import connect

    try:
        comm = await connect(address, timeout=5, **security.get_connection_args("client"))
        await comm.write({"op": "identity"})
        await comm.read()
        await comm.close()
        return True
    except Exception:  # refused in the handshake, or the connection closed on the first message
        return False


def test_the_cluster_takes_only_its_sessions_certificate(ssh_inventory):
    """Mutual TLS (testbed/host/clustertls.py): the scheduler speaks tls://, its dashboard is on loopback, the
    session's key reaches every host as a file of mode 0600 (gone after the session); a client with no
    certificate, or with a certificate of its own making, cannot connect; a worker without it cannot join."""
    from distributed.security import Security

    from testbed.host import clusterspec, daskcluster

    lines = []
    dask_cluster, client = daskcluster.connect(clusterspec.parse(f"ssh:{ssh_inventory}"), log=lines.append)
    try:
        address = client.scheduler.address
        assert address.startswith("tls://"), address
        port = urlparse(client.dashboard_link).port
        assert f"http://127.0.0.1:{port}/status on the scheduler host's loopback only" in lines[0], lines
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the dashboard answers on loopback
        with pytest.raises(OSError):
            socket.create_connection((urlparse(client.dashboard_link).hostname, port), timeout=5)
        (folder,) = Path("/tmp").glob(f"cc-testbed-tls-{os.getpid()}-*")
        assert folder.stat().st_mode & 0o777 == 0o700
        assert {(p.name, p.stat().st_mode & 0o777) for p in folder.iterdir()} == {
            ("cert.pem", 0o600),
            ("key.pem", 0o600),
        }
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3  # the session's own client runs tasks
        assert asyncio.run(_connects(address, dask_cluster.security))  # the session's own certificate
        assert not asyncio.run(_connects(address, Security()))  # no certificate
        assert not asyncio.run(_connects(address, Security.temporary()))  # a certificate of its own making
        joined = len(client.scheduler_info()["workers"])
        stranger = subprocess.run(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny", "--death-timeout", "8"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert stranger.returncode != 0
        assert len(client.scheduler_info()["workers"]) == joined
    finally:
        daskcluster.disconnect(dask_cluster, client)
    assert list(Path("/tmp").glob(f"cc-testbed-tls-{os.getpid()}-*")) == []
