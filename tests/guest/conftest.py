"""The guest tier: a Debian kernel booted with virtme-ng (KVM where it works, TCG otherwise)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.guest)


@pytest.fixture(autouse=True)
def _needs_qemu_and_vng():
    if os.geteuid() != 0:
        pytest.skip("guest tier needs root (the runner inside the guest is root over the host's filesystem)")
    venv_bin = str(Path(sys.executable).parent)
    missing = [t for t in ("qemu-system-x86_64",) if not shutil.which(t)]
    missing += [t for t in ("vng",) if not shutil.which(t, path=venv_bin) and not shutil.which(t)]
    if missing:
        pytest.skip(f"guest tier needs {', '.join(missing)}: run 'make setup'")
