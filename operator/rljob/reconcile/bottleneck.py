"""status.bottleneck: the health loop's diagnosis, kept in status for `kubectl rljob diagnose`
and the printer column. It rides the 5-minute progress refresh, and is written at once when it
changes what a user would do: another role, or a recommended concurrency moved by more than
RECOMMENDATION_CHANGE; another role also says a BottleneckChanged Event."""

from __future__ import annotations

from rljob.api.diagnosis import Bottleneck
from rljob.api.status import RLJobStatus
from rljob.reconcile.events import EventSpec, normal

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
    """BottleneckChanged when the role changed (the first diagnosis included)."""
    if after is None or (before is not None and before.role == after.role):
        return None
    was = f" (was {before.role.value})" if before is not None else ""
    advice = f" {after.advice}" if after.advice else ""
    return normal(
        "BottleneckChanged", f"bottleneck: {after.role.value}{was}: {after.evidence}.{advice}"
    )


def advice_moved(before: Bottleneck | None, after: Bottleneck) -> bool:
    """Another role, or a recommended concurrency that appeared, went or moved materially."""
    if before is None or before.role != after.role:
        return True
    old, new = before.recommended_concurrency, after.recommended_concurrency
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(new - old) > RECOMMENDATION_CHANGE * old
