"""The runner as a virtme-ng guest starts it: ``python -S -m testbed.guest.start PLAN.json`` (see
:func:`runner_command_line`), the same as ``python -m testbed.guest.runner PLAN.json`` with less to import first
(``testbed shell`` starts :mod:`testbed.guest.shell` the same way: ``--module testbed.guest.shell``).

Under TCG the guest's Python runs about 20 times slower than the host's: importing the runner took
6.6-7.9 s of a guest's start here (0.3 s on the host). Three parts of that buy the runner nothing:

- ``site`` (0.9 s): the ``.pth`` files of every site directory (the editable install's finder among
  them). ``-S`` skips it; the host's site directories come in as ``PYTHONPATH`` instead, and the
  project's own packages from the working directory, the project's root.
- pydantic's plugin discovery: it reads the entry points of every installed distribution at the
  first model class. ``PYDANTIC_DISABLE_PLUGINS`` (pydantic's own switch) skips it; we have no plugin.
- pyroute2's package ``__init__`` (1.6 s): it imports every protocol the library has (IPDB, NDB,
  conntrack, nl80211, plan9, ...) to export their names; the runner uses ``IPRoute`` and the netlink
  exceptions, imported from their own modules. :func:`_register_pyroute2` registers the package
  without running its ``__init__``, so those modules load alone.

Measured in a TCG guest here: 6.6-7.9 s before, 4.5 s with all three.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
import types

#: the environment :func:`runner_command_line` sets beside PYTHONPATH
ENVIRONMENT = {"PYTHONDONTWRITEBYTECODE": "1", "PYDANTIC_DISABLE_PLUGINS": "1"}


#: what runs a plan when no other module is named
RUNNER = "testbed.guest.runner"


def runner_command_line(python: str, plan: str, module: str = RUNNER) -> str:
    """The shell command that runs ``plan`` with ``python`` in a guest sharing this host's files (run
    from the project's root); ``module``: what runs it (the runner, or the shell)."""
    site_dirs = ":".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    env = " ".join(f"{key}={value}" for key, value in {**ENVIRONMENT, "PYTHONPATH": site_dirs}.items())
    chosen = "" if module == RUNNER else f" --module {module}"
    return f"{env} {python} -S -m testbed.guest.start{chosen} {plan}"


def _register_pyroute2() -> None:
    """``pyroute2`` in sys.modules as a bare package: its submodules import as usual, its ``__init__``
    never runs (``from pyroute2 import IPRoute`` would then fail: import from the defining module)."""
    spec = importlib.util.find_spec("pyroute2")  # locates the package, executes nothing
    if spec is None or "pyroute2" in sys.modules:
        return
    package = types.ModuleType("pyroute2")
    package.__spec__, package.__path__ = spec, list(spec.submodule_search_locations or [])
    sys.modules["pyroute2"] = package


if __name__ == "__main__":
    _register_pyroute2()
    # "--module NAME PLAN": NAME runs the plan instead of the runner; it sees only the plan in sys.argv
    module = RUNNER
    if sys.argv[1:2] == ["--module"]:
        module = sys.argv[2]
        del sys.argv[1:3]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
