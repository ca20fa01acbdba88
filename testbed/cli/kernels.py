"""The kernel developer's commands: ``testbed regress`` (a pair, ``--series``, ``--latest``), ``bisect``
and ``kernels``."""

from __future__ import annotations

import argparse

from testbed import PROJECT
from testbed.cli import options


def _cmd_regress(args: argparse.Namespace) -> int:
    from testbed.scenario.suite import find_suite, load_suite
    from testbed.workflows import regress, sessions
    from testbed.workflows.compare import parse_flow_options

    suite = load_suite(find_suite(args.suite, options.SUITES), PROJECT / "scenarios")
    code = regress.regress_or_series(
        suite,
        args.repeat,
        options.where(args),
        baseline=args.baseline,
        candidate=args.candidate,
        series_spec=args.series,
        latest=args.latest,
        flow_options=parse_flow_options(args.candidate_flow_option or []),
        inject=parse_flow_options(args.inject or [], "--inject"),
        inject_from=args.inject_from,
    )
    sessions.update_catalog(args.results)
    return code


def add_regress(sub) -> None:
    from analysis.kernels.regression import DEFAULT_REPEAT

    regress = sub.add_parser(
        "regress",
        help="the same suite on two kernels or a series, interleaved repetitions, statistical verdicts "
        "(exit 1: regression)",
        description="Runs the suite on the baseline and the candidate kernel in turn (baseline 1, candidate 1, "
        "baseline 2, ...; with --clock virtual each kernel's repetitions in one session), each in a virtme-ng guest, "
        "then compares every point x algorithm x metric (goodput, total goodput, Jain index, retransmission "
        "ratio): a regression is a change beyond 5 % the bad way with p < 0.05 in the paired t-test "
        "(repetition r runs seed r on both kernels), Holm-adjusted over the run's comparisons. Writes "
        "regress.txt, report.html, junit.xml and regress.json under results/regress/. With --series, every "
        "kernel of a series in turn and its change points (series.txt, report.html with one figure per "
        "metric, trend.csv); with --latest, the newest installable kernel of a series against the newest one "
        "already run here. Exit 0: nothing regressed; 1: a regression; 2: the run failed (a kernel that "
        "cannot be had or does not boot, a run that did not complete, a positive control missed). "
        "docs/regression.md.",
    )
    regress.add_argument("--baseline", help="kernel: " + options.KERNEL_HELP.removeprefix("guest kernel: "))
    regress.add_argument("--candidate", help="kernel, as for --baseline")
    regress.add_argument(
        "--series",
        metavar="KERNELS",
        help="a kernel series instead of a pair: 6.1.0-47..6.1.0-56 (every installable version "
        "between, both included; 6.1.0-50-cloud..6.1.0-56-cloud for a flavour) or a list "
        "6.1.0-56,6.12.117+deb12",
    )
    regress.add_argument(
        "--latest",
        metavar="SERIES",
        help="6.1 or 6.12: the newest installable kernel of that series as the candidate, against "
        "--baseline or the newest kernel of the series already in the results catalog "
        "(for cron, a systemd timer or a CI job: docs/regression.md)",
    )
    regress.add_argument("--suite", default="regression", help="suite in scenarios/suites/ (default: regression)")
    regress.add_argument(
        "--repeat",
        type=int,
        default=DEFAULT_REPEAT,
        help=f"repetitions per kernel (default {DEFAULT_REPEAT}: at 2.5 %% noise per pair, an 11 %% goodput "
        "change alone among the suite's comparisons raises the alarm; each comparison prints the change "
        "it could detect; analysis/kernels/regression.py says how)",
    )
    options.where_options(regress, kernels=False)
    options.dirty_option(regress)
    regress.add_argument(
        "--candidate-flow-option",
        action="append",
        metavar="NAME=VALUE",
        help="give every flow of the candidate's runs this option (sack=false, delayed_ack=false, initcwnd_segs=N, "
        "window_kb=N): a known regression, to check that the verdict finds it",
    )
    options.inject_options(regress)
    options.again_options(regress, options.RESUME_HELP.format(what="comparison"))
    regress.set_defaults(func=_cmd_regress)


def _cmd_bisect(args: argparse.Namespace) -> int:
    from testbed.scenario.suite import find_suite, load_suite
    from testbed.workflows import sessions
    from testbed.workflows.bisect import run_bisect
    from testbed.workflows.compare import parse_flow_options

    suite = load_suite(find_suite(args.suite, options.SUITES), PROJECT / "scenarios")
    _, _, code = run_bisect(
        args.good,
        args.bad,
        suite,
        options.where(args),
        point=args.point,
        cc=args.cc,
        metric=args.metric,
        repeat=args.repeat,
        max_repeat=args.max_repeat,
        inject=parse_flow_options(args.inject or [], "--inject"),
        inject_from=args.inject_from,
        tree=args.tree,
        first_parent=args.first_parent,
    )
    sessions.update_catalog(args.results)
    return code


def add_bisect(sub) -> None:
    from analysis.kernels.regression import METRICS

    bisect = sub.add_parser(
        "bisect",
        help="which Debian kernel version (or, with --tree, which commit) between a good and a bad one first moved "
        "a metric",
        description="Binary search of the installable versions (or, with --tree, the tree's commits) from --good to "
        "--bad: step 0 confirms that they "
        "differ (and picks the metric unless given), each later step runs the version halfway (in a tree's commit "
        "graph, as git bisect picks it) with the same seeds "
        "and compares it, paired by seed, with both ends, adding repetitions while undecided. Writes bisect.txt, "
        "bisect.json and bisect.png under results/bisect/. A version that does not build, boot or run is skipped. "
        "The answer is confirmed on fresh seeds. Exit 0: the first bad version named and confirmed; 2: unconfirmed, "
        "only a range (skipped versions), nothing to bisect, or an end failed. docs/regression.md.",
    )
    bisect.add_argument(
        "--good", required=True, help="the older kernel (with --tree: commit), where the metric is as it should be"
    )
    bisect.add_argument("--bad", required=True, help="the newer kernel (with --tree: commit), where it moved")
    bisect.add_argument(
        "--tree",
        help="bisect the commits of this git source tree (a path, or a git URL this machine can reach) from "
        "--good to --bad, merged branches included (as git bisect), each built here (docs/regression.md)",
    )
    bisect.add_argument(
        "--first-parent",
        action="store_true",
        help="with --tree: only the first-parent line (a merge is one step; its branch is not entered)",
    )
    bisect.add_argument("--suite", default="regression", help="suite in scenarios/suites/ (default: regression)")
    bisect.add_argument("--point", help="only this point of the suite (e.g. upload.default): faster")
    bisect.add_argument("--cc", help="follow this algorithm (ping, requests for latency)")
    bisect.add_argument(
        "--metric",
        choices=sorted(METRICS),
        help="follow this metric (default: the one that moved most surely between the ends)",
    )
    bisect.add_argument("--repeat", type=int, default=3, help="seeds per kernel to start with (default 3)")
    bisect.add_argument(
        "--max-repeat",
        type=int,
        default=9,
        help="seeds per kernel at most, added 'repeat' at a time while a step is undecided (default 9)",
    )
    options.where_options(bisect, kernels=False)
    options.dirty_option(bisect)
    options.inject_options(bisect)
    options.again_options(bisect, options.RESUME_HELP.format(what="bisection"))
    bisect.set_defaults(func=_cmd_bisect)


def _cmd_kernels(args: argparse.Namespace) -> int:
    from testbed.host import kernels

    if args.fetch:
        kernel = kernels.fetch(args.fetch, log=lambda line: print(line, flush=True), allow_dirty=args.allow_dirty)
        print(f"{kernel.release}: {kernel.vmlinuz}")
        return 0
    if args.prune is not None:
        from testbed.host import kernelbuild

        removed = kernelbuild.prune(kernels.cache_root(), args.prune)
        print(f"{len(removed)} kernel build(s) and checkout(s) unused for {args.prune:g} days removed")
        return 0
    print("\n".join(kernels.available_lines()))
    return 0


def add_kernels(sub) -> None:
    kern = sub.add_parser("kernels", help="list guest kernels (default, cached, downloadable) or fetch one")
    kern.add_argument(
        "--fetch",
        metavar="KERNEL",
        help="download and unpack a kernel into the cache, or build one from its source ("
        + options.KERNEL_HELP.removeprefix("guest kernel: ")
        + ")",
    )
    kern.add_argument(
        "--prune",
        type=float,
        metavar="DAYS",
        help="remove the kernels built here (and tree checkouts) unused for DAYS days",
    )
    options.dirty_option(kern)
    kern.set_defaults(func=_cmd_kernels)
