"""The rollout engine roster in status: what a disaggregated driver follows
(rljob.sdk.EngineRoster) to stop sending to a draining engine and sync a joining one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from rljob.api.base import StatusModel, optional_text
from rljob.vocabulary.enums import EngineState


class EngineMember(StatusModel):
    """One rollout engine in the roster a driver follows (rljob.sdk.EngineRoster)."""

    pod: Annotated[str, Field(max_length=253)] = Field(description="Pod name.")
    address: Annotated[str, Field(max_length=64)] = optional_text(
        "Pod IP; absent until the pod has one."
    )
    state: EngineState = Field(
        description="joining (not Ready yet), serving (Ready: send to it) or draining (being "
        "replaced: send nothing new)."
    )
    generation: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Policy generation the engine reported when its state last changed.",
    )
    required_generation: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="weightSync Gated: the generation it must report to turn Ready, the job's "
        "newest known when it joined (or when its container last restarted); empty while none "
        "was known.",
    )
    restarts: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Container restarts of the pod: a change means the engine restarted in "
        "place (its weights are the command line's again), a leave and a join for a driver.",
    )
