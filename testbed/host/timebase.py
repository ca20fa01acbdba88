"""Which clock a guest's runs run on: real time, or QEMU's virtual time (icount, :mod:`testbed.host.virtme`).

In virtual time the guest's clock advances by the instructions it executes and jumps over its idle
time, so a run whose guest waits for its links (most do: 6-57 % busy under TCG) takes a fraction of
its traffic's length, and the host's load slows it without changing what it measures. That is only
worth having where it gives the same answer: an experiment runs in virtual time by default (``--clock
auto``) only when a paired comparison at the same seeds showed it equivalent to real time
(``scenarios/timebase/equivalence.yaml``, written by ``testbed equivalence``; docs/results.md's
table), and only on a host without a usable KVM (where real time is both fast and the reference).
An entry holds for the guest it was measured on (``guest``: the icount shift and the kernel command
line, :data:`GUEST_KEYS`), and may also be ``held_back`` (a reason): shown equivalent, but kept in real
time because of a failure seen since. ``--clock real`` and ``--clock virtual`` decide for every experiment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

import yaml

from testbed import PROJECT
from testbed.host import virtme

#: what --clock takes
CLOCKS = ("auto", "real", "virtual")
#: what a virtual-time guest's equivalence holds for: a record made with another shift or kernel command
#: line (the tick kept or not) says nothing of the guest that runs now
GUEST_KEYS = ("icount_shift", "append")
#: the experiments measured in virtual time against real time, and what was found
EQUIVALENCE = PROJECT / "scenarios" / "timebase" / "equivalence.yaml"
#: a virtual-time run may take this many times its real-time wall clock before the host calls it hung
#: (a guest busy with 10-20 flows took up to 3.1x its traffic's length here)
SLOWDOWN_ALLOWANCE = 2.0


@lru_cache(maxsize=4)
def equivalence(path: Path = EQUIVALENCE) -> dict[str, dict]:
    """The measured experiments by name: ``{"equivalent": bool, ...the numbers...}``; none when the file is missing."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    experiments = data.get("experiments", {})
    if not isinstance(experiments, dict):
        raise ValueError(f"{path}: 'experiments' must map an experiment's name to its measurement")
    return experiments


def choose(
    requested: str,
    experiments: Iterable[str],
    kvm_usable: Callable[[], bool],
    table: dict[str, dict] | None = None,
    guest: dict | None = None,
) -> tuple[str, str]:
    """The clock for a guest running these experiments, and why. ``auto``: virtual time when every one
    was shown equivalent, by a guest configured as ``guest`` is (default: as one would boot now), and KVM
    does not work here; ``kvm_usable`` is asked only when it would decide."""
    if requested not in CLOCKS:
        raise ValueError(f"unknown clock {requested!r}: one of {', '.join(CLOCKS)}")
    if requested != "auto":
        return requested, f"--clock {requested}"
    names = sorted(set(experiments))
    if not names:
        return "real", "no experiment to have been shown equivalent (a shell, a probe)"
    table = equivalence() if table is None else table
    guest = virtual_guest() if guest is None else guest
    other = [name for name in names if name in table and table[name].get("guest") != guest]
    if other:
        return "real", (
            f"{', '.join(other)} measured in virtual time on another guest than this one boots ({guest}): "
            f"measure again with testbed equivalence ({EQUIVALENCE.relative_to(PROJECT)})"
        )
    held = [f"{name} ({table[name]['held_back']})" for name in names if table.get(name, {}).get("held_back")]
    if held:  # shown equivalent, yet kept in real time for a reason the file gives (a failure seen since)
        return "real", f"held back from virtual time: {'; '.join(held)} ({EQUIVALENCE.relative_to(PROJECT)})"
    unshown = [name for name in names if not table.get(name, {}).get("equivalent")]
    if unshown:
        measured = [name for name in unshown if name in table]
        why = (
            f"{', '.join(measured)} not shown equivalent in virtual time"
            if measured
            else f"{', '.join(unshown)} not yet measured in virtual time"
        )
        return "real", f"{why} ({EQUIVALENCE.relative_to(PROJECT)})"
    if kvm_usable():
        return "real", "KVM works here: real time is the reference and fast"
    return "virtual", f"{', '.join(names)} shown equivalent to real time ({EQUIVALENCE.relative_to(PROJECT)})"


def virtual_guest() -> dict:
    """How a virtual-time guest boots now (:data:`GUEST_KEYS`), as its session records it."""
    config = virtme.virtual_config().to_dict()
    return {key: config[key] for key in GUEST_KEYS}
