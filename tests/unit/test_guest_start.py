"""How a guest starts the runner (testbed.guest.start): without site, pydantic's plugin discovery or
pyroute2's package __init__, and still able to import the runner and open a netlink socket."""

from __future__ import annotations

import shlex
import subprocess
import sys

from testbed import PROJECT
from testbed.guest import start

# what the runner's start imports, and whether pyroute2's __init__ (which pulls in NDB) ran
PROBE = (
    "import sys; from testbed.guest import start; start._register_pyroute2(); "
    "import testbed.guest.runner, testbed.guest.netnsutil as n; "
    "ipr = __import__('pyroute2.iproute.linux', fromlist=['IPRoute']).IPRoute(); "
    "print(sys.flags.no_site, 'pyroute2.ndb.main' in sys.modules, len(ipr.link_lookup(ifname='lo'))); ipr.close()"
)


def test_command_skips_site_and_plugins_and_names_the_site_directories():
    command = start.runner_command_line("/venv/bin/python", "/s/plan.json")
    words = shlex.split(command)
    assert words[-5:] == ["/venv/bin/python", "-S", "-m", "testbed.guest.start", "/s/plan.json"]
    env = dict(word.split("=", 1) for word in words[:-5])
    assert env["PYDANTIC_DISABLE_PLUGINS"] == "1"
    site_dirs = env["PYTHONPATH"].split(":")
    assert site_dirs and all(d.endswith(("site-packages", "dist-packages")) for d in site_dirs)
    assert any(d in sys.path for d in site_dirs)


def test_runner_imports_without_site_and_without_pyroute2_init():
    command = start.runner_command_line(sys.executable, "unused")
    env_words = shlex.split(command)[:-5]
    env = dict(word.split("=", 1) for word in env_words)
    out = subprocess.run(
        [sys.executable, "-S", "-c", PROBE], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    no_site, ndb_loaded, loopbacks = out.stdout.split()
    assert no_site == "1"
    assert ndb_loaded == "False"  # the package __init__ would have imported pyroute2.ndb.main
    assert loopbacks == "1"  # IPRoute from its own module works: one 'lo' found over netlink


def test_the_shell_starts_the_same_way_with_its_own_module():
    words = shlex.split(start.runner_command_line("/venv/bin/python", "/s/plan.json", module="testbed.guest.shell"))
    assert words[-7:] == [
        "/venv/bin/python",
        "-S",
        "-m",
        "testbed.guest.start",
        "--module",
        "testbed.guest.shell",
        "/s/plan.json",
    ]
