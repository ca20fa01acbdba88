"""How many runs a real-time guest runs at once under ``--side-by-side auto`` (the default).

Runs side by side share one kernel and its vCPUs (testbed.guest.sidebyside), each in namespaces, ports and
tracing instances of its own. That is only worth having where it gives the same answer as runs alone: an
experiment runs side by side by default only when a paired comparison at the same seeds showed it
equivalent to runs alone in real time, at that many runs at once, on a guest like this one (its
accelerator and vCPUs, :data:`GUEST_KEYS`): ``scenarios/timebase/side-by-side.yaml``, written by
``testbed equivalence --record`` (docs/results.md, "Side by side in one guest"). A session's runs share
its slots, so every experiment in it must have been shown so. ``--side-by-side N`` decides for all.
"""

from __future__ import annotations

from collections.abc import Iterable

from testbed import PROJECT
from testbed.host import timebase
from testbed.plan.connections import AUTO_SLOTS

#: the experiments measured side by side against runs alone, and what was found
SIDE_BY_SIDE = PROJECT / "scenarios" / "timebase" / "side-by-side.yaml"
#: what a record holds for: runs that shared another accelerator or vCPU count say nothing of this guest's
GUEST_KEYS = ("accel", "vcpus")


def choose(
    requested: int, experiments: Iterable[str], guest: dict, table: dict[str, dict] | None = None
) -> tuple[int, str]:
    """How many runs at once, and why. ``auto``: the slots every experiment was shown equivalent at, on a
    guest whose :data:`GUEST_KEYS` are ``guest``'s (a guest's configuration: virtme.GuestConfig), in
    real time (its ``clock``); else one."""
    if requested != AUTO_SLOTS:
        return requested, f"--side-by-side {requested}"
    if guest.get("clock", "real") != "real":
        return 1, "virtual time runs one run at a time in a guest (--guests N packs guests instead)"
    names = sorted(set(experiments))
    if not names:
        return 1, "no experiment to have been shown equivalent side by side"
    table = timebase.equivalence(SIDE_BY_SIDE) if table is None else table
    where = SIDE_BY_SIDE.relative_to(PROJECT)
    unshown = [name for name in names if not table.get(name, {}).get("equivalent")]
    if unshown:
        measured = [name for name in unshown if name in table]
        why = "not shown equivalent" if measured else "not yet measured"
        return 1, f"{', '.join(measured or unshown)} {why} side by side against runs alone ({where})"
    here = {key: guest.get(key) for key in GUEST_KEYS}
    other = [name for name in names if table[name].get("guest") != here]
    if other:
        return 1, f"{', '.join(other)} measured side by side on another guest than this one ({here}; {where})"
    slots = {int(table[name]["slots"]) for name in names}
    if len(slots) > 1:
        return 1, f"{', '.join(names)} shown equivalent at different numbers of runs at once ({where})"
    (count,) = slots
    return count, f"{', '.join(names)} shown equivalent side by side, {count} at once, to runs alone ({where})"
