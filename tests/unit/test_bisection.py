"""The bisection's search (analysis/kernels/bisection.py) on simulated kernels of known truth: a metric that moves
at a chosen version, seeded per-run noise, no kernel involved."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from analysis.kernels import bisection

VERSIONS = [f"6.1.0-{n}" for n in range(47, 57)]  # ten, as Debian's 6.1 series here


class Simulated:
    """measure(kernel, seeds): two points' goodput and retransmission ratio; ``point1`` goodput falls by
    ``factor`` from version ``moved_at`` on. Each (kernel, seed) run is drawn once, from its own seed,
    with ``noise`` relative and a per-seed effect shared by every kernel (the seeded losses)."""

    def __init__(self, moved_at: str | None, factor: float = 0.7, noise: float = 0.03):
        self.moved_at, self.factor, self.noise = moved_at, factor, noise
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        self.calls.append((kernel, tuple(seeds)))
        rows = []
        for seed in seeds:
            rng = random.Random(f"{kernel}/{seed}")
            shared = random.Random(seed).gauss(0, 0.1)
            for point in ("point0", "point1"):
                for metric, level in (("goodput", 9.0), ("retrans_ratio", 0.02)):
                    moved = (
                        self.moved_at
                        and VERSIONS.index(kernel) >= VERSIONS.index(self.moved_at)
                        and (point, metric) == ("point1", "goodput")
                    )
                    value = level * (self.factor if moved else 1) * math.exp(shared + rng.gauss(0, self.noise))
                    rows.append(
                        {
                            "run": f"{kernel}/{point}/{seed}",
                            "point": point,
                            "seed": seed,
                            "cc": "reno",
                            "metric": metric,
                            "value": value,
                        }
                    )
        return pd.DataFrame(rows)


@pytest.mark.parametrize("moved_at", VERSIONS[1:])
def test_the_first_moved_version_is_named_within_log2_n_plus_2_steps(moved_at):
    measure = Simulated(moved_at)
    result = bisection.bisect(VERSIONS, measure)
    assert result.key == ("point1", "reno", "goodput")
    assert result.first_bad == moved_at and VERSIONS.index(result.last_good) == VERSIONS.index(moved_at) - 1
    assert len(result.steps) <= math.log2(len(VERSIONS)) + 2 and len(result.steps) <= result.planned_steps
    # every run measured once: a kernel's seeds are never run again
    runs = [(k, s) for k, seeds in measure.calls for s in seeds]
    assert len(runs) == len(set(runs))


def test_a_step_undecided_at_first_adds_repetitions_and_still_decides():
    # 12 % noise and a 15 % fall: three seeds cannot tell, more can (each look at its share of alpha)
    measure = Simulated("6.1.0-52", factor=0.85, noise=0.12)
    result = bisection.bisect(VERSIONS, measure, {"point": "point1", "metric": "goodput"}, repeat=3, max_repeat=18)
    assert max(len(e.seeds) for e in result.steps) > 3
    assert result.first_bad == "6.1.0-52"


def test_ends_that_do_not_differ_leave_nothing_to_bisect():
    with pytest.raises(bisection.NothingToBisect, match="do not differ on any point .* at 6 repetitions"):
        bisection.bisect(VERSIONS, Simulated(None), repeat=3, max_repeat=6)
    with pytest.raises(bisection.NothingToBisect, match="do not differ on point point0"):
        bisection.bisect(VERSIONS, Simulated("6.1.0-50"), {"point": "point0"}, max_repeat=3)


def test_the_evidence_of_each_step_names_its_comparisons():
    result = bisection.bisect(VERSIONS, Simulated("6.1.0-49"))
    assert "step 0" in result.steps[0].line()
    later = result.steps[1].line()
    assert "vs good" in later and "vs bad" in later and "seeds" in later


def test_bad_ends_are_refused_with_what_would_do():
    from testbed.workflows.bisect import BisectError, versions_between

    assert versions_between("6.1.0-47", "6.1.0-50", VERSIONS) == VERSIONS[:4]
    with pytest.raises(BisectError, match="not older than --bad 6.1.0-47"):
        versions_between("6.1.0-50", "6.1.0-47", VERSIONS)
    with pytest.raises(BisectError, match="--good 6.1.0-40: not an installable .* versions: 6.1.0-47, 6.1.0-48"):
        versions_between("6.1.0-40", "6.1.0-50", VERSIONS)
    with pytest.raises(BisectError, match="adjacent versions"):
        versions_between("6.1.0-49", "6.1.0-50", VERSIONS)


def test_the_sensitivity_line_replays_the_search_with_the_untrustworthy_runs_on_the_same_sessions():
    from testbed.workflows.bisect import Measurer

    truth = Simulated("6.1.0-52")
    measurer = Measurer(None, VERSIONS, None, None, None, None, None)

    def measure(kernel, seeds):  # what Measurer.__call__ keeps of each session
        measurer.measured[kernel, tuple(seeds)] = truth(kernel, seeds)
        return measurer.measured[kernel, tuple(seeds)]

    result = bisection.bisect(VERSIONS, measure)
    wanted = dict(zip(("point", "cc", "metric"), result.key, strict=True))
    assert measurer.sensitivity(result, wanted, 3, 9) == []  # nothing left out: no line
    [(kernel, seeds), *_] = [key for key in measurer.measured if key[0] == result.last_good]
    measurer.with_untrusted[kernel, seeds] = measurer.measured[kernel, seeds]  # a left-out run changing nothing
    assert measurer.sensitivity(result, wanted, 3, 9) == [
        "with the untrustworthy runs included, the answer would be the same"
    ]
    moved = measurer.measured[kernel, seeds].copy()  # left-out runs that make the last good version look bad
    moved.loc[(moved["point"] == "point1") & (moved["metric"] == "goodput"), "value"] *= 0.7
    measurer.with_untrusted[kernel, seeds] = moved
    [line] = measurer.sensitivity(result, wanted, 3, 9)
    assert line.startswith("with the untrustworthy runs the ") and result.first_bad not in line.split("(")[0], line


class Skipping(Simulated):
    """Simulated, and some versions cannot be run (they do not build or boot)."""

    def __init__(self, moved_at: str, cannot: set[str]):
        super().__init__(moved_at)
        self.cannot = cannot

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        if kernel in self.cannot:
            raise bisection.Skip(kernel, "does not build")
        return super().__call__(kernel, seeds)


def test_a_version_that_cannot_be_run_is_skipped_and_the_search_goes_round_it():
    result = bisection.bisect(VERSIONS, Skipping("6.1.0-52", {"6.1.0-53"}))  # the search reaches 53 and skips it
    assert (result.first_bad, result.last_good, result.between) == ("6.1.0-52", "6.1.0-51", [])
    assert result.skipped == [("6.1.0-53", "does not build")]


def test_when_only_skipped_versions_are_left_the_answer_is_their_range():
    result = bisection.bisect(VERSIONS, Skipping("6.1.0-52", {"6.1.0-51"}))
    assert (result.first_bad, result.last_good, result.between) == ("6.1.0-52", "6.1.0-50", ["6.1.0-51"])


def test_an_end_that_cannot_be_run_leaves_nothing_to_bisect():
    with pytest.raises(bisection.NothingToBisect, match="an end of the range cannot be run"):
        bisection.bisect(VERSIONS, Skipping("6.1.0-52", {VERSIONS[0]}))


class Fleeting(Simulated):
    """Simulated, but the move shows on seeds 1-6 only (those the search uses here): it does not hold on others."""

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        frame = super().__call__(kernel, seeds)
        if VERSIONS.index(kernel) >= VERSIONS.index(self.moved_at):
            later = (frame["seed"] > 6) & (frame["point"] == "point1") & (frame["metric"] == "goodput")
            frame.loc[later, "value"] /= self.factor
        return frame


def test_the_answer_is_confirmed_on_fresh_seeds_or_said_unconfirmed():
    held = bisection.bisect(VERSIONS, Simulated("6.1.0-52"))
    used = max(seed for e in held.steps for seed in e.seeds)
    assert held.confirmed and held.confirmation_seeds == [used + 1, used + 2, used + 3]
    assert held.confirmation.change < -0.2
    fleeting = bisection.bisect(VERSIONS, Fleeting("6.1.0-52"))
    assert fleeting.first_bad == "6.1.0-52" and fleeting.confirmed is False
    skipped = bisection.bisect(VERSIONS, Skipping("6.1.0-52", {"6.1.0-51"}))  # only a range: nothing to confirm
    assert skipped.between and skipped.confirmed is None


# a merge window in small: the good end G, a main line a1 a2, a branch b1 b2 b3 from G merged at M, then a3
# (the bad end); parents before children, as git rev-list --topo-order --reverse gives them
GRAPH = {"G": [], "a1": ["G"], "b1": ["G"], "a2": ["a1"], "b2": ["b1"], "b3": ["b2"], "M": ["a2", "b3"], "a3": ["M"]}


def _ancestry(kernel: str) -> set[str]:
    return {kernel}.union(*(_ancestry(p) for p in GRAPH[kernel]))


class OnGraph(Simulated):
    """Simulated on GRAPH: point1's goodput falls in every version that holds the ``planted`` commit."""

    def __init__(self, planted: str, cannot: frozenset[str] = frozenset()):
        super().__init__(None)
        self.planted, self.cannot = planted, cannot

    def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
        if kernel in self.cannot:
            raise bisection.Skip(kernel, "does not build")
        frame = super().__call__(kernel, seeds)
        if self.planted in _ancestry(kernel):
            frame.loc[(frame["point"] == "point1") & (frame["metric"] == "goodput"), "value"] *= self.factor
        return frame


@pytest.mark.parametrize("planted", ["a1", "a2", "b1", "b2", "b3", "M", "a3"])
def test_a_commit_graph_is_searched_as_git_bisect_does_entering_the_merged_branch(planted):
    """A change on the merged branch is found on it; a merge is named only when its parents are both good."""
    result = bisection.bisect(list(GRAPH), OnGraph(planted), parents=GRAPH)
    assert result.first_bad == planted and result.between == []
    assert result.last_good in _ancestry(planted) - {planted}
    assert result.last_good in ["G", *(e.kernel for e in result.steps if e.side == "good")]  # one that ran good
    assert len(result.steps) <= result.planned_steps + 1


def test_the_first_parent_line_names_the_merge_that_brought_a_branchs_change():
    line = ["G", "a1", "a2", "M", "a3"]
    result = bisection.bisect(line, OnGraph("b2"), parents={v: GRAPH[v][:1] for v in line})
    assert result.first_bad == "M" and result.last_good == "a2"


def test_on_a_graph_a_skipped_commit_leaves_the_answer_between_its_good_parent_and_bad_child():
    result = bisection.bisect(list(GRAPH), OnGraph("b2", frozenset({"b2"})), parents=GRAPH)
    assert (result.first_bad, result.between) == ("b3", ["b2"]) and result.last_good in ("b1", "G")
    assert result.skipped == [("b2", "does not build")]


def test_a_graph_whose_child_comes_before_its_parent_is_refused():
    with pytest.raises(bisection.NothingToBisect, match="a2 comes after its child M: give parents first"):
        bisection.bisect(["G", "a1", "M", "a2", "a3"], OnGraph("a1"), parents=GRAPH)


def test_the_bisection_figure_of_a_large_graph_shows_the_versions_it_tried(monkeypatch):
    """Past BISECT_AXIS_ALL versions (a tree's thousands of commits) the axis holds the tried ones only."""
    from analysis.figures import kernel_plots

    result = bisection.bisect(list(GRAPH), OnGraph("b2"), parents=GRAPH)
    shown = []
    monkeypatch.setattr(kernel_plots, "BISECT_AXIS_ALL", 3)
    monkeypatch.setattr(kernel_plots, "figure_png", lambda fig: shown.extend(fig.axes[0].get_xticklabels()) or b"png")
    assert kernel_plots.bisect_png(result) == b"png"
    tried = {"G", "a3", *(e.kernel for e in result.steps)}
    assert [t.get_text() for t in shown] == [v for v in GRAPH if v in tried]


def test_a_first_bad_commit_on_a_branch_older_than_the_good_end_is_named_against_the_good_end():
    """git's good..bad holds a merged branch that left the line before the good end (its first commit's
    parent is no version here): when that commit is the first bad one, the last good is the good end."""
    graph = {"G": [], "x1": ["old"], "x2": ["x1"], "a1": ["G"], "M": ["a1", "x2"], "a2": ["M"]}

    class Old(OnGraph):
        def __call__(self, kernel: str, seeds: list[int]) -> pd.DataFrame:
            frame = Simulated.__call__(self, kernel, seeds)
            if kernel in ("x1", "x2", "M", "a2"):  # everything that holds x1
                frame.loc[(frame["point"] == "point1") & (frame["metric"] == "goodput"), "value"] *= self.factor
            return frame

    result = bisection.bisect(list(graph), Old("x1"), parents=graph)
    assert (result.first_bad, result.last_good, result.between) == ("x1", "G", [])
