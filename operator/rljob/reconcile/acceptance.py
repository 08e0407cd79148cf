"""The Accepted condition: True once the spec parsed, False naming the field when it did not
(reason InvalidSpec) or names an endpoint the platform does not allow (NotAllowed): a permanent
state until the user edits the spec, never a retry loop."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rljob.api import ConditionType, FieldViolation, RLJob, RLJobStatus
from rljob.reconcile.conditions import ConditionState, with_condition

_VALID = ConditionState.of(ConditionType.ACCEPTED, True, "SpecValid", "the spec is valid")


def with_accepted(status: RLJobStatus, job: RLJob, now: dt.datetime) -> RLJobStatus:
    return with_condition(status, _VALID, now, job.metadata.generation)


def invalid_spec_status(
    body: Mapping[str, Any],
    violations: Sequence[FieldViolation],
    now: dt.datetime,
    reason: str = "InvalidSpec",
) -> RLJobStatus:
    """The previous status with Accepted=False naming the first offending field."""
    previous = RLJobStatus.model_validate(body.get("status") or {})
    generation = body.get("metadata", {}).get("generation")
    first = violations[0] if violations else FieldViolation(field="spec", message="invalid")
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    state = ConditionState.of(
        ConditionType.ACCEPTED, False, reason, f"{first.field}: {first.message}{more}"
    )
    status = with_condition(previous, state, now, generation)
    return status.model_copy(update={"observed_generation": generation})
