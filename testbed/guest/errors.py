"""How a run fails: the error whose message becomes the manifest's ``reason``."""

from __future__ import annotations


class RunFailed(Exception):
    """A run could not complete; the message says why and what to do."""
