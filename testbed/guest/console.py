"""The runner's lines on its console: what the host follows (``testbed.host.remote``) and people read.

Lines go through the logging module; :func:`testbed.plan.progress.configure_logging` (the runner's
main, the CLI) prints them as ``[testbed] message`` on stdout.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

_logger = logging.getLogger(__name__)


def log(message: str) -> None:
    """A status line on the console (``[testbed] ...`` once logging is configured)."""
    _logger.info(message)


class _Follower(logging.Handler):
    def __init__(self, on_line: Callable[[str, float], None]) -> None:
        super().__init__()
        self.on_line = on_line

    def emit(self, record: logging.LogRecord) -> None:
        self.on_line(record.getMessage(), time.monotonic())


@contextlib.contextmanager
def following(on_line: Callable[[str, float], None]):
    """``on_line(message, now)`` told every line logged here meanwhile: what a runner in this process says,
    for the host's watch that a remote runner's lines reach through its console."""
    follower = _Follower(on_line)
    level = _logger.level
    _logger.addHandler(follower)
    if _logger.getEffectiveLevel() > logging.INFO:  # logging not configured (a library caller): still told
        _logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        _logger.removeHandler(follower)
        _logger.setLevel(level)
