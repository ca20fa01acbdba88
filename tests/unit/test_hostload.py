"""The host's part of fidelity: what others than the guest used of the host's CPUs during traffic,
judged per run and written into the run's manifest."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.guest import fidelity
from testbed.host import hostload
from testbed.plan.progress import TRAFFIC_BEGINS, TRAFFIC_ENDS
from testbed.results import rundir

# these tests read the host's real CPU use: not beside the unit tier's other worker (scripts/pytest-tier.sh)
pytestmark = pytest.mark.quiet_host

TICK = os.sysconf("SC_CLK_TCK")


def snap(t_s, busy_ticks, idle_ticks, steal_ticks, guest_s, vcpu_wait_s=0.0, others=()):
    ticks = (busy_ticks, 0, 0, idle_ticks, 0, 0, 0, steal_ticks)
    return hostload.Snapshot(
        t_s, ticks, int(guest_s * 0.9e9), int(vcpu_wait_s * 1e9), int(guest_s * 1e9), 1.5, tuple(others)
    )


BEFORE = snap(0, 0, 0, 0, 0)


def test_a_quiet_host_passes_and_a_contended_one_fails_naming_why():
    # 10 s on 2 CPUs: the guest used 8 CPU-seconds, the host 9: others 1 s = 5 % of its CPUs
    quiet = hostload.summarize(BEFORE, snap(10, 9 * TICK, 11 * TICK, 0, 8, vcpu_wait_s=0.8), cpus=2)
    assert (quiet.host_busy_pct, quiet.other_busy_pct, quiet.vcpu_cpu_s) == (45.0, 5.0, 7.2)
    assert quiet.vcpu_wait_pct == round(100 * 0.8 / 8.0, 1)
    check = fidelity.host_check(quiet.to_dict())
    assert check.ok and "5 % by others than the guest" in check.detail and "waited for a CPU 10 %" in check.detail
    # a CPU hog: the host was full and the guest got 6 of its 20 CPU-seconds
    hog = hostload.summarize(BEFORE, snap(10, 20 * TICK, 0, 0, 6, vcpu_wait_s=6), cpus=2)
    check = fidelity.host_check(hog.to_dict())
    assert not check.ok and "others than the guest used 70 % of the host's 2 CPUs (limit 30 %)" in check.detail
    stolen = hostload.summarize(BEFORE, snap(10, 10 * TICK, 6 * TICK, 4 * TICK, 5), cpus=2)
    check = fidelity.host_check(stolen.to_dict())
    assert stolen.host_steal_pct == 20.0 and not check.ok and "hypervisor stole 20 %" in check.detail
    other = hostload.summarize(BEFORE, snap(10, 9 * TICK, 11 * TICK, 0, 8, others=["4242 qemu-system-x86_64"]))
    check = fidelity.host_check(other.to_dict())
    assert not check.ok and "other guests ran on the host: 4242 qemu-system-x86_64" in check.detail


def test_a_contended_run_names_the_other_processes_that_took_the_cpu():
    """Who the others were, from each process's CPU time over the window: the busiest named (at most
    three, each with its share of the CPUs judged), a process too idle to matter not; said when the host
    was contended, where it helps find what to stop."""
    before = replace(BEFORE, others_cpu_s={7: ("apt-get upgrade", 100.0), 8: ("sshd", 5.0)})
    after = replace(
        snap(10, 20 * TICK, 0, 0, 6),
        others_cpu_s={7: ("apt-get upgrade", 108.0), 8: ("sshd", 5.1), 9: ("[kworker/1:2]", 1.0)},
    )
    hog = hostload.summarize(before, after, cpus=2)
    assert hog.busiest_others == ("7 apt-get upgrade: 40 %", "9 [kworker/1:2]: 5 %")
    check = fidelity.host_check(hog.to_dict())
    assert not check.ok and "busiest others: 7 apt-get upgrade: 40 %, 9 [kworker/1:2]: 5 %" in check.detail
    quiet = hostload.summarize(before, replace(after, cpu_ticks=(9 * TICK, 0, 0, 11 * TICK, 0, 0, 0, 0)), cpus=2)
    assert "busiest" not in fidelity.host_check(quiet.to_dict()).detail  # named only when it was contended


def test_the_snapshot_reads_every_other_process_but_the_guests():
    """Real /proc: a busy loop running beside a stand-in guest is named, by its command line, with about
    one of the host's CPUs (its command line on one line); the guest's processes are never among the others."""
    import subprocess

    spin = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass"
    guest = subprocess.Popen(["sleep", "30"])
    busy = subprocess.Popen([sys.executable, "-c", spin, "5"])
    try:
        time.sleep(0.2)
        before = hostload.snapshot({guest.pid})
        time.sleep(1.0)
        after = hostload.snapshot({guest.pid})
    finally:
        for process in (guest, busy):
            process.kill()
            process.wait()
    assert guest.pid not in after.others_cpu_s and busy.pid in after.others_cpu_s
    summary = hostload.summarize(before, after)
    (named,) = [text for text in summary.busiest_others if text.startswith(f"{busy.pid} ")]
    share = float(named.rpartition(": ")[2].rstrip(" %"))
    assert f"{busy.pid} {sys.executable} -c import sys, time end = " in named, summary.busiest_others
    assert share >= 100 / summary.cpus * 0.6, summary.busiest_others  # about one CPU of the host's


def test_the_watch_judges_each_runs_traffic_and_amends_its_manifest(tmp_path, monkeypatch):
    snapshots = iter([BEFORE, snap(10, 20 * TICK, 0, 0, 6, vcpu_wait_s=6)])
    monkeypatch.setattr(hostload, "snapshot", lambda own, cores=None, tree=None: next(snapshots))
    for name in ("a", "b"):
        rundir.write_json_atomic(
            tmp_path / name / rundir.MANIFEST,
            {"status": "complete", "fidelity": {"trustworthy": True, "problems": [], "checks": []}},
        )
    said = []
    watch = hostload.HostWatch(["a", "b"], own=set, session=tmp_path, log=said.append)
    for now, line in [
        (100.0, "run 1/2: s p seed=1 (ETA 1 min)"),
        (101.0, f"  {TRAFFIC_BEGINS}"),
        (106.0, "  traffic t=  5.0 s of 10 s"),
        (111.0, f"  {TRAFFIC_ENDS}"),
        (114.5, "run 1/2 complete"),
        (114.6, "run 2/2: s p seed=2 (ETA 0.5 min)"),
    ]:
        watch.on_line(line, now)
    first = rundir.read_json(tmp_path / "a" / rundir.MANIFEST)
    assert first["host"]["other_busy_pct"] == 70.0
    assert first["host"]["run_wall_s"] == 14.5  # the run's first line to its last, on the host's clock
    assert first["fidelity"]["trustworthy"] is False
    assert first["fidelity"]["problems"][0].startswith("host contention: the host was contended")
    assert "host" not in rundir.read_json(tmp_path / "b" / rundir.MANIFEST)  # its traffic never came
    # said as the run ends: the guest's lines cannot, the host judges after them
    assert said == [f"a: host contention: failed: {first['fidelity']['problems'][0].removeprefix('host contention: ')}"]


def test_the_guests_own_processes_are_found_by_their_marker():
    import subprocess

    from testbed.host import guardian

    marker = guardian.marker_value("/nowhere/checkout")
    guest = subprocess.Popen(["sleep", "60"], env=dict(os.environ, **{guardian.MARKER: marker}))
    try:
        # its environment is the marked one once it has exec'd (before, /proc shows this process's)
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{guest.pid}/cmdline").read_bytes().startswith(b"sleep") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hostload.marked_processes(marker) == {guest.pid}
    finally:
        guest.kill()
        guest.wait()


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="judging a pinned guest's cores needs two cores to pin to")
def test_a_pinned_guest_is_judged_on_its_own_cores_only(tmp_path):
    """A busy process pinned to one core is contention on that core and none on another; a qemu pinned
    elsewhere is no competitor of a guest pinned here (real /proc, real affinities)."""
    import multiprocessing
    import shutil
    import subprocess

    busy, quiet = sorted(os.sched_getaffinity(0))[:2]
    # the "quiet" core must be quiet before anything here runs: make test builds the lab VM's box in the
    # background during the unit tier, and a core it fills cannot show that a hog elsewhere leaves it alone
    start = hostload.snapshot(set(), frozenset({quiet}))
    time.sleep(1.0)
    already = hostload.summarize(start, hostload.snapshot(set(), frozenset({quiet})), cores=frozenset({quiet}))
    if already.other_busy_pct >= 20:
        pytest.skip(
            f"core {quiet} is {already.other_busy_pct:.0f} % busy with other work before the test: "
            "not a quiet core to judge (run the test alone)"
        )
    # a stand-in qemu: a sleep under qemu's process name, pinned to the busy core
    fake_qemu = tmp_path / "qemu-system-x86_64"
    shutil.copy("/bin/sleep", fake_qemu)
    other = subprocess.Popen([str(fake_qemu), "30"], preexec_fn=lambda: os.sched_setaffinity(0, {busy}))
    hog = multiprocessing.get_context("fork").Process(target=_spin, args=(1.5,))
    try:
        deadline = time.monotonic() + 10
        while other.pid not in hostload.qemu_pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        before = {core: hostload.snapshot(set(), frozenset({core})) for core in (busy, quiet)}
        hog.start()
        os.sched_setaffinity(hog.pid, {busy})
        hog.join()
        after = {core: hostload.snapshot(set(), frozenset({core})) for core in (busy, quiet)}
    finally:
        other.kill()
        other.wait()
    on_busy = hostload.summarize(before[busy], after[busy], cores=frozenset({busy}))
    on_quiet = hostload.summarize(before[quiet], after[quiet], cores=frozenset({quiet}))
    assert on_busy.cpus == 1 and on_busy.cores == [busy]
    assert on_busy.other_busy_pct > 60, on_busy
    assert on_quiet.other_busy_pct < 30, on_quiet
    assert on_quiet.other_guests == [] and any(str(other.pid) in g for g in on_busy.other_guests)
    check = fidelity.host_check(on_busy.to_dict())
    assert not check.ok and f"of its cores {busy} (limit 30 %)" in check.detail
    assert f"other guests ran on its cores: {other.pid}" in check.detail
    assert fidelity.host_check(on_quiet.to_dict()).ok


def test_a_local_runs_processes_count_with_their_children_that_ended():
    """The local backend's "guest" is the run's process tree: a child's CPU time still counts once it
    has ended and been reaped."""
    import subprocess

    before = hostload.tree_cpu_ns(os.getpid())
    spin = "import time\nend = time.monotonic() + 0.5\nwhile time.monotonic() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    used_s = (hostload.tree_cpu_ns(os.getpid()) - before) / 1e9
    assert 0.4 < used_s < 2.0, used_s
