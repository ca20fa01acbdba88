"""What an answer's prose claims, read closely enough to hold it to the student's runs
(testbed/labs/grading.py).

* **Units.** A rate in prose is read in whatever unit it is written: ``2.5 Mbps``, ``2.5 Mb/s``,
  ``2500 kbit/s`` and ``0.3125 MB/s`` are all 2.5 Mbit/s (:func:`in_mbit`), so a made-up number cannot
  hide behind a unit the checks do not know.
* **Comparisons.** A sentence that names two of the lab's algorithms, the first before a percentage
  and the second right after its direction ("Westwood+ is about 6 % below New Reno", "New Reno got 19 %
  higher goodput than Westwood+"), is held to the runs' means: the direction must be the runs' (unless
  they differ by under :data:`TIE_PCT`), and the size within :data:`SIZE_SLACK_PP` points or
  :data:`SIZE_SLACK_SHARE` of the runs' difference; "less than N %", "under N %", "within N %" only
  bound it from above. Other orders ("compared with New Reno, Westwood+ is 6 % lower") and sentences
  about a paper or a report are not judged. Only a lab whose rate numbers give each algorithm one point
  and one metric (the wireless lab) has its comparisons judged: elsewhere "higher" could mean another
  point or metric than the runs' means say.
* **Significance.** "is significant" or "significantly higher" needs the runs' two-sided test below
  0.05, and "is not significant" above it (a hypothetical, "would be significant", is not judged):
  the paired test over the seeds both ran (the design's) or Welch's (what the handout names); either
  one agreeing is enough.
* **Negation.** A rubric term negated wherever it is used in the sentence ("it does not use the
  bandwidth estimate") does not state the concept (:func:`negated`); a term that is itself a negation
  ("not congestion"), and a concept stated by a negation (``negative`` in lab.yaml: "three runs
  cannot detect it"), are read as written.
* **Verdicts.** A verdict question states exactly one verdict (:func:`verdicts_stated`): an answer
  hedged over several earns none. The p-values and signed effects its sentences quote ("+21 %",
  "p = 0.002") are held to the verdict on the student's runs (:func:`verdict_number_problems`): an
  effect within the comparisons' slack of a condition's effect (or its means' ratio), or within
  :data:`ROUNDING_PP` of a number the report prints (an interval's bound, the threshold, the paper's
  effect); a p-value within a factor of :data:`P_FACTOR` of a condition's (or a bound it keeps).

Why by hand, not a parser: spaCy's or Stanza's dependency parse would tell a negation's scope and a
comparison's sides better, but needs models downloaded that Gradescope's image and offline lab
machines lack (testbed/labs/answerfile.py says the same of the claim rule); these rules are narrow on
purpose, and the unit tier holds the shipped solutions and the real student's answers to them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from analysis.verdicts import claims, stats
from analysis.verdicts.stats import ALPHA
from testbed.labs import answerfile, definition, studentruns
from testbed.labs.definition import Lab, Measured, Question
from testbed.labs.studentruns import Results, point_values

#: the units of the numbers a prose answer is held to (a number with one of them is checked against the runs)
PROSE_UNITS = ("Mbit/s", "ms")
#: a rate's unit as written -> its value in Mbit/s per unit (case matters: Mb is megabits, MB megabytes)
RATE_UNITS = {
    r"Gbit/s|Gbps|Gb/s": 1000.0,
    r"Mbit/s|Mbits/s|Mbit/sec|Mbps|Mb/s|[Mm]egabits? per second": 1.0,
    r"kbit/s|Kbit/s|kbps|Kbps|kb/s|Kb/s|[Kk]ilobits? per second": 0.001,
    r"MB/s|MByte/s|[Mm]egabytes? per second": 8.0,
}
NUMBER = r"\d+(?:\.\d+)?"
#: a list or range of numbers before a unit ("0.8, 0.9 and 1.1", "0.8-1.1")
NUMBERS = rf"(?<![\d.])({NUMBER}(?:\s*(?:,|and|or|to|-)\s*{NUMBER})*)"

#: the lab's algorithms as prose names them
CC_NAMES = {
    "reno": r"new\s*reno|reno",
    "westwood": r"westwood\+?",
    "cubic": r"cubic",
    "vegas": r"vegas",
    "bbr": r"bbr",
}
UP = r"higher|above|more|faster|better|greater|larger|ahead"
DOWN = r"lower|below|less|slower|worse|smaller|behind"
#: a quantifier that makes "N %" an upper bound
AT_MOST = r"less than|under|below|at most|within|no more than|up to"
#: runs whose means differ by less than this (percent) have no direction to get wrong
TIE_PCT = 1.0
#: a stated size may miss the runs' difference by this many points, or this share of it
SIZE_SLACK_PP = 3.0
SIZE_SLACK_SHARE = 0.35
NEGATIONS = r"not|no|never|n't|neither|nor|without|cannot|hardly"
#: a negation reaches this many words after it, within its clause (clauses end at ; : ( ) but while ...)
NEGATION_REACH = 6
#: a quoted p-value may be this many times off the verdict's (rounding: 0.0025 written as 0.003, 0.002)
P_FACTOR = 2.0
#: "p = 0.002", "p < 0.05", "p ≈ 0.01" in a verdict answer
P_STATED = re.compile(rf"\bp\s*(=|<|≤|<=|≈|~)\s*(0?\.\d+|{NUMBER}(?:e-\d+)?)")
#: a sentence that quotes other results than the student's runs: the paper's, a report's, another session's
OTHER_RESULTS = r"\bpaper|\breport|\bsession|\bmake reproduce\b|\b[0-9a-f]{7,40}\b"
#: a signed percentage, "+21 %", "-4%", "−3.5 %": an effect as the report writes it
SIGNED_PCT = re.compile(rf"(?<![\w.])(?<!\d\s)([+\-−])\s?({NUMBER})\s*%")
#: a number the report prints as it is (an interval's bound, a threshold) may be off by its rounding
ROUNDING_PP = 1.0


def in_mbit(prose: str) -> str:
    """The prose with every rate written in Mbit/s (``2500 kbit/s`` -> ``2.5 Mbit/s``)."""
    for units, factor in RATE_UNITS.items():

        def converted(match: re.Match, factor: float = factor) -> str:
            numbers = re.sub(NUMBER, lambda n: f"{float(n.group()) * factor:g}", match.group(1))
            return f"{numbers} Mbit/s"

        prose = re.sub(rf"{NUMBERS}\s*(?:{units})(?![\w/])", converted, prose)
    return prose


def negated(sentence: str, term: str) -> bool:
    """Every use of ``term`` in ``sentence`` sits in a clause with a negation before it, within
    :data:`NEGATION_REACH` words ("does not use the bandwidth estimate"). A term that is a negation
    itself ("not congestion") is never negated."""
    lowered = sentence.lower()
    if re.search(rf"\b(?:{NEGATIONS})\b", term.lower()):
        return False
    clauses = re.split(r"[;:()]|\bbut\b|\bwhile\b|\bwhereas\b|\bthough\b", lowered)
    found = [c for c in clauses if re.search(r"(?<![a-z0-9])" + re.escape(term.lower()), c)]
    return bool(found) and all(_negation_before(c, term.lower()) for c in found)


def _negation_before(clause: str, term: str) -> bool:
    """Every use of ``term`` in ``clause`` has a negation before it, within reach."""
    uses = re.finditer(r"(?<![a-z0-9])" + re.escape(term), clause)
    negation = rf"(?:\b(?:{NEGATIONS})\b|n't)(?:\W+\w+){{0,{NEGATION_REACH}}}\W*$"
    return all(re.search(negation, clause[: use.start()]) is not None for use in uses)


#: a verdict's name as a verdict, not as a word of a sentence: "reproduced" not inside "not reproduced",
#: "opposite" not "the opposite of", "short of the paper" not "falls short of the paper's +20 %"
VERDICT_PATTERNS = {
    "reproduced": r"(?<!not )\breproduced\b",
    "opposite": r"\bopposite\b(?! of)",
    "short of the paper": r"(?<!falls )(?<!fell )(?<!fall )\bshort of the paper\b(?!'s)",
}


def verdicts_stated(answer: str) -> list[str]:
    """The verdicts of analysis/verdicts/claims.py the answer states: those of its first sentence that names any
    (an answer leads with its verdict; a later sentence may quote another session's), each not negated
    ("neither reproduced nor refuted" states none)."""
    for sentence in answerfile.sentences(answer):
        said = [
            v
            for v in claims.VERDICTS
            if re.search(VERDICT_PATTERNS.get(v, r"\b" + re.escape(v) + r"\b"), sentence.lower())
            and not negated(sentence, v)
        ]
        if said:
            return said
    return []


def comparison_problems(sentences: list[str], means: Mapping[str, float]) -> list[str]:
    """Each stated comparison of two algorithms' means (module doc) that the runs' ``means`` (cc -> mean)
    contradict, saying what the runs give."""
    problems = []
    for sentence in sentences:
        named = _named(sentence, means)
        if len(named) != 2:
            continue
        (first, _), (second, _) = named
        actual = 100 * (means[first] / means[second] - 1)
        # "A ... N % lower than B", "A is N % below B": the second algorithm right after the direction;
        # a sentence about a paper or a report quotes another result
        other = CC_NAMES.get(second, re.escape(second))
        pattern = (
            rf"({AT_MOST})?\s*({NUMBER})\s*%\s*(?:\w+\s+)?({UP}|{DOWN})\s+(?:\w+\s+)?(?:than\s+)?"
            rf"(?:that of\s+)?(?:{other})(?![a-z])"
        )
        if re.search(r"\bpaper|\breport", sentence.lower()):
            continue
        for bound, size, direction in re.findall(pattern, sentence.lower()):
            stated = float(size) * (1 if re.fullmatch(UP, direction.lower()) else -1)
            if why := _contradicted(stated, actual, bool(bound)):
                problems.append(
                    f'"{_short(sentence)}": {why}; your runs give {first} {actual:+.1f} % '
                    f"against {second} ({means[first]:.3g} vs {means[second]:.3g})"
                )
    return list(dict.fromkeys(problems))


def _named(sentence: str, means: Mapping[str, float]) -> list[tuple[str, int]]:
    """The algorithms of ``means`` the sentence names, in the order it names them (each once)."""
    found = []
    for cc in means:
        match = re.search(rf"(?<![a-z]){CC_NAMES.get(cc, re.escape(cc))}(?![a-z])", sentence.lower())
        if match:  # "reno" names New Reno: Linux's reno module is New Reno
            found.append((cc, match.start()))
    return sorted(found, key=lambda f: f[1])


def _contradicted(stated: float, actual: float, at_most: bool) -> str | None:
    if at_most:
        return None if abs(actual) <= abs(stated) + SIZE_SLACK_PP else f"the runs differ by more than {abs(stated):g} %"
    if abs(actual) >= TIE_PCT and math.copysign(1, stated) != math.copysign(1, actual):
        return "the runs differ the other way"
    if abs(abs(stated) - abs(actual)) > max(SIZE_SLACK_PP, SIZE_SLACK_SHARE * abs(actual)):
        return f"{abs(stated):g} % is not the runs' difference"
    return None


def significance_problems(sentences: list[str], p_values: list[float]) -> list[str]:
    """A difference called significant that no test of the runs shows below 0.05, or called not
    significant where every test does (``p_values``: the runs' two-sided tests, paired and Welch)."""
    known = [p for p in p_values if not math.isnan(p)]
    if not known:
        return []
    problems = []
    for sentence in sentences:
        # a statement about these runs ("is significant", "is not statistically significant", "significantly
        # higher"), not a hypothetical ("would be significant", "far from significant")
        stated = re.search(
            rf"\b(?:is|was|are|were)\s+(not\s+)?(?:statistically\s+)?significant\b|"
            rf"\b(not\s+)?significantly\s+(?:{UP}|{DOWN})\b",
            sentence.lower(),
        )
        if not stated:
            continue
        said = not (stated.group(1) or stated.group(2))
        shown = [p < ALPHA for p in known]
        if (said and not any(shown)) or (not said and all(shown)):
            tests = ", ".join(f"{p:.3g}" for p in known)
            word = "significant" if said else "not significant"
            problems.append(f'"{_short(sentence)}" calls the difference {word}; your runs\' tests give p = {tests}')
    return problems


def verdict_number_problems(answer: str, verdict: claims.Verdict) -> list[str]:
    """The p-values and signed effects a verdict answer quotes that the claim's verdict on the student's
    runs does not give (module doc); sentences about a paper, a report or another session quote other
    results. An effect may miss a condition's effect (or the ratio of its means) by the comparisons'
    slack; a number the report prints as it is (an interval's bound, the threshold, the paper's effect)
    only by its rounding."""
    effects, printed, p_values = [], [], []
    bounds = claims.bounds(verdict.claim)
    printed += [100 * x for x in bounds.values() if not math.isnan(x)]
    for condition in verdict.conditions:
        means = (sum(condition.a) / len(condition.a), sum(condition.b) / len(condition.b)) if condition.a else ()
        effects += [100 * condition.difference] if not math.isnan(condition.difference) else []
        effects += [100 * (means[0] / means[1] - 1)] if means and means[1] else []
        for confidence in (1 - condition.alpha, 0.95):
            printed += [100 * x for x in condition.interval(confidence) if not math.isnan(x)]
        # the findings' one-sided p (the report's), and the two-sided tests: the design's and Welch's
        welch = stats.ratio_effect(condition.a, condition.b) if min(len(condition.a), len(condition.b)) > 1 else None
        tests = [e.p_two_sided() for e in (condition.effect, welch) if e is not None]
        p_values += [p for p in (*condition.p_values.values(), *tests) if not math.isnan(p)]
    problems = []
    for sentence in answerfile.sentences(answer):
        if re.search(OTHER_RESULTS, sentence.lower()):
            continue
        for sign, size in SIGNED_PCT.findall(sentence):
            stated = float(size) * (-1 if sign in "-−" else 1)
            near = any(abs(stated - e) <= max(SIZE_SLACK_PP, SIZE_SLACK_SHARE * abs(e)) for e in effects)
            if (effects or printed) and not near and not any(abs(stated - x) <= ROUNDING_PP for x in printed):
                problems.append(
                    f'"{_short(sentence)}": {stated:+g} % is not what your runs give on {verdict.claim.id} '
                    f"(effect {', '.join(f'{c.difference:+.1%}' for c in verdict.conditions)})"
                )
        for relation, number in P_STATED.findall(sentence.lower()):
            stated = float(number)
            if p_values and not any(_p_agrees(relation, stated, p) for p in p_values):
                problems.append(
                    f'"{_short(sentence)}": p {relation} {number} is not your runs\' test on '
                    f"{verdict.claim.id} (p = {', '.join(f'{p:.2g}' for p in p_values)})"
                )
    return list(dict.fromkeys(problems))


def _p_agrees(relation: str, stated: float, actual: float) -> bool:
    if relation in ("<", "≤", "<="):
        return actual <= stated
    if stated == 0:  # "p = 0.000": a p below the last digit written
        return actual < 0.0005
    return actual > 0 and 1 / P_FACTOR <= stated / actual <= P_FACTOR


def _short(sentence: str, limit: int = 90) -> str:
    flat = " ".join(sentence.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass
class Compared:
    """The lab's algorithms as the student's runs give them, for the comparisons prose states: each one's
    mean of the lab's rate numbers, and the two-sided tests between two (paired over the seeds both ran,
    and Welch), NaN where they cannot be made."""

    means: dict[str, float] = field(default_factory=dict)
    p_values: list[float] = field(default_factory=list)


def compared_algorithms(lab: Lab, results: Results) -> Compared:
    """:class:`Compared` over the numbers the lab's questions ask for in Mbit/s, per algorithm (``cc``)."""
    asked = [n for t in lab.tasks for q in t.questions for n in q.numbers if n.cc and n.unit == "Mbit/s"]
    if any(len({(n.point, n.metric) for n in asked if n.cc == cc}) > 1 for cc in {n.cc for n in asked}):
        return Compared()  # an algorithm at several points or metrics: "higher" would not say which
    runs = {n.cc: studentruns.seeded_values(n.point, n, results) for n in asked}
    runs = {cc: values for cc, values in runs.items() if values}
    means = {cc: sum(v for _, v in values) / len(values) for cc, values in runs.items()}
    if len(runs) != 2:
        return Compared(means)
    a, b = runs.values()
    tests = [stats.seeded_effect(a, b), stats.ratio_effect([v for _, v in a], [v for _, v in b])]
    return Compared(means, [e.p_two_sided() if e is not None else math.nan for e in tests])


def contradictions(question: Question, prose: str, results: Results, settings: dict[str, list[float]]) -> list[str]:
    """The prose's numbers in the units the question asks about (``1.4 Mbit/s``; ``0.8 and 1.1 Mbit/s``)
    that nothing backs: none of the runs' values of those points (each run, their mean, range and
    spread, the difference of two means) nor a setting of the scenario file is within the tolerance."""
    problems = []
    prose = in_mbit(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", prose))  # 2,500 kbit/s and 2.5 Mbps are 2.5 Mbit/s
    for unit in sorted({n.unit for n in question.numbers if n.unit in PROSE_UNITS}):
        asked = [n for n in question.numbers if n.unit == unit]
        tolerance = min(n.tolerance_pct for n in asked) / 100
        backed = _evidence(asked, results) + settings.get(unit, [])
        # a number, or a list or range of them ("0.8, 0.9 and 1.1", "0.8-1.1"), followed by the unit
        number = r"\d+(?:\.\d+)?"
        pattern = rf"(?<![\d.])({number}(?:\s*(?:,|and|or|to|-)\s*{number})*)\s*" + re.escape(unit)
        for group in re.finditer(pattern, prose.replace(",000", "000")):
            for n in (float(x) for x in re.findall(r"\d+(?:\.\d+)?", group.group(1))):
                if not any(abs(n - b) <= tolerance * max(abs(b), 1e-9) for b in backed):
                    problems.append(
                        f"the answer says {n:g} {unit}, which neither your runs nor your scenario file give"
                    )
    return list(dict.fromkeys(problems))


def _evidence(asked: list[Measured], results: Results) -> list[float]:
    """Every number the runs give for ``asked``'s points in their unit: each run's value of each metric
    of that unit, each metric's mean, range and spread, and the differences of the means."""
    means, found = [], []
    for n in asked:
        for metric in definition.metrics_in(n.unit):
            values = [v * n.scale for v in point_values(n.point, n.model_copy(update={"metric": metric}), results)]
            if values:
                mean = sum(values) / len(values)
                means.append(mean)
                found += [*values, mean, max(values) - min(values)]
    return found + [abs(a - b) for a in means for b in means if a != b]
