"""Child processes that die with their parent, however it dies (SIGKILL included): the kernel's
``PR_SET_PDEATHSIG``, used by the side-by-side slots' runners, the cluster workers' children and the
report's analysis ahead. Through ctypes: the standard library has no binding for prctl(2), and the
python-prctl package is a C extension, last released in 2020, that needs libcap's headers to build."""

from __future__ import annotations

import ctypes
import os
import signal

#: linux/prctl.h
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Have the kernel send ``sig`` to this process when the thread that started it ends. Called in the
    child (a ``preexec_fn`` or a multiprocessing target's first act); ``parent``: the pid that started
    it, to exit at once if it died before the request took hold."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent is not None and os.getppid() != parent:
        os._exit(0)
