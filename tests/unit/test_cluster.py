"""The cluster's pure parts: what --cluster SPEC reads into, how runs spread over workers and cores,
and the check a shipped run folder passes before it joins the session."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from testbed.host import clusterspec
from testbed.host.cluster import share_cores, spread_s
from testbed.host.clusterspec import ClusterError
from testbed.host.clusterwork import Shipment, pack, unpack
from testbed.results import rundir
from tests.prerequisites import require_tools


def test_local_n_is_n_workers_and_anything_else_after_local_is_refused_with_the_form():
    assert clusterspec.parse("local:3") == clusterspec.LocalSpec(workers=3)
    for wrong in ("local:0", "local:two", "local:"):
        with pytest.raises(ClusterError, match="N must be a whole number of workers"):
            clusterspec.parse(wrong)


def test_a_missing_file_names_the_three_forms(tmp_path):
    with pytest.raises(ClusterError, match=r"local:N .*Ansible inventory.*Slurm description"):
        clusterspec.parse(str(tmp_path / "nowhere.ini"))


def test_an_inventory_gives_one_worker_per_host_with_ansibles_variables(tmp_path):
    require_tools(("ansible-inventory",), "reading an inventory")
    inventory = tmp_path / "lab.ini"
    inventory.write_text(
        "[senders]\ns1 ansible_host=192.0.2.10 ansible_user=debian ansible_port=2222\ns2 ansible_host=192.0.2.11\n"
        "[lab:children]\nsenders\n[lab:vars]\ntestbed_src=/srv/cc\nansible_ssh_private_key_file=~/.ssh/lab\n"
    )
    spec = clusterspec.parse(str(inventory))
    assert [h.name for h in spec.hosts] == ["s1", "s2"] and spec.scheduler.name == "s1"
    s1, s2 = spec.hosts
    assert (s1.address, s1.user, s1.port, s1.python) == ("192.0.2.10", "debian", 2222, "/srv/cc/.venv/bin/python")
    assert s2.connect_options()["port"] == 22 and s2.connect_options()["client_keys"][0].endswith("/.ssh/lab")


def test_an_inventory_without_hosts_says_how_to_add_one(tmp_path):
    require_tools(("ansible-inventory",), "reading an inventory")
    inventory = tmp_path / "empty.ini"
    inventory.write_text("[lab]\n# sender1 ansible_host=192.0.2.10\n")
    with pytest.raises(ClusterError, match="lists no host"):
        clusterspec.parse(f"ssh:{inventory}")


def test_a_slurm_description_is_checked_key_by_key(tmp_path):
    good = tmp_path / "slurm.yaml"
    good.write_text("slurm:\n  partition: short\n  jobs: 10\n  cores: 4\n  memory: 8GiB\n")
    spec = clusterspec.parse(str(good))
    assert (spec.kind, spec.partition, spec.jobs, spec.cores) == ("slurm", "short", 10, 4)
    typo = tmp_path / "typo.yaml"
    typo.write_text("slurm:\n  partiton: short\n  jobs: yes\n")
    with pytest.raises(ClusterError) as err:
        clusterspec.parse(f"slurm:{typo}")
    assert "slurm.partiton" in str(err.value) and "slurm.jobs" in str(err.value) and "valid keys" in str(err.value)


def test_runs_spread_longest_first_over_the_workers():
    assert spread_s([10, 10, 10, 10], 2) == 20
    assert spread_s([30, 10, 10, 10], 2) == 30
    assert spread_s([5, 5], 10) == 5
    assert spread_s([], 3) == 0


def test_each_local_worker_gets_cores_of_its_own():
    assert share_cores([0, 1, 2, 3], ["0", "1"]) == {"0": [0, 1], "1": [2, 3]}
    assert share_cores([0, 1], ["0", "1", "2"]) == {"0": [0], "1": [1], "2": [0]}


def test_more_pinned_guests_than_cores_are_refused_before_anything_runs(tmp_path):
    """``local:N --backend guest`` on a process allowed one core: refused, saying what this host allows,
    before a worker starts or a results folder exists."""
    import subprocess
    import sys

    from tests.conftest import PROJECT

    core = min(os.sched_getaffinity(0))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "topology: {name: dumbbell, bottleneck: {rate_mbit: 5}}\nflows: [{cc: reno, rtt_ms: 20}]\nduration_s: 3\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(scenario),
            "--backend",
            "guest",
            "--cluster",
            "local:2",
            "--no-report",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"may use 1 core(s) ({core}): at most local:1 here" in done.stderr
    assert "cluster: starting" not in done.stdout and not (tmp_path / "results").exists()


def _run_folder(path):
    (path / "raw").mkdir(parents=True)
    (path / "raw" / "iperf3.json").write_text('{"end": {}}')
    manifest = {"status": "complete", "files": rundir.file_hashes(path)}
    rundir.write_json_atomic(path / rundir.MANIFEST, manifest)
    return path


def _shipment(archive: bytes, sha: str | None = None) -> Shipment:
    import hashlib

    digest = sha or hashlib.sha256(archive).hexdigest()
    return Shipment(
        run_dir="cc=reno/seed=1",
        archive=archive,
        archive_sha256=digest,
        worker="tcp://w",
        host="h",
        cpu="c",
        run_s=1,
        pack_s=0,
        unpacked_bytes=1,
    )


def test_a_shipped_folder_arrives_whole_and_checked_against_its_manifest(tmp_path):
    archive, size = pack(_run_folder(tmp_path / "worker"))
    assert size > 0
    unpack(_shipment(archive), tmp_path / "home")
    assert (tmp_path / "home" / "raw" / "iperf3.json").read_text() == '{"end": {}}'


def test_a_changed_archive_or_file_is_refused(tmp_path):
    folder = _run_folder(tmp_path / "worker")
    archive, _ = pack(folder)
    with pytest.raises(ValueError, match="changed on its way"):
        unpack(_shipment(archive, sha="0" * 64), tmp_path / "home1")
    (folder / "raw" / "iperf3.json").write_text('{"end": {"changed": 1}}')  # after the manifest was written
    with pytest.raises(ValueError, match="differ from the manifest's sha256 list"):
        unpack(_shipment(pack(folder)[0]), tmp_path / "home2")


def test_an_archive_reaching_outside_the_run_folder_is_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b"x"
        info = tarfile.TarInfo("../escaped")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="outside a run folder"):
        unpack(_shipment(buffer.getvalue()), tmp_path / "home")
    assert not (tmp_path / "escaped").exists()


def test_a_placement_seed_sends_a_point_to_the_same_host_in_every_session():
    from testbed.host.cluster import ClusterBackend
    from testbed.plan.plan import PlanRun

    def backend(ports: tuple[int, int, int]) -> ClusterBackend:
        chosen = ClusterBackend(clusterspec.LocalSpec(workers=3), "guest", [], placement_seed=7)
        chosen.facts = {
            str(i): {"host": f"h{i}", "address": f"tcp://10.0.0.{i}:{port}"} for i, port in enumerate(ports)
        }
        return chosen

    runs = [
        PlanRun(scenario_name="s", point_id=f"cc={cc}", params={}, seed=seed, scenario={}, run_dir="x", estimate_s=1)
        for cc in ("reno", "cubic", "bbr", "vegas")
        for seed in (1, 2, 3)
    ]
    first, second = backend((1, 2, 3)), backend((4, 5, 6))  # the next session's workers have other ports
    hosts = [first._placed(r)[0].split(":")[1] for r in runs]
    assert hosts == [second._placed(r)[0].split(":")[1] for r in runs]
    assert len(set(hosts)) > 1  # spread, not all on one host
    assert ClusterBackend(clusterspec.LocalSpec(workers=2), "guest", [])._placed(runs[0]) is None


def test_a_local_cluster_listens_on_loopback_only():
    """``local:N``: the scheduler, each worker and the dashboard bound to 127.0.0.1 (Dask's TCP is not
    authenticated and its tasks run as root), checked on the sockets the processes really opened."""
    import psutil

    from testbed.host import daskcluster

    dask_cluster = daskcluster.start(clusterspec.parse("local:1"))
    try:
        workers = list(dask_cluster.scheduler_info["workers"])
        assert dask_cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers), workers
        pids = [os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))]
        listening = [
            c.laddr.ip
            for pid in pids
            for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening and set(listening) == {"127.0.0.1"}, listening
    finally:
        dask_cluster.close()


def test_credentials_of_a_killed_controller_are_removed_and_a_live_ones_kept(tmp_path):
    from testbed.host import clustertls

    dead = tmp_path / f"{clustertls.PREFIX}999999999-0a1b"
    live = tmp_path / f"{clustertls.PREFIX}{os.getpid()}-2c3d"
    for folder in (dead, live):
        folder.mkdir(mode=0o700)
        (folder / clustertls.KEY).write_text("key")
    assert dead in clustertls.remove_stale(tmp_path)
    assert not dead.exists() and (live / clustertls.KEY).exists()


def test_remote_processes_get_file_paths_never_the_key_itself():
    from testbed.host import clustertls

    remote = clustertls.file_security("/tmp/cc-testbed-tls-1-ab")
    assert remote.require_encryption and remote.tls_worker_key == "/tmp/cc-testbed-tls-1-ab/key.pem"
    names = ("tls_ca_file", "tls_client_key", "tls_scheduler_key", "tls_worker_key")
    fields = [getattr(remote, name) for name in names]
    assert not any("PRIVATE KEY" in value for value in fields)
    assert "PRIVATE KEY" in clustertls.credentials().tls_client_key
