"""Suites: the default suite loads every experiment once, compressed; bad suite files are refused
with the valid choices named."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import load_scenario
from testbed.scenario.suite import compress, find_suite, load_suite

PROJECT = Path(__file__).resolve().parents[2]
SCENARIOS = PROJECT / "scenarios"
SUITES = SCENARIOS / "suites"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_the_tour_suite_holds_one_point_of_every_experiment():
    suite = load_suite(find_suite("tour", SUITES), SCENARIOS)
    experiments = sorted(p.stem for p in SCENARIOS.glob("*.yaml") if p.stem != "default")
    assert sorted(point.scenario_name for point in suite.points) == experiments
    for point in suite.points:
        assert point.scenario.duration_s == 15
        assert point.scenario.seeds == [1]
        assert point.point_id.startswith(f"{point.scenario_name}.")


def test_the_variants_suite_holds_every_variant_profile_but_the_uncompressible_uploads():
    suite = load_suite(find_suite("variants", SUITES), SCENARIOS)
    variants = {
        (path.stem, profile)
        for path in SCENARIOS.glob("*.yaml")
        for profile in load_scenario(path, None).profiles
        if profile not in ("quick", "full")
    }
    # pipe-size's variants upload fixed sizes that do not fit a 15 s compression (the suite file says so)
    expected = {variant for variant in variants if variant[0] != "pipe-size"}
    assert expected and {(p.scenario_name, p.profile) for p in suite.points} == expected
    for point in suite.points:
        assert point.point_id.startswith(f"{point.scenario_name}@{point.profile}.")
        assert [run.profile for run in point.runs()] == [point.profile]
        assert point.scenario.duration_s == 15


def test_an_entry_profile_loads_that_profile_and_an_unknown_one_names_the_valid_ones(tmp_path):
    path = write(
        tmp_path,
        'experiments:\n  - {scenario: parking-lot, profile: full-cross-vegas, point: "hops=2,cc=reno"}\n'
        '  - {scenario: parking-lot, point: "hops=3,cc=westwood"}\n',
    )
    cross, plain = load_suite(path, SCENARIOS).points
    assert (cross.profile, cross.point_id) == ("full-cross-vegas", "parking-lot@full-cross-vegas.hops=2,cc=reno")
    assert {f.cc for f in cross.scenario.flows[1:]} == {"vegas"}
    assert (plain.profile, plain.point_id) == (None, "parking-lot.hops=3,cc=westwood")
    path = write(tmp_path, "experiments:\n  - {scenario: parking-lot, profile: full-cross}\n")
    with pytest.raises(ScenarioError, match="unknown profile 'full-cross'.*full-cross-vegas"):
        load_suite(path, SCENARIOS)


def test_compress_scales_the_schedule_but_not_the_path():
    (point,) = [p for p in load_scenario(SCENARIOS / "reverse-onoff.yaml", "quick").points if p.params["cc"] == "reno"]
    short = compress(point, 10)
    scale = 10 / point.scenario.duration_s
    for before, after in zip(point.scenario.flows, short.scenario.flows, strict=True):
        assert after.start_s == pytest.approx(before.start_s * scale)
        assert after.rtt_ms == before.rtt_ms
        if before.periods:
            assert after.periods[0][1] == pytest.approx(before.periods[0][1] * scale)
    assert short.scenario.topology == point.scenario.topology


def test_an_unknown_point_lists_the_valid_ones(tmp_path):
    path = write(tmp_path, "experiments:\n  - scenario: parking-lot\n    point: hops=4,cc=westwood\n")
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    assert "'hops=4,cc=westwood' is not a point of parking-lot" in str(error.value)
    assert "hops=3,cc=westwood" in str(error.value)


def test_an_unknown_scenario_and_a_misspelled_field_are_both_reported(tmp_path):
    path = write(tmp_path, "experiments:\n  - scenario: parking-lots\n    piont: x\n")
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    message = "line 3, experiments[0].piont: unknown field; valid fields here: scenario, point, profile, control"
    assert message in str(error.value)
    path = write(tmp_path, "experiments:\n  - scenario: parking-lots\n")
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    assert "did you mean 'parking-lot'" in str(error.value)


def test_a_negative_traffic_time_is_refused(tmp_path):
    path = write(tmp_path, "traffic_s: -5\nexperiments:\n  - scenario: pipe-size\n")
    with pytest.raises(ScenarioError, match="traffic_s"):
        load_suite(path, SCENARIOS)


def test_an_unknown_suite_names_the_available_ones():
    with pytest.raises(ScenarioError, match="available: bufferbloat, default, "):
        find_suite("nope", SUITES)


def test_bools_and_numbers_in_each_others_place_name_the_line_and_what_is_valid(tmp_path):
    path = write(
        tmp_path,
        "traffic_s: true\nseeds: [1, true]\nexperiments:\n  - {scenario: regression/upload, control: {sack: 1}}\n",
    )
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    assert str(error.value).splitlines() == [
        f"{path}: 3 problems:",
        "  line 1, traffic_s: expected a number in seconds, got the bool true",
        "  line 2, seeds[1]: expected a whole number, got the bool true",
        "  line 4, experiments[0].control.sack: expected true or false, got 1",
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("experiments: " + "[" * 5000 + "]" * 5000 + "\n", "  line 1: lists and mappings are nested more than 64"),
        ("experiments:\n" + "- " * 5000 + "x\n", "  line 2: lists and mappings are nested more than 64"),
        ("experiments:\n" + "- x\n" * 200_000, "  line 10001: the file has 200001 lines; a scenario or suite file"),
        ("description: '" + "x" * (1 << 20) + "'\n", "  the file is larger than 1 MiB; a scenario or suite file"),
        ("a: &x [*x]\n", "  an alias (*name) is used inside the list or mapping that its anchor (&name) marks"),
    ],
    ids=["deep-flow", "deep-block", "long", "large", "alias-cycle"],
)
def test_a_suite_file_is_bounded_like_a_scenario_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    first, problem = str(error.value).splitlines()
    assert first == f"{path}: 1 problem:"
    assert problem.startswith(message)


def test_a_duplicate_key_in_a_suite_is_an_error(tmp_path):
    path = write(tmp_path, "profile: quick\nprofile: full\nexperiments:\n  - scenario: regression/upload\n")
    with pytest.raises(ScenarioError, match=r"line 2, profile: duplicate key \(first given on line 1\)"):
        load_suite(path, SCENARIOS)


def test_a_suite_lists_at_most_200_experiments(tmp_path):
    path = write(tmp_path, "experiments:\n" + "  - scenario: regression/upload\n" * 201)
    with pytest.raises(ScenarioError, match="line 1, experiments: too many items: at most 200, got 201"):
        load_suite(path, SCENARIOS)


def test_the_default_suite_runs_one_comparison_long_enough_and_headline_the_three():
    suite = load_suite(find_suite("default", SUITES), SCENARIOS)
    assert [point.point_id for point in suite.points] == [
        "mobile-bernoulli.loss_pct=5,cc=westwood_ml",
        "mobile-bernoulli.loss_pct=5,cc=reno",
    ]
    for point in suite.points:
        assert point.scenario.seeds == [4, 5, 6, 7, 8] and point.scenario.duration_s == 25
        assert "westwood" not in {flow.cc for flow in point.scenario.flows}
        assert point.params["cc"] == point.scenario.flows[0].cc
    # 10 runs of 25 s: about 5.3 min at ~5 s of overhead per run, 7.5 min in all on a fresh machine
    assert len(suite.runs()) == 10
    headline = load_suite(find_suite("headline", SUITES), SCENARIOS)
    lengths = {p.point_id.split(".")[0]: p.scenario.duration_s for p in headline.points}
    assert lengths == {"mobile-bernoulli": 25, "wireless-gilbert": 100, "lab-vs-cubic": 25}
    assert len(headline.runs()) == 18


def test_run_as_maps_the_flows_and_shows_it_in_params_and_id_also_when_no_swept_cc_shows_it(tmp_path):
    path = write(
        tmp_path,
        "run_as: {westwood: westwood_ml}\nexperiments:\n"
        '  - {scenario: parking-lot, point: "hops=3,cc=westwood"}\n'
        '  - {scenario: parking-lot, point: "hops=3,cc=reno"}\n'
        "  - {scenario: pipe-size}\n",
    )
    mapped, unmapped, fixed = load_suite(path, SCENARIOS).points
    assert mapped.point_id == "parking-lot.hops=3,cc=westwood_ml" and mapped.params["cc"] == "westwood_ml"
    assert mapped.runs()[0].params["cc"] == "westwood_ml"
    assert mapped.scenario.flows[0].cc == "westwood_ml"
    assert unmapped.point_id == "parking-lot.hops=3,cc=reno" and "westwood" not in str(unmapped.params)
    # pipe-size's westwood flow is not swept: a run_as.cc parameter says what ran
    assert {flow.cc for flow in fixed.scenario.flows} == {"westwood_ml", "reno"}
    assert fixed.params["run_as.cc"] == "westwood_ml" and fixed.point_id.endswith(",run_as.cc=westwood_ml")


def test_run_as_names_an_unknown_algorithm_with_its_line_and_the_valid_ones(tmp_path):
    path = write(tmp_path, "run_as:\n  westwood: westwod_ml\nexperiments:\n  - scenario: regression/upload\n")
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    (problem,) = str(error.value).splitlines()[1:]
    assert problem.startswith("  line 2, run_as.westwood: 'westwod_ml' is not a known congestion-control algorithm")
    assert "valid: westwood, reno, cubic" in problem and "westwood_ml" in problem
    assert "did you mean 'westwood_ml'" in problem
    path = write(tmp_path, "run_as: {vegass: reno}\nexperiments:\n  - scenario: regression/upload\n")
    with pytest.raises(ScenarioError, match="line 1, run_as.vegass: 'vegass' is not a known"):
        load_suite(path, SCENARIOS)


def test_point_ids_are_the_files_own_ids_mapped_after_selection(tmp_path):
    path = write(
        tmp_path,
        'run_as: {westwood: westwood_ml}\nexperiments:\n  - {scenario: parking-lot, point: "hops=3,cc=westwood_ml"}\n',
    )
    with pytest.raises(
        ScenarioError, match="'hops=3,cc=westwood_ml' is not a point of parking-lot.*hops=3,cc=westwood"
    ):
        load_suite(path, SCENARIOS)


def test_run_as_that_makes_two_points_one_is_an_error(tmp_path):
    path = write(
        tmp_path,
        "run_as: {westwood: westwood_ml}\nexperiments:\n"
        '  - {scenario: regression/dumbbell, points: ["cc=westwood", "cc=westwood_ml"]}\n',
    )
    message = r"line 3, experiments\[0\]: dumbbell.cc=westwood_ml is already in the suite"
    with pytest.raises(ScenarioError, match=message):
        load_suite(path, SCENARIOS)


def test_points_lists_several_points_and_an_entry_overrides_seeds_and_traffic(tmp_path):
    path = write(
        tmp_path,
        "traffic_s: 15\nseeds: [1]\nexperiments:\n"
        "  - scenario: mobile-bernoulli\n    points:\n      - loss_pct=5,cc=westwood\n      - loss_pct=5,cc=reno\n"
        "    seeds: [4, 5]\n    traffic_s: 8\n"
        '  - {scenario: parking-lot, point: "hops=3,cc=westwood"}\n',
    )
    westwood, reno, other = load_suite(path, SCENARIOS).points
    assert [westwood.point_id, reno.point_id] == [
        "mobile-bernoulli.loss_pct=5,cc=westwood",
        "mobile-bernoulli.loss_pct=5,cc=reno",
    ]
    assert westwood.scenario.seeds == reno.scenario.seeds == [4, 5]
    assert westwood.scenario.duration_s == reno.scenario.duration_s == 8
    assert (other.scenario.seeds, other.scenario.duration_s) == ([1], 15)


def test_point_and_points_together_is_an_error_and_a_bad_id_in_points_is_named(tmp_path):
    path = write(
        tmp_path,
        "experiments:\n"
        '  - {scenario: parking-lot, point: "hops=3,cc=reno", points: ["hops=3,cc=westwood"]}\n'
        '  - {scenario: parking-lot, points: ["hops=3,cc=reno", "hops=9,cc=reno"]}\n',
    )
    with pytest.raises(ScenarioError) as error:
        load_suite(path, SCENARIOS)
    lines = str(error.value).splitlines()
    assert lines[1] == "  line 2, experiments[0]: give point or points, not both"
    assert lines[2].startswith("  line 3, experiments[1].points: 'hops=9,cc=reno' is not a point of parking-lot")


def test_a_suite_that_judges_the_seeds_that_chose_its_windows_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "seeds: [2, 4]\nchosen_on: [1, 2]\nconfirmed_on: [2, 5]\nexperiments:\n"
        "  - scenario: mobile-bernoulli\n    points: ['loss_pct=5,cc=westwood']\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_suite(path, SCENARIOS)
    text = str(caught.value)
    assert "seeds [2] chose this suite's windows (chosen_on [1, 2])" in text
    assert "confirmed_on: seeds [2] are in chosen_on too" in text
