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

A plain run (no ``--decide``) is a design of one look: the full alpha.

Written here rather than taken from a library: neither scipy nor statsmodels has alpha spending (the
well-kept implementations, gsDesign and rpact, are R packages), and the spending function is one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from analysis import stats
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

    def describe(self) -> str:
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

    def look_at(self, runs: int) -> int | None:
        """The look that judges ``runs`` complete runs: the earlier one that judged as many (the same data
        judged again, e.g. a report written anew), else the next look; None when the design's looks are
        spent (a judgement of more runs would be a look the design did not plan)."""
        if runs in self.runs_at:
            return self.runs_at.index(runs) + 1
        if self.looks >= self.design.max_looks:
            return None
        self.looks += 1
        self.runs_at.append(runs)
        return self.looks

    def look(self, verdicts: dict[str, str]) -> float:
        """Take the next look's verdicts (claim id -> verdict, judged at :meth:`alpha_now`): the claims that
        decided there are kept. Returns the alpha of the look after it (NaN when none is planned)."""
        self.looks += 1
        for claim_id, verdict in verdicts.items():
            if claim_id not in self.decided and verdict not in ("undecided", "no data"):
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
        return {"max_looks": self.design.max_looks, "alpha": self.design.alpha, "looks": self.looks,
                "runs_at": self.runs_at,
                "levels": [self.design.alpha_at(k) for k in range(1, self.design.max_looks + 1)],
                "decided": {k: {"look": look, "verdict": v} for k, (look, v) in self.decided.items()}}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> Record:
        design = Design(int(data["max_looks"]), float(data.get("alpha", stats.ALPHA)))
        decided = {k: (int(v["look"]), str(v["verdict"])) for k, v in (data.get("decided") or {}).items()}
        return cls(design, decided, int(data.get("looks", 0)), [int(n) for n in data.get("runs_at") or []])


def read_record(session_dir: Path) -> Record | None:
    """The session's record (:data:`RECORD_FILE`), None when it has none (a design of one look)."""
    path = Path(session_dir) / RECORD_FILE
    if not path.exists():
        return None
    try:
        return Record.from_json(rundir.read_json(path))
    except (KeyError, TypeError, ValueError) as exc:
        raise rundir.LoadError(path, f"not a sequential record ({exc}); remove it to judge at the full alpha") \
            from exc
