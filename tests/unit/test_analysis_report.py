"""testbed.report.pages.sessionpage.write_session_report on sessions built from copies of the real fixture."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from analysis.runs.metrics import jain_index
from analysis.verdicts import claims
from analysis.verdicts.stats import student_t_quantile
from testbed.report.pages.points import text_table
from testbed.report.pages.sessionpage import write_session_report
from testbed.results import rundir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = FIXTURES / "run-westwood"
RECV_GOODPUT = 7920560 * 8 / 10.123518 / 1e6  # the fixture's iperf3 server: 6.259 Mbit/s
SENDER_GOODPUT = (1320613 - 250504) * 8 / 1.256148 / 1e6  # the fixture's (trimmed) capture: 6.815 Mbit/s
#: a second, Reno, flow: iperf3's control connection stands in for it (it has data in the capture)
SECOND_FLOW = {
    "id": "c1",
    "flow": 1,
    "replica": 0,
    "period": 0,
    "pair": 1,
    "cc": "reno",
    "direction": "forward",
    "sender": "l1",
    "sender_ip": "10.1.0.1",
    "receiver": "r1",
    "receiver_ip": "10.2.0.1",
    "server_port": 5201,
    "client_port": 32946,
    "start_s": 0.0,
    "stop_s": 10.0,
    "base_rtt_ms": 100.0,
}


def add_run(
    session: Path,
    point: str,
    seed: int,
    params: dict | None = None,
    cc: str = "westwood",
    status: str = "complete",
    recv_scale: float = 1.0,
    extra_connections: list[dict] | None = None,
) -> str:
    """Copy the fixture run into ``session/<point>/seed=<seed>`` with the manifest changed as asked."""
    relative = f"{point}/seed={seed}"
    target = session / relative
    shutil.copytree(FIXTURE, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest.update(point_id=point, seed=seed, params=params or {}, status=status)
    if status != "complete":
        manifest["reason"] = f"guest crashed in seed {seed}"
    manifest["connections"][0]["cc"] = cc
    manifest["connections"] += extra_connections or []
    (target / "manifest.json").write_text(json.dumps(manifest))
    if recv_scale != 1.0:
        server = target / "raw" / "iperf3-c0-server.json"
        data = json.loads(server.read_text())
        data["end"]["sum_received"]["bytes"] = round(data["end"]["sum_received"]["bytes"] * recv_scale)
        server.write_text(json.dumps(data))
    return relative


def write_session(session: Path, runs: list[str]) -> None:
    data = json.loads((FIXTURES / "session-westwood.json").read_text())
    data["runs"] = runs
    (session / "session.json").write_text(json.dumps(data))


def test_one_run_session(tmp_path):
    session = tmp_path / "short" / "20261121T074018Z-nogit"
    session.mkdir(parents=True)
    write_session(session, [add_run(session, "default", 1)])
    report = write_session_report(session)
    assert report.html_path == session / "report.html" and report.html_path.exists()
    assert report.md_path == session / "summary.md" and report.md_path.exists()
    assert (session / "default" / "seed=1" / "flows.csv").exists()
    header = report.summary_text.splitlines()[1]
    for column in [
        "point",
        "cc",
        "sender goodput Mbit/s (paper)",
        "receiver goodput Mbit/s (iperf3)",
        "retrans %",
        "runs complete",
        "trustworthy",
    ]:
        assert column in header, column
    row = report.summary_text.splitlines()[3].split()
    assert row == ["default", "westwood", "6.82", "6.26", "19.0", "1/1", "no"]
    table = report.table.iloc[0]
    assert table["goodput_mbit"] == pytest.approx(SENDER_GOODPUT, rel=1e-6)
    assert table["recv_goodput_mbit"] == pytest.approx(RECV_GOODPUT, rel=1e-6)
    assert math.isnan(table["goodput_mbit_ci_low"])  # one seed: no interval
    page = report.html_path.read_text()
    assert 'href="default/seed=1/report.html"' in page
    assert page.count("data:image/png;base64,") == 2
    assert "6.1.0-56-amd64" in page and "accel tcg" in page
    markdown = report.md_path.read_text()
    assert "| default | westwood | 6.82 | 6.26 | 19.0 | 1/1 | no |" in markdown


def test_a_sweep_is_aggregated_per_point_sorted_by_loss_then_cc(tmp_path):
    session = tmp_path / "sweep"
    session.mkdir()
    runs = []
    for loss in [1, 0]:
        for cc in ["westwood", "reno"]:
            point = f"cc={cc},loss_pct={loss}"
            for seed, scale in [(1, 1.0), (2, 0.9), (3, 0.8)]:
                status = "failed" if (cc, loss, seed) == ("reno", 1, 3) else "complete"
                runs.append(
                    add_run(
                        session,
                        point,
                        seed,
                        {"cc": cc, "loss_pct": loss},
                        cc=cc,
                        status=status,
                        recv_scale=scale,
                    )
                )
    write_session(session, runs)
    report = write_session_report(session)
    table = report.table
    assert list(zip(table["loss_pct"], table["cc"], strict=True)) == [
        (0, "reno"),
        (0, "westwood"),
        (1, "reno"),
        (1, "westwood"),
    ]
    full = table[(table["loss_pct"] == 0) & (table["cc"] == "westwood")].iloc[0]
    assert (full["runs_complete"], full["runs_total"], full["recv_goodput_mbit_n"]) == (3, 3, 3)
    assert full["recv_goodput_mbit"] == pytest.approx(0.9 * RECV_GOODPUT, rel=1e-6)
    assert full["recv_goodput_mbit_min"] == pytest.approx(0.8 * RECV_GOODPUT, rel=1e-6)
    assert full["recv_goodput_mbit_max"] == pytest.approx(RECV_GOODPUT, rel=1e-6)
    half = student_t_quantile(0.975, 2) * 0.1 * RECV_GOODPUT / math.sqrt(3)  # sd of (1, .9, .8) g is 0.1 g
    assert full["recv_goodput_mbit_ci_high"] - full["recv_goodput_mbit"] == pytest.approx(half, rel=1e-5)
    partial = table[(table["loss_pct"] == 1) & (table["cc"] == "reno")].iloc[0]
    assert (partial["runs_complete"], partial["runs_total"]) == (2, 3)
    assert partial["recv_goodput_mbit"] == pytest.approx(0.95 * RECV_GOODPUT, rel=1e-6)  # the failed seed is left out
    lines = report.summary_text.splitlines()
    assert lines[1].split()[:2] == ["loss_pct", "cc"] and "point" not in lines[1]
    body = [line.split() for line in lines[3:7]]
    assert [(b[0], b[1]) for b in body] == [
        ("0", "reno"),
        ("0", "westwood"),
        ("1", "reno"),
        ("1", "westwood"),
    ]
    # identical captures in every seed: the sender goodput's interval has zero width
    assert body[1][2:4] == [f"{SENDER_GOODPUT:.2f}", "±0"]
    assert body[1][4:6] == [f"{0.9 * RECV_GOODPUT:.2f}", f"±{half:.1f}"]
    assert body[2][-2] == "2/3"
    assert "not complete:" in report.summary_text
    assert "cc=reno,loss_pct=1/seed=3: failed: guest crashed in seed 3" in report.summary_text
    page = report.html_path.read_text()
    assert "Runs that did not complete" in page and "guest crashed in seed 3" in page
    assert page.count('href="cc=') == 12
    assert "guest crashed in seed 3" in report.md_path.read_text()


def test_several_flows_get_a_jain_index_and_a_row_per_algorithm(tmp_path):
    session = tmp_path / "mix"
    session.mkdir()
    relative = add_run(session, "mixed", 1, {"queue_bdp": 1}, extra_connections=[SECOND_FLOW])
    for side in ["client", "server"]:
        shutil.copy(
            session / relative / "raw" / f"iperf3-c0-{side}.json",
            session / relative / "raw" / f"iperf3-c1-{side}.json",
        )
    write_session(session, [relative])
    report = write_session_report(session)
    analysis = report.runs[0]
    goodputs = analysis.flows["goodput_mbit"].tolist()
    assert all(g > 0 for g in goodputs)
    assert analysis.jain["forward"] == pytest.approx(jain_index(goodputs))
    table = report.table
    assert sorted(table["cc"]) == ["reno", "westwood"]
    assert table["jain"].tolist() == pytest.approx([jain_index(goodputs)] * 2)
    assert "Jain" in report.summary_text.splitlines()[1] and "flows" in report.summary_text.splitlines()[1]
    assert "Jain fairness index over flows" in (session / relative / "report.html").read_text()


def test_without_session_json_the_runs_are_found_by_their_manifests(tmp_path):
    session = tmp_path / "lost"
    session.mkdir()
    add_run(session, "p1", 1)
    add_run(session, "p1", 2, status="incomplete")
    report = write_session_report(session)
    assert "session.json: missing" in report.problems
    assert len(report.runs) == 2
    assert report.table.iloc[0]["runs_complete"] == 1 and report.table.iloc[0]["runs_total"] == 2
    assert "p1/seed=2: incomplete" in report.summary_text


def test_a_listed_run_that_does_not_exist_is_reported(tmp_path):
    session = tmp_path / "gone"
    session.mkdir()
    write_session(session, [add_run(session, "p", 1), "p/seed=2"])
    report = write_session_report(session)
    assert [run.status for run in report.runs] == ["complete", "missing"]
    assert "p/seed=2: missing: run folder missing" in report.summary_text


def test_text_table_aligns_columns():
    import pandas as pd

    text = text_table(pd.DataFrame({"cc": ["reno", "westwood"], "goodput": ["10.5", "9.25"]}))
    lines = text.splitlines()
    assert lines[0] == "cc        goodput"
    assert lines[2] == "reno         10.5"
    assert lines[3] == "westwood     9.25"


def test_an_empty_session(tmp_path):
    session = tmp_path / "empty"
    session.mkdir()
    write_session(session, [])
    report = write_session_report(session)
    assert report.table.empty
    assert "no runs found" in report.summary_text
    assert report.html_path.exists() and report.md_path.exists()


def test_a_point_whose_only_run_failed_shows_no_numbers(tmp_path):
    session = tmp_path / "fail"
    session.mkdir()
    relative = add_run(session, "p", 1, {"loss_pct": 5}, status="failed")
    write_session(session, [relative])
    report = write_session_report(session)
    row = report.table.iloc[0]
    assert (row["runs_complete"], row["runs_total"]) == (0, 1)
    assert math.isnan(row["goodput_mbit"])
    line = report.summary_text.splitlines()[3].split()
    assert line == ["5", "westwood", "n/a", "n/a", "n/a", "0/1", "n/a"]


def test_cross_traffic_of_another_algorithm_keeps_its_own_cc(tmp_path):
    """A point's cc axis names the measured flow; its cross traffic (here Reno) gets a row of its own."""
    session = tmp_path / "cross"
    session.mkdir()
    relative = add_run(session, "cc=westwood", 1, {"cc": "westwood"}, extra_connections=[SECOND_FLOW])
    write_session(session, [relative])
    table = write_session_report(session).table
    assert list(zip(table["point_cc"], table["cc"], strict=True)) == [
        ("westwood", "reno"),
        ("westwood", "westwood"),
    ]


def test_the_report_judges_the_papers_claims_from_the_runs(tmp_path):
    # lab-vs-cubic's clean-path claim (003 §4.1: Westwood+ and CUBIC about equal): the same capture
    # under both names, 3 seeds each, gives equal goodputs without spread, so the rule must show them
    # equivalent ("reproduced"); every other claim about lab-vs-cubic compares points this session does not have
    session = tmp_path / "lab-vs-cubic" / "20261122T000000Z-nogit"
    session.mkdir(parents=True)
    runs = []
    for cc, seed in [(cc, seed) for cc in ("westwood", "cubic") for seed in (1, 2, 3)]:
        params = {"loss_pct": 0, "cc": cc, "rtt_ms": 0}
        relative = add_run(session, f"lab-vs-cubic.loss_pct=0,cc={cc},rtt_ms=0", seed, params=params, cc=cc)
        manifest_path = session / relative / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        # the fixture's checks failed (base RTT, bottleneck rate): only trustworthy runs decide, so the
        # seed-3 cubic run keeps them and the others are made trustworthy
        if (cc, seed) != ("cubic", 3):
            manifest["fidelity"] = {"trustworthy": True, "problems": [], "checks": []}
        manifest.update(scenario="lab-vs-cubic", profile="quick")
        manifest_path.write_text(json.dumps(manifest))
        runs.append(relative)
    write_session(session, runs)
    report = write_session_report(session)
    verdicts = {v.claim.id: v for v in report.verdicts}
    assert verdicts["lab-westwood-like-cubic-clean-path"].verdict == "reproduced"
    assert verdicts["lab-westwood-like-cubic-clean-path"].left_out == {"base RTT pair 0, bottleneck rate forward": 1}
    assert "1 untrustworthy run left out (base RTT pair 0, bottleneck rate forward: 1)" in " ".join(
        report.summary_text.split()
    )
    assert verdicts["lab-cubic-beats-westwood-long-delay"].verdict == "no data"
    assert all(v.claim.experiment == "lab-vs-cubic" for v in report.verdicts)
    text = " ".join(report.summary_text.split())  # the terminal's lines wrapped at 100 columns
    assert "lab-westwood-like-cubic-clean-path: reproduced: loss_pct=0, rtt_ms=0, 10 s runs:" in text
    assert "3 vs 2 runs, paired over 2 seeds" in text
    html = report.html_path.read_text()
    assert "The papers&#x27; claims" in html or "The papers' claims" in html
    assert (session / "figures" / "claims-forest.png").read_bytes().startswith(b"\x89PNG")
    assert "figures/claims-forest.png" in report.md_path.read_text()
    assert "In both cases the average estimated troughput was about 9500 Kbits/s." in html


def _set_scenario(session: Path, relative: str, scenario: str, trusted: bool = True) -> None:
    """The run's scenario set; its fidelity made trustworthy (the fixture's checks failed), since only
    trustworthy runs decide a claim."""
    manifest_path = session / relative / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest.update(scenario=scenario, profile="quick")
    if trusted:
        manifest["fidelity"] = {"trustworthy": True, "problems": [], "checks": []}
    manifest_path.write_text(json.dumps(manifest))


def test_each_experiment_gets_its_own_section_and_figures(tmp_path):
    session = tmp_path / "suite"
    session.mkdir()
    runs = []
    for scenario, cc in [("exp-one", "westwood"), ("exp-one", "reno"), ("exp-two", "cubic")]:
        relative = add_run(session, f"{scenario}.cc={cc}", 1, {"cc": cc}, cc=cc)
        _set_scenario(session, relative, scenario)
        runs.append(relative)
    write_session(session, runs)
    report = write_session_report(session)
    html = report.html_path.read_text()
    assert html.count("<h2 id=") == 2
    one, two = html.index('<h2 id="exp-one">'), html.index('<h2 id="exp-two">')
    assert one < two
    # each section's table has its own experiment's algorithms only
    first, second = html[one:two], html[two : html.index("<h2>Runs</h2>")]
    assert ">reno<" in first and ">westwood<" in first and ">cubic<" not in first
    assert ">cubic<" in second and ">reno<" not in second and ">westwood<" not in second
    assert first.count("data:image/png") == 2 and second.count("data:image/png") == 2
    # one bar chart per experiment, none mixes them
    figures = sorted(p.name for p in (session / "figures").glob("*.png"))
    assert figures == [
        "exp-one-goodput-bars.png",
        "exp-one-retrans-bars.png",
        "exp-two-goodput-bars.png",
        "exp-two-retrans-bars.png",
    ]
    # the report records what it drew: each figure's sha256 and the runs (testbed lab check reads it)
    drawn = json.loads((session / "figures" / "drawn.json").read_text())
    assert sorted(drawn["figures"]) == figures and len(drawn["runs"]) == len(list(session.rglob("manifest.json")))
    assert drawn["figures"]["exp-one-goodput-bars.png"] == rundir.sha256_file(session / "figures" / figures[0])
    assert (session / "figures" / "exp-two-goodput-bars.png").read_bytes().startswith(b"\x89PNG")
    assert "figures/exp-one-goodput-bars.png" in report.md_path.read_text()


def test_the_summary_leads_with_the_verdicts(tmp_path):
    session = tmp_path / "lab-vs-cubic" / "s"
    session.mkdir(parents=True)
    runs = []
    for cc, seed in [(cc, seed) for cc in ("westwood", "cubic") for seed in (1, 2, 3)]:
        params = {"loss_pct": 0, "cc": cc, "rtt_ms": 0}
        relative = add_run(session, f"lab-vs-cubic.loss_pct=0,cc={cc},rtt_ms=0", seed, params=params, cc=cc)
        _set_scenario(session, relative, "lab-vs-cubic")
        runs.append(relative)
    write_session(session, runs)
    report = write_session_report(session)
    lines = report.summary_text.splitlines()
    # the first line answers: runs complete and the four verdicts' counts
    counts = "1 reproduced, 0 opposite, 0 not reproduced, 0 undecided"
    assert lines[0].endswith(f"; claims: {counts}")
    assert lines[1].startswith(f"claims: {counts} (of 1 judged here)")
    assert "no data" in " ".join(lines[1:3])
    claim = next(i for i, line in enumerate(lines) if "lab-westwood-like-cubic-clean-path: reproduced:" in line)
    header = next(i for i, line in enumerate(lines) if "sender goodput Mbit/s (paper)" in line)
    assert claim < header  # the answer before the table
    block = "\n".join(lines[claim:header])
    assert "6.82 vs 6.82" in block and "paper (003 §4.1): both ~9.5 Mbit/s" in block
    assert all(len(line) <= 100 for line in lines[:header])
    # the Markdown summary has the same lines
    assert lines[claim] in report.md_path.read_text()


def test_a_second_report_reuses_unchanged_runs_and_redoes_changed_ones(tmp_path, monkeypatch):
    from testbed.report.pages import analyses as session_module

    session = tmp_path / "cached"
    session.mkdir()
    write_session(session, [add_run(session, "p", 1), add_run(session, "p", 2)])
    first = write_session_report(session)
    analysed = []
    original = session_module._analyze
    monkeypatch.setattr(session_module, "_analyze", lambda d: analysed.append(d.name) or original(d))
    monkeypatch.setattr(session_module, "MAX_WORKERS", 1)
    second = write_session_report(session)
    assert analysed == []  # nothing changed: both runs from the cache
    assert second.table.equals(first.table)
    # a raw file rewritten: that run (only) is analysed again, and its new numbers show
    server = session / "p" / "seed=2" / "raw" / "iperf3-c0-server.json"
    data = json.loads(server.read_text())
    data["end"]["sum_received"]["bytes"] = round(data["end"]["sum_received"]["bytes"] * 0.5)
    server.write_text(json.dumps(data))
    third = write_session_report(session)
    assert analysed == ["seed=2"]
    assert third.table.iloc[0]["recv_goodput_mbit_min"] == pytest.approx(0.5 * RECV_GOODPUT, rel=1e-4)
    # a deleted output (the run's page) is written again
    (session / "p" / "seed=1" / "report.html").unlink()
    write_session_report(session)
    assert analysed == ["seed=2", "seed=1"] and (session / "p" / "seed=1" / "report.html").exists()


def test_a_session_figure_is_drawn_again_exactly_when_its_data_change(tmp_path):
    import pandas as pd

    from testbed.report.cache import entries

    calls = []

    def draw(tag):
        return lambda: calls.append(tag) or tag.encode()

    table = pd.DataFrame({"x": [1, 2], "v": [2.0, 3.0]})
    assert entries.figure(tmp_path, draw("a"), "bars", table, "title") == b"a"
    assert entries.figure(tmp_path, draw("b"), "bars", table.copy(), "title") == b"a"  # same data: the stored one
    assert entries.figure(tmp_path, draw("c"), "bars", table.assign(v=[2.0, 3.5]), "title") == b"c"
    assert entries.figure(tmp_path, draw("d"), "bars", table, "another title") == b"d"
    assert calls == ["a", "c", "d"]


def test_an_experiment_with_the_module_trace_gets_cwnd_ssthresh_and_estimate_over_time(tmp_path):
    session = tmp_path / "traced"
    session.mkdir()
    shutil.copytree(FIXTURES / "westwood_tb", session / "cc=westwood_paper" / "seed=1")
    write_session(session, ["cc=westwood_paper/seed=1"])
    report = write_session_report(session)
    assert report.runs[0].westwood_samples is not None
    trace = session / "figures" / "wpaper-trace.png"
    assert trace.read_bytes().startswith(b"\x89PNG")
    html = report.html_path.read_text()
    assert 'alt="wpaper: cwnd, ssthresh and bandwidth estimate' in html
    assert "figures/wpaper-trace.png" in report.md_path.read_text()


def _lab_session(tmp_path, seeds=(1, 2, 3), name="s") -> tuple[Path, list[str]]:
    """lab-vs-cubic's clean path, westwood and cubic at ``seeds``, every run trustworthy."""
    session = tmp_path / "lab-vs-cubic" / name
    session.mkdir(parents=True, exist_ok=True)
    runs = []
    for cc, seed in [(cc, seed) for cc in ("westwood", "cubic") for seed in seeds]:
        params = {"loss_pct": 0, "cc": cc, "rtt_ms": 0}
        relative = add_run(session, f"lab-vs-cubic.loss_pct=0,cc={cc},rtt_ms=0", seed, params=params, cc=cc)
        _set_scenario(session, relative, "lab-vs-cubic")
        runs.append(relative)
    write_session(session, runs)
    return session, runs


def test_a_plain_sessions_report_is_its_one_look_and_judges_every_claim_at_the_designs_level(tmp_path, monkeypatch):
    from analysis.verdicts import sequential
    from testbed.workflows import decide

    seen: list[float] = []
    rule = claims.decide
    monkeypatch.setattr(
        claims,
        "decide",
        lambda claim, results, alpha=0.05, plan=True: seen.append(alpha) or rule(claim, results, alpha, plan),
    )
    session, _runs = _lab_session(tmp_path)
    write_session_report(session)
    record = sequential.read_record(session)
    assert record.design.max_looks == 1 and record.looks == 1 and len(record.runs_of[0]) == 6
    assert record.decided == {"lab-westwood-like-cubic-clean-path": (1, "reproduced")}
    assert set(seen) == {0.05}
    write_session_report(session)  # the same runs again: the same look
    assert sequential.read_record(session).looks == 1
    with pytest.raises(ValueError, match="already judged it at the full 0.05"):
        decide.planned_record(session)
    # a seed more in the same folder: no look is left, so the new runs are kept and not judged
    add_run(
        session,
        "lab-vs-cubic.loss_pct=0,cc=cubic,rtt_ms=0",
        4,
        params={"loss_pct": 0, "cc": "cubic", "rtt_ms": 0},
        cc="cubic",
    )
    _set_scenario(session, "lab-vs-cubic.loss_pct=0,cc=cubic,rtt_ms=0/seed=4", "lab-vs-cubic")
    write_session(session, [*_runs, "lab-vs-cubic.loss_pct=0,cc=cubic,rtt_ms=0/seed=4"])
    again = write_session_report(session)
    assert any("1 runs after the design's last look (look 1 of 1) are not judged" in p for p in again.problems)
    assert [v.conditions[0].b.__len__() for v in again.verdicts if v.conditions] == [3]


def test_a_claim_decided_at_an_earlier_look_is_reported_on_that_looks_runs_and_level(tmp_path, monkeypatch):
    from analysis.verdicts import sequential

    session, runs = _lab_session(tmp_path, seeds=(1, 2, 3, 4))
    record = sequential.Record(sequential.Design(4))
    first = sorted(r for r in runs if r.endswith(("seed=1", "seed=2", "seed=3")))
    record.look({"lab-westwood-like-cubic-clean-path": "reproduced"}, first)
    (session / sequential.RECORD_FILE).write_text(json.dumps(record.to_json()))
    seen: list[float] = []
    rule = claims.decide
    monkeypatch.setattr(
        claims,
        "decide",
        lambda claim, results, alpha=0.05, plan=True: seen.append(alpha) or rule(claim, results, alpha, plan),
    )
    report = write_session_report(session)
    (verdict,) = [v for v in report.verdicts if v.claim.id == "lab-westwood-like-cubic-clean-path"]
    design = sequential.Design(4)
    assert verdict.alpha == pytest.approx(design.alpha_at(1)) and len(verdict.conditions[0].a) == 3
    assert verdict.design_note.startswith("decided at look 1 of 4 on 6 runs")
    assert set(seen) <= {design.alpha_at(1), design.alpha_at(2)}, seen  # nothing at 0.05
    text = " ".join(report.summary_text.split())
    assert "98.2 % interval" in text and "tested at alpha 0.0179" in text


def test_a_report_over_two_sessions_takes_each_claims_session_or_says_the_pooled_look_is_exploratory(tmp_path):
    from testbed.report.pages.sessionpage import write_run_list

    one, runs_one = _lab_session(tmp_path, name="one")
    two, runs_two = _lab_session(tmp_path, name="two")  # the same seeds again: one replicate per seed
    write_session_report(one)
    out = tmp_path / "combined"
    write_run_list(out, [one / r for r in runs_one] + [two / r for r in runs_two], "lab-vs-cubic", "two sessions")
    report = write_session_report(out)
    (verdict,) = [v for v in report.verdicts if v.claim.id == "lab-westwood-like-cubic-clean-path"]
    assert verdict.design_note.startswith("exploratory: its runs come from 2 sessions")
    assert "paired over 3 seeds, 6 repeated runs averaged into their seed's" in verdict.measured
    assert not (out / "sequential.json").exists()
    only_one = tmp_path / "only-one"
    write_run_list(only_one, [one / r for r in runs_one], "lab-vs-cubic", "one session")
    (alone,) = [v for v in write_session_report(only_one).verdicts if v.claim.id == verdict.claim.id]
    assert alone.design_note == "" and alone.verdict == "reproduced"
