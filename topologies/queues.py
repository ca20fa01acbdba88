"""Queue disciplines of a shaped link: drop-tail (fifo), CoDel, fq_codel, PIE, RED and CAKE.

A link's ``queue:`` names the discipline that holds the packets waiting for the link's rate (the
leaf under HTB's shaped class, ``topologies.shaping``), with the discipline's own parameters, units
in their names. A parameter left out takes the kernel's default, written here as the field's default
(Linux 6.1's ``sch_*.c``), so that the manifest records what ran. The size of the queue is either the
link's ``queue_pkts`` / ``queue_bdp`` or the discipline's ``limit_pkts``, never both.

How each goes into the kernel (``topologies.shaping.leaf_spec``): fifo, codel, fq_codel and cake
through pyroute2's netlink modules; pyroute2 has no ``pie`` or ``red`` module, so those two go in with
the ``tc`` command (as ``fq`` does).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from topologies.base import StrictModel


class _Discipline(StrictModel):
    # frozen: a plan that holds one (topologies.shaping.EgressPlan) is hashable and compared by value
    model_config = ConfigDict(**StrictModel.model_config | {"frozen": True, "validate_assignment": False})


class Fifo(_Discipline):
    """Drop-tail: a packet that finds ``limit_pkts`` packets waiting is dropped (``pfifo``)."""

    discipline: Literal["fifo"]
    limit_pkts: int | None = Field(default=None, ge=1, le=1_000_000, description="the queue's size")
    limit_bdp: float | None = Field(
        default=None, gt=0, le=1000, description="the queue's size in bandwidth-delay products of the longest base RTT"
    )

    @model_validator(mode="after")
    def _one_size(self) -> Fifo:
        if self.limit_pkts is not None and self.limit_bdp is not None:
            raise ValueError("give either limit_pkts or limit_bdp, not both")
        return self


class Codel(_Discipline):
    """CoDel (RFC 8289): drops (or ECN-marks) once packets have waited longer than ``target_ms`` for
    an ``interval_ms``."""

    discipline: Literal["codel"]
    limit_pkts: int | None = Field(default=None, ge=1, le=1_000_000, description="hard limit; kernel: 1000")
    target_ms: float = Field(default=5.0, gt=0, le=10_000, description="acceptable standing queue delay")
    interval_ms: float = Field(default=100.0, gt=0, le=100_000, description="about the worst RTT through it")
    ecn: bool = Field(default=False, description="mark ECN-capable packets instead of dropping them")
    ce_threshold_ms: float | None = Field(default=None, gt=0, le=10_000, description="mark CE above this delay")


class FqCodel(_Discipline):
    """fq_codel (RFC 8290): per-flow queues served in turn, each under CoDel."""

    discipline: Literal["fq_codel"]
    limit_pkts: int | None = Field(default=None, ge=1, le=1_000_000, description="hard limit; kernel: 10240")
    target_ms: float = Field(default=5.0, gt=0, le=10_000, description="acceptable standing queue delay")
    interval_ms: float = Field(default=100.0, gt=0, le=100_000, description="about the worst RTT through it")
    ecn: bool = Field(default=True, description="mark ECN-capable packets instead of dropping them")
    ce_threshold_ms: float | None = Field(default=None, gt=0, le=10_000, description="mark CE above this delay")
    flows: int = Field(default=1024, ge=1, le=65_536, description="number of flow queues")
    quantum_bytes: int | None = Field(default=None, ge=64, le=1_048_576, description="bytes per turn; kernel: MTU")


class Pie(_Discipline):
    """PIE (RFC 8033): drops with a probability steered toward a queueing delay of ``target_ms``."""

    discipline: Literal["pie"]
    limit_pkts: int | None = Field(default=None, ge=1, le=1_000_000, description="hard limit; kernel: 1000")
    target_ms: float = Field(default=15.0, gt=0, le=10_000, description="target queueing delay")
    tupdate_ms: float = Field(default=15.0, gt=0, le=10_000, description="how often the probability is updated")
    alpha: int = Field(default=2, ge=0, le=32, description="weight of the delay's distance from target (1/8 units)")
    beta: int = Field(default=20, ge=0, le=32, description="weight of the delay's trend (1/8 units)")
    ecn: bool = Field(default=False, description="mark ECN-capable packets instead of dropping them")
    bytemode: bool = Field(default=False, description="scale the drop probability by packet size")


class Red(_Discipline):
    """RED: drops (or marks) with a probability rising from 0 at ``min_pkts`` of average queue to
    ``probability`` at ``max_pkts``; above ``max_pkts``, every packet."""

    discipline: Literal["red"]
    limit_pkts: int | None = Field(default=None, ge=4, le=1_000_000, description="hard limit; default 1000")
    min_pkts: float | None = Field(default=None, gt=0, description="average queue where drops begin; default max/3")
    max_pkts: float | None = Field(default=None, gt=0, description="average queue of full probability; default limit/4")
    probability: float = Field(default=0.02, gt=0, le=1, description="drop probability at max_pkts")
    ecn: bool = Field(default=False, description="mark ECN-capable packets instead of dropping them")
    adaptive: bool = Field(default=False, description="Adaptive RED: probability steered between min and max")

    @model_validator(mode="after")
    def _thresholds_in_order(self) -> Red:
        limit = self.limit_pkts or RED_DEFAULT_LIMIT_PKTS
        high = self.max_pkts if self.max_pkts is not None else limit / 4
        low = self.min_pkts if self.min_pkts is not None else high / 3
        if not low < high <= limit:
            raise ValueError(f"RED needs min_pkts < max_pkts <= limit_pkts (here {low:g}, {high:g}, {limit})")
        return self

    def thresholds_pkts(self, limit_pkts: int | None) -> tuple[int, float, float]:
        """(limit, min, max) in packets, the defaults filled in (``limit_pkts``: the link's queue size)."""
        limit = self.limit_pkts or limit_pkts or RED_DEFAULT_LIMIT_PKTS
        high = self.max_pkts if self.max_pkts is not None else limit / 4
        low = self.min_pkts if self.min_pkts is not None else high / 3
        return limit, low, high


#: RED has no kernel default size (tc requires one): this many packets, tc-red(8)'s example's order
RED_DEFAULT_LIMIT_PKTS = 1000


CakeFlowMode = Literal["srchost", "dsthost", "hosts", "flows", "dual-srchost", "dual-dsthost", "triple-isolate"]


class Cake(_Discipline):
    """CAKE: flow isolation and COBALT (CoDel and BLUE) per flow; it always marks ECN-capable packets.
    Under the link's HTB it runs unshaped (HTB sets the rate); it sizes its queue by memory, not packets."""

    discipline: Literal["cake"]
    rtt_ms: float = Field(default=100.0, gt=0, le=3_600_000, description="the RTT its AQM is tuned for")
    flow_mode: CakeFlowMode = Field(default="triple-isolate", description="what a flow is, for fairness")
    ack_filter: bool = Field(default=False, description="drop ACKs that a later ACK makes redundant")


QueueDiscipline = Annotated[Fifo | Codel | FqCodel | Pie | Red | Cake, Field(discriminator="discipline")]

#: each discipline's kernel module, for the error when the kernel lacks it
MODULES = {
    "fifo": "sch_fifo (built in)",
    "codel": "sch_codel",
    "fq_codel": "sch_fq_codel",
    "pie": "sch_pie",
    "red": "sch_red",
    "cake": "sch_cake",
}
#: the disciplines a link's ``queue:`` may name
DISCIPLINES = tuple(MODULES)
