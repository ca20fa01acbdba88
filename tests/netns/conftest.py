"""The netns tier: root, network namespaces and the host's own kernel (HTB, no netem here)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import leftovers


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.netns)


@pytest.fixture(autouse=True)
def _needs_root_and_tools():
    if os.geteuid() != 0:
        pytest.skip("netns tier needs root (network namespaces, qdiscs, tracefs); run 'sudo make test-netns'")
    missing = [t for t in ("iperf3", "tcpdump", "ethtool", "mnexec") if not shutil.which(t)]
    if missing:
        pytest.skip(f"netns tier needs {', '.join(missing)}: run 'make setup'")


@pytest.fixture
def clean_kernel():
    """Fails the test if it leaves processes, interfaces, namespaces or trace instances behind."""
    assert leftovers() == [], "a previous test left these behind"
    yield
    assert leftovers() == []
