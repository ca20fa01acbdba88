"""The ``testbed`` command: run scenarios, analyse results, manage guest kernels, clean up.

Exit status: 0 when every run completed, 1 when a run failed or was incomplete, 2 when the
command itself could not start (bad scenario, unknown kernel, missing tool).

It only parses: each command's work is a function of its workflow (testbed/workflows/, testbed/labs/,
testbed/host/cleanup.py), given typed options (:class:`testbed.workflows.sessions.Where`). Each
subcommand imports what it needs inside its function: ``testbed --help`` and shell completion must
answer at once, without loading pandas, matplotlib or pyroute2. Past 500 lines because it declares
every command's options and help, and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time
from pathlib import Path

from testbed import PROJECT
from testbed.plan import progress

SUITES = PROJECT / "scenarios" / "suites"


def _where(args: argparse.Namespace):
    """The options every command that runs things shares, typed (testbed.workflows.sessions.Where)."""
    from testbed.workflows.sessions import Where

    return Where(
        backend=getattr(args, "backend", "guest"),
        kernel=_kernel(args),
        cpus=args.cpus,
        cluster=args.cluster,
        results=args.results,
        force=args.force,
        yes=args.yes,
        fresh_networks=getattr(args, "fresh_networks", False),
        queue_hz=getattr(args, "queue_hz", 10.0),
        clock=getattr(args, "clock", "auto"),
        allow_dirty=getattr(args, "allow_dirty", False),
    )


def _kernel(args: argparse.Namespace) -> str | None:
    """``--kernel``; with ``--allow-dirty``, a tree's uncommitted diff read now and pinned by its sha256
    (testbed.host.kernels.pinned), so the command builds what the tree held when it started."""
    kernel = getattr(args, "kernel", None)
    if kernel and getattr(args, "allow_dirty", False):
        from testbed.host import kernels

        return kernels.pinned(kernel, allow_dirty=True)
    return kernel


def _cmd_run(args: argparse.Namespace) -> int:
    from testbed.scenario.load import find_scenario, load_scenario
    from testbed.scenario.suite import find_suite, load_suite
    from testbed.workflows import sessions

    if args.command == "suite":
        scenario = load_suite(find_suite(args.suite, SUITES), PROJECT / "scenarios")
    else:
        scenario = load_scenario(find_scenario(args.scenario, PROJECT / "scenarios"), profile=args.profile)
        scenario = scenario.select(args.only or (), args.seed or ())
    return sessions.run_scenario(
        scenario,
        _where(args),
        report=not args.no_report,
        done_file=args.done_file,
        budget_s=_decide_budget(args, scenario),
    )


def _decide_budget(args: argparse.Namespace, scenario) -> float | None:
    """``--decide``'s budget in seconds (``--budget``, else the suite's own estimate); None without it."""
    if args.command != "suite" or not (args.decide or args.budget):
        return None
    from testbed.workflows.decide import default_budget_s, parse_budget

    try:
        return parse_budget(args.budget) if args.budget else default_budget_s(scenario)
    except ValueError as err:
        raise SystemExit(f"testbed suite: {err}") from None


def _queue_hz(text: str) -> float:
    try:
        hz = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--queue-hz {text!r} is not a number: give samples per second, 1 to 1000"
        ) from None
    if not 1 <= hz <= 1000:
        raise argparse.ArgumentTypeError(f"--queue-hz {text} is out of range: give 1 to 1000 samples per second")
    return hz


def _cmd_report(args: argparse.Namespace) -> int:
    from testbed.workflows.sessions import write_report

    if len(args.session) == 1 and args.out is None:
        write_report(args.session[0])
        return 0
    if args.out is None:
        print("testbed: several sessions need --out DIR for their combined report", file=sys.stderr)
        return 2
    from testbed.report.session import combine_sessions

    write_report(combine_sessions(args.session, args.out))
    return 0


def _cmd_results(args: argparse.Namespace) -> int:
    from analysis.catalog import FILTERS
    from testbed.workflows import results

    filters = {name: getattr(args, name) for name in [*FILTERS, "cc"]}
    view = "latency" if args.latency else ("flows" if args.flows else "runs")
    return results.listing(
        args.results, filters, view, csv=args.csv, report=args.report, update=not args.no_update, rebuild=args.rebuild
    )


def _cmd_regress(args: argparse.Namespace) -> int:
    from testbed.scenario.suite import find_suite, load_suite
    from testbed.workflows import regress, sessions
    from testbed.workflows.compare import parse_flow_options

    suite = load_suite(find_suite(args.suite, SUITES), PROJECT / "scenarios")
    code = regress.command(
        suite,
        args.repeat,
        _where(args),
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


def _cmd_bisect(args: argparse.Namespace) -> int:
    from testbed.scenario.suite import find_suite, load_suite
    from testbed.workflows import sessions
    from testbed.workflows.bisect import run_bisect
    from testbed.workflows.compare import parse_flow_options

    suite = load_suite(find_suite(args.suite, SUITES), PROJECT / "scenarios")
    _, _, code = run_bisect(
        args.good,
        args.bad,
        suite,
        _where(args),
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


def _cmd_explain(args: argparse.Namespace) -> int:
    from testbed.workflows import sessions

    factors = [name for item in args.factors or [] for name in item.split(",") if name]
    return sessions.explain_claim(args.claim, args.seeds, factors, _where(args))


def _cmd_check(args: argparse.Namespace) -> int:
    from testbed.workflows.sessions import check_scenarios

    return check_scenarios(args.scenarios, args.profile, args.only or (), args.seed or ())


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
    print("\n".join(kernels.describe()))
    return 0


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from testbed.host.cleanup import cleanup

    print("\n".join(cleanup()))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from testbed.workflows.bench import bench, bench_pcap, bench_scale

    statuses, kernel = [], _kernel(args)
    if args.part in ("basic", "all"):
        statuses.append(bench(kernel_version=kernel)["status"])
    if args.part in ("scale", "all"):
        statuses.append(bench_scale(kernel_version=kernel)["status"])
    if args.part in ("pcap", "all"):
        statuses.append(bench_pcap()["status"])
    if args.part in ("experiment", "all"):
        from testbed.workflows.experiment_bench import bench_experiment

        statuses.append(bench_experiment(kernel_version=kernel)["status"])
    if args.part in ("clock", "all"):
        from testbed.workflows.clock_bench import bench_clock

        statuses.append(bench_clock(kernel_version=kernel)["status"])
    if args.part in ("cluster", "all"):
        from testbed.workflows.cluster_bench import bench_cluster

        statuses.append(bench_cluster(args.cluster or "local:2")["status"])
    return 0 if all(status == "complete" for status in statuses) else 1


def _cmd_lab(args: argparse.Namespace) -> int:
    from testbed.labs import lab

    runner = None if args.action != "check" or (args.no_hidden and not args.rerun) else _hidden_runner(args)
    return lab.command(
        args.action,
        args.name,
        args.dir,
        args.more,
        args.work,
        args.how,
        None if args.no_hidden else runner,
        args.student,
        student_check=not args.no_student_check,
        rerun_runner=runner if args.rerun else None,
    )


def _hidden_runner(args: argparse.Namespace):
    """How ``lab check`` runs the instructor's hidden variants: a session each, as ``testbed run`` would."""
    from testbed.host.session import run_session
    from testbed.workflows.sessions import update_catalog

    def run(scenario, results: Path) -> list:
        result = run_session(scenario, backend=args.backend, kernel_version=_kernel(args), results_root=results)
        update_catalog(results)
        return result.failed

    return run


def _run_options(parser: argparse.ArgumentParser, outputs: bool = True) -> None:
    """The options of commands that run sessions; ``outputs``: with --no-report and --done-file."""
    _where_options(parser)
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
        type=_queue_hz,
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
    _again_options(
        parser,
        "run every run again in a new results folder; without it, a scenario run again on the same "
        "kernel resumes its newest results folder: complete runs are kept, failed and incomplete "
        "ones run again",
    )


def _where_options(parser: argparse.ArgumentParser, kernels: bool = True) -> None:
    """Where runs execute and land, shared by every command that runs things; ``kernels``: --backend and
    --kernel too (a kernel comparison names its kernels and runs them in guests)."""
    if kernels:
        _backend_options(parser)
    parser.add_argument("--cpus", type=int, help="guest vCPUs (default 2; 1 on a single-core host under TCG)")
    _clock_option(parser)
    _cluster_option(parser)
    parser.add_argument("--results", type=Path, default=PROJECT / "results", help="results root (default: results/)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="serve a live page of the runs (goodput, cwnd, RTT, queues, checks, progress) on "
        "127.0.0.1 while the command runs; it prints the URL with its token "
        "(docs/live.md)",
    )


def _backend_options(parser: argparse.ArgumentParser, backend_help: str = "", kernel_help: str = "") -> None:
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
    _dirty_option(parser)


#: the kernel names every --kernel, --baseline, --candidate and --good/--bad take (testbed.host.kernels)
KERNEL_HELP = (
    "guest kernel: Debian version (6.1.0-56, 6.12.117+deb12), vmlinuz or .deb, or a source built here: "
    "tree:PATH[@REV] (a git tree), 6.1+patch:FILE (Debian's linux-source-6.1 with a patch) or "
    "6.1+source (it unpatched); docs/regression.md"
)


def _dirty_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="build a tree:PATH kernel with its uncommitted changes (refused without it; the diff is "
        "built as a patch and recorded in the manifest)",
    )


def _again_options(parser: argparse.ArgumentParser, force_help: str) -> None:
    """--yes (start what is estimated beyond a day) and --force (start anew instead of resuming)."""
    parser.add_argument(
        "--yes", action="store_true", help="start what is estimated beyond a day of runs (refused without it)"
    )
    parser.add_argument("--force", action="store_true", help=force_help)


def _clock_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clock",
        choices=["auto", "real", "virtual"],
        default="auto",
        help="a guest's clock: real time, or virtual time (QEMU's icount: one vCPU, idle time skipped, the "
        "host's load cannot reach what the guest measures); auto runs an experiment in virtual time where "
        "it was shown equivalent to real time and KVM does not work (scenarios/timebase/equivalence.yaml, "
        "docs/results.md)",
    )


def _cluster_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        metavar="SPEC",
        help="spread the runs over a Dask cluster, one run per worker at a time, their folders shipped back here: "
        "local:N (N workers on this host, each on its own cores), an Ansible inventory (ssh:FILE: a worker "
        "per host, provisioned by playbooks/site.yml) or a Slurm description (slurm:FILE); --backend is "
        "then each worker's (docs/cluster.md)",
    )


def _selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        action="append",
        metavar="KEY=VALUE[,VALUE]",
        help="run only the sweep points with these values (repeatable; KEY as in the point ids, "
        "e.g. --only cc=westwood --only hops=2,4); a later run without it resumes around them",
    )
    parser.add_argument("--seed", type=int, action="append", help="run only this seed of the profile (repeatable)")


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="run a scenario (every point and seed) and write its report")
    run.add_argument("scenario", help="scenario name in scenarios/ (e.g. default) or a path to a .yaml file")
    run.add_argument("--profile", help="profile of the scenario file (e.g. quick, full); default: quick if it has one")
    _selection_options(run)
    _run_options(run)
    run.set_defaults(func=_cmd_run)


def _cmd_shell(args: argparse.Namespace) -> int:
    from testbed.host.session import log
    from testbed.host.shell import open_shell
    from testbed.report.liveserver import shell_page
    from testbed.scenario.load import find_scenario, load_scenario

    scenario = load_scenario(find_scenario(args.scenario, PROJECT / "scenarios"), profile=args.profile)
    scenario = scenario.select(args.only or (), args.seed or ())
    return open_shell(
        scenario, backend=args.backend, kernel_version=_kernel(args), vcpus=args.cpus, log=log, page=shell_page
    )


def _add_shell(sub) -> None:
    shell = sub.add_parser(
        "shell",
        help="build one point of a scenario on a real kernel and open Mininet's CLI on it (mininet>)",
        description="Build the network of one run of SCENARIO (its first point and seed; --only and --seed pick "
        "another) where 'testbed run' would run it, and open Mininet's CLI on it: the project's node "
        "names, Mininet's commands (nodes, net, pingall, 'h1 ping r1') and ours: flows, start [ID...], "
        "stop, tc (the bottleneck's qdisc statistics), cwnd ID [SECONDS] (one connection's cwnd "
        "live). exit or Ctrl-D tears it all down, the guest included.",
    )
    shell.add_argument("scenario", help="scenario name in scenarios/ (e.g. default) or a path to a .yaml file")
    shell.add_argument("--profile", help="profile of the scenario file (default: quick if it has one)")
    _selection_options(shell)
    _backend_options(shell, "where the network is built, chosen as 'testbed run' chooses (auto)")
    shell.add_argument("--cpus", type=int, help="guest vCPUs (default 2; 1 on a single-core host under TCG)")
    shell.set_defaults(func=_cmd_shell)


def _add_suite(sub) -> None:
    suite = sub.add_parser(
        "suite", help="run a suite (chosen points of several experiments, one session) and write its report"
    )
    suite.add_argument("suite", help="suite name in scenarios/suites/ (e.g. default) or a path to a .yaml file")
    _run_options(suite)
    suite.add_argument(
        "--decide",
        action="store_true",
        help="after the suite's runs, run more seeds where they decide undecided claims (the cheapest to decide "
        "first, judged again after each round) until the budget is spent; the same folder grows "
        "(docs/results.md)",
    )
    suite.add_argument(
        "--budget",
        metavar="TIME",
        help="--decide's wall time for the added runs: 60m, 1.5h, 900s or minutes (implies --decide; "
        "default: the suite's own estimate)",
    )
    suite.set_defaults(func=_cmd_run)


def _add_explain(sub) -> None:
    explain = sub.add_parser(
        "explain",
        help="run a claim's deciding condition with each factor set as the paper had it, and say which "
        "explains the claim (docs/explain.md)",
        description="Run the claim's deciding condition (from the reproduce suite) as one session: the baseline, "
        "each ablation factor of analysis/claims.yaml alone at the paper's setting, and all of them "
        "together, the same seeds each; then judge per factor whether the effect moves to the paper's "
        "(analysis/ablation.py) and conclude: explained by X, partly, or not explained by these factors.",
    )
    explain.add_argument("claim", help="a claim id of analysis/claims.yaml that has ablations")
    explain.add_argument("--seeds", type=int, default=3, help="seeds per setting and side (default 3, at least 2)")
    explain.add_argument(
        "--factors",
        action="append",
        metavar="NAME[,NAME]",
        help="only these factors (default: every factor of the claim that can be switched here)",
    )
    _run_options(explain, outputs=False)
    explain.set_defaults(func=_cmd_explain)


def _add_report(sub) -> None:
    report = sub.add_parser(
        "report", help="(re)analyse a session folder and write its report; several: one combined report (--out)"
    )
    report.add_argument("session", type=Path, nargs="+", help="results/<scenario>/<time>-<sha>/")
    report.add_argument("--out", type=Path, help="write the report of every run of the sessions into this folder")
    report.set_defaults(func=_cmd_report)


def _add_lengths(sub) -> None:
    lengths = sub.add_parser(
        "lengths",
        help="a session's goodput claims judged over windows of its runs (first T s, a warm-up left out): "
        "where each effect settles (docs/experiments.md)",
    )
    lengths.add_argument("session", type=Path, help="results/<scenario>/<time>-<sha>/ (long runs show the most)")
    lengths.set_defaults(func=_cmd_lengths)


def _cmd_lengths(args: argparse.Namespace) -> int:
    from testbed.workflows import lengths

    path, lines = lengths.run(args.session)
    print("\n".join(lines))
    print(f"written: {path}")
    return 0


def _add_equivalence(sub) -> None:
    parser = sub.add_parser(
        "equivalence",
        help="a faster way of running (virtual time) against runs alone in real time, twin runs at the "
        "same seeds: paired TOST per experiment and metric, the claims' verdicts on both "
        "(docs/results.md, 'Virtual time'); exit 1 when an experiment is not shown equivalent",
    )
    parser.add_argument(
        "reference", type=Path, help="the session alone in real time (results/<scenario>/<time>-<sha>/)"
    )
    parser.add_argument("candidate", type=Path, help="the same runs the faster way (e.g. --clock virtual)")
    parser.add_argument(
        "--record",
        action="store_true",
        help="write each experiment's result into scenarios/timebase/equivalence.yaml, which --clock auto reads",
    )
    parser.set_defaults(func=_cmd_equivalence)


def _cmd_equivalence(args: argparse.Namespace) -> int:
    from testbed.workflows import equivalence

    return equivalence.run(args.reference, args.candidate, keep=args.record)


def _add_results(sub) -> None:
    results = sub.add_parser(
        "results",
        help="list and filter every run under the results folder (the catalog, results/catalog.sqlite)",
        description="Update the catalog from the run folders, then list the runs (or their flows) that match "
        "every filter given. Filters: --scenario, --profile, --point (prefix), --seed, --status, --kernel (release "
        "prefix), --backend, --git (sha prefix), --cc (runs with a flow of that algorithm). Python: "
        "analysis.catalog.runs(root, ...) and flows(root, ...) return DataFrames.",
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


def _add_regress(sub) -> None:
    from analysis.regression import DEFAULT_REPEAT

    regress = sub.add_parser(
        "regress",
        help="the same suite on two kernels or a series, interleaved repetitions, statistical verdicts "
        "(exit 1: regression)",
        description="Runs the suite on the baseline and the candidate kernel in turn (baseline 1, candidate 1, "
        "baseline 2, ...), each in a virtme-ng guest, then compares every point x algorithm x metric (goodput, total "
        "goodput, Jain index, retransmission ratio): a regression is a change beyond 5 %% the bad way with p < "
        "0.05 in the paired t-test (repetition r runs seed r on both kernels), Holm-adjusted over the run's "
        "comparisons. Writes regress.txt, report.html, junit.xml and regress.json under results/regress/. With "
        "--series, every kernel of a series in turn and its change points (series.txt, report.html with one figure "
        "per metric, trend.csv); with --latest, the newest installable kernel of a series against the newest one "
        "already run here. Exit 0: nothing regressed; 1: a regression; 2: the run failed (a kernel that cannot be "
        "had or does not boot, a run that did not complete, a positive control missed). docs/regression.md.",
    )
    regress.add_argument("--baseline", help="kernel: " + KERNEL_HELP.removeprefix("guest kernel: "))
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
        help=f"repetitions per kernel (default {DEFAULT_REPEAT}: resolves a 5 %% goodput change at "
        "the noise measured here; analysis/regression.py says how)",
    )
    _where_options(regress, kernels=False)
    _dirty_option(regress)
    regress.add_argument(
        "--candidate-flow-option",
        action="append",
        metavar="NAME=VALUE",
        help="give every flow of the candidate's runs this option (sack=false, delayed_ack=false, initcwnd_segs=N, "
        "window_kb=N): a known regression, to check that the verdict finds it",
    )
    _inject_options(regress)
    _again_options(regress, _RESUME_HELP.format(what="comparison"))
    regress.set_defaults(func=_cmd_regress)


def _add_bisect(sub) -> None:
    from analysis.regression import METRICS

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
        type=Path,
        help="bisect the commits of this git source tree from --good to --bad, merged branches included "
        "(as git bisect), each built here (docs/regression.md)",
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
    _where_options(bisect, kernels=False)
    _dirty_option(bisect)
    _inject_options(bisect)
    _again_options(bisect, _RESUME_HELP.format(what="bisection"))
    bisect.set_defaults(func=_cmd_bisect)


def _inject_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--inject",
        action="append",
        metavar="NAME=VALUE",
        help="a positive control: give every flow this option (as --candidate-flow-option) on "
        "--inject-from and every later kernel; the verdict must find it there",
    )
    parser.add_argument("--inject-from", metavar="KERNEL", help="the first kernel that --inject harms")


_RESUME_HELP = (
    "start a new {what} instead of resuming an unfinished one with the same arguments (a killed one "
    "goes on in its folder: its complete sessions are not run again)"
)


def _add_check(sub) -> None:
    check = sub.add_parser("check", help="validate scenario files and list their points")
    check.add_argument("scenarios", nargs="+")
    check.add_argument("--profile", help="profile of the scenario files (e.g. quick, full); default: quick if any")
    _selection_options(check)
    check.set_defaults(func=_cmd_check)


def _add_kernels(sub) -> None:
    kern = sub.add_parser("kernels", help="list guest kernels (default, cached, downloadable) or fetch one")
    kern.add_argument(
        "--fetch",
        metavar="KERNEL",
        help="download and unpack a kernel into the cache, or build one from its source ("
        + KERNEL_HELP.removeprefix("guest kernel: ")
        + ")",
    )
    kern.add_argument(
        "--prune",
        type=float,
        metavar="DAYS",
        help="remove the kernels built here (and tree checkouts) unused for DAYS days",
    )
    _dirty_option(kern)
    kern.set_defaults(func=_cmd_kernels)


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="speed and fidelity figures of this machine (printed, written to bench/)")
    bench.add_argument("--kernel", help="guest kernel, as for run")
    bench.add_argument(
        "--part",
        choices=["basic", "scale", "pcap", "experiment", "clock", "cluster", "all"],
        default="all",
        help="basic: one flow's speed and fidelity (~2 min); scale: 200+10 flows, a 10-hop parking lot and each "
        "loss model (~30 min under TCG); pcap: our capture analysis vs tcptrace on a ~1 M-packet capture made "
        "in network namespaces on the host (~3 min); experiment: the default suite as make experiment runs it, "
        "its overhead per run by phase, guest ready, report time, trust and verdicts (~5 min); clock: the default "
        "suite in real and in virtual time, traffic seconds per wall second each way and their equivalence "
        "(~6 min); cluster: Dask's overhead per task and a run folder's shipping on --cluster (default "
        "local:2, ~30 s); all: the six",
    )
    bench.add_argument("--cluster", metavar="SPEC", help="the cluster --part cluster measures (as for run)")
    bench.set_defaults(func=_cmd_bench)


def _add_cleanup(sub) -> None:
    clean = sub.add_parser(
        "cleanup",
        help="stop guests and lab-VM runners left by killed controllers; remove "
        "processes, interfaces and trace instances left by killed runs",
    )
    clean.set_defaults(func=_cmd_cleanup)


def _add_lab(sub) -> None:
    lab = sub.add_parser(
        "lab",
        help="course labs: list them, start one in a folder of its own, grade a student's work",
        description="list: the labs of labs/. start NAME [DIR]: copy a lab (handout, starter scenario, notebook) "
        "into DIR (default ./NAME). check NAME [RESULTS]: grade the lab folder (the current one, or --work) on "
        "RESULTS (default: its results/): per task pass or fail, JUnit XML and Gradescope's results.json in "
        "grade/; the lab's hidden variants run first when it has any. Exit 0: every task passes; 1: one fails. "
        "pack NAME [DIR]: zip the lab folder (the current one, or --work) for handing in, each run with its raw/ "
        "files (grading recomputes the runs from them), into DIR (default: the current folder). "
        "notebook NAME: JupyterLab on the lab's analysis.ipynb (the current folder's, if it has one). "
        "bands NAME RESULTS --how TEXT (instructors): the bands of the lab's expected.yaml from reference runs of "
        "its solution/. autograder NAME [DIR] (instructors): the zip Gradescope takes as the lab's autograder, "
        "written to DIR (default: the current folder). duplicates FOLDER FOLDER... (instructors): runs that two "
        "submissions share, by their captures' fingerprints (exit 1 when any).",
    )
    lab.add_argument(
        "action", choices=["list", "start", "check", "pack", "notebook", "bands", "autograder", "duplicates"]
    )
    lab.add_argument("name", nargs="?", help="a lab of labs/ (testbed lab list) or a folder holding a lab.yaml")
    lab.add_argument(
        "dir",
        nargs="?",
        type=Path,
        help="start: the new folder; check: the results folder; pack, autograder: where the zip goes",
    )
    lab.add_argument("more", nargs="*", help="duplicates: more submission folders")
    lab.add_argument(
        "--work",
        type=Path,
        help="check, pack: the student's lab folder (default: the current one "
        "if it holds a lab.yaml, else the lab's own)",
    )
    lab.add_argument("--no-hidden", action="store_true", help="check: do not run the instructor's hidden variants")
    lab.add_argument(
        "--rerun",
        action="store_true",
        help="check: run one graded run per point again on this machine and hold the submitted ones "
        "to it (beyond 20 %%: to grade by hand; docs/labs.md)",
    )
    _backend_options(
        lab,
        "check: where the hidden variants run (as for testbed run)",
        "check: the guest kernel of the hidden variants (as for testbed run)",
    )
    lab.add_argument("--how", help="bands: how the reference runs (the results folder given) were made")
    lab.add_argument(
        "--no-student-check",
        action="store_true",
        help="autograder: build it without the course's secret (a student's own seeds unchecked)",
    )
    lab.add_argument(
        "--student",
        metavar="ID",
        help="start: give the student their own seeds (and the lab's variant, e.g. the wireless "
        "lab's radio rate), drawn from the course's secret (CC_TESTBED_COURSE_SECRET) and "
        "ID; check: grade the folder as ID's, their own required (docs/labs.md)",
    )
    lab.set_defaults(func=_cmd_lab)


def _cmd_watch(args: argparse.Namespace) -> int:
    from testbed.report.liveserver import watch

    return watch(args.folder, args.speed, args.port)


def _add_watch(sub) -> None:
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


#: the subcommands in the order --help lists them
SUBCOMMANDS = (
    _add_run,
    _add_suite,
    _add_explain,
    _add_shell,
    _add_report,
    _add_lengths,
    _add_equivalence,
    _add_results,
    _add_regress,
    _add_bisect,
    _add_check,
    _add_lab,
    _add_kernels,
    _add_bench,
    _add_cleanup,
    _add_watch,
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
    from testbed.report.liveserver import serving

    return serving(args.results, since=time.time())


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    from analysis.catalog import CatalogError
    from testbed.guest.lossbpf import LossChannelError
    from testbed.guest.modules import ModuleBuildError
    from testbed.host.clusterspec import ClusterError
    from testbed.host.kernels import KernelError
    from testbed.host.vagrant import VagrantError
    from testbed.host.virtme import GuestError
    from testbed.labs.labkit import LabError
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


if __name__ == "__main__":
    sys.exit(main())
