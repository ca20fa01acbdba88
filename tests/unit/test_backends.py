"""Backends behind one protocol: which one a name gives, what the lab VM leaves to the VM, how a session
maps a backend's failure or Ctrl-C onto the runs it did not finish, and the remote runner stream."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from testbed.host import backends, remote, secondboot, session
from testbed.plan import resume
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict


def sweep(ccs, seeds=(1, 2, 3)):
    return scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
            "flows": [{"cc": ccs, "rtt_ms": 20}],
            "duration_s": 10,
            "seeds": list(seeds),
        },
        name="s",
    )


class FakeError(Exception):
    pass


class FakeBackend:
    """Runs a plan by writing its manifests: the first ``complete_first`` runs complete, then ``raise_``."""

    name, label, failures, release = "fake", "fake VM", (FakeError,), "6.1.0-fake"
    at_once = 1

    def __init__(self, runs_here=False, complete_first=None, raise_=None, identities=None):
        self.runs_here, self.complete_first, self.raise_ = runs_here, complete_first, raise_
        self.identities = identities or {}  # run_dir -> identity, for a later session to resume
        self.executed = self.closed = False

    def prepare(self):
        return self.release

    def record(self):
        return {"kind": self.name, "kernel_release": self.release}

    def build(self, runs, release):
        return backends.Artefacts({}, {}, None)

    def wall_s(self, estimates, boot_s=None, experiments=None):
        return sum(estimates)

    def execute(self, plan, plan_path, session_dir, total_s):
        self.executed = True
        assert json.loads(plan_path.read_text())["context"]["backend"]["kind"] == "fake"
        for run in plan.runs[: self.complete_first]:
            identity = self.identities.get(run.run_dir)
            manifest = {"status": "complete", "identity": identity, "kernel": {"release": self.release}}
            rundir.write_json_atomic(session_dir / run.run_dir / rundir.MANIFEST, manifest)
        if self.raise_ is not None:
            raise self.raise_
        return {"fake": {"wall_s": 1.0}}

    def close(self):
        self.closed = True


@pytest.fixture
def use(monkeypatch):
    """run_session on the given FakeBackend, whatever --backend says."""
    monkeypatch.setattr(session.virtme, "stop_orphans", lambda log: [])

    def use(backend):
        monkeypatch.setattr(session.backends, "create", lambda name, kernel_version, vcpus, log, **clock: backend)
        return backend

    return use


def statuses(result):
    return [rundir.read_json(run / rundir.MANIFEST) for run in result.runs]


def test_a_name_gives_its_backend_and_only_the_guest_takes_a_kernel():
    assert isinstance(backends.create("local"), backends.LocalBackend)
    assert isinstance(backends.create("vagrant"), backends.LabVMBackend)
    guest = backends.create("guest", kernel_version="6.1.0-56", vcpus=1)
    assert isinstance(guest, backends.GuestBackend) and guest.kernel_version == "6.1.0-56"
    assert guest.wall_s([10.0]) > 10.0 and backends.LocalBackend().wall_s([10.0, 5.0]) == 15.0
    assert guest.wall_s([10.0], boot_s=15.5) == 25.5  # a boot measured here (testbed.plan.costs), not the model's
    assert not guest.runs_here and backends.LocalBackend.runs_here
    for name in ("local", "vagrant"):
        with pytest.raises(ValueError, match="--kernel needs the guest backend"):
            backends.create(name, kernel_version="6.1.0-56")
    with pytest.raises(ValueError, match="unknown backend"):
        backends.create("qemu")


def test_the_lab_vm_builds_nothing_on_the_host():
    runs = sweep("westwood_ml").runs()
    built = backends.LabVMBackend().build(runs, "6.1.0-41-amd64")
    assert built == backends.Artefacts({"tcp_westwood_tb": None}, {}, None)


def test_a_session_records_the_backend_and_its_timings_and_closes_it(tmp_path, use):
    backend = use(FakeBackend())
    result = session.run_session(sweep("reno"), backend="local", results_root=tmp_path)
    assert backend.closed and [m["status"] for m in statuses(result)] == ["complete"] * 3
    info = rundir.read_json(result.directory / rundir.SESSION)
    assert info["backend"] == {"kind": "fake", "kernel_release": "6.1.0-fake"} == result.backend
    assert info["timing"]["fake"] == {"wall_s": 1.0} and "runs_wall_s" in info["timing"]


def test_a_backend_failure_marks_the_runs_it_did_not_finish(tmp_path, use, capsys):
    backend = use(FakeBackend(complete_first=1, raise_=FakeError("the VM went away")))
    result = session.run_session(sweep("reno"), backend="local", results_root=tmp_path)
    assert "[testbed] fake VM failed: the VM went away" in capsys.readouterr().out
    manifests = statuses(result)
    assert [m["status"] for m in manifests] == ["complete", "failed", "failed"]
    assert manifests[1]["reason"] == "the VM went away" and backend.closed
    assert "fake" not in rundir.read_json(result.directory / rundir.SESSION)["timing"]


def test_ctrl_c_marks_the_runs_only_when_the_runner_runs_elsewhere(tmp_path, use):
    elsewhere = use(FakeBackend(complete_first=1, raise_=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        session.run_session(sweep("reno"), backend="local", results_root=tmp_path / "a")
    (folder,) = (tmp_path / "a" / "s").iterdir()
    marked = [rundir.read_json(folder / d / rundir.MANIFEST) for d in resume.run_dirs(folder, sweep("reno").runs())[1:]]
    assert {m["reason"] for m in marked} == {"interrupted (Ctrl-C) while the fake VM ran it; raw files kept"}
    assert elsewhere.closed
    use(FakeBackend(runs_here=True, complete_first=1, raise_=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        session.run_session(sweep("reno"), backend="local", results_root=tmp_path / "b")
    (folder,) = (tmp_path / "b" / "s").iterdir()
    assert not (folder / resume.run_dirs(folder, sweep("reno").runs())[1] / rundir.MANIFEST).exists()


def test_a_session_already_complete_runs_nothing_and_closes_the_backend(tmp_path, use, capsys):
    runs = sweep("reno").runs()
    identities = {str(rundir.run_dir(tmp_path, r.point_id, r.seed).relative_to(tmp_path)): r.identity() for r in runs}
    use(FakeBackend(identities=identities))
    first = session.run_session(sweep("reno"), backend="local", results_root=tmp_path)
    backend = use(FakeBackend())
    again = session.run_session(sweep("reno"), backend="local", results_root=tmp_path, vcpus=1)
    assert again.directory == first.directory and not backend.executed and backend.closed
    assert "all 3 runs are already complete on 6.1.0-fake" in capsys.readouterr().out


def test_the_remote_stream_echoes_runner_lines_and_times_the_plan(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"runs": [{"run_dir": "p/seed1", "estimate_s": 10}]}))
    (tmp_path / "plan.done").write_text("1\n")
    script = "print('kernel noise'); print('[testbed] run 1/1: p seed=1'); print('[testbed] run 1/1 complete')"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    echoed, seen, started = [], [], time.monotonic()
    with open(tmp_path / "console.log", "wb") as log_file:
        ready_s = remote.follow_plan(
            proc,
            log_file,
            plan,
            started,
            label="test",
            start_timeout_s=30,
            timeout_s=60,
            echo=echoed.append,
            on_line=lambda text, now: seen.append(text),
        )
    proc.stdout.close()
    assert echoed == seen == ["run 1/1: p seed=1", "run 1/1 complete"]
    assert "kernel noise" in (tmp_path / "console.log").read_text()
    timing = remote.plan_timing(ready_s, started, tmp_path / "plan.done")
    assert timing["not_complete"] == 1 and timing["ready_s"] is not None and timing["wall_s"] >= timing["ready_s"]


def test_a_session_hands_its_observers_to_the_backend(tmp_path, use):
    backend = use(FakeBackend())

    def observer(session_dir, run_dirs):
        return lambda text, now: None

    session.run_session(sweep("reno"), backend="local", results_root=tmp_path, observers=[observer])
    assert backend.observers == (observer,)


class LinesGuest:
    """Stands in for testbed.host.virtme: its run_in_guest says each run of the plan started and ended."""

    BOOT_TIMEOUT_S = 1
    GuestBootError = GuestHungError = FakeError

    def run_in_guest(self, kernel, config, plan_path, rwdirs, console_log, timeout_s, echo, on_line=None):
        runs = json.loads(plan_path.read_text())["runs"]
        for index, _ in enumerate(runs, 1):
            on_line(f"run {index}/{len(runs)}: s p seed={index} (ETA 1.0 min)", 0.0)
            on_line(f"run {index}/{len(runs)} complete", 1.0)
        return {"wall_s": 1.0}


def test_observers_follow_the_guests_lines_after_the_hosts_watch(tmp_path, monkeypatch):
    plan = {"context": {}, "runs": [{"run_dir": f"p/seed={i}", "estimate_s": 10} for i in (1, 2)]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    seen = []
    monkeypatch.setattr(secondboot.hostload.HostWatch, "on_line", lambda watch, text, now: seen.append(("watch", text)))

    def observer(session_dir, run_dirs):
        assert session_dir == tmp_path and run_dirs == ["p/seed=1", "p/seed=2"]
        return lambda text, now: seen.append(("observer", text))

    secondboot.run_with_second_boot(
        LinesGuest(), None, None, tmp_path / "plan.json", tmp_path, 10, observers=(observer,)
    )
    assert len(seen) == 8 and [who for who, _ in seen] == ["watch", "observer"] * 4
    assert [text for who, text in seen if who == "observer"] == [text for who, text in seen if who == "watch"]


def test_a_session_is_priced_by_what_earlier_runs_took_and_its_deadline_stays_on_the_model(tmp_path, use, capsys):
    class TimedBackend(FakeBackend):
        """Writes manifests as the host watch would, each run having taken 2 s; keeps the deadline it was given."""

        def execute(self, plan, plan_path, session_dir, total_s):
            self.total_s, self.plan = total_s, plan
            for run in plan.runs:
                manifest = {"status": "complete", "kernel": {"release": self.release}, "host": {"run_wall_s": 2.0}}
                rundir.write_json_atomic(session_dir / run.run_dir / rundir.MANIFEST, manifest)
            return {}

    first = use(TimedBackend())
    session.run_session(sweep("reno"), backend="local", results_root=tmp_path)
    model_s = first.total_s
    assert [run.cost_s for run in first.plan.runs] == [None] * 3
    assert "costs: no earlier real-time run measured here" in capsys.readouterr().out
    again = use(TimedBackend())
    session.run_session(sweep("reno"), backend="local", results_root=tmp_path, force=True)
    out = capsys.readouterr().out
    assert [run.cost_s for run in again.plan.runs] == [2.0] * 3  # measured: the model scaled to what runs took
    assert "costs: real time measured at " in out and "(3 runs) of the model's estimate" in out
    assert "3 runs, estimated 0.1 min" in out  # 6 s, not the model's
    assert again.total_s == model_s > 6.0  # the deadline's basis: the model's, never what runs happened to take


def test_runs_that_build_their_network_and_each_packed_guests_first_run_are_priced_as_measured(tmp_path, use):
    class BuildingBackend(FakeBackend):
        """Each run on a new network took 6 s, on a kept one 2 s; the guest booted in 10 s."""

        at_once = 1

        def wall_s(self, estimates, boot_s=None, experiments=None):
            self.priced = getattr(self, "priced", None) or (list(estimates), boot_s)  # the estimate, not the deadline
            return sum(estimates)

        def execute(self, plan, plan_path, session_dir, total_s):
            self.plan = plan
            for i, run in enumerate(plan.runs):
                manifest = {
                    "status": "complete",
                    "kernel": {"release": self.release},
                    "host": {"run_wall_s": 6.0 if i == 0 else 2.0},
                    "network": {"kept_from_earlier_runs": i > 0},
                }
                rundir.write_json_atomic(session_dir / run.run_dir / rundir.MANIFEST, manifest)
            return {"guest": {"ready_s": 10.0}}

    for root in ("one", "packed"):  # a session measured in each results folder
        use(BuildingBackend())
        session.run_session(sweep("reno"), backend="local", results_root=tmp_path / root)
    one = use(BuildingBackend())
    session.run_session(sweep("reno"), backend="local", results_root=tmp_path / "one", force=True)
    # in one guest the plan's first run builds the network, the other two use it
    assert one.priced == ([6.0, 2.0, 2.0], 10.0) and [run.cost_s for run in one.plan.runs] == [6.0, 2.0, 2.0]
    packed = BuildingBackend()
    packed.at_once = 2
    use(packed)
    session.run_session(sweep("reno"), backend="local", results_root=tmp_path / "packed", force=True)
    # packed, every run is split at its kept cost, and each guest pays its boot and its first run's network
    assert packed.priced == ([2.0, 2.0, 2.0], 14.0)
