"""Conditions by Kubernetes conventions: one per type, status True/False, a CamelCase reason, a
one-line message, and a lastTransitionTime that changes only when the status flips."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rljob.api import Condition, ConditionStatus, ConditionType, RLJobStatus
from rljob.api.status import MESSAGE_MAX_LENGTH, REASON_MAX_LENGTH, REASON_PATTERN
from rljob.health.termination import sanitize_line

# Types this layer owns, in the order they are listed; other types (CheckpointReady, ...) are
# kept as they are, after these.
MANAGED_TYPES = (
    ConditionType.READY.value,
    ConditionType.PROGRESSING.value,
    ConditionType.DEGRADED.value,
    ConditionType.SUSPENDED.value,
    ConditionType.RESTARTING.value,
    ConditionType.PODS_SCHEDULED.value,
    ConditionType.SUSPECT_NODE_IN_USE.value,
    ConditionType.SUCCEEDED.value,
    ConditionType.FAILED.value,
)
_REASON = re.compile(REASON_PATTERN)


@dataclass(frozen=True)
class ConditionState:
    """What a condition should say, without its timestamps."""

    type: str
    status: ConditionStatus
    reason: str
    message: str

    @classmethod
    def of(cls, kind: str, is_true: bool, reason: str, message: str) -> ConditionState:
        status = ConditionStatus.TRUE if is_true else ConditionStatus.FALSE
        return cls(kind, status, reason, one_line(message))


def one_line(text: str, limit: int = MESSAGE_MAX_LENGTH) -> str:
    """Whitespace (newlines included) collapsed to single spaces, control and format
    characters dropped (messages quote what pods and metrics sources say: no terminal escapes
    reach `kubectl describe`), cut to `limit` characters."""
    line = sanitize_line(text[: 8 * limit])  # bounded work, whatever comes in
    return line if len(line) <= limit else line[: limit - 3] + "..."


def valid_reason(reason: str, fallback: str) -> str:
    """`reason` if it is a valid condition reason (CamelCase word), else `fallback`."""
    # fullmatch: Python's `$` also matches before a trailing newline, the API server's not.
    valid = len(reason) <= REASON_MAX_LENGTH and _REASON.fullmatch(reason)
    return reason if valid else fallback


def find(conditions: Iterable[Condition], kind: str) -> Condition | None:
    return next((condition for condition in conditions if condition.type == kind), None)


def is_true(conditions: Iterable[Condition], kind: str) -> bool:
    condition = find(conditions, kind)
    return condition is not None and condition.status == ConditionStatus.TRUE


def merge_conditions(
    previous: Sequence[Condition],
    states: Sequence[ConditionState],
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """The new condition list: `states` for the managed types (a managed type without a state is
    removed), the previous object reused when nothing changed, then unmanaged types as they were."""
    managed = [
        _updated(find(previous, state.type), state, now, generation)
        for kind in MANAGED_TYPES
        for state in states
        if state.type == kind
    ]
    return managed + [condition for condition in previous if condition.type not in MANAGED_TYPES]


def _updated(
    old: Condition | None, state: ConditionState, now: datetime, generation: int | None
) -> Condition:
    if old is not None and old.status == state.status:
        if (old.reason, old.message, old.observed_generation) == (
            state.reason,
            state.message,
            generation,
        ):
            return old
        transition = old.last_transition_time
    else:
        transition = now
    return Condition(
        type=state.type,
        status=state.status,
        reason=state.reason,
        message=state.message,
        last_transition_time=transition,
        observed_generation=generation,
    )


def set_condition(
    conditions: Sequence[Condition], state: ConditionState, now: datetime, generation: int | None
) -> list[Condition]:
    """`conditions` with the one condition of `state.type` set, in place, keeping the others."""
    updated = _updated(find(conditions, state.type), state, now, generation)
    if find(conditions, state.type) is None:
        return [*conditions, updated]
    return [updated if condition.type == state.type else condition for condition in conditions]


def with_condition(
    status: RLJobStatus, state: ConditionState, now: datetime, generation: int | None
) -> RLJobStatus:
    """`status` with the condition of `state.type` set."""
    conditions = set_condition(status.conditions or [], state, now, generation)
    return status.model_copy(update={"conditions": conditions})
