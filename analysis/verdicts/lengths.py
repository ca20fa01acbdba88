"""A claim's effect against the window it is measured over: where does it settle?

The papers ran 250-1000 s; the quick profiles run 10-30 s, where the first losses of slow start (a
bandwidth estimate still near zero, a window fallen from 57 packets to 4) weigh as much as the steady
state, and the answer can flip with the run's length. One session of long runs shows where the effect
settles: every side's goodput is recomputed over windows of the same runs, and each window is judged by
the claims' own rule (analysis/verdicts/claims.py: paired by seed, the same bounds):

* ``0-T``: the first T seconds, which is what a run of T seconds measures (a flow does not know when it
  will be stopped; iperf3's end is outside the window);
* ``W-end``: the whole run with its first W seconds left out (a warm-up).

Goodput over a window is analysis/verdicts/flowrows.py's: the sender's acknowledged bytes in it over the
window's length. Only goodput claims (``goodput``, ``total_goodput``, ``jain``) have a per-window value;
the others are left out and said so.

**Exploratory, always.** Picking the window whose verdict one likes is a choice made on the runs it
then judges. So every window's verdict is labelled exploratory, and the windows' tests share the 5 %:
each is judged at 0.05 divided by the number of windows tried (Bonferroni), so that the table as a whole
shows a wrong finding at most 5 % of the time. A window chosen here is only used by a claim once it is
confirmed on seeds that took no part in choosing it (claims.yaml's ``warmup_confirmed``).

Pure: it reads analyses already made (analysis/runs/analyze.py), no kernel.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from analysis.verdicts import claims as claims_module
from analysis.verdicts.flowrows import WINDOWED_METRICS, Window, windowed_flows

#: window ends and warm-ups tried, in seconds (those a run is long enough for)
PREFIXES_S = (10, 15, 20, 25, 30, 40, 60, 100, 200, 300)
WARMUPS_S = (10, 20, 30, 60)


def windows_for(duration_s: float) -> list[Window]:
    """The prefixes and warm-ups a run of ``duration_s`` allows (the whole run among the prefixes)."""
    prefixes = [Window(0, t) for t in PREFIXES_S if t < duration_s] + [Window(0, None)]
    return prefixes + [Window(w, None) for w in WARMUPS_S if w <= duration_s / 2]


def table(analyses, claims: list[claims_module.Claim]) -> pd.DataFrame:
    """One row per claim, condition and window: the effect with its 95 % interval, the test, the finding
    and the claim's verdict on that window alone (module doc), the two sides' correlation across seeds
    (``r``) and the smallest effect its test shows with 80 % power at this noise (``detectable``)."""
    complete = [a for a in analyses if a.status == "complete"]
    durations = {float((a.manifest.get("resolved") or {}).get("duration_s") or math.nan) for a in complete}
    longest = max((d for d in durations if not math.isnan(d)), default=math.nan)
    rows = []
    windows = windows_for(longest) if not math.isnan(longest) else []
    alpha = claims_module.ALPHA / max(1, len(windows))  # the windows share the 5 % (module doc)
    for window in windows:
        flows = windowed_flows(complete, window)
        for claim in claims:
            if claim.metric not in WINDOWED_METRICS or flows.empty or claim.experiment not in set(flows["experiment"]):
                continue
            verdict = claims_module.judge(claim, flows, alpha)
            for c in verdict.conditions:
                low, high = c.interval()
                rows.append(
                    {
                        "claim": claim.id,
                        "condition": c.condition,
                        "point": _point(c.condition),
                        "window": window.label,
                        "effect": c.difference,
                        "low": low,
                        "high": high,
                        "test": c.effect.test if c.effect else "",
                        "finding": c.finding,
                        "verdict": f"exploratory: {verdict.label}",
                        "alpha": alpha,
                        "r": pair_correlation(c),
                        "detectable": c.effect.detectable() if c.effect else math.nan,
                    }
                )
    return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = [
    "claim",
    "condition",
    "point",
    "window",
    "effect",
    "low",
    "high",
    "test",
    "finding",
    "verdict",
    "alpha",
    "r",
    "detectable",
]
#: the run length and window that claims._condition_text appends to a condition's parameters
_LENGTH = re.compile(r", (?:[\d.]+-)?[\d.]+ s (?:of [\d.]+ s )?runs(?=$|, kernel )")


def _point(condition: str) -> str:
    """The condition's parameters without its run length and window: what the windows of one point share."""
    return _LENGTH.sub("", condition)


def pair_correlation(condition: claims_module.ConditionResult) -> float:
    """Pearson's r of the two sides' values across the seeds they share (what pairing can take out); NaN with
    fewer than three pairs or without a paired effect."""
    effect = condition.effect
    if effect is None or not effect.paired or len(effect.pairs) < 3 or len(condition.a) != len(condition.b):
        return math.nan
    a, b = np.array(condition.a, dtype=float), np.array(condition.b, dtype=float)
    if a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])
