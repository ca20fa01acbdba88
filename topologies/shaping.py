"""What qdiscs go on which interface, computed purely; and the thin code that installs them.

A topology describes each interface's egress as an :class:`EgressPlan` (rate + queue, and/or
delay + loss). :func:`qdisc_specs` turns a plan into the list of qdiscs/classes to create, a
pure function the unit tests check; :func:`apply` sends them to the kernel through pyroute2
(netlink) inside a node's network namespace.

Layout on one interface:

* rate-limited egress (a bottleneck): ``htb 1:`` → class ``1:1`` (rate = ceil) → ``pfifo 10:``
  with ``limit = queue_pkts``: a drop-tail queue of exactly that many packets;
* delay/loss egress: ``netem 1:`` with a large ``limit`` (netem counts packets held for delay
  against its limit, so it must never be the queue that drops).

A plan with both a rate and a delay is refused: keep them on different interfaces
(MACHINE.md: netem's limit would turn into the bottleneck queue).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: netem's own limit: far above any window in flight on the links we emulate
NETEM_LIMIT_PKTS = 100_000
#: HTB burst for a rate: at least one full-size frame plus slack; too small a burst
#: under-shoots the rate when the timer granularity is coarse (TCG guests)
MIN_HTB_BURST_BYTES = 3_000


@dataclass(frozen=True)
class EgressPlan:
    """Egress emulation of one interface."""

    rate_mbit: float | None = None
    queue_pkts: int | None = None
    delay_ms: float = 0.0
    loss_pct: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_mbit is not None and (self.delay_ms or self.loss_pct):
            raise ValueError(
                "rate and delay/loss must be on different interfaces (netem's limit would queue)"
            )
        if self.queue_pkts is not None and self.rate_mbit is None:
            raise ValueError("a queue size needs a rate (the queue forms in front of the rate limit)")

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms or self.loss_pct)

    @property
    def is_empty(self) -> bool:
        return self.rate_mbit is None and not self.needs_netem


@dataclass(frozen=True)
class QdiscSpec:
    """One pyroute2 ``tc()`` call: command, kind and keyword arguments."""

    command: str  # "add" or "add-class"
    kind: str
    kwargs: dict = field(default_factory=dict)


def htb_burst_bytes(rate_mbit: float) -> int:
    """HTB burst: 1 ms worth of the rate, but never below a few frames."""
    return max(MIN_HTB_BURST_BYTES, int(rate_mbit * 1e6 / 8 / 1000))


def qdisc_specs(plan: EgressPlan) -> list[QdiscSpec]:
    """The qdiscs and classes that implement a plan, root first."""
    if plan.rate_mbit is not None:
        rate = f"{round(plan.rate_mbit * 1e6)}bit"
        burst = htb_burst_bytes(plan.rate_mbit)
        specs = [
            QdiscSpec("add", "htb", {"handle": "1:", "default": "1"}),
            QdiscSpec(
                "add-class",
                "htb",
                {
                    "handle": "1:1",
                    "parent": "1:",
                    "rate": rate,
                    "ceil": rate,
                    "burst": burst,
                    "cburst": burst,
                },
            ),
        ]
        if plan.queue_pkts is not None:
            specs.append(
                QdiscSpec("add", "pfifo", {"handle": "10:", "parent": "1:1", "limit": plan.queue_pkts})
            )
        return specs
    if plan.needs_netem:
        netem = {"handle": "1:", "limit": NETEM_LIMIT_PKTS}
        if plan.delay_ms:
            netem["delay"] = round(plan.delay_ms * 1000)  # pyroute2 takes microseconds
        if plan.loss_pct:
            netem["loss"] = plan.loss_pct  # percent
        return [QdiscSpec("add", "netem", netem)]
    return []


class MissingQdiscError(RuntimeError):
    """The kernel lacks a qdisc a plan needs (e.g. netem on the host kernel)."""


def apply(netns_path: str, ifname: str, plan: EgressPlan, replace: bool = False) -> list[QdiscSpec]:
    """Install a plan on ``ifname`` inside the namespace at ``netns_path``.

    ``replace``: swap an existing root qdisc of the same layout in place (used to correct a netem
    delay without tearing the link down)."""
    from pyroute2 import NetNS
    from pyroute2.netlink.exceptions import NetlinkError

    specs = qdisc_specs(plan)
    ns = NetNS(netns_path)
    try:
        index = ns.link_lookup(ifname=ifname)[0]
        for spec in specs:
            command = "replace" if replace and spec.command == "add" else spec.command
            try:
                ns.tc(command, spec.kind, index=index, **spec.kwargs)
            except NetlinkError as err:
                if err.code == 2 and spec.command == "add":  # ENOENT: qdisc kind not in this kernel
                    raise MissingQdiscError(
                        f"the kernel has no '{spec.kind}' qdisc (needed on {ifname} for {plan}); "
                        f"delay and loss need sch_netem: run in the guest (testbed run --backend guest) "
                        f"or load the module (modprobe sch_{spec.kind})"
                    ) from err
                raise
    finally:
        ns.close()
    return specs
