"""The factors of a claim's ablations (``ablations`` in analysis/verdicts/claims.yaml): the ways today's setup
differs from the paper's, each a switch the testbed can set on a point's flows (analysis/verdicts/ablation.py
has the rule that judges them; ``testbed explain`` runs them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: the point parameter that names an explain run's setting (``baseline``, a factor, ``all``)
ABLATE_PARAM = "ablate"

#: the switches a factor can be: name -> what it sets, and the kind of the paper's setting
SWITCHES: dict[str, tuple[str, type]] = {
    "variant": (
        "the algorithm run for Westwood+: westwood_paper (kernel-patch/, the papers' pseudo-code) "
        "instead of mainline tcp_westwood",
        str,
    ),
    "sack": ("SACK on every flow's hosts (net.ipv4.tcp_sack)", bool),
    "rack": ("RACK loss detection on every flow's hosts (net.ipv4.tcp_recovery)", bool),
    "tlp": ("tail loss probes on every flow's hosts (net.ipv4.tcp_early_retrans)", bool),
    "frto": ("F-RTO on every flow's hosts (net.ipv4.tcp_frto)", bool),
    "delayed_ack": ("delayed ACKs at every flow's receiver (route quickack when off)", bool),
    "initcwnd_segs": ("the initial congestion window of every flow, in segments (route initcwnd)", int),
    "length": ("the run's seconds of traffic (the point compressed or stretched to it)", float),
}


class Factor(BaseModel):
    """One way today's setup differs from the paper's, as a switch (module doc)."""

    model_config = ConfigDict(extra="forbid")
    paper: bool | int | float | str | None = Field(default=None, description="the paper's setting")
    run: float | None = Field(
        default=None, gt=0, description="length: the seconds run here, when the paper's are out of this machine's reach"
    )
    why: str = Field(min_length=10, description="why it could matter for this claim")
    unavailable: str | None = Field(default=None, description="why it cannot be switched here (then never run)")

    def setting(self):
        """What the switch is set to: the paper's setting, or ``run`` for a length out of reach."""
        return self.run if self.run is not None else self.paper


class Ablations(BaseModel):
    """A claim's ablation plan: where it is decided and the factors to set there."""

    model_config = ConfigDict(extra="forbid")
    at: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="the parameters of the deciding condition, when the claim has several"
    )
    factors: dict[str, Factor] = Field(min_length=1)

    @model_validator(mode="after")
    def _known(self):
        for name, factor in self.factors.items():
            if factor.unavailable is not None:  # named for the record; it need not be a switch
                continue
            if name not in SWITCHES:
                raise ValueError(f"factor {name!r} is not a switch the testbed has; valid: {', '.join(SWITCHES)}")
            kind = SWITCHES[name][1]
            value = factor.setting()
            if value is None or not _is_kind(value, kind):
                raise ValueError(f"factor {name!r}: paper (or run) must be a {kind.__name__}, not {value!r}")
        return self

    def runnable(self, chosen: list[str] | None = None) -> dict[str, Factor]:
        """The factors to run (``chosen`` by name, else every available one); an unknown or unavailable
        name is refused with what would be valid."""
        available = {name: f for name, f in self.factors.items() if f.unavailable is None}
        if not chosen:
            return available
        for name in chosen:
            if name not in self.factors:
                raise ValueError(f"factor {name!r} is not one of this claim's: {', '.join(self.factors)}")
            if name not in available:
                raise ValueError(f"factor {name!r} cannot be switched here: {self.factors[name].unavailable}")
        return {name: available[name] for name in chosen}


def _is_kind(value, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)
