"""The Accepted condition: True once the spec parsed, False with reason InvalidSpec naming the
field when it did not (a permanent state until the user edits the spec, never a retry loop)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rljob.api import Condition, ConditionStatus, FieldViolation, RLJob, RLJobStatus

ACCEPTED = "Accepted"


def upsert_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: dt.datetime,
) -> list[Condition]:
    """conditions with `type_` set; lastTransitionTime moves only when the status flips."""
    previous = next((c for c in conditions if c.type == type_), None)
    since = previous.last_transition_time if previous and previous.status == status else now
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    if previous == updated:
        return list(conditions)
    return [c for c in conditions if c.type != type_] + [updated]


def with_accepted(status: RLJobStatus, job: RLJob, now: dt.datetime) -> RLJobStatus:
    generation = job.metadata.generation
    conditions = upsert_condition(
        status.conditions or [],
        ACCEPTED,
        ConditionStatus.TRUE,
        "SpecValid",
        "the spec is valid",
        generation,
        now,
    )
    return status.model_copy(update={"conditions": conditions})


def invalid_spec_status(
    body: Mapping[str, Any], violations: Sequence[FieldViolation], now: dt.datetime
) -> RLJobStatus:
    """The previous status with Accepted=False naming the first offending field."""
    previous = RLJobStatus.model_validate(body.get("status") or {})
    generation = body.get("metadata", {}).get("generation")
    first = violations[0] if violations else FieldViolation(field="spec", message="invalid")
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    conditions = upsert_condition(
        previous.conditions or [],
        ACCEPTED,
        ConditionStatus.FALSE,
        "InvalidSpec",
        f"{first.field}: {first.message}{more}",
        generation,
        now,
    )
    return previous.model_copy(update={"conditions": conditions, "observed_generation": generation})
