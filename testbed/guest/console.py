"""The runner's lines on its console: what the host follows (``testbed.host.remote``) and people read.

Lines go through the logging module; :func:`testbed.plan.progress.configure_logging` (the runner's
main, the CLI) prints them as ``[testbed] message`` on stdout.
"""

from __future__ import annotations

import logging

_logger = logging.getLogger(__name__)


def log(message: str) -> None:
    """A status line on the console (``[testbed] ...`` once logging is configured)."""
    _logger.info(message)
