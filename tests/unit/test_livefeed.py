"""The live page's records (testbed/report/live/livefeed.py) from a real session's files: the same numbers the
analysis reads from them, whether the files are read whole (a replay) or as they grow (a live run)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from analysis.raw.loaders import load_tcp_probe
from analysis.runs import analyze as run_analysis
from analysis.verdicts import claims
from testbed.report.live import livefeed

STUDENT = Path(__file__).resolve().parents[1] / "fixtures" / "lab-wireless-student"


@pytest.fixture
def session(tmp_path) -> Path:
    return student_session(tmp_path)


def student_session(tmp_path: Path) -> Path:
    """The student fixture's session (6 real runs with their raw files), with the plan its runner had."""
    source = next((STUDENT / "results" / "wireless").iterdir())
    folder = tmp_path / source.name
    shutil.copytree(source, folder)
    runs = sorted(str(m.parent.relative_to(folder)) for m in folder.rglob("manifest.json"))
    (folder / "plan.json").write_text(json.dumps({"runs": [{"run_dir": r, "estimate_s": 20.0} for r in runs]}))
    return folder


def test_a_finished_session_gives_each_runs_records_in_plan_order(session):
    records = livefeed.SessionFeed(session).poll()
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "session" and kinds.count("result") == 12  # the end and the goodput, per run
    runs = [r["run"] for r in records if r["kind"] == "flow"]
    assert list(dict.fromkeys(runs)) == [
        r for r in json.loads((session / "plan.json").read_text())["runs"] for r in [r["run_dir"]]
    ]
    progress = [r for r in records if r["kind"] == "progress"]
    assert [p["done"] for p in progress] == [1, 2, 3, 4, 5, 6] and progress[-1]["finished"]
    assert livefeed.finished(session)


def test_the_windows_and_rtts_are_the_traces_own(session):
    """Each flow record is the last tcp_probe event of its bin, read by the analysis' own line parser."""
    records = livefeed.SessionFeed(session).poll()
    run = "cc=reno/seed=1"
    manifest = json.loads((session / run / "manifest.json").read_text())
    events = load_tcp_probe(session / run / "raw" / "tcp_probe.txt").events
    events = events[events["src_port"] == manifest["connections"][0]["client_port"]]
    t = events["t_mono_s"] - manifest["t0_monotonic"]
    flows = [r for r in records if r["kind"] == "flow" and r["run"] == run]
    assert len(flows) > 50
    for record in flows[5:40]:
        last = events[(t < record["t"]) & (t >= record["t"] - livefeed.BIN_S)].iloc[-1]
        assert record["cwnd"] == last["snd_cwnd"] and record["rtt_ms"] == pytest.approx(last["srtt"] / 1000)
    result = next(r for r in records if r["kind"] == "result" and r["run"] == run and "goodput_mbit" in r)
    flows_csv = (session / run / "flows.csv").read_text().splitlines()
    goodput = float(flows_csv[1].split(",")[flows_csv[0].split(",").index("goodput_mbit")])
    assert result["goodput_mbit"]["c0"] == pytest.approx(goodput)


def test_files_read_as_they_grow_give_the_same_records(session, tmp_path):
    """A run's trace and manifest written in pieces (a line cut in two, the end after the traffic) give
    the records the whole files give."""
    whole = [r for r in livefeed.SessionFeed(session).poll() if r.get("run") == "cc=reno/seed=1"]
    run = session / "cc=reno" / "seed=1"
    trace = (run / "raw" / "tcp_probe.txt").read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    growing = livefeed.RunTail(session, "cc=reno/seed=1")
    (run / "raw" / "tcp_probe.txt").write_text(trace[: len(trace) // 2 + 7])  # mid-line
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "running", "fidelity": None}))
    pieces = growing.poll()
    (run / "raw" / "tcp_probe.txt").write_text(trace)
    pieces += growing.poll()
    (run / "manifest.json").write_text(json.dumps(manifest))
    pieces += growing.poll()
    flows = [r for r in whole if r["kind"] == "flow"]
    assert [r for r in pieces if r["kind"] == "flow"] == flows
    assert [r["name"] for r in pieces if r["kind"] == "check"] == [r["name"] for r in whole if r["kind"] == "check"]


def test_the_expectations_are_the_papers_lines():
    manifest = {
        "topology": {
            "bottlenecks": [{"direction": "forward", "rate_mbit": 10.0}, {"direction": "reverse", "rate_mbit": 10.0}]
        },
        "connections": [{"direction": "forward", "base_rtt_ms": 100.0}, {"direction": "forward", "base_rtt_ms": 120.0}],
    }
    assert livefeed.expectations(manifest) == {"rate_mbit": 10.0, "fair_mbit": 5.0, "bdp_pkts": 83.3}
    assert livefeed.expectations({}) == {}


def test_a_suite_of_the_papers_experiments_gets_its_claims_as_the_report_judges_them(tmp_path):
    """The reproduce lab's student session (6 real runs of mobile-bernoulli): the claim's verdict, effect
    and interval on the page are those analysis.verdicts.claims gives on the same runs."""
    source = next((STUDENT.with_name("lab-reproduce-student") / "results" / "suite-claim").iterdir())
    folder = tmp_path / source.name
    shutil.copytree(source, folder)
    runs = sorted(m.parent for m in folder.rglob("manifest.json"))
    (folder / "plan.json").write_text(json.dumps({"runs": [{"run_dir": str(r.relative_to(folder))} for r in runs]}))
    records = livefeed.SessionFeed(folder).poll()
    [told] = [r for r in records if r["kind"] == "claims"]
    assert told["runs"] == 6
    expected = {v.claim.id: v for v in claims.verdicts([run_analysis.analyze_run(r, write=False) for r in runs])}
    row = next(c for c in told["claims"] if c["id"] == "mobile-westwood-beats-reno-bernoulli")
    verdict = expected[row["id"]]
    assert row["verdict"] == verdict.label == "reproduced"
    condition = next(c for c in verdict.conditions if c.condition == row["condition"])
    assert row["effect_pct"] == pytest.approx(100 * condition.difference, abs=0.05)
    assert (row["low_pct"], row["high_pct"]) == pytest.approx(tuple(100 * x for x in condition.interval()), abs=0.05)


def test_a_number_that_is_not_one_goes_to_the_page_as_null():
    """JSON has no NaN (a browser's JSON.parse rejects the whole record): an interval from one run a
    side, seen live in a suite's first runs, is sent as null."""
    from testbed.report.live import liveserver

    sent = liveserver._json({"a": float("nan"), "b": [float("inf"), 1.5], "c": "x"})
    assert sent == '{"a":null,"b":[null,1.5],"c":"x"}'
    assert json.loads(liveserver._json({"kind": "flow", "t": 0.2})) == {"kind": "flow", "t": 0.2}
    assert livefeed._percent(float("nan")) is None and livefeed._percent(0.333) == 33.3


def test_a_comparisons_page_follows_each_of_its_sessions_in_turn(session, tmp_path, monkeypatch):
    """``regress``/``series``/``bisect --live`` serve the page of their results root, under which each
    side's repetition is a session two folders deep (regress/<comparison>/<side>/<suite>/<session>): the
    page takes the newest as it is planned, and leaves out sessions older than the command."""
    monkeypatch.setattr(livefeed, "RESCAN_S", 0.0)
    root = tmp_path / "results"
    comparison = root / "regress" / "20261129T100945Z-6.1.0-55-vs-6.1.0-56"
    old = shutil.copytree(session, root / "wireless" / "20261128T090000Z-old")  # an earlier command's
    since = old.joinpath("plan.json").stat().st_mtime + 1
    feed = livefeed.SessionFeed(root, since=since)
    assert feed.poll() == []  # nothing of this command's yet
    shown = []
    for side, stamp in (("baseline", since + 5), ("candidate", since + 10)):
        folder = shutil.copytree(session, comparison / side / "suite-regression-check" / f"{int(stamp)}-s")
        os.utime(folder / "plan.json", (stamp, stamp))
        records = feed.poll()
        shown += [r["session"] for r in records if r["kind"] == "session"]
        assert sum(r["kind"] == "result" for r in records) == 12, side  # each session's runs, whole
    assert shown == [str(p) for p in sorted(comparison.glob("*/suite-regression-check/*"))]


def test_the_hosts_check_added_after_a_runs_end_reaches_the_page(session, monkeypatch):
    """The host adds its contention check to a run's manifest a moment after the run ends
    (testbed/host/hostload.py): the page reads the ended run again until it has it, and only then is the
    run settled (the stream's end waits for it); a run the host never judges settles after the wait."""
    path = sorted(session.rglob("manifest.json"))[0]
    run = path.parent.relative_to(session).as_posix()
    full = json.loads(path.read_text())
    checks = [c for c in full["fidelity"]["checks"] if c["name"] != "host contention"]
    bare = {**{k: v for k, v in full.items() if k != "host"}, "fidelity": {**full["fidelity"], "checks": checks}}
    path.write_text(json.dumps(bare))  # the run's end, before the host's amendment
    feed = livefeed.SessionFeed(session)
    told = [(r["run"], r["name"]) for r in feed.poll() if r["kind"] == "check"]
    assert (run, "host contention") not in told and not feed.settled
    path.write_text(json.dumps(full))  # the host amends the manifest
    assert [(r["run"], r["name"]) for r in feed.poll() if r["kind"] == "check"] == [(run, "host contention")]
    assert feed.settled
    path.write_text(json.dumps(bare))
    monkeypatch.setattr(livefeed, "HOST_CHECK_WAIT_S", 0.0)
    feed = livefeed.SessionFeed(session)
    feed.poll()
    assert feed.poll() == [] and feed.settled


def test_before_the_last_run_every_verdict_on_the_page_is_provisional(tmp_path):
    """The same session with one planned run still to come: the page's verdicts say provisional, and the
    page records no look (the report records the session's one look once every run is in)."""
    source = next((STUDENT.with_name("lab-reproduce-student") / "results" / "suite-claim").iterdir())
    folder = tmp_path / source.name
    shutil.copytree(source, folder)
    runs = [str(m.parent.relative_to(folder)) for m in sorted(folder.rglob("manifest.json"))]
    planned = [*runs, "mobile-bernoulli.loss_pct=5,cc=reno/seed=4"]
    (folder / "plan.json").write_text(json.dumps({"runs": [{"run_dir": r} for r in planned]}))
    records = livefeed.SessionFeed(folder).poll()
    [told] = [r for r in records if r["kind"] == "claims"]
    assert told["provisional"] is True
    row = next(c for c in told["claims"] if c["id"] == "mobile-westwood-beats-reno-bernoulli")
    assert row["verdict"] == "provisional: reproduced"
    assert not (folder / "sequential.json").exists()
