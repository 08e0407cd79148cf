"""status.goodput: the share of wall-clock that advanced training, and where the rest went
(docs/architecture.md section 12). Whole seconds: the figures are read over days."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from rljob.api.base import StatusModel
from rljob.api.rounding import Share

Seconds = Annotated[int, Field(ge=0)]
MAX_GOODPUT_NOTES = 4
GOODPUT_NOTE_MAX_LENGTH = 256


class LostSeconds(StatusModel):
    """Seconds of trainer time lost, by cause."""

    detection: Seconds = Field(
        default=0,
        description="From the failure (a rank's container ending; else the last evidence of "
        "health: the last step seen) to the operator's decision.",
    )
    teardown: Seconds = Field(
        default=0,
        description="From the decision to the next attempt's Job (old pods terminating, backoff).",
    )
    scheduling: Seconds = Field(
        default=0,
        description="From an attempt's Job to all its ranks Ready, and a first attempt's wait "
        "before its Job (queueing).",
    )
    startup: Seconds = Field(
        default=0, description="From all ranks Ready to the first step after the resume."
    )
    recomputation: Seconds = Field(
        default=0,
        description="Redoing the steps done since the checkpoint resumed from (until the step "
        "the attempt before had reached), and a failed attempt's step in progress.",
    )

    def total(self) -> int:
        return self.detection + self.teardown + self.scheduling + self.startup + self.recomputation


class SuspendedSeconds(StatusModel):
    """Seconds the job was suspended, shown apart from the losses."""

    user: Seconds = Field(default=0, description="By spec.suspend or the failure policy.")
    queue: Seconds = Field(default=0, description="By Kueue (not admitted, or evicted).")

    def total(self) -> int:
        return self.user + self.queue


class GoodputTotals(StatusModel):
    """Wall time split into training, losses and suspensions, and the steps done twice."""

    productive_seconds: Seconds = Field(default=0, description="Time that advanced training.")
    lost_seconds: LostSeconds = Field(default_factory=LostSeconds, description="Lost, by cause.")
    suspended_seconds: SuspendedSeconds = Field(
        default_factory=SuspendedSeconds, description="Suspended, by whom."
    )
    recomputed_steps: Seconds = Field(
        default=0, description="Steps done again after resuming from an older checkpoint."
    )


class GoodputStatus(StatusModel):
    """The job's effective training time. `closed` holds what attempts no longer in
    status.attempts added, so the figures outlive the bounded attempt history."""

    ratio: Share | None = Field(
        default=None,
        description="productiveSeconds / (wall-clock since creation - suspendedSeconds); "
        "empty before the first attempt.",
    )
    total: GoodputTotals = Field(
        default_factory=GoodputTotals, description="Since the job was created, up to updatedAt."
    )
    closed: GoodputTotals = Field(
        default_factory=GoodputTotals,
        description="What ended attempts up to closedThrough added (kept for the totals).",
    )
    closed_through: Seconds = Field(
        default=0, description="The last attempt whose time is in `closed` (0: none)."
    )
    updated_at: datetime | None = Field(default=None, description="When it was computed.")
    notes: Annotated[
        list[Annotated[str, Field(max_length=GOODPUT_NOTE_MAX_LENGTH)]],
        Field(max_length=MAX_GOODPUT_NOTES),
    ] = Field(
        default_factory=list,
        description="What is inferred rather than measured (no step signal, a failure instant "
        "taken from the last step seen).",
    )
