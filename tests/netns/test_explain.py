"""``testbed explain`` end to end on the host kernel: a claim's deciding condition run under the baseline
and with a factor set as the paper had it (RACK off), the switch seen in each run's sysctls, then judged
and written (explanation.json, .md, the figure). The host kernel has reno and cubic, not Westwood+, so the
claim is one made for the test (CUBIC vs Reno on a lossless dumbbell); the real claims' plans are checked
in tests/unit/test_ablation.py and their runs in docs/explain.md."""

from __future__ import annotations

import textwrap

from analysis.verdicts import ablation, claims
from testbed.host.session import run_session
from testbed.report.pages.sessionpage import write_session_report
from testbed.results import rundir
from testbed.workflows import explain


def test_a_claim_is_explained_from_real_runs_with_each_factor_set(tmp_path, clean_kernel):
    (tmp_path / "toy.yaml").write_text(
        textwrap.dedent("""\
        description: CUBIC and Reno, one flow at a time, on a 10 Mbit/s dumbbell without delay
        topology: {name: dumbbell, bottleneck: {rate_mbit: 10, queue_pkts: 50}}
        flows: [{cc: [reno, cubic], rtt_ms: 0}]
        duration_s: 3
        seeds: [1]
    """)
    )
    suite = tmp_path / "suite.yaml"
    entry = f"{{scenario: {tmp_path / 'toy.yaml'}, points: [cc=reno, cc=cubic]}}"
    suite.write_text(f"profile: null\nexperiments:\n  - {entry}\n")
    claim = claims.Claim.model_validate(
        {
            "id": "toy-cubic-like-reno",
            "experiment": "toy",
            "source": "test",
            "quote": "q",
            "paper_numbers": "n",
            "metric": "goodput",
            "expect": "similar",
            "margin": 0.2,
            "margin_reason": "a test's claim",
            "a": {"cc": "cubic"},
            "b": {"cc": "reno"},
            "ablations": {"factors": {"rack": {"paper": False, "why": "the papers' TCPs had no RACK"}}},
        }
    )
    scenario = explain.plan(claim, 2, suite_path=suite)
    assert sorted(p.point_id for p in scenario.points) == [
        "toy.cc=cubic,ablate=baseline",
        "toy.cc=cubic,ablate=rack",
        "toy.cc=reno,ablate=baseline",
        "toy.cc=reno,ablate=rack",
    ]
    result = run_session(scenario, backend="local", results_root=tmp_path / "results")
    assert not result.failed, [rundir.read_json(r / "manifest.json").get("reason") for r in result.failed]
    for run in result.runs:
        manifest = rundir.read_json(run / "manifest.json")
        rack_off = manifest["params"]["ablate"] == "rack"
        assert manifest["sysctls"]["net.ipv4.tcp_recovery"] == ("0" if rack_off else "1"), run
        assert manifest["host_options"]["rack_off"] == (["l0", "r0"] if rack_off else [])
    report = write_session_report(result.directory)
    found = explain.explain_session(claim, result.directory, report.runs)
    record = ablation.ExplanationRecord.model_validate(rundir.read_json(result.directory / ablation.EXPLANATION))
    assert [s.setting for s in record.settings] == ["baseline", "rack"]
    assert all(s.runs == "2 vs 2" and s.effect > -0.5 for s in record.settings), record.settings
    assert record.kind in ("explained", "partly", "not explained", "nothing to explain") and record.conclusion
    assert found.conclusion == record.conclusion
    assert (result.directory / "explanation.md").read_text().startswith("# Why toy-cubic-like-reno?")
    assert (result.directory / "figures" / "explain.png").read_bytes()[:4] == b"\x89PNG"
    # the claims' own verdict in the session's report takes only the baseline's runs
    verdict = next(v for v in claims.verdicts(report.runs, [claim]))
    assert [c.condition for c in verdict.conditions] == ["ablate='baseline', 3 s runs"]
