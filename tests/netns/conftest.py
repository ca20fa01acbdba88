"""The netns tier: root, network namespaces and the host's own kernel (HTB, no netem here)."""

from __future__ import annotations

import pytest

from tests.conftest import leftovers
from tests.prerequisites import require_root, require_tools


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.netns)


@pytest.fixture(autouse=True)
def _needs_root_and_tools():
    require_root("the netns tier: network namespaces, qdiscs, tracefs; run 'sudo make test-netns'")
    require_tools(("iperf3", "tcpdump", "ethtool", "mnexec"), "the netns tier")


@pytest.fixture
def clean_kernel():
    """Fails the test if it leaves processes, interfaces, namespaces or trace instances behind."""
    assert leftovers() == [], "a previous test left these behind"
    yield
    assert leftovers() == []
