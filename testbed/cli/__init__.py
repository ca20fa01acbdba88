"""The ``testbed`` command: run scenarios, analyse results, manage guest kernels, clean up.

Exit status: 0 when every run completed, 1 when a run failed or was incomplete, 2 when the
command itself could not start (bad scenario, unknown kernel, missing tool).

It only parses: each command's work is a function of its workflow (testbed/workflows/, testbed/labs/,
testbed/host/cleanup.py), given typed options (:class:`testbed.workflows.sessions.Where`). The
commands are declared by group, one module each (runs, results, kernels, labs, upkeep), on the
shared options of :mod:`testbed.cli.options`. Each subcommand imports what it needs inside its
function: ``testbed --help`` and shell completion must answer at once, without loading pandas,
matplotlib or pyroute2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time

from testbed.cli import kernels, labs, results, runs, upkeep
from testbed.plan import progress

#: the subcommands in the order --help lists them
SUBCOMMANDS = (
    runs.add_run,
    runs.add_suite,
    runs.add_explain,
    runs.add_shell,
    results.add_report,
    results.add_lengths,
    results.add_equivalence,
    results.add_results,
    kernels.add_regress,
    kernels.add_bisect,
    results.add_check,
    labs.add_lab,
    kernels.add_kernels,
    upkeep.add_bench,
    upkeep.add_cleanup,
    results.add_watch,
)

#: the subcommands that run sessions: the ones a progress bar follows on a terminal
SESSION_COMMANDS = {"run", "suite", "explain", "regress", "bisect", "bench", "lab"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed", description="Real-kernel testbed for TCP congestion control.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _progress_bar(command: str) -> contextlib.AbstractContextManager:
    """A progress bar while a command that runs sessions runs on a terminal; plain log lines otherwise."""
    if command in SESSION_COMMANDS:
        from testbed.host import progressbar

        if progressbar.wanted():
            return progressbar.shown(logging.getLogger("testbed"))
    return contextlib.nullcontext()


def _live_page(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """With --live: the live page of the sessions the command makes under its results folder."""
    if not getattr(args, "live", False):
        return contextlib.nullcontext()
    from testbed.report.live.liveserver import serving

    return serving(args.results, since=time.time())


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    from analysis.runs.catalog import CatalogError
    from testbed.guest.lossbpf import LossChannelError
    from testbed.guest.modules import ModuleBuildError
    from testbed.host.clusterspec import ClusterError
    from testbed.host.kernels import KernelError
    from testbed.host.vagrant import VagrantError
    from testbed.host.virtme import GuestError
    from testbed.labs.definition import LabError
    from testbed.results.folderlock import FolderBusy
    from testbed.scenario.errors import ScenarioError

    args = build_parser().parse_args(argv)
    progress.configure_logging()
    # a SIGTERM (a CI job cancelled, `kill`) tears the run down like Ctrl-C: without this Python would
    # die at once and leave the guest, its namespaces and iperf3 processes behind
    signal.signal(signal.SIGTERM, _terminate)
    if args.command == "check":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `testbed check ... | head` ends quietly
    try:
        with _progress_bar(args.command), _live_page(args):
            return args.func(args)
    except (
        ScenarioError,
        KernelError,
        GuestError,
        ModuleBuildError,
        LossChannelError,
        VagrantError,
        CatalogError,
        FolderBusy,
        LabError,
        ClusterError,
        ValueError,
    ) as err:
        print(f"testbed: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "testbed: interrupted; completed runs are intact, the current one is marked incomplete",
            file=sys.stderr,
        )
        return 130
