"""Runs side by side on the host kernel (testbed.guest.sidebyside): two runs at once, each in its own slot,
keep to their own namespaces, ports and tracing instances, and leave nothing behind."""

from __future__ import annotations

import pytest

from analysis.raw.loaders import load_tcp_probe
from testbed.host.session import run_session
from testbed.plan.connections import CLIENT_PORT_BASE, SLOT_PORTS
from testbed.results import rundir
from testbed.scenario.load import scenario_from_dict

#: one long run in one slot; two short ones in the other, the second building its network (and sweeping
#: leftovers) while the long run's traffic flows beside it
DURATIONS_S = [9, 3, 2]


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    from tests.conftest import leftovers

    assert leftovers() == []
    scenario = scenario_from_dict(
        {
            "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
            "flows": [{"cc": "reno", "rtt_ms": 0}],  # the host kernel has no netem
            "duration_s": DURATIONS_S,
        },
        name="side-by-side",
    )
    results = tmp_path_factory.mktemp("results")
    # fresh networks: every run builds its own, and first sweeps what killed runs left
    result = run_session(scenario, backend="local", results_root=results, side_by_side=2, keep_networks=False)
    assert leftovers() == []
    return result, [rundir.read_json(run / "manifest.json") for run in result.runs]


def test_runs_at_once_complete_though_one_builds_its_network_beside_the_others_traffic(side_by_side):
    result, manifests = side_by_side
    assert [m["status"] for m in manifests] == ["complete"] * 3, [m.get("reason") for m in manifests]
    long, *short = sorted(manifests, key=lambda m: -m["resolved"]["duration_s"])
    # the last short run began its traffic during the long run's: its network was built beside that traffic,
    # and a cleanup that swept another live runner's processes would have killed the long run's iperf3
    last = max(m["t0_unix_s"] for m in short)
    assert long["t0_unix_s"] < last < long["t0_unix_s"] + long["resolved"]["duration_s"] - 1, "not side by side"
    packing = rundir.read_json(result.directory / "packing.json")
    assert packing["side_by_side"] == 2 and not packing["rerun_alone"], packing


def test_each_run_names_its_slot_and_the_runs_beside_it(side_by_side):
    result, manifests = side_by_side
    slot_of = {run: m["backend"]["side_by_side"]["slot"] for run, m in zip(result.runs, manifests, strict=True)}
    assert sorted(slot_of.values()) == [0, 1, 1]
    for manifest in manifests:
        record = manifest["backend"]["side_by_side"]
        others = [str(r.relative_to(result.directory)) for r, slot in slot_of.items() if slot != record["slot"]]
        assert record["runs_at_once"] == 2 and record["beside"] == sorted(others)


def test_each_run_traces_its_own_ports_only(side_by_side):
    result, _ = side_by_side
    for run in result.runs:
        manifest = rundir.read_json(run / "manifest.json")
        slot = manifest["backend"]["side_by_side"]["slot"]
        (connection,) = manifest["connections"]  # one flow
        assert connection["client_port"] == CLIENT_PORT_BASE + slot * SLOT_PORTS
        ports = set(load_tcp_probe(run / "raw" / "tcp_probe.txt").events["src_port"])
        assert ports == {connection["client_port"]}, f"slot {slot} traced {sorted(ports)}"
