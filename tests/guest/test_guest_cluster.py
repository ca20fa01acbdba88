"""A ``local:2`` cluster of guest-backed runs: two Dask workers on this host, each booting its own guest
pinned to its own core, and each run judged on its own core: the other guest, pinned to the other
core, is no competitor. Whether a run is trustworthy depends on what else used its core during its
traffic (the controller and the Dask processes are not pinned; docs/cluster.md has the counts measured
here), so this asserts the judging and prints the outcome."""

from __future__ import annotations

import os
import subprocess
import sys

from testbed.results import rundir
from tests import clusterhosts
from tests.conftest import PROJECT, guest_processes

SCENARIO = """\
topology:
  name: dumbbell
  bottleneck: {rate_mbit: 5, queue_bdp: 1}
flows:
  - cc: [reno, westwood]
    rtt_ms: 40
duration_s: 3
"""


def test_two_pinned_guests_run_a_sweep_side_by_side_and_their_runs_merge(tmp_path):
    scenario = tmp_path / "side-by-side.yaml"
    scenario.write_text(SCENARIO)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(scenario),
            "--backend",
            "guest",
            "--cluster",
            "local:2",
            "--no-report",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = [p.parent for p in (tmp_path / "results").glob("*/*/session.json")]
    backend = rundir.read_json(session / "session.json")["backend"]
    assert backend["worker_backend"] == "guest" and len(backend["workers"]) == 2
    record = rundir.read_json(session / "cluster.json")
    assert len({where["worker"] for where in record["runs"].values()}) == 2  # side by side, one run each
    judged = []
    for run_dir in ("cc=reno/seed=1", "cc=westwood/seed=1"):
        manifest = rundir.read_json(session / run_dir / "manifest.json")
        assert manifest["status"] == "complete", manifest.get("reason")
        assert manifest["backend"]["kind"] == "guest" and manifest["backend"]["vcpus"] == 1  # one core each
        assert manifest["kernel"]["release"] == backend["kernel_release"]
        host = manifest["host"]
        assert host["cpus"] == 1 and len(host["cores"]) == 1 and host["other_guests"] == [], host
        judged.append(host["cores"][0])
        print(run_dir, "trustworthy:", manifest["fidelity"]["trustworthy"], manifest["fidelity"]["problems"])
    assert sorted(judged) == sorted(os.sched_getaffinity(0))[:2]  # each on a core of its own
    assert guest_processes() == [] and clusterhosts.cluster_processes() == []
