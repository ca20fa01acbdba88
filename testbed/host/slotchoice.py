"""How many runs a real-time guest runs at once under ``--side-by-side auto`` (the default).

Runs side by side share one kernel and its vCPUs (testbed.guest.sidebyside), each in namespaces, ports and
tracing instances of its own. That is only worth having where it gives the same answer as runs alone: an
experiment runs side by side by default only when a paired comparison at the same seeds showed it
equivalent to runs alone in real time, at that many runs at once, on a guest like this one (its
accelerator and vCPUs, :data:`GUEST_KEYS`): ``scenarios/timebase/side-by-side.yaml``, written by
``testbed equivalence --record`` (docs/results.md, "Side by side in one guest"). In a session of several
experiments, those shown so run side by side and the others' runs alone after them (as runs too busy to
share the guest do: testbed.host.packing.admitted). ``--side-by-side N`` decides for all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from testbed import PROJECT
from testbed.host import timebase
from testbed.plan.connections import AUTO_SLOTS

#: the experiments measured side by side against runs alone, and what was found
SIDE_BY_SIDE = PROJECT / "scenarios" / "timebase" / "side-by-side.yaml"
#: what a record holds for: runs that shared another accelerator or vCPU count say nothing of this guest's
GUEST_KEYS = ("accel", "vcpus")


@dataclass(frozen=True)
class Slots:
    """How many runs at once, why, and the experiments whose runs run alone all the same (each with why)."""

    count: int
    why: str
    alone: dict[str, str] = field(default_factory=dict)


def choose(requested: int, experiments: Iterable[str], guest: dict, table: dict[str, dict] | None = None) -> Slots:
    """``auto``: as many at once as the session's experiments shown equivalent side by side were shown at
    (the fewest, when they differ), on a guest whose :data:`GUEST_KEYS` are ``guest``'s (a guest's
    configuration: virtme.GuestConfig), in real time (its ``clock``); the other experiments' runs alone."""
    if requested != AUTO_SLOTS:
        return Slots(requested, f"--side-by-side {requested}")
    if guest.get("clock", "real") != "real":
        return Slots(1, "virtual time runs one run at a time in a guest (--guests N packs guests instead)")
    table = timebase.equivalence(SIDE_BY_SIDE) if table is None else table
    here = {key: guest.get(key) for key in GUEST_KEYS}
    unshown = {name: why for name in sorted(set(experiments)) if (why := _not_shown(table.get(name), here))}
    shown = {name: int(table[name]["slots"]) for name in sorted(set(experiments)) if name not in unshown}
    where = SIDE_BY_SIDE.relative_to(PROJECT)
    if not shown:
        return Slots(1, "; ".join(f"{name} {why}" for name, why in unshown.items()) + f" ({where})")
    count = min(shown.values())
    alone = {**unshown, **{name: f"shown at {n} at once, not {count}" for name, n in shown.items() if n != count}}
    together = [name for name in shown if name not in alone]
    why = f"{', '.join(together)} shown equivalent side by side, {count} at once, to runs alone ({where})"
    return Slots(count, why + (f"; the runs of {', '.join(alone)} run alone after them" if alone else ""), alone)


def _not_shown(entry: dict | None, guest: dict) -> str | None:
    """Why an experiment's record does not let its runs go side by side on this guest; None when it does."""
    if entry is None:
        return "not yet measured side by side"
    if not entry.get("equivalent"):
        return "not shown equivalent side by side"
    if entry.get("guest") != guest:
        return f"measured side by side on another guest than this one ({guest})"
    return None
