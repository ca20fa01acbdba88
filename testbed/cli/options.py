"""The options the commands share, declared once (where runs execute and land, the kernel, the clock, the
cluster, resuming and starting anew) and read back typed (:class:`testbed.workflows.sessions.Where`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from testbed import PROJECT
from testbed.plan.connections import AUTO_SLOTS, MAX_SLOTS

SUITES = PROJECT / "scenarios" / "suites"


def where(args: argparse.Namespace):
    """The options every command that runs things shares, typed (testbed.workflows.sessions.Where)."""
    from testbed.workflows.sessions import Where

    return Where(
        backend=getattr(args, "backend", "guest"),
        kernel=kernel(args),
        cpus=args.cpus,
        cluster=args.cluster,
        results=args.results,
        force=args.force,
        yes=args.yes,
        fresh_networks=getattr(args, "fresh_networks", False),
        queue_hz=getattr(args, "queue_hz", 10.0),
        clock=getattr(args, "clock", "auto"),
        guests=getattr(args, "guests", 1),
        side_by_side=getattr(args, "side_by_side", 1),
        allow_dirty=getattr(args, "allow_dirty", False),
    )


def kernel(args: argparse.Namespace) -> str | None:
    """``--kernel``; with ``--allow-dirty``, a tree's uncommitted diff read now and pinned by its sha256
    (testbed.host.kernels.pinned), so the command builds what the tree held when it started."""
    kernel = getattr(args, "kernel", None)
    if kernel and getattr(args, "allow_dirty", False):
        from testbed.host import kernels

        return kernels.pinned(kernel, allow_dirty=True)
    return kernel


def queue_hz(text: str) -> float:
    try:
        hz = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--queue-hz {text!r} is not a number: give samples per second, 1 to 1000"
        ) from None
    if not 1 <= hz <= 1000:
        raise argparse.ArgumentTypeError(f"--queue-hz {text} is out of range: give 1 to 1000 samples per second")
    return hz


def whole_number(option: str, high: int, why: str, auto: int | None = None) -> Callable[[str], int]:
    """An argparse type for ``option``: a whole number from 1 to ``high``; out of range, the error says ``why``.
    ``auto``: what the word ``auto`` stands for, when the option takes it."""
    valid = f"give {'auto or ' if auto is not None else ''}1 to {high}"

    def parse(text: str) -> int:
        if auto is not None and text == "auto":
            return auto
        try:
            count = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text!r} is not a whole number: {valid}") from None
        if not 1 <= count <= high:
            raise argparse.ArgumentTypeError(f"{option} {text} is out of range: {valid} ({why})")
        return count

    return parse


guest_count = whole_number("--guests", 16, "one guest per core")
slot_count = whole_number("--side-by-side", MAX_SLOTS, "each run takes a block of ports of its own", AUTO_SLOTS)


def run_options(parser: argparse.ArgumentParser, outputs: bool = True) -> None:
    """The options of commands that run sessions; ``outputs``: with --no-report and --done-file."""
    where_options(parser)
    if outputs:
        parser.add_argument("--no-report", action="store_true", help="skip the analysis and report")
        parser.add_argument(
            "--done-file",
            type=Path,
            metavar="FILE",
            help="when the session ends, write its folder and report path to FILE as JSON (for scripts: "
            "testbed.plan.progress.SessionDone)",
        )
    parser.add_argument(
        "--queue-hz",
        type=queue_hz,
        default=10.0,
        metavar="HZ",
        help="how often each bottleneck queue is read during traffic (backlog, drops, marks: raw/queues.csv); "
        "default 10, from 1 to 1000",
    )
    parser.add_argument(
        "--fresh-networks",
        action="store_true",
        help="build every run's network anew; by default a run whose network would be the same as the run "
        "before's (same links, queues, delays, host options: runs that differ in algorithms or seeds) "
        "uses that network, kept for it (docs/results.md)",
    )
    again_options(
        parser,
        "run every run again in a new results folder; without it, a scenario run again on the same "
        "kernel resumes its newest results folder: complete runs are kept, failed and incomplete "
        "ones run again",
    )


def where_options(parser: argparse.ArgumentParser, kernels: bool = True) -> None:
    """Where runs execute and land, shared by every command that runs things; ``kernels``: --backend and
    --kernel too (a kernel comparison names its kernels and runs them in guests)."""
    if kernels:
        backend_options(parser)
    parser.add_argument("--cpus", type=int, help="guest vCPUs (default 2; 1 on a single-core host under TCG)")
    clock_option(parser)
    parser.add_argument(
        "--guests",
        type=guest_count,
        default=1,
        metavar="N",
        help="in virtual time, split the session's runs over N guests at once, one per core; a run that fails "
        "its checks packed runs again alone; in real time one guest runs (docs/results.md)",
    )
    parser.add_argument(
        "--side-by-side",
        type=slot_count,
        default=AUTO_SLOTS,
        metavar="N",
        help="run N runs at once in one real-time guest (or on the local kernel), each in namespaces, ports and "
        "tracing instances of its own; every manifest names the runs beside it, and a run that fails its checks "
        "runs again alone. auto (the default): in a real-time guest, as many as the session's experiments were "
        "shown equivalent at (scenarios/timebase/side-by-side.yaml), else one (docs/commands.md)",
    )
    cluster_option(parser)
    parser.add_argument("--results", type=Path, default=PROJECT / "results", help="results root (default: results/)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="serve a live page of the runs (goodput, cwnd, RTT, queues, checks, progress) on "
        "127.0.0.1 while the command runs; it prints the URL with its token "
        "(docs/live.md)",
    )


def backend_options(parser: argparse.ArgumentParser, backend_help: str = "", kernel_help: str = "") -> None:
    """--backend and --kernel, as every command that runs or builds a network has them."""
    parser.add_argument(
        "--backend",
        choices=["auto", "local", "guest", "vagrant"],
        default="auto",
        help=backend_help
        or "where runs execute: the running kernel (local), the project's lab VM (vagrant: "
        "'vagrant up' first) or a virtme-ng guest; auto picks local when this kernel has every "
        "algorithm and qdisc the scenario needs, else the lab VM when it is up, else a guest",
    )
    parser.add_argument("--kernel", help=kernel_help or KERNEL_HELP)
    dirty_option(parser)


#: the kernel names every --kernel, --baseline, --candidate and --good/--bad take (testbed.host.kernels)
KERNEL_HELP = (
    "guest kernel: Debian version (6.1.0-56, 6.12.117+deb12), vmlinuz or .deb, or a source built here: "
    "tree:PATH[@REV] (a git tree), 6.1+patch:FILE (Debian's linux-source-6.1 with a patch) or "
    "6.1+source (it unpatched); docs/regression.md"
)


def dirty_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="build a tree:PATH kernel with its uncommitted changes (refused without it; the diff is "
        "built as a patch and recorded in the manifest)",
    )


def again_options(parser: argparse.ArgumentParser, force_help: str) -> None:
    """--yes (start what is estimated beyond a day) and --force (start anew instead of resuming)."""
    parser.add_argument(
        "--yes", action="store_true", help="start what is estimated beyond a day of runs (refused without it)"
    )
    parser.add_argument("--force", action="store_true", help=force_help)


def clock_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clock",
        choices=["auto", "real", "virtual"],
        default="auto",
        help="a guest's clock: real time, or virtual time (QEMU's icount: one vCPU, idle time skipped, the "
        "host's load cannot reach what the guest measures); auto runs an experiment in virtual time where "
        "it was shown equivalent to real time and KVM does not work (scenarios/timebase/equivalence.yaml, "
        "docs/results.md)",
    )


def cluster_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        metavar="SPEC",
        help="spread the runs over a Dask cluster, one run per worker at a time, their folders shipped back here: "
        "local:N (N workers on this host, each on its own cores), an Ansible inventory (ssh:FILE: a worker "
        "per host, provisioned by playbooks/site.yml) or a Slurm description (slurm:FILE); --backend is "
        "then each worker's (docs/cluster.md)",
    )


def selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        action="append",
        metavar="KEY=VALUE[,VALUE]",
        help="run only the sweep points with these values (repeatable; KEY as in the point ids, "
        "e.g. --only cc=westwood --only hops=2,4); a later run without it resumes around them",
    )
    parser.add_argument("--seed", type=int, action="append", help="run only this seed of the profile (repeatable)")


def inject_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--inject",
        action="append",
        metavar="NAME=VALUE",
        help="a positive control: give every flow this option (as --candidate-flow-option) on "
        "--inject-from and every later kernel; the verdict must find it there",
    )
    parser.add_argument("--inject-from", metavar="KERNEL", help="the first kernel that --inject harms")


RESUME_HELP = (
    "start a new {what} instead of resuming an unfinished one with the same arguments (a killed one "
    "goes on in its folder: its complete sessions are not run again)"
)
