"""Grades that cannot be bought (testbed/labs/labels.py, evidence.py, intake.py): the cheats a
determined student tried on the wireless lab's real submission (tests/fixtures/lab-wireless-student),
each made consistent the way the student made it (the manifest's sha256s and identity computed again
by the project's own code, flows.csv written again by its analysis, the figure drawn again), and each
losing the points it should, with why:

* a run is what its raw files say: New Reno's runs relabelled as Westwood+, another seed's runs
  relabelled, a seed cloned from another seed, start times moved, a capture's clock compressed;
* evidence fails closed: a failed check deleted from the manifest, the file that decides a check
  removed from raw/ and from the file list; fewer seeds than lab start gave;
* a folder with a link or a FIFO in it is not graded, and the grade is never written through a link;
* the Gradescope autograder is not built without the course's secret unless told.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from analysis.runs import analyze as run_analysis
from testbed.labs import answerfile, autograder, definition, gradereport, intake, lab, studentruns, students
from testbed.results import rundir
from tests.unit.test_labs import (
    LABS,
    _analysed,
    _answer,
    _draw_goodput_bars,
    _reproduce,
    _submission,
    assert_cheat_graded,
)


def _session(results: Path) -> Path:
    return next((results / "wireless").iterdir())


def _made_consistent(work: Path, run: Path) -> None:
    """What a careful student does after editing a run: each raw file's sha256 and the run's identity
    computed again (by the project's own code), flows.csv written again by the analysis."""
    manifest = rundir.read_json(run / rundir.MANIFEST)
    manifest["files"] = {name: rundir.sha256_file(run / name) for name in manifest["files"] if (run / name).is_file()}
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))
    planned = studentruns.load_results(work, definition.load_lab(LABS / "wireless"), work / "results").identities
    manifest["identity"] = planned[(manifest["point_id"], manifest["seed"])]
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))
    flows = run_analysis.analyze_run(run, write=False).flows
    flows.to_csv(run / "flows.csv", index=False, float_format="%.10g")


def _redrawn(work: Path, results: Path) -> None:
    for run in sorted(p.parent for p in results.rglob(rundir.MANIFEST)):
        _made_consistent(work, run)
    _analysed(results)
    _draw_goodput_bars(_session(results))


def _edit_manifest(run: Path, **changes) -> None:
    manifest = rundir.read_json(run / rundir.MANIFEST)
    manifest.update(changes)
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


def _relabelled(run: Path, cc: str) -> None:
    manifest = rundir.read_json(run / rundir.MANIFEST)
    connections = [{**c, "cc": cc} for c in manifest["connections"]]
    resolved = json.loads(json.dumps(manifest["resolved"]).replace(f'"{manifest["params"]["cc"]}"', f'"{cc}"'))
    _edit_manifest(run, point_id=f"cc={cc}", params={"cc": cc}, connections=connections, resolved=resolved)


def _q1_from_runs(work: Path, results: Path) -> None:
    """Q1, and Q2's comparison, answered again from the runs as they are now (the cheat's own numbers)."""
    flows = pd.concat([pd.read_csv(f) for f in sorted(results.rglob("flows.csv"))], ignore_index=True)
    means = flows.groupby("cc")["goodput_mbit"].mean()
    _answer(
        work,
        "Q1",
        f"New Reno got a mean goodput of {means['reno']:.3f} Mbit/s over the seeds and Westwood+ "
        f"{means['westwood']:.3f} Mbit/s, each about half of the 2 Mbit/s radio link.\n\n"
        f"```numbers\nreno_goodput_mbit: {means['reno']:.3f}\n"
        f"westwood_goodput_mbit: {means['westwood']:.3f}\n```\n",
    )
    change = 100 * (means["westwood"] / means["reno"] - 1)
    q2 = answerfile.sections(work / "answers.md")["Q2"]
    _answer(
        work,
        "Q2",
        q2.replace(
            "Westwood+ is less than 1 % lower than New Reno",
            f"Westwood+ is {abs(change):.1f} % {'above' if change > 0 else 'below'} New Reno",
        ),
    )


def _labels_swapped(work: Path, results: Path) -> None:
    # the two algorithms' runs swapped, only the manifests edited: New Reno's better runs as Westwood+'s
    session = _session(results)
    (session / "cc=reno").rename(session / "swap")
    (session / "cc=westwood").rename(session / "cc=reno")
    (session / "swap").rename(session / "cc=westwood")
    for cc in ("reno", "westwood"):
        for run in (session / f"cc={cc}").iterdir():
            _relabelled(run, cc)
    _redrawn(work, results)
    _q1_from_runs(work, results)


def _seeds_relabelled(work: Path, results: Path) -> None:
    # another student's runs (seeds 1-3) relabelled as this student's seeds 4-6: folders renamed,
    # seeds edited, identities computed again
    scenario = work / "wireless.yaml"
    scenario.write_text(scenario.read_text().replace("seeds: [1, 2, 3]", "seeds: [4, 5, 6]"))
    for run in sorted(_session(results).glob("cc=*/seed=*"), reverse=True):
        seed = int(run.name.split("=")[1]) + 3
        _edit_manifest(run, seed=seed)
        run.rename(run.with_name(f"seed={seed}"))
    _redrawn(work, results)


def _seed_cloned(work: Path, results: Path) -> None:
    # seed 2's run copied as seed 3
    point = _session(results) / "cc=westwood"
    shutil.rmtree(point / "seed=3")
    shutil.copytree(point / "seed=2", point / "seed=3")
    _edit_manifest(point / "seed=3", seed=3)
    _redrawn(work, results)


def _one_seed(work: Path, results: Path) -> None:
    # one seed instead of the three lab start gave: two runs instead of six
    scenario = work / "wireless.yaml"
    scenario.write_text(scenario.read_text().replace("seeds: [1, 2, 3]", "seeds: [1]"))
    for run in _session(results).glob("cc=*/seed=[23]"):
        shutil.rmtree(run)
    _redrawn(work, results)
    _q1_from_runs(work, results)


def _dropped_packets(run: Path) -> None:
    log = run / "raw" / "tcpdump-ra.log"
    log.write_text(log.read_text().replace(" 0 packets dropped by kernel", " 212 packets dropped by kernel"))


def _failed_check_deleted(work: Path, results: Path) -> None:
    # a capture that dropped packets (the guest failed the run), the failed check deleted from the manifest
    run = _session(results) / "cc=reno" / "seed=2"
    _dropped_packets(run)
    manifest = rundir.read_json(run / rundir.MANIFEST)
    manifest["fidelity"]["checks"] = [c for c in manifest["fidelity"]["checks"] if c["name"] != "capture ra"]
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))
    _made_consistent(work, run)


def _evidence_removed(work: Path, results: Path) -> None:
    # the same run, the file that decides the check removed from raw/ and from the manifest's file list
    run = _session(results) / "cc=reno" / "seed=2"
    (run / "raw" / "tcpdump-ra.log").unlink()
    _made_consistent(work, run)


def _start_times_moved(work: Path, results: Path) -> None:
    # runs made before lab start: lab start moved after them, the runs' start and end moved after it
    (work / definition.LAB_START).write_text(
        json.dumps({"lab": "wireless", "started_utc": "2026-11-30T00:00:00+00:00"})
    )
    for run in sorted(p.parent for p in results.rglob(rundir.MANIFEST)):
        manifest = rundir.read_json(run / rundir.MANIFEST)
        _edit_manifest(
            run,
            started_utc=manifest["started_utc"].replace("2026-11-29", "2026-11-30"),
            ended_utc=manifest["ended_utc"].replace("2026-11-29", "2026-11-30"),
        )
    _redrawn(work, results)


def _compressed_clock(path: Path, factor: float) -> None:
    """A classic pcap's packet times brought closer to its first by ``factor`` (its bytes unchanged)."""
    data = bytearray(path.read_bytes())
    offset, first = 24, None
    while offset + 16 <= len(data):
        seconds, micros, included, _ = struct.unpack_from("<IIII", data, offset)
        t = seconds + micros / 1e6
        first = t if first is None else first
        t = first + (t - first) / factor
        struct.pack_into("<II", data, offset, int(t), round(t % 1 * 1e6) % 1_000_000)
        offset += 16 + included
    path.write_bytes(bytes(data))


def _capture_clock_compressed(work: Path, results: Path) -> None:
    # Westwood+'s captures' timestamps compressed by 1/1.3, everything after made consistent: "+30 %"
    for capture in sorted((_session(results) / "cc=westwood").glob("seed=*/raw/ra.pcap")):
        _compressed_clock(capture, 1.3)
    _redrawn(work, results)
    _q1_from_runs(work, results)


def _comparison_reversed(work: Path, results: Path) -> None:
    # the numbers block right, the prose claiming the opposite, and significance
    _answer(
        work,
        "Q2",
        "Westwood+ got 19 % higher goodput than New Reno, a significant difference by Welch's "
        "t-test, although the seeds spread and three runs can detect little.",
    )


def _rates_in_another_unit(work: Path, results: Path) -> None:
    _answer(work, "Q1", answerfile.sections(work / "answers.md")["Q1"].replace("(mean 1.04 Mbit/s", "(mean 2.5 Mbps"))


def _rubric_negated(work: Path, results: Path) -> None:
    _answer(
        work,
        "Q3",
        "New Reno does not halve its window at a loss here. Westwood+ does not set ssthresh from "
        "any bandwidth estimate at all. Linux has no SACK, RACK or PRR.",
    )


#: cheat -> (the points each task keeps, what the grade says about it)
CHEATS = {
    _labels_swapped: ({"t1": 0, "t2": 3, "t3": 3}, "ran westwood; iperf3's own output says its sender used reno"),
    _seeds_relabelled: ({"t1": 0, "t2": 3, "t3": 3}, "its draws were seeded by another seed than the manifest's"),
    _seed_cloned: ({"t1": 0, "t2": 3, "t3": 3}, "seed 2 and seed 3: the same capture as another run"),
    _one_seed: ({"t1": 0, "t2": 3, "t3": 3}, "the lab asks for at least 3 seeds a point"),
    _failed_check_deleted: ({"t1": 0, "t2": 3, "t3": 3}, "manifest.json lacks the check 'capture ra'"),
    _evidence_removed: ({"t1": 0, "t2": 3, "t3": 3}, "the check 'capture ra' has no evidence: raw/tcpdump-ra.log"),
    _start_times_moved: ({"t1": 0, "t2": 3, "t3": 3}, "iperf3's own output says c0 started 2026-11-29"),
    _capture_clock_compressed: ({"t1": 0, "t2": 3, "t3": 3}, "apart: its clock is not the capture's"),
    _comparison_reversed: (
        {"t1": 4, "t2": 0, "t3": 3},
        "19 % is not the runs' difference; your runs give westwood -0.7 % against reno",
    ),
    _rates_in_another_unit: ({"t1": 4, "t2": 0, "t3": 3}, "the answer says 2.5 Mbit/s, which neither your runs"),
    _rubric_negated: ({"t1": 4, "t2": 3, "t3": 0}, "states none of what the answer needs"),
}


@pytest.mark.parametrize("cheat", list(CHEATS), ids=[c.__name__.strip("_") for c in CHEATS])
def test_each_relabelling_and_each_missing_evidence_loses_its_points_and_says_why(cheat, tmp_path):
    assert_cheat_graded(cheat, CHEATS[cheat], tmp_path)


def test_the_honest_submission_made_consistent_again_keeps_its_points(tmp_path):
    # the cheats' own tools applied to nothing: the consistency steps alone take no point
    work, results = _submission(tmp_path)
    _redrawn(work, results)
    checked = lab.check(LABS / "wireless", work, results)
    assert checked.grade.score == 10, gradereport.text(checked.grade)


def test_a_compressed_capture_raises_the_captures_goodput_as_the_cheat_meant(tmp_path):
    source = next(Path(__file__).parents[1].glob("fixtures/lab-wireless-student/results/wireless/*/cc=westwood/seed=1"))
    run = tmp_path / "seed=1"
    shutil.copytree(source, run)
    before = run_analysis.analyze_run(run, write=False).flows["goodput_mbit"].iloc[0]
    _compressed_clock(run / "raw" / "ra.pcap", 1.3)
    after = run_analysis.analyze_run(run, write=False).flows["goodput_mbit"].iloc[0]
    assert 1.25 < after / before < 1.35


def test_a_submission_with_a_link_or_a_fifo_is_not_graded_and_nothing_outside_is_written(tmp_path):
    work, results = _submission(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text("the instructor's file\n")
    (work / "grade").mkdir()
    (work / "grade" / "results.json").symlink_to(outside)
    with pytest.raises(intake.Unsafe, match=r"grade/results.json \(a symbolic link\).*cp -L"):
        lab.check(LABS / "wireless", work, results)
    assert outside.read_text() == "the instructor's file\n"
    (work / "grade" / "results.json").unlink()
    os.mkfifo(work / "answers.fifo")
    with pytest.raises(intake.Unsafe, match=r"answers.fifo \(a FIFO\)"):
        lab.check(LABS / "wireless", work, results)


def test_a_results_folder_that_links_to_another_students_is_refused(tmp_path):
    work, results = _submission(tmp_path / "mine")
    other, _ = _submission(tmp_path / "other")
    shutil.rmtree(results)
    results.symlink_to(other / "results")
    before = sorted(p.name for p in (other / "results").iterdir())
    with pytest.raises(intake.Unsafe, match="results is a symbolic link"):
        lab.check(LABS / "wireless", work, results)
    assert sorted(p.name for p in (other / "results").iterdir()) == before  # no catalog written there


def test_the_grade_replaces_a_link_instead_of_writing_through_it(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "results.json").write_text("kept\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "grade").symlink_to(outside)
    written = intake.write_fresh(work / "grade", {"results.json": b"{}\n"})
    assert not written.is_symlink() and (written / "results.json").read_text() == "{}\n"
    assert (outside / "results.json").read_text() == "kept\n"


def test_lab_duplicates_finds_a_shared_capture_under_a_dummy_file(tmp_path):
    alice, _ = _submission(tmp_path / "alice")
    bob, _ = _submission(tmp_path / "bob")
    shutil.rmtree(bob / "results")
    shutil.copytree(alice / "results", bob / "results")
    for raw in (bob / "results").rglob("raw"):
        (raw / "dummy.txt").write_text("mine\n")  # the file list differs now; the captures do not
    assert len(lab.shared_runs([alice, bob])) == 6


def test_the_autograder_is_not_built_without_the_course_secret_unless_told(tmp_path, monkeypatch):
    monkeypatch.delenv(students.SECRET_ENV, raising=False)
    with pytest.raises(definition.LabError, match=f"{students.SECRET_ENV}.*--no-student-check"):
        autograder.build("wireless", tmp_path)
    assert not list(tmp_path.iterdir())
    path = autograder.build("wireless", tmp_path, student_check=False)
    with zipfile.ZipFile(path) as zf:
        assert "without the student check" in zf.read("README.txt").decode()


def test_a_reproduce_answer_hedged_over_every_verdict_earns_none(tmp_path):
    work = _reproduce(tmp_path)
    _answer(
        work,
        "Q2",
        "Reproduced, or perhaps not reproduced, undecided or even opposite, for "
        "mobile-westwood-beats-reno-bernoulli: the mean is 1.53 Mbit/s and p = 0.0053.",
    )
    graded = lab.check(LABS / "reproduce", work, work / "results").grade
    assert graded.tasks[1].score == 0, gradereport.text(graded)
    assert "the answer states 2 verdicts (reproduced, not reproduced)" in gradereport.text(graded)


def test_a_negated_term_does_not_state_its_concept_but_a_negation_in_the_term_does():
    from testbed.labs import statements

    assert statements.negated("Westwood+ does not set ssthresh from its estimate.", "ssthresh")
    assert not statements.negated("Westwood+ sets ssthresh, not cwnd, from its estimate.", "ssthresh")
    assert not statements.negated("It is not the papers': it recovers with SACK.", "sack")
    assert not statements.negated("A random loss is not congestion.", "not congestion")
    assert statements.in_mbit("0.8 and 1.1 Mbps, 2500 kbit/s, 0.25 MB/s") == "0.8 and 1.1 Mbit/s, 2.5 Mbit/s, 2 Mbit/s"


def _rerunner(source: Path, calls: list):
    """A stand-in for the grader's session runner: the honest run of the point and seed asked for (from the
    student's fixture, as the guest would make it again), copied into the grader's folder."""

    def run(scenario, where, clock):
        [spec] = scenario.runs()
        calls.append((spec.point_id, spec.seed, where, clock))
        original = next(source.rglob(f"{spec.point_id}/seed={spec.seed}"))
        shutil.copytree(original, where / "session" / spec.point_id / f"seed={spec.seed}")
        return []

    return run


def test_the_grader_runs_a_graded_run_again_and_a_forged_goodput_goes_to_grading_by_hand(tmp_path):
    """In real time one seed's repeats here differ by up to 38 %: the consistent +30 % forgery is within
    what an honest rerun can give (the limit, stated), a +60 % one goes to grading by hand."""
    from testbed.labs import reruns

    honest_source = Path(__file__).parents[1] / "fixtures" / "lab-wireless-student" / "results"
    lab_ = definition.load_lab(LABS / "wireless")
    work, results = _submission(tmp_path / "honest")
    calls = []
    found = studentruns.load_results(work, lab_, results)
    checks = reruns.rerun_checks(work, lab_, found, _rerunner(honest_source, calls), random.Random(1))
    assert [c.name.split(" seed ")[0] for c in checks] == ["rerun of cc=reno", "rerun of cc=westwood"]
    assert all(c.ok and c.graded and "within 40%" in c.detail for c in checks), checks
    assert [clock for *_, clock in calls] == ["real", "real"]  # the submitted runs' clock (their manifests')
    assert all(not where.exists() for *_, where, _ in calls)  # the grader's folder, removed after
    forged, forged_results = _submission(tmp_path / "forged")
    _capture_clock_compressed(forged, forged_results)  # Westwood+'s goodput +30 %, consistent down to flows.csv
    found = studentruns.load_results(forged, lab_, forged_results)
    checks = reruns.rerun_checks(forged, lab_, found, _rerunner(honest_source, []), random.Random(1))
    [westwood] = [c for c in checks if "westwood" in c.name]
    assert westwood.graded and "(-23.1%): within 40%" in westwood.detail, westwood
    found.flows.loc[found.flows["cc"] == "westwood", "goodput_mbit"] *= 1.6 / 1.3
    [westwood] = [
        c
        for c in reruns.rerun_checks(forged, lab_, found, _rerunner(honest_source, []), random.Random(1))
        if "westwood" in c.name
    ]
    assert not westwood.graded and "beyond 40% of what the grader's machine gives in real time" in westwood.detail
    failing = reruns.rerun_checks(work, lab_, studentruns.load_results(work, lab_, results), lambda *_: ["a run"])
    assert all(not c.graded and "did not complete on the grader's machine" in c.detail for c in failing)


def test_a_run_made_in_virtual_time_is_run_again_in_virtual_time_and_held_closer(tmp_path):
    """A submitted run's manifest says its clock; the rerun runs on it, and virtual time's repeats agree
    closely enough that the +30 % forgery (within real time's 40 %) goes to grading by hand."""
    from testbed.labs import reruns

    lab_ = definition.load_lab(LABS / "wireless")
    work, results = _submission(tmp_path)
    for manifest in results.rglob(rundir.MANIFEST):
        data = json.loads(manifest.read_text())
        data["backend"] = {**(data.get("backend") or {}), "clock": "virtual"}
        manifest.write_text(json.dumps(data))
    assert {reruns.run_clock(m.parent) for m in results.rglob(rundir.MANIFEST)} == {"virtual"}
    found = studentruns.load_results(work, lab_, results)
    found.flows.loc[found.flows["cc"] == "westwood", "goodput_mbit"] *= 1.3
    calls = []
    checks = reruns.rerun_checks(work, lab_, found, _rerunner(results, calls), random.Random(1))
    assert [clock for *_, clock in calls] == ["virtual", "virtual"]
    [reno, westwood] = sorted(checks, key=lambda c: c.name)
    assert reno.graded and "within 20%" in reno.detail, reno
    assert not westwood.graded and "beyond 20% of what the grader's machine gives in virtual time" in westwood.detail


def test_a_course_keeps_its_own_hidden_variants_apart_from_the_public_examples(tmp_path, monkeypatch):
    own = tmp_path / "instructor" / "wireless"
    own.mkdir(parents=True)
    (own / "hidden.yaml").write_text(
        (LABS / "wireless" / "hidden.yaml").read_text().replace("seeds: [4, 5]", "seeds: [6, 7]")
    )
    monkeypatch.setenv(definition.INSTRUCTOR_ENV, str(tmp_path / "instructor"))
    work, results = _submission(tmp_path)
    asked = []
    lab.check(LABS / "wireless", work, results, lambda scenario, where: asked.append(scenario.runs()) or ["x"])
    assert sorted({r.seed for r in asked[0]}) == [6, 7]  # the course's own seeds, not the shipped example's
