"""The guest tier: a Debian kernel booted with virtme-ng (KVM where it works, TCG otherwise)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.prerequisites import require_root, require_tools


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.guest)


@pytest.fixture(autouse=True)
def _needs_qemu_and_vng():
    require_root("the guest tier: the runner inside the guest is root over the host's filesystem")
    require_tools(("qemu-system-x86_64", "vng"), "the guest tier", extra_path=str(Path(sys.executable).parent))


@pytest.fixture(scope="session")
def tier_session(tmp_path_factory):
    """One session, one guest boot, for the runs several files read (tests/guest/tierpoints.py)."""
    from testbed.host.session import run_session
    from testbed.scenario.points import ScenarioFile
    from tests.guest import tierpoints

    points = tierpoints.all_points()
    combined = ScenarioFile("guest-tier", tierpoints.SCENARIOS, "quick", "the guest tier's runs", points)
    return run_session(combined, backend="guest", results_root=tmp_path_factory.mktemp("results"))
