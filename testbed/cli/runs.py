"""The commands that run sessions: ``testbed run``, ``suite``, ``explain`` and ``shell``."""

from __future__ import annotations

import argparse

from testbed import PROJECT
from testbed.cli import options


def _cmd_run(args: argparse.Namespace) -> int:
    from testbed.scenario.load import find_scenario, load_scenario
    from testbed.scenario.suite import find_suite, load_suite
    from testbed.workflows import sessions

    if args.command == "suite":
        scenario = load_suite(find_suite(args.suite, options.SUITES), PROJECT / "scenarios")
    else:
        scenario = load_scenario(find_scenario(args.scenario, PROJECT / "scenarios"), profile=args.profile)
        scenario = scenario.select(args.only or (), args.seed or ())
    return sessions.run_scenario(
        scenario,
        options.where(args),
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


def add_run(sub) -> None:
    run = sub.add_parser("run", help="run a scenario (every point and seed) and write its report")
    run.add_argument("scenario", help="scenario name in scenarios/ (e.g. default) or a path to a .yaml file")
    run.add_argument("--profile", help="profile of the scenario file (e.g. quick, full); default: quick if it has one")
    options.selection_options(run)
    options.run_options(run)
    run.set_defaults(func=_cmd_run)


def add_suite(sub) -> None:
    suite = sub.add_parser(
        "suite", help="run a suite (chosen points of several experiments, one session) and write its report"
    )
    suite.add_argument("suite", help="suite name in scenarios/suites/ (e.g. default) or a path to a .yaml file")
    options.run_options(suite)
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


def _cmd_explain(args: argparse.Namespace) -> int:
    from testbed.workflows import sessions

    factors = [name for item in args.factors or [] for name in item.split(",") if name]
    return sessions.explain_claim(args.claim, args.seeds, factors, options.where(args))


def add_explain(sub) -> None:
    explain = sub.add_parser(
        "explain",
        help="run a claim's deciding condition with each factor set as the paper had it, and say which "
        "explains the claim (docs/explain.md)",
        description="Run the claim's deciding condition (from the reproduce suite) as one session: the baseline, "
        "each ablation factor of analysis/verdicts/claims.yaml alone at the paper's setting, and all of them "
        "together, the same seeds each; then judge per factor whether the effect moves to the paper's "
        "(analysis/verdicts/ablation.py) and conclude: explained by X, partly, or not explained by these factors.",
    )
    explain.add_argument("claim", help="a claim id of analysis/verdicts/claims.yaml that has ablations")
    explain.add_argument("--seeds", type=int, default=3, help="seeds per setting and side (default 3, at least 2)")
    explain.add_argument(
        "--factors",
        action="append",
        metavar="NAME[,NAME]",
        help="only these factors (default: every factor of the claim that can be switched here)",
    )
    options.run_options(explain, outputs=False)
    explain.set_defaults(func=_cmd_explain)


def _cmd_shell(args: argparse.Namespace) -> int:
    from testbed.host.session import log
    from testbed.host.shell import open_shell
    from testbed.report.live.liveserver import shell_page
    from testbed.scenario.load import find_scenario, load_scenario

    scenario = load_scenario(find_scenario(args.scenario, PROJECT / "scenarios"), profile=args.profile)
    scenario = scenario.select(args.only or (), args.seed or ())
    return open_shell(
        scenario, backend=args.backend, kernel_version=options.kernel(args), vcpus=args.cpus, log=log, page=shell_page
    )


def add_shell(sub) -> None:
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
    options.selection_options(shell)
    options.backend_options(shell, "where the network is built, chosen as 'testbed run' chooses (auto)")
    shell.add_argument("--cpus", type=int, help="guest vCPUs (default 2; 1 on a single-core host under TCG)")
    shell.set_defaults(func=_cmd_shell)
