"""Estimates of a run before it runs: its network, what it needs from the kernel, its wall time.

The session prints the estimate first (and its ETA as runs finish), and the remote follower gives a
run a deadline from it (``runner.run_budget_s``).
"""

from __future__ import annotations

from testbed.plan.connections import plan_connections
from testbed.scenario.points import RunSpec
from topologies import TOPOLOGIES
from topologies.netspec import NetSpec

#: per-run overhead beyond its traffic and its nodes (calibration, captures, checks, collection) used for ETAs.
#: Fitted to make reproduce's 135 runs (69.8 min measured, 69.2 estimated; the old 6 / 0.5 / 1.0 said 92.7)
#: and the default suite's 18 (285 s measured, ~290 estimated), under TCG, networks kept between runs
RUN_OVERHEAD_S = 3.0
#: from the command to the guest runner's first line: 11.7-12.2 s measured under TCG
GUEST_BOOT_S = 12.0
SETUP_S_PER_NODE = 0.4
#: per connection: its pings, iperf3 server and client start, results (TCG)
SETUP_S_PER_CONNECTION = 0.4


def netspec(run: RunSpec) -> NetSpec:
    """The run's network: nodes, links, addresses and each interface's egress plan (pure)."""
    return TOPOLOGIES[run.scenario.topology.name].from_scenario(run.scenario).netspec()


def needs_netem(run: RunSpec) -> bool:
    return netspec(run).needs_netem


def bpf_programs(run: RunSpec) -> set[str]:
    """The project's tc-BPF programs a run attaches (names of ``lossbpf.SOURCES``)."""
    spec = netspec(run)
    needed = {"spray"} if spec.sprayers else set()
    if any(plan.timed_loss is not None for plan in spec.egress.values()):
        needed.add("timed_loss")
    if spec.needs_fq:
        needed.add("edt_delay")
    return needed


def estimate_s(run: RunSpec) -> float:
    """Expected wall time of a run: its traffic, a fixed overhead, setup + calibration per node
    (a new network costs ~2 s per node under TCG, a 62-node dumbbell took ~2 min before traffic; a
    network kept from the run before costs nothing: 0.4 s is the average over a session), and per
    connection (many_flows puts 210 connections on 5 nodes: 13 s of addresses and delays, 30 s of
    calibration pings and 36 s of iperf3 client starts under TCG)."""
    scenario = run.scenario
    connections = len(plan_connections(scenario, TOPOLOGIES[scenario.topology.name].from_scenario(scenario)))
    return (
        scenario.duration_s
        + RUN_OVERHEAD_S
        + SETUP_S_PER_NODE * len(netspec(run).nodes)
        + SETUP_S_PER_CONNECTION * connections
    )


#: beyond this much of estimated runs a sweep is a runaway until said otherwise (testbed run --yes)
RUNAWAY_S = 24 * 3600.0


def runaway(runs: list[RunSpec], hosts: int = 1, extra_s: float = 0.0) -> str | None:
    """Why a session of ``runs`` is too long to start without asking (None: it is not): its estimate
    here and spread over more hosts, and how to cut it. ``extra_s``: work before the runs (kernels to
    build), on this host."""
    total_s = sum(estimate_s(r) for r in runs) + extra_s * hosts
    if total_s / hosts <= RUNAWAY_S:
        return None
    spread = ", ".join(f"{total_s / n / 3600:.1f} h on {n} hosts" for n in (10, 100) if n > hosts)
    here = f"{total_s / hosts / 3600:.1f} h" + (f" on {hosts} hosts" if hosts > 1 else " here")
    return (
        f"{len(runs)} runs, estimated {here} ({total_s / 86400:.1f} days of runs; {spread}): cut the sweep "
        f"(--only, --seed, fewer seeds or values), or spread it (--cluster)"
    )


def check_runaway(runs: list[RunSpec], hosts: int, yes: bool, extra_s: float = 0.0) -> str | None:
    """Refuse (ValueError) what :func:`runaway` finds too long unless ``yes``; with ``yes``, the note to print."""
    why = runaway(runs, hosts, extra_s)
    if why and not yes:
        raise ValueError(f"{why}; or run it as it is with --yes")
    return f"{why}; running it as asked (--yes)" if why else None
