"""The base of every scenario-facing model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base for every scenario-facing model: unknown fields are errors, values are checked on assignment.

    Scalars are strict: pydantic's lax mode would read ``rate_mbit: true`` as 1 Mbit/s, ``sack: 1`` as
    true and ``rate_mbit: "10"`` as 10, so a misplaced line would run as a different experiment. Strict
    mode still takes an int for a float and a mapping for a nested model; a field whose value arrives
    as a list but is a tuple (a ``[start_s, stop_s]`` period) relaxes only that container.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, strict=True)
