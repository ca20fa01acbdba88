"""Typed link and topology parameters shared by every topology.

Units live in the field names (``rate_mbit``, ``delay_ms``, ``loss_pct``, ``queue_pkts``).
Unknown keys are errors (``extra="forbid"``): a misspelled option must never be swallowed
silently, which is what Mininet's ``**params`` does.
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from topologies.base import StrictModel
from topologies.lossmodel import BernoulliLoss, LossModel
from topologies.queues import QueueDiscipline

#: Bytes on the wire per full-size segment: 1448 B payload + 32 B TCP (timestamps) + 20 B IP + 14 B Ethernet.
#: HTB counts the Ethernet header, so the TCP goodput limit of a rate R is R * 1448 / 1514.
WIRE_BYTES_PER_PACKET = 1514
TCP_PAYLOAD_BYTES = 1448


class LinkParams(StrictModel):
    """One emulated link direction set: rate, one-way delay, random loss and the queue in front of it."""

    rate_mbit: float | None = Field(default=None, gt=0, le=100_000, description="link rate; None = unshaped")
    delay_ms: float = Field(default=0.0, ge=0, le=10_000, description="one-way propagation delay")
    loss_pct: float = Field(default=0.0, ge=0, le=100, description="independent (Bernoulli) loss, per direction")
    loss: LossModel | None = Field(
        default=None,
        description="a loss model (bernoulli, gilbert_elliott, four_state, timed_two_state) instead of loss_pct",
    )
    queue_pkts: int | None = Field(default=None, ge=1, le=1_000_000, description="drop-tail queue in packets")
    queue_bdp: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="drop-tail queue in bandwidth-delay products of the longest base RTT",
    )

    queue: QueueDiscipline | None = Field(
        default=None,
        description="the queue's discipline: fifo (the default, drop-tail), codel, fq_codel, pie, red or cake, "
        "with its parameters (scenarios/README.md, Queue disciplines)",
    )

    @model_validator(mode="after")
    def _one_queue_size(self) -> LinkParams:
        if self.queue_pkts is not None and self.queue_bdp is not None:
            raise ValueError("give either queue_pkts or queue_bdp, not both")
        sized = self.queue_pkts is not None or self.queue_bdp is not None
        own_size = getattr(self.queue, "limit_pkts", None) or getattr(self.queue, "limit_bdp", None)
        if self.queue is not None and sized and own_size is not None:
            raise ValueError("give the queue's size once: queue_pkts / queue_bdp, or its limit_pkts / limit_bdp")
        if self.queue is not None and sized and self.queue.discipline == "cake":
            raise ValueError("cake sizes its queue by memory, not packets: leave out queue_pkts and queue_bdp")
        if self.queue is not None and self.rate_mbit is None:
            raise ValueError("a queue discipline needs rate_mbit: the queue forms in front of the rate limit")
        if self.loss is not None and self.loss_pct:
            raise ValueError("give either loss_pct or loss (a loss model), not both")
        return self

    @property
    def loss_model(self) -> LossModel | None:
        """The link's loss as a model (``loss_pct`` is the short form of Bernoulli loss); None = lossless."""
        if self.loss is not None:
            return self.loss
        return BernoulliLoss(loss_pct=self.loss_pct) if self.loss_pct else None


def bdp_packets(rate_mbit: float, rtt_ms: float) -> int:
    """Bandwidth-delay product in full-size packets on the wire (at least 1)."""
    return max(1, math.ceil(rate_mbit * 1e6 * rtt_ms / 1e3 / 8 / WIRE_BYTES_PER_PACKET - 1e-9))


def queue_packets(link: LinkParams, max_rtt_ms: float) -> int | None:
    """The resolved queue size of a link in packets (paper 000 §3: buffer = rate x max RTT)."""
    if link.queue_pkts is not None:
        return link.queue_pkts
    in_bdp = link.queue_bdp if link.queue_bdp is not None else getattr(link.queue, "limit_bdp", None)
    if in_bdp is not None:
        if link.rate_mbit is None:
            raise ValueError("queue_bdp needs rate_mbit on the same link")
        return max(1, round(in_bdp * bdp_packets(link.rate_mbit, max_rtt_ms)))
    return None


def tcp_goodput_limit_mbit(rate_mbit: float) -> float:
    """Highest TCP goodput a link of this rate can carry with full-size segments and timestamps."""
    return rate_mbit * TCP_PAYLOAD_BYTES / WIRE_BYTES_PER_PACKET
