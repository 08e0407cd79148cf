"""status.bottleneck: the health loop's diagnosis, kept in status for `kubectl rljob diagnose`
and the printer column. It rides the 5-minute progress refresh, and is written at once when it
changes what a user would do: another known role, or a recommended concurrency moved by more
than RECOMMENDATION_CHANGE; another known role also says a BottleneckChanged Event. Unknown (too
little data yet, or no more) is no advice: it rides the refresh and says nothing, so a new job's
first write of it is not one more write and Event per job."""

from __future__ import annotations

from rljob.api.diagnosis import Bottleneck
from rljob.api.status import RLJobStatus
from rljob.reconcile.events import EventSpec, normal
from rljob.vocabulary.enums import BottleneckRole

# Relative change of the recommended concurrency worth a status write of its own.
RECOMMENDATION_CHANGE = 0.1


def with_bottleneck(
    status: RLJobStatus, diagnosis: Bottleneck | None, *, refreshed: bool
) -> RLJobStatus:
    """`status` with the diagnosis, when the refresh is due or the advice moved; else itself."""
    if diagnosis is None:
        return status
    if not refreshed and not advice_moved(status.bottleneck, diagnosis):
        return status
    return status.model_copy(update={"bottleneck": diagnosis})


def bottleneck_event(before: Bottleneck | None, after: Bottleneck | None) -> EventSpec | None:
    """BottleneckChanged when a known role replaced another role (the first verdict included)."""
    if after is None or after.role == BottleneckRole.UNKNOWN:
        return None
    if before is not None and before.role == after.role:
        return None
    was = f" (was {before.role.value})" if before is not None else ""
    advice = f" {after.advice}" if after.advice else ""
    return normal(
        "BottleneckChanged", f"bottleneck: {after.role.value}{was}: {after.evidence}.{advice}"
    )


def advice_moved(before: Bottleneck | None, after: Bottleneck) -> bool:
    """Another known role, or a recommended concurrency that appeared, went or moved materially."""
    if after.role == BottleneckRole.UNKNOWN:
        return False
    if before is None or before.role != after.role:
        return True
    old, new = before.recommended_concurrency, after.recommended_concurrency
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(new - old) > RECOMMENDATION_CHANGE * old
