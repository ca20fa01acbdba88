"""Loss models of a link, and the seeded state timeline of the papers' time-based two-state channel.

A link's ``loss`` names one model (``model:`` picks it); ``loss_pct`` stays as the short form of
Bernoulli loss. Every model applies per direction of the link, in both directions.

* ``bernoulli``: each packet is lost with ``loss_pct``, drawn from the run's seed (the timed channel's
  tc-BPF program with one state of that loss, :meth:`BernoulliLoss.as_timed`): the same seed loses the
  same packets (by their index on the link), so every side of a comparison run at one seed meets the
  same losses (common random numbers: the claims, ``testbed explain`` and ``testbed regress`` pair runs
  by seed). A link's ``loss_pct`` is this model's short form. ``seeded: false`` draws with netem's own
  ``loss`` instead, which takes no seed here (Debian 12's iproute2): not reproducible, not paired.
* ``gilbert_elliott``: netem's per-packet Gilbert-Elliott chain (``loss gemodel p r 1-h 1-k``, where 1-h is the loss
  probability in Bad and 1-k in Good): at
  each packet the chain moves Good->Bad with ``p_pct`` and Bad->Good with ``r_pct``; a packet is
  lost with ``bad_loss_pct`` in Bad and ``good_loss_pct`` in Good. Debian 12's netem takes no seed,
  so this model's pattern is not reproducible (the manifest says so).
* ``four_state``: netem's 4-state Markov model (``loss state p13 p31 p32 p23 p14``; Salamatian and
  Vaton's gap/burst model as implemented in ``sch_netem.c``): state 1 transmits within a gap, 2
  transmits within a burst, 3 loses within a burst, 4 is an isolated loss in a gap. Per packet:
  1 -> 3 with ``p13``, 1 -> 4 with ``p14``; 2 -> 3 with ``p23``; 3 -> 1 with ``p31``, 3 -> 2 with
  ``p32``; 4 -> 1 always; a packet is lost when the chain is (or stays) in 3 or 4. Defaults are tc's
  (p31 100 %, p32 0, p23 100 %, p14 0). Not seeded either.
* ``timed_two_state``: the papers' channel (000 §3.4, 001 §3.1.2). The channel is Good or Bad for a
  *duration* (``deterministic``, or ``exponential`` with that mean); each packet is lost with the
  probability of the state at that packet's time; at each state end the next state is drawn
  (Bad with ``to_bad_p`` after Good, Good with ``to_good_p`` after Bad; paper 000: both 0.5,
  paper 001's Markov chain: both 1, i.e. alternating). The timeline comes from the run's seed
  (:func:`timeline`), is enforced by a tc-BPF program (``testbed/guest/bpf/timed_loss.bpf.c``) whose
  per-packet draws also come from the seed, and is written to the run directory with the packets
  seen and dropped in every state.

This module is pure (no kernel access): scenario files validate and timelines are computed and
unit-tested anywhere.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, model_validator

from topologies.base import StrictModel

#: the BPF program's timeline map holds this many states (testbed/guest/bpf/timed_loss.bpf.c MAX_STATES)
MAX_STATES = 65_536
#: seeded Bernoulli loss is a timed channel whose first state outlasts any run (the schema's longest state)
SEEDED_STATE_S = 100_000


class BernoulliLoss(StrictModel):
    """Independent loss: every packet is lost with the same probability."""

    model: Literal["bernoulli"] = "bernoulli"
    loss_pct: float = Field(ge=0, le=100, description="probability that a packet is lost")
    seeded: bool = Field(
        default=True, description="draw each packet's fate from the run's seed (tc-BPF); false: netem's unseeded draws"
    )

    def as_timed(self) -> TimedTwoStateLoss:
        """The seeded form: the timed channel with one state (far longer than any run) of this loss."""
        return TimedTwoStateLoss(
            good_s=SEEDED_STATE_S, bad_s=SEEDED_STATE_S, good_loss_pct=self.loss_pct, bad_loss_pct=self.loss_pct
        )


class GilbertElliottLoss(StrictModel):
    """netem's per-packet Gilbert-Elliott model (state changes counted in packets, not time)."""

    model: Literal["gilbert_elliott"] = "gilbert_elliott"
    p_pct: float = Field(gt=0, le=100, description="per packet, probability of Good -> Bad")
    r_pct: float = Field(gt=0, le=100, description="per packet, probability of Bad -> Good")
    bad_loss_pct: float = Field(default=100, ge=0, le=100, description="loss probability in Bad (netem 1-k)")
    good_loss_pct: float = Field(default=0, ge=0, le=100, description="loss probability in Good (netem 1-h)")


class FourStateLoss(StrictModel):
    """netem's per-packet 4-state model (gap/burst periods; transitions in percent per packet)."""

    model: Literal["four_state"] = "four_state"
    p13_pct: float = Field(gt=0, le=100, description="gap -> burst loss (state 1 -> 3)")
    p31_pct: float = Field(default=100, gt=0, le=100, description="burst loss -> gap (3 -> 1)")
    p32_pct: float = Field(default=0, ge=0, le=100, description="burst loss -> burst transmission (3 -> 2)")
    p23_pct: float = Field(default=100, ge=0, le=100, description="burst transmission -> burst loss (2 -> 3)")
    p14_pct: float = Field(default=0, ge=0, le=100, description="gap -> isolated loss (1 -> 4)")

    @model_validator(mode="after")
    def _probabilities_sum(self) -> FourStateLoss:
        if self.p13_pct + self.p14_pct > 100:
            raise ValueError("p13_pct + p14_pct (the ways out of state 1) must be at most 100")
        if self.p31_pct + self.p32_pct > 100:
            raise ValueError("p31_pct + p32_pct (the ways out of state 3) must be at most 100")
        if self.p32_pct > 0 and self.p23_pct == 0:
            raise ValueError(
                "with p32_pct > 0 and p23_pct 0 the chain ends in state 2 and loses nothing more; give p23_pct > 0"
            )
        return self

    def stationary_loss_pct(self) -> float:
        """Share of packets lost in the long run: the stationary probability of states 3 and 4."""
        p13, p31, p32, p23, p14 = (
            v / 100 for v in (self.p13_pct, self.p31_pct, self.p32_pct, self.p23_pct, self.p14_pct)
        )
        # balance equations, with pi1 = 1 before normalizing: pi4 = p14 pi1; pi2 p23 = p32 pi3;
        # pi3 (p31 + p32) = p13 pi1 + p23 pi2  =>  pi3 p31 = p13 pi1
        pi1 = 1.0
        pi4 = p14 * pi1
        pi3 = p13 * pi1 / p31
        pi2 = p32 * pi3 / p23 if p23 else 0.0
        return 100 * (pi3 + pi4) / (pi1 + pi2 + pi3 + pi4)


class TimedTwoStateLoss(StrictModel):
    """The papers' channel: Good and Bad states that last a time, a loss probability in each."""

    model: Literal["timed_two_state"] = "timed_two_state"
    good_s: float = Field(gt=0, le=100_000, description="duration of a Good state (the mean if exponential)")
    bad_s: float = Field(gt=0, le=100_000, description="duration of a Bad state (the mean if exponential)")
    durations: Literal["deterministic", "exponential"] = Field(
        default="deterministic", description="how state durations are drawn"
    )
    good_loss_pct: float = Field(default=0, ge=0, le=100, description="loss probability in Good")
    bad_loss_pct: float = Field(ge=0, le=100, description="loss probability in Bad")
    to_bad_p: float = Field(default=1.0, ge=0, le=1, description="at a Good state's end, probability that Bad follows")
    to_good_p: float = Field(default=1.0, ge=0, le=1, description="at a Bad state's end, probability that Good follows")
    start: Literal["good", "bad"] = Field(default="good", description="the state at t = 0")

    @model_validator(mode="after")
    def _short_states_fit(self) -> TimedTwoStateLoss:
        # the timeline must fit the BPF map for any run up to its horizon; checked again per run
        if min(self.good_s, self.bad_s) < 1e-5:
            raise ValueError("state durations below 10 us are finer than the clock can hold them")
        return self


LOSS_MODEL_NAMES = ("bernoulli", "gilbert_elliott", "four_state", "timed_two_state")
#: per-packet models that netem draws (through the tc command: pyroute2's netem has no loss models)
NetemLossModel = GilbertElliottLoss | FourStateLoss
LossModel = Annotated[
    BernoulliLoss | GilbertElliottLoss | FourStateLoss | TimedTwoStateLoss, Field(discriminator="model")
]


@dataclass(frozen=True)
class State:
    """One state of a realized timeline: ``bad`` or not, from ``start_s`` to ``end_s`` after t0."""

    bad: bool
    start_s: float
    end_s: float
    loss_pct: float

    def to_dict(self) -> dict:
        return {
            "state": "bad" if self.bad else "good",
            "start_s": self.start_s,
            "end_s": self.end_s,
            "loss_pct": self.loss_pct,
        }


class TimelineTooLong(ValueError):
    """More states than the BPF program's map holds."""


def timeline(model: TimedTwoStateLoss, seed: int, horizon_s: float, stream: int = 0) -> list[State]:
    """The state sequence of one link direction from t = 0 to at least ``horizon_s``.

    Deterministic given (model, seed, stream): Python's Mersenne Twister seeded with the text
    ``"<seed>/<stream>"`` (hashed with SHA-512, stable across Python versions), so each direction of
    each link (``stream``) gets its own independent channel from one run seed. Not numpy: the runner
    imports this module, and numpy's wheels need CPU instructions that a TCG VM's default CPU model
    (qemu64) lacks (the lab VM's runner died with SIGILL in numpy).
    """
    rng = random.Random(f"{seed}/{stream}")
    states: list[State] = []
    bad = model.start == "bad"
    now = 0.0
    while now < horizon_s:
        mean = model.bad_s if bad else model.good_s
        length = mean if model.durations == "deterministic" else rng.expovariate(1 / mean)
        length = max(length, 1e-6)  # an exponential draw of ~0 still lasts a microsecond
        states.append(State(bad, now, now + length, model.bad_loss_pct if bad else model.good_loss_pct))
        if len(states) > MAX_STATES:
            raise TimelineTooLong(
                f"the channel changes state more than {MAX_STATES} times in {horizon_s:g} s "
                f"(good_s {model.good_s:g}, bad_s {model.bad_s:g}); use longer states or a shorter run"
            )
        now += length
        switch_p = model.to_bad_p if not bad else model.to_good_p
        if rng.random() < switch_p:
            bad = not bad
    return states


def expected_states(model: TimedTwoStateLoss, horizon_s: float) -> float:
    """Roughly how many states a timeline of ``horizon_s`` has (to refuse hopeless files early)."""
    p_gb, p_bg = model.to_bad_p, model.to_good_p
    if p_gb + p_bg == 0:
        return horizon_s / (model.bad_s if model.start == "bad" else model.good_s)
    share_bad = p_gb / (p_gb + p_bg)  # stationary share of Bad states among states
    mean_length = share_bad * model.bad_s + (1 - share_bad) * model.good_s
    return horizon_s / mean_length


def netem_loss_args(model: BernoulliLoss | GilbertElliottLoss | FourStateLoss) -> list[str]:
    """The ``tc qdisc ... netem`` loss arguments of a per-packet model."""
    if isinstance(model, BernoulliLoss):
        return ["loss", f"{model.loss_pct:g}%"]
    if isinstance(model, FourStateLoss):
        return [
            "loss",
            "state",
            *(f"{v:g}%" for v in (model.p13_pct, model.p31_pct, model.p32_pct, model.p23_pct, model.p14_pct)),
        ]
    return [
        "loss",
        "gemodel",
        f"{model.p_pct:g}%",
        f"{model.r_pct:g}%",
        f"{model.bad_loss_pct:g}%",
        f"{model.good_loss_pct:g}%",
    ]


def packet_chain(model: GilbertElliottLoss | FourStateLoss) -> tuple[list[list[float]], list[float]]:
    """A per-packet model as netem runs it: the transition matrix of its Markov chain (``P[i][j]``: from
    state i to j at a packet) and each state's loss probability. Gilbert-Elliott: Good, Bad (a packet's
    fate drawn in the state it finds). 4-state: states 1-4 as above (a packet lost in 3 and 4)."""
    if isinstance(model, GilbertElliottLoss):
        p, r = model.p_pct / 100, model.r_pct / 100
        return [[1 - p, p], [r, 1 - r]], [model.good_loss_pct / 100, model.bad_loss_pct / 100]
    p13, p31, p32, p23, p14 = (
        v / 100 for v in (model.p13_pct, model.p31_pct, model.p32_pct, model.p23_pct, model.p14_pct)
    )
    chain = [
        [1 - p13 - p14, 0.0, p13, p14],
        [0.0, 1 - p23, p23, 0.0],
        [p31, p32, 1 - p31 - p32, 0.0],
        [1.0, 0.0, 0.0, 0.0],
    ]
    return chain, [0.0, 0.0, 1.0, 1.0]


def probe_loss_pct(model: LossModel | None) -> float:
    """The loss a UDP rate probe sees before traffic starts: the stationary loss of a per-packet model;
    a timed channel is not armed yet (it starts with the traffic, at t0) and loses nothing."""
    if isinstance(model, BernoulliLoss):
        return 0.0 if model.seeded else model.loss_pct
    if isinstance(model, GilbertElliottLoss):
        share_bad = model.p_pct / (model.p_pct + model.r_pct)
        return share_bad * model.bad_loss_pct + (1 - share_bad) * model.good_loss_pct
    if isinstance(model, FourStateLoss):
        return model.stationary_loss_pct()
    return 0.0
