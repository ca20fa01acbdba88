"""Scenario files: loading, sweeps, profiles, identities and the error messages a student reads."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from testbed.scenario import profiles as profiles_module
from testbed.scenario import sweep as sweep_module
from testbed.scenario import yamlfile as yamlfile_module
from testbed.scenario.algorithms import REGISTRY
from testbed.scenario.errors import ScenarioError
from testbed.scenario.load import find_scenario, load_scenario, load_scenario_text, scenario_from_dict
from testbed.scenario.schema import Flow, Scenario
from topologies.dumbbell import DumbbellParams
from topologies.lossmodel import BernoulliLoss, GilbertElliottLoss, TimedTwoStateLoss
from topologies.params import LinkParams

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
CC_NAMES = ["westwood", "reno", "cubic", "vegas", "bbr"]


def load(text: str, profile: str | None = None, name: str = "test.yaml"):
    return load_scenario_text(textwrap.dedent(text), name=name, profile=profile)


def problems_of(text: str, profile: str | None = None) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        load(text, profile)
    return caught.value


BASE = """\
topology:
  name: dumbbell
  bottleneck:
    rate_mbit: 10
    delay_ms: 10
flows:
  - cc: reno
    rtt_ms: 100
duration_s: 20
"""


# --------------------------------------------------------------------------------------------------
# Loading and sweeps


def test_default_suite_is_five_algorithms_times_two_loss_rates():
    loaded = load_scenario(SCENARIOS / "default.yaml")
    assert loaded.name == "default"
    assert loaded.profile is None
    assert loaded.description.startswith("Default quick suite")
    expected = [f"loss_pct={loss},cc={cc}" for loss in (0, 1) for cc in CC_NAMES]
    assert [point.point_id for point in loaded.points] == expected
    assert loaded.points[1].params == {"loss_pct": 0, "cc": "reno"}
    for point in loaded.points:
        assert point.scenario.flows[0].cc == point.params["cc"]
        assert point.scenario.topology.bottleneck.loss_pct == point.params["loss_pct"]
        assert point.scenario.topology.bottleneck.rate_mbit == 10
    assert len(loaded.runs()) == 10
    assert {run.seed for run in loaded.runs()} == {1}


def test_file_without_lists_is_one_point_named_default():
    loaded = load(BASE)
    assert [point.point_id for point in loaded.points] == ["default"]
    assert loaded.points[0].params == {}
    assert loaded.points[0].scenario.duration_s == 20


def test_axes_sharing_a_leaf_name_get_dotted_paths():
    text = BASE.replace(
        "flows:\n  - cc: reno\n    rtt_ms: 100\n",
        "flows:\n  - cc: [reno, cubic]\n    rtt_ms: 100\n  - cc: [bbr, vegas]\n    rtt_ms: [100, 200]\n",
    )
    loaded = load(text)
    assert len(loaded.points) == 8
    first = loaded.points[0]
    assert list(first.params) == ["flows[0].cc", "flows[1].cc", "rtt_ms"]
    assert first.point_id == "flows.0.cc=reno,flows.1.cc=bbr,rtt_ms=100"
    assert re.fullmatch(r"[A-Za-z0-9._+=,-]+", first.point_id)
    last = loaded.points[-1]
    assert [flow.cc for flow in last.scenario.flows] == ["cubic", "vegas"]
    assert last.scenario.flows[1].rtt_ms == 200


def test_list_typed_fields_are_values_not_sweeps():
    text = BASE.replace("    rtt_ms: 100\n", "    rtt_ms: 100\n    periods: [[0, 5], [10, 15]]\n")
    loaded = load(text + "seeds: [3, 1, 2]\n")
    assert [point.point_id for point in loaded.points] == ["default"]
    scenario = loaded.points[0].scenario
    assert scenario.seeds == [3, 1, 2]
    assert scenario.flows[0].periods == [(0, 5), (10, 15)]
    assert [run.seed for run in loaded.runs()] == [3, 1, 2]


def test_sweep_over_topology_value_follows_the_union_by_name():
    loaded = load(BASE.replace("rate_mbit: 10", "rate_mbit: [10, 100]"))
    assert [point.point_id for point in loaded.points] == ["rate_mbit=10", "rate_mbit=100"]
    assert loaded.points[1].scenario.topology.bottleneck.rate_mbit == 100


def test_find_scenario_by_name_and_unknown_name_lists_available(tmp_path):
    assert find_scenario("default", SCENARIOS) == SCENARIOS / "default.yaml"
    (tmp_path / "alpha.yaml").write_text(BASE)
    (tmp_path / "beta.yml").write_text(BASE)
    assert find_scenario("beta", tmp_path) == tmp_path / "beta.yml"
    with pytest.raises(ScenarioError) as caught:
        find_scenario("alpah", tmp_path)
    assert "available: alpha, beta" in str(caught.value)
    assert "did you mean 'alpha'?" in str(caught.value)


def test_load_scenario_names_the_scenario_after_the_file(tmp_path):
    path = tmp_path / "my_exp.yaml"
    path.write_text(BASE)
    loaded = load_scenario(path)
    assert loaded.name == "my_exp"
    assert loaded.path == path
    assert loaded.runs()[0].scenario_name == "my_exp"


# --------------------------------------------------------------------------------------------------
# Profiles

PROFILED = BASE + textwrap.dedent("""\
    seeds: [1]
    profiles:
      quick:
        duration_s: 30
      full:
        duration_s: 1000
        seeds: [1, 2, 3]
        topology:
          bottleneck:
            loss_pct: [0, 1]
""")


def test_profile_quick_is_used_when_none_is_named():
    loaded = load(PROFILED)
    assert loaded.profile == "quick"
    assert loaded.profiles == ("quick", "full")
    assert loaded.points[0].scenario.duration_s == 30


def test_profile_deep_merges_maps_and_replaces_lists():
    loaded = load(PROFILED, profile="full")
    assert loaded.profile == "full"
    assert [point.point_id for point in loaded.points] == ["loss_pct=0", "loss_pct=1"]
    scenario = loaded.points[1].scenario
    assert scenario.duration_s == 1000
    assert scenario.seeds == [1, 2, 3]
    # merged, not replaced: the base's other bottleneck keys survive
    assert scenario.topology.bottleneck.rate_mbit == 10
    assert scenario.topology.bottleneck.delay_ms == 10
    assert scenario.topology.bottleneck.loss_pct == 1
    assert len(loaded.runs()) == 6


def test_unknown_profile_lists_the_files_profiles():
    error = problems_of(PROFILED, profile="ful")
    assert "unknown profile 'ful'" in str(error)
    assert "quick, full" in str(error)
    assert "did you mean 'full'?" in str(error)


def test_profile_requested_from_a_file_without_profiles_is_an_error():
    assert "defines no profiles" in str(problems_of(BASE, profile="full"))


def test_error_in_a_profile_names_the_profiles_line():
    text = PROFILED.replace("    duration_s: 1000\n", "    duration_s: -5\n")
    error = problems_of(text, profile="full")
    line = text.splitlines().index("    duration_s: -5") + 1
    assert f"line {line}, duration_s: -5 is out of range" in str(error)


# --------------------------------------------------------------------------------------------------
# Error messages


def line_of(text: str, fragment: str, occurrence: int = 1) -> int:
    hits = [number for number, line in enumerate(text.splitlines(), start=1) if fragment in line]
    return hits[occurrence - 1]


def test_unknown_field_lists_valid_fields_and_suggests():
    text = BASE.replace("rate_mbit: 10", "rate_mbps: 10")
    error = problems_of(text)
    assert str(error).splitlines()[0] == "test.yaml: 1 problem:"
    (problem,) = error.problems
    assert problem.line == line_of(text, "rate_mbps")
    assert problem.path == "topology.bottleneck.rate_mbps"
    assert "valid fields here: rate_mbit, delay_ms, loss_pct, loss, queue_pkts, queue_bdp, queue" in problem.message
    assert "did you mean 'rate_mbit'?" in problem.message


def test_unknown_congestion_control_lists_registry_and_suggests():
    error = problems_of(BASE.replace("cc: reno", "cc: westwod"))
    (problem,) = error.problems
    assert (problem.line, problem.path) == (line_of(BASE, "cc: reno"), "flows[0].cc")
    assert "'westwod' is not a known congestion-control algorithm" in problem.message
    assert "valid: " + ", ".join(REGISTRY) in problem.message
    assert "did you mean 'westwood'?" in problem.message


def test_range_error_states_the_whole_range_and_unit():
    text = BASE.replace("    delay_ms: 10\n", "    delay_ms: 10\n    loss_pct: 150\n")
    (problem,) = problems_of(text).problems
    assert problem.line == line_of(text, "loss_pct")
    assert problem.path == "topology.bottleneck.loss_pct"
    assert problem.message == "150 is out of range: must be between 0 and 100 (a percentage)"


def test_exclusive_lower_bound_is_stated():
    text = BASE.replace("duration_s: 20", "duration_s: 0")
    (problem,) = problems_of(text).problems
    assert problem.path == "duration_s"
    assert "must be greater than 0" in problem.message


def test_negative_rtt_states_the_inclusive_range():
    text = BASE.replace("rtt_ms: 100", "rtt_ms: -5")
    (problem,) = problems_of(text).problems
    assert problem.path == "flows[0].rtt_ms"
    assert "must be between 0 and 100000 (in milliseconds)" in problem.message


def test_missing_field_names_field_and_the_enclosing_line():
    text = BASE.replace("    rtt_ms: 100\n", "")
    (problem,) = problems_of(text).problems
    assert problem.path == "flows[0].rtt_ms"
    assert problem.line == line_of(text, "- cc: reno")
    assert "required field 'rtt_ms' is missing" in problem.message
    assert "(milliseconds)" in problem.message


def test_literal_error_lists_the_options():
    text = BASE.replace("    rtt_ms: 100\n", "    rtt_ms: 100\n    direction: revers\n")
    (problem,) = problems_of(text).problems
    assert problem.line == line_of(text, "direction")
    assert "valid: forward, reverse" in problem.message
    assert "did you mean 'reverse'?" in problem.message


def test_unknown_topology_lists_the_registry():
    text = BASE.replace("name: dumbbell", "name: dumbell")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (2, "topology.name")
    assert "'dumbell' is not a known topology; valid: dumbbell" in problem.message
    assert "did you mean 'dumbbell'?" in problem.message


def test_missing_topology_name_lists_the_registry():
    text = BASE.replace("  name: dumbbell\n", "")
    (problem,) = problems_of(text).problems
    assert problem.path == "topology.name"
    assert "dumbbell" in problem.message


def test_yaml_syntax_error_reports_the_line():
    text = BASE.replace("duration_s: 20", "duration_s: [20")
    (problem,) = problems_of(text).problems
    assert problem.line is not None and problem.line >= line_of(text, "duration_s")
    assert "YAML syntax error" in problem.message


def test_duplicate_key_is_an_error_not_silently_the_last():
    text = BASE + "duration_s: 30\n"
    error = problems_of(text)
    assert any(
        p.line == line_of(text, "duration_s", 2) and "duplicate key (first given on line" in p.message
        for p in error.problems
    )


def test_sweep_value_error_names_the_element_line():
    text = BASE.replace("cc: reno", "cc:\n      - reno\n      - cubic\n      - renno")
    error = problems_of(text)
    (problem,) = error.problems
    assert problem.line == line_of(text, "- renno")
    assert "'renno'" in problem.message


def test_several_problems_are_reported_together_in_line_order():
    text = textwrap.dedent("""\
        topology:
          name: dumbbell
          bottleneck:
            rate_mbps: 10
            loss_pct: [0, 150]
        flows:
          - cc: westwod
            rtt_ms: 100
          - cc: reno
        duration_s: 0
        seeds: [1, 1]
    """)
    error = problems_of(text)
    message = str(error)
    # flows[1]'s missing rtt_ms is a check of the topology's (the dumbbell needs it, the parking lot
    # does not), so it comes once every field on its own is valid
    assert message.splitlines()[0] == "test.yaml: 5 problems:"
    lines = [(p.line, p.path) for p in error.problems]
    assert lines == [
        (4, "topology.bottleneck.rate_mbps"),
        (5, "topology.bottleneck.loss_pct"),
        (7, "flows[0].cc"),
        (10, "duration_s"),
        (11, "seeds[1]"),
    ]
    # the same unknown field in both sweep points is reported once
    assert message.count("rate_mbps") == 1
    assert "  line 5, topology.bottleneck.loss_pct: 150 is out of range" in message


def test_cross_field_checks_name_the_field_and_line():
    text = BASE.replace("rtt_ms: 100", "rtt_ms: 15\n    stop_s: 30")
    error = problems_of(text)
    found = {p.path: p for p in error.problems}
    assert found["flows[0].rtt_ms"].line == line_of(text, "rtt_ms")
    assert "at least 2 x bottleneck delay_ms = 20" in found["flows[0].rtt_ms"].message
    assert found["flows[0].stop_s"].line == line_of(text, "stop_s")
    assert "after the end of the run (duration_s 20)" in found["flows[0].stop_s"].message


def test_other_validators_keep_their_own_message():
    text = BASE.replace("    delay_ms: 10\n", "    delay_ms: 10\n    queue_pkts: 10\n    queue_bdp: 1\n")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (line_of(text, "bottleneck:"), "topology.bottleneck")
    assert problem.message == "give either queue_pkts or queue_bdp, not both"


def test_empty_and_nested_sweeps_are_errors():
    text = BASE.replace("rate_mbit: 10", "rate_mbit: []").replace("delay_ms: 10", "delay_ms: [[1, 2]]")
    error = problems_of(text)
    messages = {p.path: p.message for p in error.problems}
    assert "empty list" in messages["topology.bottleneck.rate_mbit"]
    assert "single numbers or names" in messages["topology.bottleneck.delay_ms"]
    assert len(error.problems) == 2


def test_repeated_sweep_value_is_an_error():
    text = BASE.replace("cc: reno", "cc: [reno, cubic, reno]")
    (problem,) = problems_of(text).problems
    assert "lists 'reno' twice" in problem.message


def test_empty_file_and_non_mapping_are_errors():
    assert "the file is empty" in str(problems_of(""))
    assert "holds a list" in str(problems_of("- 1\n"))


def test_python_data_errors_have_no_line_but_the_same_text():
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(
            {
                "topology": {"name": "dumbbell", "bottleneck": {"loss_pct": 101}},
                "flows": [{"cc": "reno", "rtt_ms": 1}],
                "duration_s": 5,
            }
        )
    (problem,) = caught.value.problems
    assert problem.line is None
    assert str(problem) == "topology.bottleneck.loss_pct: 101 is out of range: must be between 0 and 100 (a percentage)"


# --------------------------------------------------------------------------------------------------
# Flows and periods


def flow(**fields) -> Flow:
    return Flow(cc="reno", rtt_ms=50, **fields)


def test_on_periods_default_to_the_whole_run_or_start_stop():
    assert flow().on_periods(20) == [(0, 20)]
    assert flow(start_s=5).on_periods(20) == [(5, 20)]
    assert flow(start_s=5, stop_s=8).on_periods(20) == [(5, 8)]
    assert flow(periods=[[0, 5], [5, 9], [12, 20]]).on_periods(20) == [(0, 5), (5, 9), (12, 20)]


@pytest.mark.parametrize(
    ("periods", "fragment"),
    [
        ([[5, 2]], "start must be before stop"),
        ([[0, 10], [5, 15]], "periods must be sorted and must not overlap"),
        ([[10, 15], [0, 5]], "periods must be sorted and must not overlap"),
        ([[-1, 5]], "starts before 0 s"),
        ([], "at least 1"),
    ],
)
def test_invalid_periods(periods, fragment):
    with pytest.raises(ValidationError, match=re.escape(fragment)):
        flow(periods=periods)


def test_periods_exclude_start_and_stop():
    with pytest.raises(ValidationError, match="either periods or start_s/stop_s"):
        flow(periods=[[0, 5]], start_s=1)
    with pytest.raises(ValidationError, match="either periods or start_s/stop_s"):
        flow(periods=[[0, 5]], stop_s=9)


def test_malformed_period_names_its_line():
    text = BASE.replace("rtt_ms: 100", "rtt_ms: 100\n    periods:\n      - [0, 5]\n      - [7]")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (line_of(text, "- [7]"), "flows[0].periods[1]")
    assert "a period is a pair [start_s, stop_s], got [7]" in problem.message


def test_period_past_the_end_names_the_last_period():
    text = BASE.replace("rtt_ms: 100", "rtt_ms: 100\n    periods:\n      - [0, 5]\n      - [7, 25]")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (line_of(text, "- [7, 25]"), "flows[0].periods[1]")


def test_a_sub_second_timed_period_names_its_line_and_why():
    # iperf3 reads -t as whole seconds: 0.3 s became -t 0, a flow without end (a run failed after 30 s)
    text = BASE.replace("rtt_ms: 100", "rtt_ms: 100\n    periods:\n      - [0, 5]\n      - [7, 7.3]")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (line_of(text, "- [7, 7.3]"), "flows[0].periods[1]")
    assert "0.3 s" in problem.message and "whole seconds" in problem.message and "at least 1 s" in problem.message
    load(BASE.replace("rtt_ms: 100", "rtt_ms: 100\n    start_s: 3\n    stop_s: 4"))  # 1 s: fine


def test_stop_before_start_is_an_error():
    with pytest.raises(ValidationError, match=r"stop_s \(3\) must be after start_s \(5\)"):
        flow(start_s=5, stop_s=3)


@pytest.mark.parametrize("seeds", [[], [-1], [1, 2, 1]])
def test_invalid_seeds(seeds):
    with pytest.raises(ValidationError):
        Scenario(topology=DumbbellParams(bottleneck=LinkParams()), flows=[flow()], duration_s=10, seeds=seeds)


# --------------------------------------------------------------------------------------------------
# Python construction and identity


def python_scenario(**overrides) -> Scenario:
    fields = {
        "topology": DumbbellParams(bottleneck=LinkParams(rate_mbit=10)),
        "flows": [Flow(cc="reno", rtt_ms=100)],
        "duration_s": 10,
    } | overrides
    return Scenario(**fields)


def test_python_construction_and_round_trip():
    scenario = python_scenario()
    assert scenario.topology.name == "dumbbell"
    assert scenario.seeds == [1]
    again = Scenario.model_validate(scenario.model_dump(mode="json"))
    assert again == scenario
    with_periods = python_scenario(flows=[Flow(cc="reno", rtt_ms=100, periods=[(0, 5)])])
    assert Scenario.model_validate(with_periods.model_dump(mode="json")) == with_periods


def test_scenario_from_dict_accepts_models_and_sweeps():
    loaded = scenario_from_dict(
        {
            "topology": DumbbellParams(bottleneck=LinkParams(rate_mbit=10)),
            "flows": [{"cc": ["reno", "bbr"], "rtt_ms": 100}],
            "duration_s": 10,
            "seeds": [1, 2],
        },
        name="py",
    )
    assert [point.point_id for point in loaded.points] == ["cc=reno", "cc=bbr"]
    assert len(loaded.runs()) == 4
    assert loaded.path == Path("py")


def test_unknown_field_in_python_is_an_error():
    with pytest.raises(ValidationError, match="rate_mbps"):
        python_scenario(topology={"name": "dumbbell", "bottleneck": {"rate_mbps": 10}})


def test_identity_is_stable_for_equal_specs_and_differs_by_seed_and_value():
    first = load(BASE + "seeds: [1, 2]\n").runs()
    again = load(BASE.replace("rate_mbit: 10", "rate_mbit: 10.0") + "seeds: [1, 2]\n").runs()
    assert first[0].identity() == again[0].identity()
    assert re.fullmatch(r"[0-9a-f]{64}", first[0].identity())
    assert first[0].identity() != first[1].identity()
    other_rate = load(BASE.replace("rate_mbit: 10", "rate_mbit: 11")).runs()
    assert other_rate[0].identity() != first[0].identity()
    other_name = load(BASE, name="other.yaml").runs()
    assert other_name[0].identity() != load(BASE).runs()[0].identity()


def test_identity_ignores_added_seeds_and_description():
    one = load(BASE).runs()[0]
    more = load(BASE + "seeds: [1, 2, 3]\ndescription: reworded\n").runs()[0]
    assert one.seed == more.seed == 1
    assert one.identity() == more.identity()


# --------------------------------------------------------------------------------------------------
# Shipped files and safety


def _profiles_of(path: Path) -> list[str | None]:
    data = yaml.safe_load(path.read_text())
    return [None, *data.get("profiles", {})]


SHIPPED = sorted(SCENARIOS.glob("*.y*ml"))


@pytest.mark.parametrize(
    ("path", "profile"),
    [(path, profile) for path in SHIPPED for profile in _profiles_of(path)],
    ids=lambda value: value.name if isinstance(value, Path) else str(value),
)
def test_every_shipped_scenario_loads_under_every_profile(path, profile):
    loaded = load_scenario(path, profile=profile)
    assert loaded.points
    assert loaded.runs()
    assert len({point.point_id for point in loaded.points}) == len(loaded.points)


def test_shipped_scenarios_exist():
    assert SCENARIOS / "default.yaml" in SHIPPED


def test_readme_example_loads_and_documents_every_field():
    readme = (SCENARIOS / "README.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", readme, re.S).group(1)
    full = load_scenario_text(example, name="example", profile=None)
    assert full.profile == "quick"
    swept = [p.point_id for p in load_scenario_text(example.split("profiles:")[0], name="example").points]
    assert swept == ["queue_bdp=0.5", "queue_bdp=1", "queue_bdp=2"]
    for model in (Scenario, Flow, LinkParams, BernoulliLoss, GilbertElliottLoss, TimedTwoStateLoss):
        for name in model.model_fields:
            assert f"`{name}`" in readme or f".{name}`" in readme or f"[].{name}`" in readme, name


def test_module_never_executes_text():
    # every module of the scenario package (the file was one module before it was split)
    source = "".join(path.read_text() for path in sorted(Path(yamlfile_module.__file__).parent.glob("*.py")))
    assert not re.search(r"\b(eval|exec)\s*\(", source)
    assert "yaml.load(" not in source and "FullLoader" not in source and "UnsafeLoader" not in source


def test_python_tags_are_refused():
    (problem,) = problems_of("flows: []\nduration_s: !!python/object/apply:os.system ['true']\n").problems
    assert problem.line == 2
    assert "unsupported YAML" in problem.message and "could not determine a constructor" in problem.message


def test_number_with_a_unit_suffix_explains_the_unit_is_in_the_name():
    (problem,) = problems_of(BASE.replace("duration_s: 20", "duration_s: 20s")).problems
    assert problem.message == "expected a number, got '20s' (write the number only: duration_s is in seconds)"


def test_time_scale_compresses_the_schedule_but_not_rtts_or_loss_states():
    text = """
topology:
  name: dumbbell
  bottleneck:
    rate_mbit: 2
    loss: {model: timed_two_state, good_s: 1, bad_s: 0.1, bad_loss_pct: 10}
flows:
  - {cc: reno, rtt_ms: 250}
  - {cc: reno, direction: reverse, rtt_ms: 250, count: 3, rtt_max_ms: 400, periods: [[250, 500], [750, 1000]]}
duration_s: 1000
profiles:
  quick: {time_scale: 0.06}
"""
    scenario = load_scenario_text(text).points[0].scenario
    assert scenario.duration_s == 60
    assert scenario.flows[1].periods == [(15, 30), (45, 60)]
    assert scenario.flows[0].rtt_ms == 250 and scenario.topology.bottleneck.loss.bad_s == 0.1
    assert scenario.flows[1].rtts_ms() == [300, 350, 400]
    with pytest.raises(ScenarioError, match="line 12, time_scale: -1 is not valid: a number greater than 0"):
        load_scenario_text(text.replace("time_scale: 0.06", "time_scale: -1"))
    with pytest.raises(ScenarioError, match=r"rtt_max_ms \(200\) must be above rtt_ms \(250\)"):
        load_scenario_text(text.replace("rtt_max_ms: 400", "rtt_max_ms: 200"))


# --------------------------------------------------------------------------------------------------
# Strict scalars: a bool is not a number, a number is not a bool


def test_a_bool_for_a_number_names_the_file_line_field_and_unit():
    error = problems_of(BASE.replace("duration_s: 20", "duration_s: true"))
    assert str(error).splitlines() == [
        "test.yaml: 1 problem:",
        "  line 9, duration_s: expected a number in seconds, got the bool true",
    ]


def test_a_bool_in_a_nested_flow_mapping_is_an_error():
    text = BASE.replace("  - cc: reno\n    rtt_ms: 100\n", "  - {cc: reno, rtt_ms: false, count: true}\n")
    messages = {p.path: (p.line, p.message) for p in problems_of(text).problems}
    assert messages == {
        "flows[0].rtt_ms": (7, "expected a number in milliseconds, got the bool false"),
        "flows[0].count": (7, "expected a whole number, got the bool true"),
    }


def test_a_bool_for_a_percentage_and_for_a_seed():
    text = BASE.replace("delay_ms: 10", "delay_ms: 10\n    loss_pct: true") + "seeds: [1, false]\n"
    messages = {p.path: (p.line, p.message) for p in problems_of(text).problems}
    assert messages == {
        "topology.bottleneck.loss_pct": (6, "expected a number (a percentage), got the bool true"),
        "seeds[1]": (11, "expected a whole number, got the bool false"),
    }


def test_a_bool_inside_a_sweep_of_numbers_is_an_error_on_its_own_line():
    text = BASE.replace("rate_mbit: 10", "rate_mbit:\n      - 1\n      - true\n      - 100")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (6, "topology.bottleneck.rate_mbit")
    assert problem.message == "expected a number in Mbit/s, got the bool true"


def test_a_sweep_of_one_and_true_is_two_values_not_a_repeat():
    # 1 == True in Python: the repeat check must not take the bool for the number
    (problem,) = problems_of(BASE.replace("rate_mbit: 10", "rate_mbit: [1, true]")).problems
    assert problem.message == "expected a number in Mbit/s, got the bool true"


@pytest.mark.parametrize(("field", "value"), [("sack", "1"), ("delayed_ack", "0"), ("sack", "'false'")])
def test_a_number_or_text_for_a_bool_is_an_error(field, value):
    text = BASE.replace("rtt_ms: 100", f"rtt_ms: 100\n    {field}: {value}")
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.path) == (9, f"flows[0].{field}")
    assert problem.message == f"expected true or false, got {value}"


def test_quoted_numbers_and_fractions_for_whole_numbers_stay_errors():
    text = BASE.replace("rate_mbit: 10", "rate_mbit: '10'").replace("rtt_ms: 100", "rtt_ms: 100\n    count: 2.0")
    error = problems_of(text)
    messages = {p.path: p.message for p in error.problems}
    assert messages == {
        "topology.bottleneck.rate_mbit": "expected a number, got the text '10' (write the number without quotes)",
        "flows[0].count": "expected a whole number, got 2.0",
    }


def test_strict_models_still_take_ints_for_floats_lists_for_periods_and_mappings_for_models():
    text = BASE.replace("rtt_ms: 100", "rtt_ms: 100\n    periods: [[0, 5], [10, 20]]\n    sack: false")
    flow = load(text).points[0].scenario.flows[0]
    assert flow.periods == [(0.0, 5.0), (10.0, 20.0)] and isinstance(flow.periods[0][0], float)
    assert isinstance(flow.rtt_ms, float) and flow.sack is False
    (problem,) = problems_of(text.replace("[0, 5]", "[0, true]")).problems
    assert (problem.path, problem.message) == ("flows[0].periods[0][1]", "expected a number, got the bool true")


def test_python_data_is_strict_too():
    with pytest.raises(ValidationError, match="valid number"):
        LinkParams(rate_mbit=True)
    with pytest.raises(ValidationError, match="valid boolean"):
        Flow(cc="reno", rtt_ms=10, sack=1)


# --------------------------------------------------------------------------------------------------
# Bounded input: no size or depth ends in a traceback or minutes of work

DEPTH_MESSAGE = "lists and mappings are nested more than 64 levels deep; a scenario or suite file may nest at most 64"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 5000 + "]" * 5000 + "\n",
        "a: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
        "- " * 5000 + "1\n",  # block lists, each opened by its '- '
    ],
    ids=["flow-lists", "flow-mappings", "block-lists"],
)
def test_5000_nested_levels_are_refused_before_composing(text):
    error = problems_of(text)
    assert str(error).splitlines() == ["test.yaml: 1 problem:", f"  line 1: {DEPTH_MESSAGE}"]


def test_deep_block_mappings_name_the_first_line_too_deep():
    text = "".join(" " * level + f"k{level}:\n" for level in range(100)) + " " * 100 + "1\n"
    (problem,) = problems_of(text).problems
    assert (problem.line, problem.message) == (65, DEPTH_MESSAGE)


def test_depth_made_of_aliases_is_counted_too():
    text = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 100))
    (problem,) = problems_of(text).problems
    assert problem.message == DEPTH_MESSAGE


def test_an_alias_inside_its_own_anchor_is_refused():
    for text in ("a: &x [*x]\n", "a: &x {b: *x}\n"):
        (problem,) = problems_of(text).problems
        assert "an alias (*name) is used inside the list or mapping that its anchor (&name) marks" in problem.message


@pytest.mark.timeout(30)
def test_aliases_that_multiply_values_are_refused():
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    text += "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))  # 10^10 values
    (problem,) = problems_of(text).problems
    assert problem.message.startswith("the file holds more than 50000 values (keys, items and collections;")
    assert problem.message.endswith("a scenario or suite file may hold at most 50000")


@pytest.mark.timeout(30)
def test_too_many_values_on_one_line_name_the_line():
    (problem,) = problems_of("flows: [{cc: reno}]\nduration_s: [" + ", ".join(["1"] * 60_000) + "]\n").problems
    assert problem.line == 2 and problem.message.startswith("the file holds more than 50000 values")


@pytest.mark.timeout(30)
def test_a_very_long_file_is_refused_by_its_line_count():
    error = problems_of("flows:\n" + "- 1\n" * 200_000)
    assert str(error).splitlines() == [
        "test.yaml: 1 problem:",
        "  line 10001: the file has 200001 lines; a scenario or suite file may have at most 10000",
    ]


@pytest.mark.timeout(30)
def test_an_oversized_file_is_refused_without_being_read_whole(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("".join(f"k{i}: 1\n" for i in range(200_000)))  # a valid mapping of 2 MB
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).splitlines() == [
        f"{path}: 1 problem:",
        "  the file is larger than 1 MiB; a scenario or suite file may be at most 1 MiB (shipped ones: a few KiB)",
    ]
    with pytest.raises(ScenarioError, match="larger than 1 MiB"):
        load_scenario_text(path.read_text())


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(BASE.replace("reno", "r\xe9no").encode("latin-1"))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).splitlines()[1] == "  line 7: byte 0xe9 is not UTF-8 text; save the file as UTF-8"


def test_a_recursion_past_the_bounds_is_still_a_scenario_error(monkeypatch):
    # the last resort: were the bounds lifted, the composer's RecursionError is still reported as a problem
    monkeypatch.setattr(yamlfile_module, "MAX_DEPTH", 10**6)
    monkeypatch.setattr(yamlfile_module, "MAX_VALUES", 10**6)
    error = problems_of("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert str(error).splitlines()[0] == "test.yaml: 1 problem:"
    assert "nested more than" in str(error)


def test_a_sweep_with_too_many_values_to_check_is_refused(monkeypatch):
    monkeypatch.setattr(sweep_module, "MAX_SWEEP_VALUES", 100)
    (problem,) = problems_of(BASE.replace("rate_mbit: 10", "rate_mbit: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]")).problems
    assert problem.line == 4
    values = sum(1 for _ in profiles_module._paths_of(yaml.safe_load(BASE)))
    assert problem.message == (
        f"the sweep has 10 points of {values} values each; at most 100 values in all are checked: "
        "sweep fewer values, or split the file"
    )
