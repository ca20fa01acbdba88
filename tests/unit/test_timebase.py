"""Virtual time (QEMU's icount): when a guest runs on it, that the option reaches QEMU and the manifest,
that the host's contention is measured but not judged there, that sessions on two clocks never mix, and
the equivalence test that decides ``--clock auto`` (paired TOST on simulated twins of known truth)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from analysis.verdicts import equivalence, stats
from testbed.guest import fidelity
from testbed.host import backends, hostload, kernels, timebase, virtme
from testbed.plan.progress import TRAFFIC_BEGINS, TRAFFIC_ENDS
from testbed.plan.resume import find_resumable, is_done
from testbed.results import rundir
from testbed.scenario.load import load_scenario
from testbed.workflows import equivalence as equivalence_workflow

KERNEL = kernels.Kernel(release="6.1.0-57-amd64", vmlinuz=Path("/boot/vmlinuz-test"), source="test")
GUEST = {"icount_shift": 0, "append": "nohz=off"}
SHOWN = {
    "mobile-bernoulli": {"equivalent": True, "guest": GUEST},
    "rtt-fairness": {"equivalent": False, "why": "jain", "guest": GUEST},
}


def never(*_args):
    raise AssertionError("KVM must not be probed here")


def test_virtual_time_reaches_qemu_with_one_vcpu_and_no_kvm_probe(monkeypatch):
    monkeypatch.setattr(virtme, "kvm_usable", never)
    config = virtme.guest_config(KERNEL, clock="virtual")
    assert (config.accel, config.vcpus, config.clock, config.icount_shift) == ("tcg", 1, "virtual", 0)
    argv = virtme.vng_argv(KERNEL, config, [Path("/tmp/s")], "true")
    assert "--qemu-opts=-icount shift=0,sleep=off" in argv and "--disable-kvm" in argv
    assert argv[argv.index("--cpus") + 1] == "1"
    assert argv[argv.index("--append") + 1] == "nohz=off"  # an idle jump bounded by one tick
    real = virtme.vng_argv(KERNEL, virtme.GuestConfig("tcg", 2, "2G", "tsc=reliable"), [Path("/tmp/s")], "true")
    assert not any("icount" in arg for arg in real)
    with pytest.raises(virtme.GuestError, match="--cpus 2 cannot run in virtual time.*--cpus 1 or --clock real"):
        virtme.guest_config(KERNEL, vcpus=2, clock="virtual")
    monkeypatch.setenv("CC_TESTBED_ICOUNT_SHIFT", "2")  # a slower guest CPU per virtual second, measured
    assert virtme.guest_config(KERNEL, clock="virtual").icount_shift == 2
    monkeypatch.setenv("CC_TESTBED_ICOUNT_SHIFT", "fast")
    with pytest.raises(virtme.GuestError, match="CC_TESTBED_ICOUNT_SHIFT='fast': give a whole number from 0 to 10"):
        virtme.guest_config(KERNEL, clock="virtual")


def test_auto_runs_virtual_time_only_where_every_experiment_was_shown_equivalent_and_kvm_fails():
    assert timebase.choose("auto", {"mobile-bernoulli"}, lambda: False, SHOWN)[0] == "virtual"
    clock, why = timebase.choose("auto", {"mobile-bernoulli"}, lambda: True, SHOWN)
    assert clock == "real" and "KVM works here" in why
    clock, why = timebase.choose("auto", {"mobile-bernoulli", "rtt-fairness"}, never, SHOWN)
    assert clock == "real" and "rtt-fairness not shown equivalent" in why
    clock, why = timebase.choose("auto", {"parking-lot"}, never, SHOWN)
    assert clock == "real" and "parking-lot not yet measured" in why
    assert timebase.choose("auto", set(), never, SHOWN)[0] == "real"  # a shell: nothing shown
    tickless = {"mobile-bernoulli": {"equivalent": True, "guest": {"icount_shift": 0, "append": ""}}}
    clock, why = timebase.choose("auto", {"mobile-bernoulli"}, never, tickless)
    assert clock == "real" and "mobile-bernoulli measured in virtual time on another guest" in why
    clock, why = timebase.choose("auto", {"mobile-bernoulli"}, never, SHOWN, {"icount_shift": 2, "append": "nohz=off"})
    assert clock == "real" and "another guest" in why  # a shift of its own is measured on its own
    held = {"mobile-bernoulli": {"equivalent": True, "held_back": "runs hung", "guest": GUEST}}
    clock, why = timebase.choose("auto", {"mobile-bernoulli"}, never, held)
    assert clock == "real" and "held back from virtual time: mobile-bernoulli (runs hung)" in why
    assert timebase.choose("virtual", {"rtt-fairness"}, never, SHOWN) == ("virtual", "--clock virtual")
    with pytest.raises(ValueError, match="unknown clock 'fast': one of auto, real, virtual"):
        timebase.choose("fast", {"x"}, never, SHOWN)


def test_the_committed_equivalence_file_reads_and_names_only_experiments_that_exist():
    table = timebase.equivalence()
    scenarios = {p.stem for p in (timebase.PROJECT / "scenarios").glob("*.yaml")}
    assert set(table) <= scenarios
    assert all(isinstance(entry.get("equivalent"), bool) for entry in table.values())


def test_the_guest_backend_records_its_clock_in_every_manifest(monkeypatch):
    monkeypatch.setattr(backends.kernels, "fetch", lambda version, log=print: KERNEL)
    monkeypatch.setattr(virtme, "kvm_usable", lambda kernel, log=print: False)
    monkeypatch.setattr(timebase, "equivalence", lambda: SHOWN)
    guest = backends.create("guest", experiments=frozenset({"mobile-bernoulli"}), log=lambda _m: None)
    guest.prepare()
    described = guest.record()
    assert (described["clock"], described["icount_shift"], described["vcpus"]) == ("virtual", 0, 1)
    # an explicit vCPU count above one asks for real time under auto
    guest = backends.create("guest", vcpus=2, experiments=frozenset({"mobile-bernoulli"}), log=lambda _m: None)
    guest.prepare()
    assert guest.record()["clock"] == "real"
    with pytest.raises(ValueError, match="--clock virtual needs the guest backend"):
        backends.create("local", clock="virtual")


def test_virtual_time_measures_the_hosts_load_without_judging_it(tmp_path, monkeypatch):
    tick = hostload.os.sysconf("SC_CLK_TCK")
    before = hostload.Snapshot(0, (0,) * 8, 0, 0, 0, 1.0, ())
    # 5 s of wall time, the host full, others used 70 % of it, another guest beside: judged in real time
    after = hostload.Snapshot(5, (10 * tick, 0, 0, 0, 0, 0, 0, 0), 2 * 10**9, 10**9, 3 * 10**9, 2.0, ("9 qemu",))
    real = hostload.summarize(before, after, cpus=2)
    assert not fidelity.host_check(real.to_dict()).ok
    virtual = hostload.summarize(before, after, cpus=2, clock="virtual", guest_traffic_s=25.0)
    check = fidelity.host_check(virtual.to_dict())
    assert check.ok and virtual.wall_per_guest_s == 0.2
    assert "virtual time: 5.0 s of wall time for 25.0 s of the guest's traffic" in check.detail
    assert "not judged" in check.detail and "other guests ran: 1" in check.detail
    # the watch learns the traffic's guest length from the runner's ticks
    snapshots = iter([before, after])
    monkeypatch.setattr(hostload, "snapshot", lambda own, cores=None, tree=None: next(snapshots))
    rundir.write_json_atomic(
        tmp_path / "a" / rundir.MANIFEST,
        {"status": "complete", "fidelity": {"trustworthy": True, "problems": [], "checks": []}},
    )
    watch = hostload.HostWatch(["a"], own=set, session=tmp_path, clock="virtual")
    for line in [
        "run 1/1: s p seed=1 (ETA 1 min)",
        f"  {TRAFFIC_BEGINS}",
        "  traffic t=  0.0 s of 25 s, 1 connections active",
        f"  {TRAFFIC_ENDS}",
        "run 1/1 complete",
    ]:
        watch.on_line(line, 0.0)
    manifest = rundir.read_json(tmp_path / "a" / rundir.MANIFEST)
    assert manifest["host"]["clock"] == "virtual" and manifest["host"]["guest_traffic_s"] == 25.0
    assert manifest["fidelity"]["trustworthy"] is True


def test_a_session_resumes_only_runs_of_its_own_clock(tmp_path):
    scenario = load_scenario(timebase.PROJECT / "scenarios" / "mobile-bernoulli.yaml", profile="quick")
    run = scenario.runs()[0]
    session = tmp_path / scenario.name / "20260101T000000Z-abc"
    release = "6.1.0-57-amd64"
    rundir.write_json_atomic(session / rundir.SESSION, {"backend": {"kernel_release": release, "clock": "virtual"}})
    directory = rundir.run_dir(session, run.point_id, run.seed)
    rundir.write_json_atomic(
        directory / rundir.MANIFEST,
        {
            "status": "complete",
            "identity": run.identity(),
            "kernel": {"release": release},
            "backend": {"kind": "guest", "clock": "virtual"},
        },
    )
    assert is_done(directory, run, release, "virtual") and not is_done(directory, run, release, "real")
    assert find_resumable(tmp_path, scenario.name, [run], release, "virtual") == session
    assert find_resumable(tmp_path, scenario.name, [run], release, "real") is None


# ---------------------------------------------------------------------- equivalence on simulated twins


def twins(truth: float, noise: float, seeds: int, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A reference of ``seeds`` runs (goodput spread 30 % from seed to seed) and a candidate whose runs are
    the reference's times ``1 + truth``, each with its own lognormal noise of ``noise``."""
    base = rng.lognormal(0, 0.3, seeds)

    def rows(values):
        return pd.DataFrame(
            {
                "run": range(seeds),
                "point": "p",
                "seed": range(1, seeds + 1),
                "cc": "reno",
                "metric": "goodput",
                "value": values,
            }
        )

    return rows(base), rows(base * (1 + truth) * rng.lognormal(0, noise, seeds))


def test_tost_is_the_two_one_sided_t_tests_on_the_twins_log_ratios():
    rng = np.random.default_rng(1)
    logs = rng.normal(0.01, 0.01, 6)
    effect = stats.paired_ratio_effect(dict(enumerate(np.exp(logs))), dict.fromkeys(range(6), 1.0))
    lower = scipy_stats.ttest_1samp(logs, math.log(0.97), alternative="greater").pvalue
    upper = scipy_stats.ttest_1samp(logs, math.log(1.03), alternative="less").pvalue
    assert stats.tost_p(effect, 0.03) == pytest.approx(max(lower, upper))


@pytest.mark.parametrize(
    ("truth", "noise", "seeds", "equivalent"),
    [
        (0.0, 0.005, 6, True),  # the same answer, nearly deterministic: shown within ±3 %
        (0.06, 0.005, 6, False),  # 6 % off: shown outside, not equivalent
        (0.0, 0.10, 3, False),  # no difference, but too noisy to show it within ±3 %: not equivalent either
    ],
)
def test_an_experiment_is_equivalent_only_when_the_runs_show_it(truth, noise, seeds, equivalent):
    reference, candidate = twins(truth, noise, seeds, np.random.default_rng(7))
    result = equivalence.compare(reference, candidate, "mobile-bernoulli")
    (goodput,) = result.metrics
    assert goodput.pairs == seeds and result.equivalent is equivalent
    assert goodput.low < goodput.change < goodput.high


def test_more_untrustworthy_runs_or_a_changed_verdict_is_not_equivalent():
    reference, candidate = twins(0.0, 0.001, 4, np.random.default_rng(3))
    result = equivalence.compare(reference, candidate, "e")
    assert result.equivalent
    result.untrustworthy = (0, 1)
    assert result.problems == ["1 untrustworthy runs against 0 in the reference"]
    result.untrustworthy, result.verdicts = (0, 0), {"c": ("reproduced", "undecided")}
    assert result.problems == ["claim c: reproduced in the reference, undecided in the candidate"]
    assert "no goodput twins" in equivalence.compare(reference.iloc[:1], candidate.iloc[:1], "e").problems[0]


def test_recording_a_result_is_what_auto_then_reads(tmp_path):
    path = tmp_path / "equivalence.yaml"
    path.write_text("# header kept\nexperiments: {}\n")
    reference, candidate = twins(0.0, 0.001, 4, np.random.default_rng(5))
    results = [
        equivalence.compare(reference, candidate, "mobile-bernoulli"),
        equivalence.compare(*twins(0.2, 0.001, 4, np.random.default_rng(5)), "rtt-fairness"),
    ]
    sides = [
        equivalence_workflow.AnalysedSession(Path("r"), "real", 100.0, 50.0),
        equivalence_workflow.AnalysedSession(Path("v"), "virtual", 25.0, 50.0, GUEST),
    ]
    equivalence_workflow.record(*sides, results, path)
    table = timebase.equivalence(path)
    assert path.read_text().startswith("# header kept\n")
    assert "&id" not in path.read_text()  # each experiment's guest written out, not as an alias of another's
    assert table["mobile-bernoulli"]["equivalent"] is True and table["rtt-fairness"]["equivalent"] is False
    assert table["mobile-bernoulli"]["speed"] == {"reference": 0.5, "candidate": 2.0}
    assert timebase.choose("auto", {"rtt-fairness"}, never, table)[0] == "real"
    assert table["mobile-bernoulli"]["guest"] == GUEST  # the guest it holds for, read back by auto
    assert timebase.choose("auto", {"mobile-bernoulli"}, lambda: False, table, GUEST)[0] == "virtual"
    with pytest.raises(ValueError, match="--record keeps a faster way against runs alone in real time"):
        equivalence_workflow.record(sides[1], sides[0], results, path)


def test_a_cluster_without_dask_says_how_to_install_it(monkeypatch):
    from testbed.host import session

    real_find_spec = session.importlib.util.find_spec
    monkeypatch.setattr(
        session.importlib.util, "find_spec", lambda name: None if name == "distributed" else real_find_spec(name)
    )
    with pytest.raises(ValueError, match=r"--cluster needs Dask \(distributed not installed.*run 'make setup'"):
        session._open_backend("guest", [], None, None, cluster="local:2")


def test_the_twins_a_tost_needs_follow_from_the_spread_of_the_log_ratios():
    # log ratios spread 2 %: at n twins the TOST shows ±3 % with 80 % power when (t(0.95) + t(0.90)) 2 % / √n <= 3 %
    logs = np.array([0.02, -0.02, 0.02, -0.02]) * math.sqrt(3 / 4)  # sample sd exactly 2 %
    effect = stats.paired_ratio_effect(dict(enumerate(np.exp(logs))), dict.fromkeys(range(4), 1.0))
    n = stats.pairs_for_equivalence(effect, 0.03)

    def factor(k):
        return scipy_stats.t.ppf(0.95, k - 1) + scipy_stats.t.ppf(0.90, k - 1)

    assert factor(n) * 0.02 / math.sqrt(n) <= math.log(1.03) < factor(n - 1) * 0.02 / math.sqrt(n - 1)
    assert stats.pairs_for_equivalence(effect, 0.01) > n  # a tighter margin needs more twins


def test_a_virtual_time_run_keeps_its_raw_files_in_the_guest_until_it_ends(tmp_path, monkeypatch):
    from testbed.guest import launch
    from testbed.guest import run as guest_run
    from testbed.plan.plan import PlanContext

    tmpfs = tmp_path / "tmpfs"
    tmpfs.mkdir()
    monkeypatch.setattr(launch, "tmpfs_base", lambda: tmpfs)
    run = load_scenario(timebase.PROJECT / "scenarios" / "mobile-bernoulli.yaml", profile="quick").runs()[0]
    for clock in ("real", "virtual"):
        directory = tmp_path / clock
        state = guest_run._start(run, directory, PlanContext(backend={"kind": "guest", "clock": clock}))
        (state.raw / "tcp_probe.txt").write_text("trace\n")
        written_in_the_guest = state.raw.parent == tmpfs
        assert written_in_the_guest is (clock == "virtual")
        guest_run._finish(state)
        assert (directory / "raw" / "tcp_probe.txt").read_text() == "trace\n"
        assert "raw/tcp_probe.txt" in rundir.read_json(directory / rundir.MANIFEST)["files"]
    assert list(tmpfs.iterdir()) == []  # the staging folder removed once its files are home


def test_a_cluster_settles_one_clock_for_the_whole_session(monkeypatch):
    from testbed.host import cluster, clusterspec

    monkeypatch.setattr(timebase, "equivalence", lambda: SHOWN)
    runs = load_scenario(timebase.PROJECT / "scenarios" / "mobile-bernoulli.yaml", profile="quick").runs()
    guests = cluster.ClusterBackend(clusterspec.parse("local:2"), "guest", runs, log=lambda _m: None)
    guests.facts = {"w1": {"backend": "guest", "release": "r"}, "w2": {"backend": "guest", "release": "r"}}
    guests._settle_clock()
    assert guests.clock == "virtual"  # every worker runs it so, whatever its own KVM: the sides must share it
    local = cluster.ClusterBackend(clusterspec.parse("local:2"), "auto", runs, log=lambda _m: None, clock="virtual")
    local.facts = {"w1": {"backend": "local", "release": "r"}}
    with pytest.raises(clusterspec.ClusterError, match="--clock virtual needs guests on the workers"):
        local._settle_clock()


def analysed(name: str, frame: pd.DataFrame, clock: str = "real") -> equivalence_workflow.AnalysedSession:
    side = equivalence_workflow.AnalysedSession(Path(name), clock, 100.0, 50.0, GUEST if clock == "virtual" else {})
    side.metrics, side.untrustworthy = {"mobile-bernoulli": frame}, {"mobile-bernoulli": 0}
    return side


def test_a_control_shows_the_references_own_spread_beside_the_candidate_and_decides_nothing(tmp_path):
    reference, candidate = twins(0.0, 0.001, 6, np.random.default_rng(5))
    _, again = twins(0.0, 0.10, 6, np.random.default_rng(5))  # the reference's way again, far noisier
    sides = analysed("r", reference), analysed("v", candidate, "virtual")
    results = equivalence_workflow.judge_twins(*sides)
    control = equivalence_workflow.judge_control(sides[0], analysed("r2", again))
    assert results[0].equivalent and not control["mobile-bernoulli"].equivalent  # the decision is the candidate's
    lines = equivalence_workflow.text(*sides, results, control).splitlines()
    assert lines[2] == "- **mobile-bernoulli**: equivalent"
    assert lines[3].startswith("  - control, alone in real time run again: not shown equivalent: goodput")
    assert any(line.startswith("| mobile-bernoulli (control) | goodput | 6 |") for line in lines)
    path = tmp_path / "equivalence.yaml"
    equivalence_workflow.record(*sides, results, path, control=(analysed("r2", again), control))
    entry = timebase.equivalence(path)["mobile-bernoulli"]
    assert entry["equivalent"] is True and entry["control"]["within_margins"] is False
    assert entry["control"]["session"] == "r2" and entry["control"]["metrics"]["goodput"]["twins"] == 6
    with pytest.raises(ValueError, match="--control is the reference's way run again"):
        equivalence_workflow.judge_control(sides[0], sides[1])
