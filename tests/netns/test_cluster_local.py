"""A ``local:2`` cluster on the host kernel stopped like a user stops it (SIGTERM is the CLI's Ctrl-C):
exit 130, the runs not home marked, and nothing left on the host: no worker, no run's process, namespace,
trace instance, iperf3 scratch folder or worker scratch folder (a worker that closes and then dies
sends its run two SIGTERMs: the second must not cut the teardown short)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from testbed.results import rundir
from tests import clusterhosts
from tests.conftest import PROJECT, leftovers


def test_a_cluster_session_stopped_mid_run_marks_its_runs_and_leaves_nothing(tmp_path, clean_kernel):
    scenario = clusterhosts.scenario_file(tmp_path / "stopped.yaml", ["reno", "cubic"], duration_s=8)
    controller = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(scenario),
            "--backend",
            "local",
            "--cluster",
            "local:2",
            "--no-report",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert clusterhosts.wait_until(clusterhosts.run_children, 120), "no run started"
        time.sleep(3)  # into the first run's traffic
        controller.send_signal(signal.SIGTERM)
        out, _ = controller.communicate(timeout=120)
    finally:
        if controller.poll() is None:
            controller.kill()
    assert controller.returncode == 130, out[-3000:]
    (session,) = [p.parent for p in (tmp_path / "results").glob("*/*/session.json")]
    for run_dir in ("cc=reno/seed=1", "cc=cubic/seed=1"):
        manifest = rundir.read_json(session / run_dir / "manifest.json")
        assert manifest["status"] in ("failed", "incomplete")
        assert manifest["reason"] == "interrupted (Ctrl-C) while the cluster ran it; raw files kept"
    assert clusterhosts.wait_until(lambda: not clusterhosts.cluster_processes() and not leftovers(), 20), (
        clusterhosts.cluster_processes() + leftovers()
    )
    assert clusterhosts.wait_until(lambda: not list(clusterhosts.SCRATCH.glob("[0-9]*/")), 10)
