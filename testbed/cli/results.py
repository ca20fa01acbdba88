"""The commands that read what sessions wrote: ``testbed report``, ``results``, ``lengths``,
``equivalence``, ``check`` and ``watch``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testbed import PROJECT
from testbed.cli import options


def _cmd_report(args: argparse.Namespace) -> int:
    from testbed.workflows.sessions import write_report

    if len(args.session) == 1 and args.out is None:
        write_report(args.session[0])
        return 0
    if args.out is None:
        print("testbed: several sessions need --out DIR for their combined report", file=sys.stderr)
        return 2
    from testbed.report.pages.sessionpage import combine_sessions

    write_report(combine_sessions(args.session, args.out))
    return 0


def add_report(sub) -> None:
    report = sub.add_parser(
        "report", help="(re)analyse a session folder and write its report; several: one combined report (--out)"
    )
    report.add_argument("session", type=Path, nargs="+", help="results/<scenario>/<time>-<sha>/")
    report.add_argument("--out", type=Path, help="write the report of every run of the sessions into this folder")
    report.set_defaults(func=_cmd_report)


def _cmd_results(args: argparse.Namespace) -> int:
    from analysis.runs.catalog import FILTERS
    from testbed.workflows import results

    filters = {name: getattr(args, name) for name in [*FILTERS, "cc"]}
    view = "latency" if args.latency else ("flows" if args.flows else "runs")
    return results.listing(
        args.results, filters, view, csv=args.csv, report=args.report, update=not args.no_update, rebuild=args.rebuild
    )


def add_results(sub) -> None:
    results = sub.add_parser(
        "results",
        help="list and filter every run under the results folder (the catalog, results/catalog.sqlite)",
        description="Update the catalog from the run folders, then list the runs (or their flows) that match "
        "every filter given. Filters: --scenario, --profile, --point (prefix), --seed, --status, --kernel (release "
        "prefix), --backend, --git (sha prefix), --cc (runs with a flow of that algorithm). Python: "
        "analysis.runs.catalog.runs(root, ...) and flows(root, ...) return DataFrames.",
    )
    results.add_argument("--results", type=Path, default=PROJECT / "results", help="results root (default: results/)")
    for name, kind in [
        ("scenario", str),
        ("profile", str),
        ("point", str),
        ("seed", int),
        ("status", str),
        ("kernel", str),
        ("backend", str),
        ("git", str),
        ("cc", str),
    ]:
        results.add_argument(f"--{name}", type=kind)
    results.add_argument("--flows", action="store_true", help="one row per flow instead of per run")
    results.add_argument(
        "--latency",
        action="store_true",
        help="one row per ping or requests flow (its RTT or completion-time percentiles)",
    )
    results.add_argument("--csv", type=Path, help="also write the rows to this CSV file")
    results.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="write the report of the matching runs into DIR (from the stored runs: nothing is run again)",
    )
    results.add_argument("--rebuild", action="store_true", help="recreate the catalog from the run folders")
    results.add_argument("--no-update", action="store_true", help="query the catalog as it is")
    results.set_defaults(func=_cmd_results)


def _cmd_lengths(args: argparse.Namespace) -> int:
    from testbed.workflows import lengths

    path, lines = lengths.run(args.session)
    print("\n".join(lines))
    print(f"written: {path}")
    return 0


def add_lengths(sub) -> None:
    lengths = sub.add_parser(
        "lengths",
        help="a session's goodput claims judged over windows of its runs (first T s, a warm-up left out): "
        "where each effect settles (docs/experiments.md)",
    )
    lengths.add_argument("session", type=Path, help="results/<scenario>/<time>-<sha>/ (long runs show the most)")
    lengths.set_defaults(func=_cmd_lengths)


def _cmd_equivalence(args: argparse.Namespace) -> int:
    from testbed.workflows import equivalence

    try:
        return equivalence.run(args.reference, args.candidate, keep=args.record, control_dir=args.control)
    except ValueError as err:
        print(f"testbed equivalence: {err}", file=sys.stderr)
        return 2


def add_equivalence(sub) -> None:
    parser = sub.add_parser(
        "equivalence",
        help="a faster way of running (virtual time, side by side) against runs alone in real time, twin runs "
        "at the same seeds: paired TOST per experiment and metric, the claims' verdicts on both "
        "(docs/results.md, 'Virtual time'); exit 1 when an experiment is not shown equivalent",
    )
    parser.add_argument(
        "reference", type=Path, help="the session alone in real time (results/<scenario>/<time>-<sha>/)"
    )
    parser.add_argument("candidate", type=Path, help="the same runs the faster way (--clock virtual, --side-by-side N)")
    parser.add_argument(
        "--record",
        action="store_true",
        help="write each experiment's result into the file the faster way's auto reads: "
        "scenarios/timebase/equivalence.yaml (--clock auto) or side-by-side.yaml beside it (--side-by-side auto)",
    )
    parser.add_argument(
        "--control",
        type=Path,
        metavar="SESSION",
        help="the reference's way run again at the same seeds (alone in real time again): judged against the "
        "reference beside the candidate and recorded with it, to show how far the reference's way stands from "
        "itself; it changes no decision",
    )
    parser.set_defaults(func=_cmd_equivalence)


def _cmd_check(args: argparse.Namespace) -> int:
    from testbed.workflows.sessions import check_scenarios

    return check_scenarios(args.scenarios, args.profile, args.only or (), args.seed or ())


def add_check(sub) -> None:
    check = sub.add_parser("check", help="validate scenario files and list their points")
    check.add_argument("scenarios", nargs="+")
    check.add_argument("--profile", help="profile of the scenario files (e.g. quick, full); default: quick if any")
    options.selection_options(check)
    check.set_defaults(func=_cmd_check)


def _cmd_watch(args: argparse.Namespace) -> int:
    from testbed.report.live.liveserver import watch

    return watch(args.folder, args.speed, args.port)


def add_watch(sub) -> None:
    watch = sub.add_parser(
        "watch",
        help="a live page of a session: a running one as it grows, a finished one replayed (docs/live.md)",
        description="Serve a page on 127.0.0.1 showing FOLDER's runs: per flow the acked rate, cwnd, ssthresh and "
        "RTT, per bottleneck the queue, the fidelity checks, the progress and the time left; the paper's "
        "expectation (fair share, bottleneck rate, BDP) beside the measured lines. FOLDER is a session, "
        "or a results folder whose newest session is followed. A finished session is replayed at "
        "--speed times its pace. The URL carries a random token; the page is refused without it. "
        "Ctrl-C stops it.",
    )
    watch.add_argument("folder", type=Path, help="a session folder, or a results folder (its newest session)")
    watch.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="replay speed of a finished session (default 1: as it ran; 0: all at once)",
    )
    watch.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    watch.set_defaults(func=_cmd_watch)
