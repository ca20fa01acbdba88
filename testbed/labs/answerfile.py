"""A student's answers file (``answers.md``) as grading reads it: a section per question, each with its
prose and, where the question asks for numbers, a ``numbers`` block of them.

::

    ## Q1
    Westwood+ kept more of the radio link than New Reno at every seed, ...

    ```numbers
    reno_goodput_mbit: 1.04        # New Reno's mean goodput (Mbit/s)
    westwood_goodput_mbit: 1.02
    ```

Numbers are asked as numbers: each has its own field, named with its unit (``_mbit``, ``_ms``), so a
number is never fished out of prose or out of a spray of candidates. The prose is what the student
claims; a claim is a sentence, told from a list of terms or numbers by its function words (articles,
pronouns, prepositions, auxiliaries: "the", "it", "at", "is"), which every English sentence has and a
keyword list lacks. Why not a parser: spaCy and NLTK need models downloaded, which Gradescope's image
and offline lab machines do not have, and this one distinction is all grading needs of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

#: the fenced block of a question's numbers: ```numbers ... ```
_BLOCK = re.compile(r"^```numbers[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
#: what the starter file leaves in place of an answer
_PLACEHOLDERS = re.compile(r"<!--.*?-->|\(your answer\)", re.S)
#: English function words: a sentence has some (a fifth of its words or more, in the labs' solutions a
#: third to a half); a list of rubric terms or numbers has none
FUNCTION_WORDS = frozenset(
    """
a an the this that these those it its it's they them their there here we our us you your i my he she
his her one ones each every both either neither all any some no not nor none more most less least much
many few than then so such as of at by for from in into on onto over under to up down out off with
without within about above below after before between during through across against along among
around behind beyond near since until upon via per whose which who whom what when where why how whether
and or but because if while although though unless whereas yet also only even just still too very
is are was were be been being am has have had having do does did done can cannot could may might must
shall should will would isn't aren't wasn't weren't doesn't don't didn't can't couldn't won't wouldn't
""".split()
)
#: a sentence at least this long, with at least this share of function words, states something
MIN_SENTENCE_WORDS = 5
MIN_FUNCTION_SHARE = 0.2


@dataclass
class Section:
    """One question's part of the answers file."""

    prose: str  # the text without the numbers block and the starter's placeholders
    numbers: dict = field(default_factory=dict)  # the block's fields, as YAML read them
    block_error: str | None = None  # why the block could not be read (None: read, or there is none)
    has_block: bool = False


def sections(path: Path) -> dict[str, str]:
    """The answers file's sections: heading (``## Q1 ...`` -> ``Q1``) -> the text under it."""
    found: dict[str, str] = {}
    current = None
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        heading = re.match(r"^#{1,6}\s+(\S+)", line)
        if heading:
            current = heading.group(1).rstrip(":.")
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


def read_section(text: str) -> Section:
    """A section's prose and its numbers block (module doc)."""
    blocks = list(_BLOCK.finditer(text))
    prose = _PLACEHOLDERS.sub("", _BLOCK.sub("", text)).strip()
    if not blocks:
        return Section(prose)
    if len(blocks) > 1:
        return Section(prose, block_error=f"{len(blocks)} numbers blocks: give one", has_block=True)
    try:
        data = yaml.safe_load(blocks[0].group(1))
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" (line {where.line + 1} of the block)" if where is not None else ""
        return Section(
            prose, block_error=f"the numbers block is not YAML{line}: {getattr(err, 'problem', err)}", has_block=True
        )
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return Section(prose, block_error="the numbers block is not 'name: number' lines", has_block=True)
    return Section(prose, {str(k): v for k, v in data.items()}, has_block=True)


def number_of(value) -> float | None:
    """A field's value as a number; None for what is not one (a bool, text, an empty field, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(float(value)):
        return None
    return float(value)


def sentences(prose: str) -> list[str]:
    """The prose cut at sentence ends, blank lines and the items of a list (not at colons: "Reproduced:
    the runs show ..." is one sentence)."""
    parts = re.split(r"(?<=[.!?])\s+|\n\s*[-*+]\s+|\n\s*\n", prose)
    return [p.strip() for p in parts if p.strip()]


def is_claim(sentence: str) -> bool:
    """A sentence that states something: long enough, and with function words (module doc)."""
    words = re.findall(r"[a-z']+", sentence.lower())
    if len(words) < MIN_SENTENCE_WORDS:
        return False
    return sum(w in FUNCTION_WORDS for w in words) >= MIN_FUNCTION_SHARE * len(words)


def claims(prose: str) -> list[str]:
    """The sentences of the prose that state something."""
    return [s for s in sentences(prose) if is_claim(s)]
