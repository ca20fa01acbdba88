"""Each student's own seeds: drawn by an HMAC of the course's secret and the student's id.

``testbed lab start NAME DIR --student ID`` draws the student's seeds and writes them into the copied
scenario file and ``lab-start.json``; grading requires runs of exactly those seeds, and, given the
student's id (``lab check --student ID``, or Gradescope's ``submission_metadata.json`` in the
autograder), checks that they are that student's: another student's runs, or their folder, fail with
why. The secret is the instructor's (``CC_TESTBED_COURSE_SECRET``); it never goes into a student's
folder, so a student cannot compute another's seeds. (PrairieLearn draws a student's variant from a
seed the same way; an HMAC makes the draw unforgeable without the secret.)

A lab may also give each student their own value of one knob (``lab.yaml``'s ``variant``: the wireless
lab's radio rate), drawn the same way among the values the lab has bands for, so two students'
numbers differ by more than their seeds' noise and numbers copied from another's runs miss.

The seeds are drawn from those the lab's bands were made from (``expected.yaml``'s reference seeds),
so every band holds for every seed a student can get; a lab whose bands were made over more seeds
gives more different draws (3 of 5 seeds: 10; 3 of 20: 1140). A lab without bands draws from
:data:`OPEN_POOL`. The hidden variants of a student's lab run the pool's seeds the student did not get.
"""

from __future__ import annotations

import hashlib
import hmac
import os

SECRET_ENV = "CC_TESTBED_COURSE_SECRET"
#: where a lab without reference seeds draws from (no band to hold)
OPEN_POOL = list(range(1, 1001))


class StudentError(ValueError):
    """A student's variant that cannot be made or does not match: the message says why and what to do."""


def course_secret() -> bytes | None:
    """The course's secret (``CC_TESTBED_COURSE_SECRET``), None when it is not set."""
    value = os.environ.get(SECRET_ENV, "")
    return value.encode() if value else None


def draw(secret: bytes, lab: str, student: str, pool: list[int], count: int) -> list[int]:
    """``count`` seeds of ``pool`` for ``student`` in ``lab``: the pool ranked by each seed's HMAC under the
    secret, the first ``count`` (sorted). The same arguments give the same seeds; without the secret
    nobody can tell which a student gets."""
    if count > len(pool):
        raise StudentError(
            f"the lab asks for {count} seeds a point and its pool has {len(pool)} "
            f"({', '.join(map(str, pool))}): make its bands over more seeds "
            "(testbed lab bands)"
        )
    ranked = sorted(
        pool, key=lambda seed: hmac.new(secret, f"{lab}\0{student}\0{seed}".encode(), hashlib.sha256).digest()
    )
    return sorted(ranked[:count])


def others(pool: list[int], mine: list[int], count: int) -> list[int]:
    """``count`` seeds of the pool that are not the student's (a hidden variant's, in the pool's order)."""
    return [seed for seed in pool if seed not in mine][:count]


def pick(secret: bytes, lab: str, student: str, values: list[float]) -> float:
    """The value of the lab's variant knob ``student`` gets: ``values`` ranked by an HMAC under the secret
    (another message than the seeds', so the value tells nothing of the seeds), the first."""
    return min(
        values,
        key=lambda value: hmac.new(
            secret, f"{lab}\0{student}\0variant\0{float(value)!r}".encode(), hashlib.sha256
        ).digest(),
    )
