"""The lab VM end to end: box, ``vagrant up`` + provisioning, an experiment in the VM with the
report on the host, an idempotent second provisioning, ``vagrant destroy``, nothing left behind.

The tests run in file order and share one VM (module fixture). The VM gets a domain name of its
own (TESTBED_VM_PREFIX) and its own Vagrant state folder (VAGRANT_DOTFILE_PATH), so a developer's
own lab VM in this checkout is left alone. The box is reused when it is already added (it is
rebuilt only when its recipe changed).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.host import vagrant as vagrant_backend
from testbed.host.session import run_session
from testbed.report.pages.sessionpage import write_session_report
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict
from tests.prerequisites import require_root, require_tools
from tests.shelldialogue import reachability_flow_and_exit, spawned

PROJECT = Path(__file__).resolve().parents[2]
URI = "qemu:///system"
BOX = "cc-testbed/bookworm"
#: libvirt's default storage pool (a directory pool): domain disks and the box's base volume
IMAGES = Path("/var/lib/libvirt/images")

pytestmark = pytest.mark.vagrant


def virsh(*args: str) -> list[str]:
    out = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def libvirt_answers() -> bool:
    return subprocess.run(["virsh", "-c", URI, "version"], capture_output=True).returncode == 0


def vagrant(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(["vagrant", *args], cwd=PROJECT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lab_vm(tmp_path_factory):
    require_root("the vagrant tier: libvirt's system instance, loop devices for the box build")
    require_tools(("vagrant", "virsh", "libvirtd", "mmdebstrap", "ansible-playbook"), "the vagrant tier")
    state = tmp_path_factory.mktemp("vagrant")
    env = {"VAGRANT_DOTFILE_PATH": str(state / "dot-vagrant"), "TESTBED_VM_PREFIX": f"cc-testbed-test-{os.getpid()}_"}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    before = {
        "libvirt": libvirt_answers(),
        "images": set(os.listdir(IMAGES)) if IMAGES.exists() else set(),
        "networks": set(virsh("net-list", "--name")),
    }
    started = time.monotonic()
    up, first = vagrant_up_once_more_if_no_address(state)
    info = {"state": state, "env": env, "before": before, "up": up, "up_s": time.monotonic() - started}
    info["first_attempt"] = first
    try:
        yield info
    finally:
        if (state / "dot-vagrant" / "machines").exists() and not info.get("destroyed"):
            vagrant("destroy", "-f", timeout=600)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def vagrant_up_once_more_if_no_address(state: Path) -> tuple[subprocess.CompletedProcess, str | None]:
    """``vagrant up``, and once more when the domain never got an address: once in a rehearsal a TCG
    domain sat 15 min (``boot_timeout``) without one, its serial log lost with the run (CI infrastructure
    retries a boot that never came up, as LAVA and KernelCI do). The first attempt's error and serial
    log are kept for the report; any other failure is not retried."""
    up = vagrant("up", "--provider=libvirt")
    no_address = "Waiting for domain to get an IP address" in up.stdout and "PLAY RECAP" not in up.stdout
    if up.returncode == 0 or not no_address:
        return up, None
    first = f"{why_up_failed(up)}\nserial console (last lines):\n{serial_tail(state)}"
    vagrant("destroy", "-f", timeout=600)
    return vagrant("up", "--provider=libvirt"), first


def why_up_failed(up: subprocess.CompletedProcess) -> str:
    """Vagrant's own error: the first lines of its stderr (a Ruby backtrace follows them)."""
    head = [line for line in up.stderr.splitlines() if not line.lstrip().startswith("from /")]
    return "\n".join(head[:12])


def serial_tail(state: Path, lines: int = 40) -> str:
    path = state / "dot-vagrant" / "serial.log"
    if not path.exists():
        return "(no serial log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_vagrant_up_provisions_the_vm(lab_vm):
    up = lab_vm["up"]
    if lab_vm["first_attempt"]:
        print(f"the first vagrant up got no address and was retried:\n{lab_vm['first_attempt']}")
    assert up.returncode == 0, (
        f"vagrant up failed:\n{why_up_failed(up)}\n{up.stdout[-3000:]}\n"
        f"serial console (last lines):\n{serial_tail(lab_vm['state'])}"
    )
    recap = re.search(r"PLAY RECAP.*?\n(.*failed=\d+)", up.stdout, re.S)
    assert recap and "failed=0" in recap.group(1), up.stdout[-3000:]
    out = vagrant(
        "ssh",
        "-c",
        "cat /proc/sys/net/ipv4/tcp_available_congestion_control; uname -r; "
        "cat /etc/cc-testbed/box.json; cat /etc/cc-testbed/provisioned",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    algorithms = lines[0].split()
    assert {"westwood", "vegas", "westwood_ml", "westwood_paper"} <= set(algorithms), algorithms
    box = json.loads(lines[2])
    assert lines[1] == box["kernel"], "the VM runs the box's kernel (no TESTBED_KERNEL given)"
    print(f"vagrant up (box, boot, first provisioning): {lab_vm['up_s']:.0f} s")


def test_experiment_runs_in_the_vm_and_the_report_lands_on_the_host(lab_vm, tmp_path):
    assert lab_vm["up"].returncode == 0, "vagrant up failed (first test)"
    scenario = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_bdp": 1}},
            "flows": [{"cc": "westwood", "rtt_ms": 40}, {"cc": "westwood_paper", "rtt_ms": 40}],
            "duration_s": 10,
        },
        name="lab-vm",
    )
    # the host kernel here has no netem: "auto" must pick the VM that is up
    result = run_session(scenario, backend="auto", results_root=tmp_path)
    assert result.backend["kind"] == "vagrant"
    [run] = result.runs
    manifest = rundir.read_json(run / "manifest.json")
    assert manifest["status"] == "complete", manifest["reason"]
    assert manifest["backend"]["kind"] == "vagrant"
    assert manifest["kernel"]["release"] == result.backend["kernel_release"] != os.uname().release
    assert manifest["modules"]["tcp_westwood_tb"]["srcversion"], "the VM built and loaded the project's module"
    assert manifest["host"]["guest_cpu_s"] > 0, "the host read its contention from the VM's qemu"
    assert "westwood_tb_sample" in (run / "raw" / "westwood_tb.txt").read_text()
    report = write_session_report(result.directory)
    assert report.html_path.exists() and (run / "report.html").exists()
    flows = pd.read_csv(run / "flows.csv")
    assert sorted(flows["cc"]) == ["westwood", "westwood_paper"]
    goodput = flows["recv_goodput_mbit"].sum()
    assert 7.0 < goodput < 10.0, f"two flows through 10 Mbit/s delivered {goodput:.2f} Mbit/s"


def test_the_shell_opens_in_the_vm_and_leaves_nothing_there(lab_vm, tmp_path):
    """``testbed shell`` picks the VM that is up (the host kernel has no netem) and runs Mininet's CLI
    there over ``ssh -t``: the same dialogue as the netns and guest tiers'; after ``exit`` no shell
    process, namespace or plan is left in the VM."""
    assert lab_vm["up"].returncode == 0, "vagrant up failed (first test)"
    with spawned(tmp_path, "auto", rtt_ms=20, boot_timeout_s=300) as child:
        reachability_flow_and_exit(child, live=False)  # the VM's folder is not the host's
    log = (tmp_path / "shell.log").read_text()
    assert "backend: vagrant" in log and child.exitstatus == 0, log[-3000:]
    out = vagrant(
        "ssh", "-c", "pgrep -af '[t]estbed.guest.shell'; ip netns list; sudo ls /var/tmp/cc-testbed-shell", timeout=300
    )
    assert out.stdout.strip() == "", f"left in the VM: {out.stdout}"


def test_second_provisioning_changes_nothing(lab_vm):
    assert lab_vm["up"].returncode == 0, "vagrant up failed (first test)"
    started = time.monotonic()
    again = vagrant("provision")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    recap = re.search(r"PLAY RECAP.*?\n(.*)", again.stdout, re.S).group(1)
    assert re.search(r"changed=0\s", recap) and "failed=0" in recap, recap
    print(f"second provisioning: {time.monotonic() - started:.0f} s")


def test_a_vm_that_stops_answering_fails_its_run_within_the_deadline(lab_vm, tmp_path):
    """qemu SIGSTOPped during a run's traffic: ssh's keepalives give up, the run fails with a message
    that says so, and the VM is left as it was (here: continued afterwards, for the next test)."""
    assert lab_vm["up"].returncode == 0, "vagrant up failed (first test)"
    scenario = tmp_path / "silent.yaml"
    scenario.write_text(
        json.dumps(
            {
                "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
                "flows": [{"cc": "reno", "rtt_ms": 20}],
                "duration_s": 30,
            }
        )
    )
    log = tmp_path / "cli.log"
    with open(log, "wb") as out:
        cli = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.cli",
                "run",
                str(scenario),
                "--backend",
                "vagrant",
                "--no-report",
                "--results",
                str(tmp_path / "results"),
            ],
            cwd=PROJECT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 600
    while "traffic window begins" not in log.read_text() and time.monotonic() < deadline and cli.poll() is None:
        time.sleep(0.5)
    assert "traffic window begins" in log.read_text(), log.read_text()[-3000:]
    with vagrant_backend.LabVM() as vm:
        (qemu,) = vm.qemu_pids()
    os.kill(qemu, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        cli.wait(timeout=600)
        waited = time.monotonic() - stopped
        state = virsh(
            "domstate",
            next(d for d in virsh("list", "--all", "--name") if d.startswith(lab_vm["env"]["TESTBED_VM_PREFIX"])),
        )
    finally:
        os.kill(qemu, signal.SIGCONT)
    out = log.read_text()
    assert cli.returncode == 1, out[-3000:]
    assert "lab VM failed: ssh lost the lab VM: it answered nothing for 30 s" in out, out[-3000:]
    assert "The VM is left as it is" in out and "vagrant destroy -f" in out
    limit = vagrant_backend.ALIVE_INTERVAL_S * vagrant_backend.ALIVE_COUNT + 2 * vagrant_backend.CONNECT_TIMEOUT_S
    assert waited < limit + 30, f"the silent VM held the session {waited:.0f} s"
    assert state == ["running"] or state == ["paused"], state  # not destroyed, not shut down
    (manifest,) = (tmp_path / "results").glob("silent/*/*/seed=1/manifest.json")
    manifest = rundir.read_json(manifest)  # its files stayed in the VM: failed, with the reason
    assert manifest["status"] == "failed" and "ssh lost the lab VM" in manifest["reason"]
    print(f"a silent lab VM failed the session {waited:.0f} s after its qemu stopped")


def test_destroy_leaves_nothing_behind(lab_vm):
    destroy = vagrant("destroy", "-f", timeout=600)
    lab_vm["destroyed"] = True
    assert destroy.returncode == 0, destroy.stderr
    prefix = lab_vm["env"]["TESTBED_VM_PREFIX"]
    before = lab_vm["before"]
    # The box's base volume stays after `vagrant destroy` (the next `vagrant up` starts faster);
    # the test removes the one its own `vagrant up` uploaded.
    base_volume = BOX.replace("/", "-VAGRANTSLASH-")
    for name in set(os.listdir(IMAGES)) - before["images"]:
        if name.startswith(base_volume):
            if libvirt_answers():
                virsh("vol-delete", "--pool", "default", name)
            (IMAGES / name).unlink(missing_ok=True)
    assert set(os.listdir(IMAGES)) <= before["images"], "volumes left in libvirt's default pool"
    if before["libvirt"]:
        assert not [d for d in virsh("list", "--all", "--name") if d.startswith(prefix)]
        assert set(virsh("net-list", "--name")) <= before["networks"]
    else:
        # the test's `vagrant up` started libvirt; `vagrant destroy` stopped it again with its networks
        assert not libvirt_answers(), "libvirtd started for the test is still running"
        leftover = subprocess.run(
            ["pgrep", "-a", "-f", "libvirtd|virtlogd|qemu-system|dnsmasq"], capture_output=True, text=True
        ).stdout
        assert not leftover.strip(), leftover
