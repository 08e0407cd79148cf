"""Events derived from what changed between the previous and the new status, so a pass that
repeats (a retry, a stale index) repeats no Event."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rljob.api import ConditionStatus, ConditionType, JobPhase, RLJobStatus, RolesStatus
from rljob.reconcile.conditions import find, is_true, one_line
from rljob.reconcile.lifecycle import TrainerDecision, TrainerState
from rljob.reconcile.names import ROLE_ORDER
from rljob.reconcile.render import DesiredChild

NORMAL = "Normal"
WARNING = "Warning"
_STOPPED_PHASES = (JobPhase.SUSPENDED, JobPhase.SUCCEEDED, JobPhase.FAILED)
REPORT_REPEAT_SECONDS = 600.0  # a standing finding is said again well within an Event's 1h TTL


@dataclass(frozen=True)
class EventSpec:
    """A Kubernetes Event about the RLJob: type Normal or Warning, a CamelCase reason and one
    line of at most 1 KiB."""

    type: str
    reason: str
    message: str


def normal(reason: str, message: str) -> EventSpec:
    return EventSpec(NORMAL, reason, one_line(message))


def warning(reason: str, message: str) -> EventSpec:
    return EventSpec(WARNING, reason, one_line(message))


def transition_events(
    job_name: str,
    old: RLJobStatus,
    new: RLJobStatus,
    decision: TrainerDecision,
    applied: Sequence[DesiredChild],
) -> list[EventSpec]:
    return [
        *_created(job_name, old, new, decision, applied),
        *_scaled(old, new),
        *_suspension(old, new),
        *_scheduling(old, new, decision),
        *_replaced(decision),
        *_finished(old, new, decision),
        *_roles_removed(old, new),
    ]


ATTEMPT_CREATED = "created trainer Job"


def announces_attempt(event: EventSpec) -> bool:
    """The Event of a trainer attempt's Job created in this pass."""
    return event.reason == "Created" and event.message.startswith(ATTEMPT_CREATED)


def _created(
    job_name: str,
    old: RLJobStatus,
    new: RLJobStatus,
    decision: TrainerDecision,
    applied: Sequence[DesiredChild],
) -> list[EventSpec]:
    if old.start_time is None and new.start_time is not None:
        if not applied:
            return []  # created by a pass whose status write failed
        names = ", ".join(f"{child.kind} {child.name}" for child in applied)
        return [normal("Created", f"created {names}")]
    record = next((r for r in new.attempts if r.attempt == decision.attempt), None)
    if decision.create_job and record is not None and record not in old.attempts:
        job = next((c.name for c in applied if c.kind == "Job"), f"attempt {decision.attempt}")
        start = (
            f"resuming from step {record.resumed_from_step}"
            if record.resumed_from_step is not None
            else "without a checkpoint to resume from"
        )
        return [normal("Created", f"{ATTEMPT_CREATED} {job} (attempt {decision.attempt}), {start}")]
    return []


def _scaled(old: RLJobStatus, new: RLJobStatus) -> list[EventSpec]:
    if old.phase in _STOPPED_PHASES or new.phase in _STOPPED_PHASES:
        return []
    events = []
    for role in ROLE_ORDER:
        before = getattr(old.roles or RolesStatus(), role.value)
        after = getattr(new.roles or RolesStatus(), role.value)
        if before is not None and after is not None and before.desired != after.desired:
            message = f"{role.value} scaled from {before.desired} to {after.desired} pods"
            events.append(normal("Scaled", message))
    return events


def _suspension(old: RLJobStatus, new: RLJobStatus) -> list[EventSpec]:
    kind = ConditionType.SUSPENDED.value
    was, now = is_true(old.conditions, kind), is_true(new.conditions, kind)
    if now and not was:
        if new.suspension is not None:
            return []  # the policy's own Warning, PolicySuspended (reconcile/suspension.py)
        message = "suspended: Deployments scaled to 0 and the trainer Job deleted; state kept"
        return [normal("Suspended", message)]
    if was and not now and find(new.conditions, kind) is not None:
        message = f"resumed as trainer attempt {new.attempt} (not counted as a restart)"
        if (request := _ended_by(old, new)) is not None:
            message += f": rljob.io/resume-request={request} ended the policy's suspension"
        return [normal("Resumed", message)]
    return []


def _ended_by(old: RLJobStatus, new: RLJobStatus) -> str | None:
    """The resume request's nonce when one ended the policy's part of this suspension."""
    request = new.last_resume_request
    began = find(old.conditions, ConditionType.SUSPENDED.value)
    if request is None or not request.resumed or began is None:
        return None
    return request.id if began.last_transition_time <= request.handled_at else None


def _scheduling(old: RLJobStatus, new: RLJobStatus, decision: TrainerDecision) -> list[EventSpec]:
    events = []
    if decision.state == TrainerState.TIMED_OUT:
        events.append(warning("SchedulingTimeout", decision.message))
    before = find(old.conditions, ConditionType.PODS_SCHEDULED)
    after = find(new.conditions, ConditionType.PODS_SCHEDULED)
    was_unschedulable = before is not None and before.status == ConditionStatus.FALSE
    if after is not None and after.status == ConditionStatus.FALSE and not was_unschedulable:
        events.append(warning("Unschedulable", after.message))
    return events


def _replaced(decision: TrainerDecision) -> list[EventSpec]:
    if not decision.replaced:
        return []
    message = (
        f"trainer Job {decision.replaced} (attempt {decision.attempt - 1}) was deleted outside "
        f"the operator: attempt {decision.attempt} starts from the newest checkpoint "
        "(not counted as a restart)"
    )
    return [warning("TrainerJobDeleted", message)]


def _finished(old: RLJobStatus, new: RLJobStatus, decision: TrainerDecision) -> list[EventSpec]:
    if new.phase == old.phase:
        return []
    if new.phase == JobPhase.SUCCEEDED:
        return [normal("Completed", f"{decision.message}; other roles scaled to 0")]
    if new.phase == JobPhase.FAILED:
        return [warning("Failed", decision.message)]
    return []


def _roles_removed(old: RLJobStatus, new: RLJobStatus) -> list[EventSpec]:
    return [
        normal("Deleted", f"{role.value} removed from the spec: its children are deleted")
        for role in ROLE_ORDER
        if getattr(old.roles or RolesStatus(), role.value) is not None
        and getattr(new.roles or RolesStatus(), role.value) is None
    ]
