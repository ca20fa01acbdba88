"""The tests' own judge of "the machine's fault" (tests/machinefault.py): a run failed only by a host others
took, when none of those others is a process the tests start; contention by the tests' own stays theirs."""

from __future__ import annotations

from tests import machinefault


def manifest(busiest, steal=0.0, others=36.0, failed=("host contention",)):
    checks = [{"name": name, "ok": False} for name in failed] + [{"name": "base RTT pair 0", "ok": True}]
    host = {"host_steal_pct": steal, "other_busy_pct": others, "other_guests": [], "busiest_others": busiest}
    return {"fidelity": {"trustworthy": False, "checks": checks}, "host": host}


def test_a_host_taken_by_others_than_the_tests_is_the_machines_fault():
    why = machinefault.machines_fault(manifest(["812 /usr/bin/python3 /usr/bin/unattended-upgrade: 30 %"]))
    assert why and "unattended-upgrade" in why and "36 %" in why
    assert machinefault.machines_fault(manifest([], steal=25.0, others=5.0)).startswith("the host's hypervisor stole")


def test_contention_by_the_tests_own_processes_or_unnamed_or_beside_other_failures_is_not():
    assert machinefault.machines_fault(manifest(["77 qemu-system-x86_64 -name guest: 30 %"])) is None
    assert machinefault.machines_fault(manifest(["78 /w/.venv/bin/python -m pytest tests/guest: 30 %"])) is None
    assert machinefault.machines_fault(manifest([])) is None  # not named: nothing says whose
    assert machinefault.machines_fault(manifest(["9 apt-get: 30 %"], failed=("host contention", "rate"))) is None
