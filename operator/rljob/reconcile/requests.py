"""Manual restarts: the annotation `rljob.io/restart-request: <role>/<nonce>` (written by
`kubectl rljob restart`) is honoured exactly once per nonce, remembered in
status.lastRestartRequest. A trainer restart is a journaled gang restart (attempt + 1: the
reconcile then retires the old Job and creates the next one with the resume checkpoint); a
serving role restart is a journaled roll of its Deployment (Gated rollout engines: an in-turn
restart, each drained first). A request that arrives while an action is in flight waits for
it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from rljob.api import (
    ActionKind,
    ActionTarget,
    FailureAction,
    InFlightAction,
    RestartRequest,
    RestartsStatus,
    RLJob,
    RLJobStatus,
    RoleName,
)
from rljob.reconcile.drain import drains
from rljob.reconcile.events import EventSpec
from rljob.reconcile.in_turn import advance_in_turn, in_turn_entry
from rljob.reconcile.journal import MANUAL_PREFIX
from rljob.reconcile.lifecycle import RESTART_REQUESTED_END, close_attempt
from rljob.reconcile.names import child_names
from rljob.reconcile.observed import Observed
from rljob.reconcile.policy import record_requested_restart
from rljob.reconcile.remediation import current_trainer_job
from rljob.vocabulary.labels import RESTART_REQUEST_ANNOTATION

# The annotation's name stays importable from here, where the request is read.
__all__ = [
    "RESTART_REQUEST_ANNOTATION",
    "RestartOrder",
    "journal_manual_restart",
    "malformed_restart",
    "not_started_note",
    "pending_restart",
]
_REQUEST = re.compile(
    r"^(?P<role>rollout|trainer|reference|verifier)/(?P<nonce>[A-Za-z0-9._-]{1,64})$"
)


@dataclass(frozen=True)
class RestartOrder:
    """A request that has not been carried out yet."""

    role: RoleName
    nonce: str

    @property
    def gang(self) -> bool:
        return self.role == RoleName.TRAINER


def pending_restart(annotations: Mapping[str, str], status: RLJobStatus) -> RestartOrder | None:
    """The annotated request, unless it is malformed or its nonce was already handled."""
    match = _REQUEST.match(annotations.get(RESTART_REQUEST_ANNOTATION, ""))
    if match is None:
        return None
    done = status.last_restart_request
    if done is not None and done.handled(match["nonce"]):
        return None
    return RestartOrder(RoleName(match["role"]), match["nonce"])


def malformed_restart(annotations: Mapping[str, str]) -> str | None:
    """A one-line reason when the annotation is present but unusable, else None."""
    value = annotations.get(RESTART_REQUEST_ANNOTATION)
    if value is None or _REQUEST.match(value):
        return None
    return f"{RESTART_REQUEST_ANNOTATION}={value[:80]!r}: expected <role>/<nonce>"


def journal_manual_restart(
    job: RLJob, order: RestartOrder, observed: Observed, now: datetime
) -> RLJobStatus:
    """The request recorded as handled in the same write that journals it as an action in
    flight (a trainer gang restart: attempt + 1; a serving role: its roll), so a crash between
    the write and the roll resumes the roll. A restart carried out is in the restart ledger,
    as the policy's are, but not counted towards the restart budget."""
    status = job.status.model_copy(
        update={
            "last_restart_request": RestartRequest(
                id=order.nonce,
                role=order.role,
                handled_at=now,
                earlier=done.after() if (done := job.status.last_restart_request) else [],
            )
        }
    )
    action_id = f"{MANUAL_PREFIX}{order.nonce}"[:64]
    if order.gang:
        current = current_trainer_job(job, observed)
        if current is None and not _recorded(status):
            return status  # the attempt about to start is the restart: it resumes afresh
        target = ActionTarget(
            role=RoleName.TRAINER,
            name=current.name if current else None,
            uid=current.uid if current else None,
        )
        action = InFlightAction(
            id=action_id, kind=ActionKind.RESTART_TRAINER_GANG, target=target, started_at=now
        )
        attempt = status.attempt or 1
        ended = close_attempt(status.attempts, attempt, RESTART_REQUESTED_END, now)
        return status.model_copy(
            update={
                "attempt": attempt + 1,
                "attempts": ended,
                "in_flight": action,
                "restarts": _ledger(status, order, FailureAction.RESTART_TRAINER_GANG, now),
            }
        )
    if getattr(job.spec.roles, order.role.value) is None:
        return status  # no such role: nothing to roll (kubectl rljob restart checks first)
    if drains(job, order.role.value):  # Gated engines drain: in turn, never a roll
        entry = in_turn_entry(job, order.role, observed, action_id, now)
        if entry is None:
            return status
        ledger = _ledger(status, order, FailureAction.RESTART_ROLE_IN_TURN, now)
        journaled = status.model_copy(update={"in_flight": entry, "restarts": ledger})
        return advance_in_turn(job.model_copy(update={"status": journaled}), observed, now).status
    target = ActionTarget(role=order.role, name=child_names(job).role(order.role))
    action = InFlightAction(
        id=action_id, kind=ActionKind.RESTART_ROLE, target=target, started_at=now
    )
    ledger = _ledger(status, order, FailureAction.RESTART_ROLE, now)
    return status.model_copy(update={"in_flight": action, "restarts": ledger})


def _ledger(
    status: RLJobStatus, order: RestartOrder, action: FailureAction, now: datetime
) -> RestartsStatus:
    return record_requested_restart(status.restarts, order.role, action, order.nonce, now)


def _recorded(status: RLJobStatus) -> bool:
    """The current attempt was journaled (its Job may exist unseen): a restart is then one more
    attempt. Looser than the lifecycle's "started" (its Job seen) on purpose."""
    attempt = status.attempt or 1
    return any(record.attempt == attempt for record in status.attempts)


def not_started_note(order: RestartOrder, status: RLJobStatus) -> EventSpec:
    """What a trainer restart request says when the current attempt has not started yet."""
    message = (
        f"trainer restart requested ({order.nonce}): attempt {status.attempt or 1} has not "
        "started yet; it starts from the newest checkpoint"
    )
    return EventSpec("Normal", "RestartRequested", message)
