"""Shared test helpers: leftover detection for the tiers that touch the kernel; the testbed's logging as its
commands set it up."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from analysis.raw.pcap import TCPTRACE_LABELS, tcptrace_connection  # noqa: F401 - the tests' tcptrace reader
from testbed.guest import launch
from testbed.guest.capture import INSTANCES, TRACEFS
from testbed.guest.network import INTF_PATTERN, _marked_pids
from testbed.host import guardian
from testbed.plan.progress import configure_logging
from tests.prerequisites import STRICT_BECAUSE


@pytest.fixture(autouse=True)
def testbed_logging():
    """Status lines as ``testbed`` and the runner print them (``[testbed] ...`` on stdout), for tests that call
    the session or the runner directly. Every test: import-linter's CLI (test_layout) runs
    logging.config.dictConfig, which disables every logger that exists by then."""
    for name, logger in logging.root.manager.loggerDict.items():
        if name.startswith("testbed") and isinstance(logger, logging.Logger):
            logger.disabled = False
    configure_logging()


def pytest_sessionfinish(session, exitstatus):
    """Under CI or --require-tiers a session where tests were collected and every one skipped fails: a
    tier that ran nothing has not passed (pytest itself exits 0 then)."""
    if not STRICT_BECAUSE or exitstatus != 0:
        return
    stats = session.config.pluginmanager.get_plugin("terminalreporter").stats
    ran = sum(len(stats.get(key, [])) for key in ("passed", "failed", "error", "xfailed", "xpassed"))
    skipped = stats.get("skipped", [])
    if skipped and not ran:
        reasons = sorted({str(report.longrepr[2]) for report in skipped if isinstance(report.longrepr, tuple)})
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"every test skipped (under {STRICT_BECAUSE} that fails the tier): " + "; ".join(reasons), red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def leftovers() -> list[str]:
    """Everything a run may leave behind: marked processes, our interfaces, netns, trace instance, iperf3's
    scratch directories."""
    found = [f"process {pid}" for pid in _marked_pids()]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if INTF_PATTERN.match(name):
            found.append(f"interface {name}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    found += [f"netns {n}" for n in netns]
    found += [f"trace instance {name}" for name in INSTANCES if (TRACEFS / "instances" / name).exists()]
    found += [f"directory {path}" for path in launch.stale_scratch_dirs()]
    return found


PROJECT = Path(__file__).resolve().parent.parent


def guest_processes() -> list[str]:
    """This checkout's guests still running: vng, qemu or virtiofsd carrying its guardian's marker."""
    names = ("vng", "virtme", "qemu-system", "virtiofsd")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            marker = guardian.environ_marker(int(entry.name))
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker is not None and marker.startswith(f"{PROJECT}:") and any(n in cmdline for n in names):
            found.append(f"{entry.name} {cmdline[:80]}")
    return found
