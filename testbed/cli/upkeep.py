"""The machine's upkeep: ``testbed bench`` (speed and fidelity figures) and ``cleanup``."""

from __future__ import annotations

import argparse

from testbed.cli import options


def _cmd_bench(args: argparse.Namespace) -> int:
    from testbed.workflows.bench import bench, bench_pcap, bench_scale

    statuses, kernel = [], options.kernel(args)
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

        statuses.append(bench_clock(kernel_version=kernel, suite_name=args.suite)["status"])
    if args.part in ("cluster", "all"):
        from testbed.workflows.cluster_bench import bench_cluster

        statuses.append(bench_cluster(args.cluster or "local:2")["status"])
    return 0 if all(status == "complete" for status in statuses) else 1


def add_bench(sub) -> None:
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
        "suite four ways: in real time alone and two runs side by side (--side-by-side 2), in virtual time alone "
        "and on packed guests (--guests 2), traffic seconds per wall second each way and their equivalence "
        "(~10 min); cluster: Dask's overhead per task and a run "
        "folder's shipping on --cluster (default local:2, ~30 s); all: the six",
    )
    bench.add_argument("--cluster", metavar="SPEC", help="the cluster --part cluster measures (as for run)")
    bench.add_argument(
        "--suite",
        default="default",
        help="the suite --part clock runs four ways, by name or file (default: default), its figures per experiment",
    )
    bench.set_defaults(func=_cmd_bench)


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from testbed.host.cleanup import cleanup

    print("\n".join(cleanup()))
    return 0


def add_cleanup(sub) -> None:
    clean = sub.add_parser(
        "cleanup",
        help="stop guests and lab-VM runners left by killed controllers; remove "
        "processes, interfaces and trace instances left by killed runs",
    )
    clean.set_defaults(func=_cmd_cleanup)
