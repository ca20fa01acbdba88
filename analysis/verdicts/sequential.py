"""Decisions that add runs: one group-sequential design, alpha spent over planned looks.

A loop that judges, adds runs where they would decide, and judges again (``testbed suite --decide``,
``make reproduce BUDGET=``) looks at the data several times. Tested at the full 5 % at every look, a
claim at its null's boundary is called "reproduced" more often than 5 %: simulated whole (the seed
planner's own steps, 3 runs a side to start), 3 to 6 looks at the full alpha erred 10.3-10.7 % of
the time; spent as below, 1.9-4.6 % (tests/unit/test_sequential.py, docs/results.md).

**The design.** At most ``max_looks`` looks, stated before the first (the suite's own runs are look 1).
Look k tests at ``alpha_k = A(k / K) - A((k - 1) / K)``, where ``A`` is Lan and DeMets' alpha-spending
function of Pocock's type, ``A(t) = alpha ln(1 + (e - 1) t)``: the looks' alphas add up to alpha, so by
Bonferroni's inequality the chance of any wrong decision over all looks is at most alpha, whatever the
dependence between looks and however the runs added depend on what was seen. Pocock's type rather than
O'Brien and Fleming's: most claims that decide at all decide at the first look (the suite is planned to
decide them), and O'Brien-Fleming's first look of four would test at 0.0001. The exact group-sequential
boundaries (which credit the looks' correlation) assume a normal statistic with known variance at
planned sizes; here the noise is estimated at each look from 3-10 runs and the sizes are chosen by what
was seen, so the simpler bound that holds regardless is used, and simulated.

**The stopping rule.** A claim decided at a look keeps that verdict: later looks neither judge it again
nor add runs for it (``Record``). A claim still undecided after the last planned look stays undecided,
saying what it would need.

A plain run (no ``--decide``) is a design of one look: the full alpha, spent by its report, which
records it (``sequential.json``). ``--decide`` on such a session refuses: its alpha is spent.

**One design per claim, whatever reads it** (:func:`judge_by_design`): the session's report, a report
written again, and the live page all judge through the record. A claim decided at a look is reported
with the verdict, the level and the runs it was decided on, even after runs were added for other claims
that share its points; the others at the level of the look their runs make. Runs beyond the design's
last look are kept, not judged (a look nobody planned).

Written here rather than taken from a library: neither scipy nor statsmodels has alpha spending (the
well-kept implementations, gsDesign and rpact, are R packages), and the spending function is one line.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

from analysis.verdicts import claims, stats
from testbed.results import rundir

#: looks of ``testbed suite --decide`` (the suite's runs, then up to three rounds of added runs)
DECIDE_LOOKS = 4
#: where a session keeps its record (testbed/workflows/decide.py writes it, the report reads it)
RECORD_FILE = "sequential.json"
#: looks of one `testbed explain` session: run again with more --seeds, it judges the grown runs again
EXPLAIN_LOOKS = 3


@dataclass(frozen=True)
class Design:
    """A group-sequential design: ``max_looks`` planned looks spending ``alpha`` in all."""

    max_looks: int = 1
    alpha: float = stats.ALPHA

    def __post_init__(self):
        if self.max_looks < 1:
            raise ValueError(f"a design needs at least one look, not {self.max_looks}")

    def spent(self, look: int) -> float:
        """The alpha spent by the end of ``look`` (1-based): Pocock's type of Lan-DeMets spending."""
        t = min(look, self.max_looks) / self.max_looks
        return self.alpha * math.log1p((math.e - 1) * t)

    def alpha_at(self, look: int) -> float:
        """The level look ``look`` tests at: what the design spends there."""
        if not 1 <= look <= self.max_looks:
            raise ValueError(f"look {look} is outside the design's {self.max_looks} planned looks")
        return self.spent(look) - self.spent(look - 1)

    def summary(self) -> str:
        """'4 planned looks at alpha 0.0179, 0.0131, 0.0104, 0.0086 (0.05 in all, Pocock-type spending)'."""
        if self.max_looks == 1:
            return f"one look at alpha {self.alpha:g}"
        levels = ", ".join(f"{self.alpha_at(k):.3g}" for k in range(1, self.max_looks + 1))
        return f"{self.max_looks} planned looks at alpha {levels} ({self.alpha:g} in all, Pocock-type spending)"


@dataclass
class Record:
    """What a sequential loop decided, look by look (``sequential.json`` in the session folder)."""

    design: Design
    #: claim id -> (the look that decided it, its verdict there)
    decided: dict[str, tuple[int, str]] = field(default_factory=dict)
    looks: int = 0
    #: the complete runs each look judged (a judgement of the same runs again is the same look)
    runs_at: list[int] = field(default_factory=list)
    #: their names (run folders relative to the session), where the look recorded them
    runs_of: list[list[str]] = field(default_factory=list)

    def look_at(self, runs: int, names: list[str] | None = None) -> int | None:
        """The look that judges ``runs`` complete runs (``names``: which, where known): the earlier one that
        judged the same runs (the same data judged again, e.g. a report written anew), else the next look;
        None when the design's looks are spent (a judgement of more runs would be a look the design did not
        plan)."""
        for index, counted in enumerate(self.runs_at):
            known = self.runs_of[index] if index < len(self.runs_of) else None
            if counted == runs and (names is None or not known or sorted(names) == known):
                return index + 1
        if self.looks >= self.design.max_looks:
            return None
        self.looks += 1
        self._remember(runs, names)
        return self.looks

    def names_at(self, look: int) -> set[str]:
        """The runs ``look`` judged, by name (empty where it did not record them)."""
        return set(self.runs_of[look - 1]) if 0 < look <= len(self.runs_of) else set()

    def _remember(self, runs: int, names: list[str] | None) -> None:
        self.runs_at.append(runs)
        self.runs_of += [[]] * (len(self.runs_at) - 1 - len(self.runs_of)) + [sorted(names or [])]

    def look(self, verdicts: dict[str, str], names: list[str] | None = None) -> float:
        """Take the next look's verdicts (claim id -> verdict, judged at :meth:`alpha_now`; ``names``: the
        complete runs judged): the claims that decided there are kept. Returns the alpha of the look after
        it (NaN when none is planned)."""
        self.looks += 1
        if names is not None:
            self._remember(len(names), names)
        for claim_id, verdict in verdicts.items():
            if claim_id not in self.decided and verdict not in claims.UNSETTLED:
                self.decided[claim_id] = (self.looks, verdict)
        return self.design.alpha_at(self.looks + 1) if self.looks < self.design.max_looks else math.nan

    def alpha_now(self) -> float:
        """The level of the next look."""
        return self.design.alpha_at(self.looks + 1)

    def alpha_for(self, claim_id: str) -> float:
        """The level a claim is judged at in the report: its deciding look's, else the last look's."""
        look = self.decided.get(claim_id, (max(self.looks, 1), ""))[0]
        return self.design.alpha_at(look)

    def left(self) -> int:
        return self.design.max_looks - self.looks

    def to_json(self) -> dict:
        return {
            "max_looks": self.design.max_looks,
            "alpha": self.design.alpha,
            "looks": self.looks,
            "runs_at": self.runs_at,
            "runs_of": self.runs_of,
            "levels": [self.design.alpha_at(k) for k in range(1, self.design.max_looks + 1)],
            "decided": {k: {"look": look, "verdict": v} for k, (look, v) in self.decided.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> Record:
        design = Design(int(data["max_looks"]), float(data.get("alpha", stats.ALPHA)))
        decided = {k: (int(v["look"]), str(v["verdict"])) for k, v in (data.get("decided") or {}).items()}
        runs_of = [[str(name) for name in names] for names in data.get("runs_of") or []]
        return cls(design, decided, int(data.get("looks", 0)), [int(n) for n in data.get("runs_at") or []], runs_of)


def read_record(session_dir: Path) -> Record | None:
    """The session's record (:data:`RECORD_FILE`), None when it has none (a design of one look)."""
    path = Path(session_dir) / RECORD_FILE
    if not path.exists():
        return None
    try:
        return Record.from_json(rundir.read_json(path))
    except (KeyError, TypeError, ValueError) as exc:
        raise rundir.LoadError(path, f"not a sequential record ({exc}); remove it to judge at the full alpha") from exc


def run_name(session_dir: Path, run_dir: Path) -> str:
    """A run as a record names it: its folder relative to the session (the folder's own path otherwise)."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path(session_dir).resolve()))
    except ValueError:
        return str(run_dir)


@dataclass
class Judged:
    """:func:`judge_by_design`'s answer: the verdicts, the record (to be written back) and what it said."""

    verdicts: list
    record: Record
    notes: list[str] = field(default_factory=list)


def judge_by_design(
    session_dir: Path, analyses, record: Record | None, flows=None, final: bool = True, known: list | None = None
) -> Judged:
    """Every claim (of ``known``, default claims.yaml's) about the session's experiments judged by the
    session's one design (module doc): a plain session's first judgement is the one look of a one-look
    design. Not ``final`` (runs the session planned are not all complete yet, or the session still runs),
    the look is only previewed: judged at the level the look would have, marked provisional, nothing
    recorded. ``flows``: the runs' ``claims.flow_rows`` where already made. The caller writes ``record`` back."""
    record = copy.deepcopy(record) if record else Record(Design(1))
    runs = _Runs(session_dir, [a for a in analyses if a.status == "complete"], flows)
    names = runs.names()
    if not final:
        preview = copy.deepcopy(record)
        look = preview.look_at(len(names), names) or preview.looks
        verdicts = runs.verdicts(None, preview.design.alpha_at(look), known)
        for v in verdicts:
            v.design_note = (
                f"provisional: {len(names)} runs, not all the session planned; the verdict is made "
                f"once they are complete (look {look} of {record.design.max_looks})"
            )
        return Judged(verdicts, record)
    look, notes, judged_names = record.look_at(len(names), names), [], None
    if look is None:  # the runs beyond the last look are kept, but the last look stands
        look = record.looks
        judged_names = record.names_at(look)
        notes.append(
            f"{len(set(names) - judged_names)} runs after the design's last look (look {look} of "
            f"{record.design.max_looks}) are not judged: a look the design did not plan"
        )
    verdicts = runs.verdicts(judged_names, record.design.alpha_at(look), known)
    for index, v in enumerate(verdicts):
        decided_at = record.decided.get(v.claim.id, (look, ""))[0]
        if decided_at < look:  # decided earlier: on that look's runs, at its level
            earlier = record.names_at(decided_at)
            again = runs.verdicts(earlier or None, record.design.alpha_at(decided_at), [v.claim])
            if again:
                again[0].design_note = (
                    f"decided at look {decided_at} of {record.design.max_looks} on "
                    f"{len(earlier) if earlier else len(names)} runs; runs added later for other "
                    "claims do not judge it again"
                )
                verdicts[index] = again[0]
        elif v.claim.id not in record.decided and v.verdict not in claims.UNSETTLED:
            record.decided[v.claim.id] = (look, v.verdict)
    return Judged(verdicts, record, notes)


class _Runs:
    """A session's complete runs and their flows, judged whole or by a look's runs (by name)."""

    def __init__(self, session_dir: Path, complete: list, flows):
        self.session_dir, self.complete = session_dir, complete
        self.flows = claims.flow_rows(complete) if flows is None else flows

    def names(self) -> list[str]:
        return sorted(run_name(self.session_dir, a.run_dir) for a in self.complete)

    def verdicts(self, names: set[str] | None, alpha: float, known: list | None) -> list:
        """The claims' verdicts over the runs named (all of them: None), at ``alpha``."""
        analyses, flows = self.complete, self.flows
        if names is not None:
            analyses = [a for a in analyses if run_name(self.session_dir, a.run_dir) in names]
            if not flows.empty:
                flows = flows[flows["run"].map(lambda r: run_name(self.session_dir, Path(r)) in names)]
        return claims.verdicts(analyses, claims=known, flows=flows, alpha=alpha)
