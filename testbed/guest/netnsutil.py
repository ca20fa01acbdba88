"""A pyroute2 ``IPRoute`` (and sysctl reads) bound to another network namespace, without a helper process.

pyroute2's ``NetNS`` forks a helper process per call to open its socket inside the namespace;
that costs ~13 ms on a host and about half a second in a TCG guest, per node and per change, which
made a 60-node topology spend minutes in setup. A netlink socket belongs to the namespace it was
created in, so this module enters the namespace (``setns(2)``, this thread only), opens the
``IPRoute`` socket and returns at once. pyroute2 exposes no way to do this with a path, hence these
few lines of ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextlib.contextmanager
def entered(netns_path: str) -> Iterator[None]:
    """This thread inside the namespace at ``netns_path`` for the ``with`` block, then back in its own."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns_path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


@contextlib.contextmanager
def iproute(netns_path: str) -> Iterator:
    """``with iproute("/proc/<pid>/ns/net") as ipr:`` an IPRoute whose socket lives in that namespace."""
    from pyroute2.iproute.linux import IPRoute  # its own module: see testbed.guest.start

    with entered(netns_path):
        ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()


def read_sysctls(netns_path: str, keys: list[str]) -> dict[str, str | None]:
    """The values of ``keys`` as a process in that namespace sees them (``/proc/sys/net`` is per
    namespace: a file opened from inside it shows its values), without a process per key."""
    values: dict[str, str | None] = {}
    with entered(netns_path):
        for key in keys:
            try:
                with open("/proc/sys/" + key.replace(".", "/")) as f:
                    values[key] = f.read().strip() or None
            except OSError:
                values[key] = None
    return values
