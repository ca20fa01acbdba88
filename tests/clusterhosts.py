"""Real cluster parts for the tests: an sshd on this machine with keys made for the test, the Ansible
inventory that names it twice (two workers), and what a cluster session may leave behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import yaml

from tests.conftest import PROJECT

SSHD = Path("/usr/sbin/sshd")
#: where cluster workers keep runs until they ship them (testbed.host.clusterwork.SCRATCH)
SCRATCH = Path("/var/tmp/cc-testbed-cluster")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s: float):
    """``predicate()`` once it is true, or its last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.2)
    return predicate()


def wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout_s} s")


@contextlib.contextmanager
def sshd(folder: Path):
    """An sshd on 127.0.0.1 for root, keys only, its host key, client key and known_hosts in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    port = free_port()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {(folder / 'host_key.pub').read_text()}")
    config = folder / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {folder / 'host_key'}",
                f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                f"PidFile {folder / 'sshd.pid'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "MaxStartups 20",
                "MaxSessions 20",
            ]
        )
        + "\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    with open(folder / "sshd.log", "w") as log:
        proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=log, start_new_session=True)
    try:
        wait_for_port(port)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the daemon and its sessions
        proc.wait(timeout=10)


def inventory(folder: Path, port: int, hosts: tuple[str, ...] = ("w1", "w2")) -> Path:
    """An Ansible inventory whose hosts are all this machine over the test's sshd."""
    lines = ["[lab]"] + [
        f"{name} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root "
        f"ansible_ssh_private_key_file={folder / 'client_key'} testbed_known_hosts={folder / 'known_hosts'} "
        f"testbed_src={PROJECT}"
        for name in hosts
    ]
    path = folder / "inventory.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def scenario_file(path: Path, ccs: list[str], duration_s: int) -> Path:
    """A sweep over ``ccs`` on a dumbbell the host kernel can build (HTB, no netem)."""
    data = {
        "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
        "flows": [{"cc": ccs, "rtt_ms": 0}],
        "duration_s": duration_s,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def cluster_processes() -> list[str]:
    """Dask schedulers, workers and run children of this checkout still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(
            part in cmdline
            for part in ("distributed.cli", "testbed.host.clusterwork", "dask_spawn", "dask-worker", "dask worker")
        ):
            found.append(f"{entry.name} {cmdline[:100]}")
    return found


def run_children() -> list[int]:
    """The pids of the processes running a cluster run (testbed.host.clusterwork)."""
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and b"testbed.host.clusterwork" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


SLURM_DAEMONS = (Path("/usr/sbin/munged"), Path("/usr/sbin/slurmctld"), Path("/usr/sbin/slurmd"))


@contextlib.contextmanager
def slurm(folder: Path):
    """A one-node Slurm on this machine: munged, slurmctld and slurmd in the foreground, no systemd,
    their key, sockets, state and logs in ``folder``; yields the ``SLURM_CONF`` path (sbatch reads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)  # munged wants its socket's folder reachable by every user
    for part in ("state", "spool"):
        (folder / part).mkdir(exist_ok=True)
    subprocess.run(["mungekey", "--create", f"--keyfile={folder / 'munge.key'}"], check=True)
    host = socket.gethostname()
    ctld_port, slurmd_port = free_port(), free_port()
    conf = folder / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=cctest",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={folder / 'munge.sock'}",
                "CredType=cred/munge",
                f"StateSaveLocation={folder / 'state'}",
                f"SlurmdSpoolDir={folder / 'spool'}",
                f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
                f"SlurmdPidFile={folder / 'slurmd.pid'}",
                f"SlurmctldLogFile={folder / 'slurmctld.log'}",
                f"SlurmdLogFile={folder / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SwitchType=switch/none",
                "MpiDefault=none",
                "ReturnToService=2",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=4000 State=UNKNOWN",
                "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    commands = [
        [
            "munged",
            "-F",
            "-f",
            f"--socket={folder / 'munge.sock'}",
            f"--key-file={folder / 'munge.key'}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--seed-file={folder / 'munged.seed'}",
            f"--log-file={folder / 'munged.log'}",
        ],
        ["slurmctld", "-D", "-f", str(conf)],
        ["slurmd", "-D", "-f", str(conf), "-N", host],
    ]
    daemons = []
    try:
        for command in commands:
            with open(folder / f"{command[0]}.out", "w") as out:
                daemons.append(
                    subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                )
            time.sleep(0.5 if command[0] == "munged" else 0)
        _wait_for_idle_node(env)
        yield conf
    finally:
        subprocess.run(["scancel", "--partition=test"], env=env, capture_output=True)
        _wait_for_steps_to_end()
        for daemon in reversed(daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=30)


def _wait_for_idle_node(env: dict, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
        if state == "idle":
            return
        time.sleep(0.3)
    raise AssertionError(f"the Slurm node is not idle after {timeout_s} s (sinfo: {state!r})")


def _wait_for_steps_to_end(timeout_s: float = 30.0) -> None:
    """Cancelled jobs' slurmstepd processes end by themselves within seconds; any left then are killed."""
    deadline = time.monotonic() + timeout_s
    while (steps := slurm_processes(("slurmstepd",))) and time.monotonic() < deadline:
        time.sleep(0.2)
    for step in steps:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(step.split()[0]), signal.SIGKILL)


def slurm_processes(names: tuple[str, ...] = ("munged", "slurmctld", "slurmd", "slurmstepd")) -> list[str]:
    """Slurm's and munge's processes still running (zombies left to their parents aside)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if not entry.name.isdigit():
                continue
            name = (entry / "comm").read_text().strip()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if name in names and state != "Z":
                found.append(f"{entry.name} {name}")
    return found
