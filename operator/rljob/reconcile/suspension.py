"""The failure policy's Suspend and its resume (pure).

Suspend is journaled in the pass's one status write (status.suspension: reason, evidence, rule,
time); the same pass stops the pods as spec.suspend does, since every reader asks
`rljob.reconcile.suspended.suspended`. It is no restart: nothing goes in the ledger and the
attempt it stops ends as Suspended. Like any new action it waits for an action in flight to
finish (a gang restart completes, its new attempt then stops). A finding while suspended does
nothing: a suspended job is not watched.

Resume: the annotation `rljob.io/resume-request: <nonce>` (written by `kubectl rljob resume`)
is handled once per nonce, remembered in status.lastResumeRequest. It clears a policy suspension
(resumed: true; the next attempt starts from the newest checkpoint, as after spec.suspend:
false); with none it is only recorded (resumed: false), so a nonce written before a suspension
never ends a later one. spec.suspend true keeps the job suspended whatever the nonce did."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from rljob.api import RLJob, RLJobStatus
from rljob.api.diagnosis import PolicySuspension, ResumeRequest
from rljob.reconcile.events import EventSpec
from rljob.reconcile.policy import Decision
from rljob.reconcile.suspended import SPEC_SUSPENDED, resume_hint
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION

POLICY_SUSPENDED = "PolicySuspended"
RESUME_REQUESTED = "ResumeRequested"
RULE_MAX_LENGTH = 63
_NONCE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

Report = tuple[str, EventSpec]  # (throttle key, Event)


def journal_suspension(status: RLJobStatus, decision: Decision, now: datetime) -> RLJobStatus:
    """The status with the policy's suspension, unless one is already held (kept as it was:
    a suspension is applied once, its first reason stays)."""
    if status.suspension is not None:
        return status
    held = PolicySuspension(
        reason=decision.reason,
        message=decision.message,
        rule=decision.rule[:RULE_MAX_LENGTH] or None,
        suspended_at=now,
    )
    return status.model_copy(update={"suspension": held})


def suspended_event(job_name: str, status: RLJobStatus) -> tuple[str, EventSpec] | None:
    """(Event name, Event) of the policy's suspension while it holds: named after it, so a
    restarted operator posting it again is answered 409 and nothing doubles."""
    held = status.suspension
    if held is None:
        return None
    rule = f"rule {held.rule}: " if held.rule else ""
    message = (
        f"{rule}{held.message}; Deployments scaled to 0 and the trainer "
        f"Job deleted, state and checkpoints kept; {resume_hint(job_name)}"
    )
    name = f"{job_name}.suspended-{int(held.suspended_at.timestamp())}"
    return name, EventSpec("Warning", POLICY_SUSPENDED, message)


def pending_resume(annotations: Mapping[str, str], status: RLJobStatus) -> str | None:
    """The annotated nonce, unless it is malformed or was already handled."""
    nonce = annotations.get(RESUME_REQUEST_ANNOTATION, "")
    if not _NONCE.match(nonce):
        return None
    done = status.last_resume_request
    return None if done is not None and done.handled(nonce) else nonce


@dataclass(frozen=True)
class ResumeOutcome:
    status: RLJobStatus
    reports: tuple[Report, ...] = ()


def handle_resume(job: RLJob, now: datetime) -> ResumeOutcome:
    """A new nonce recorded as handled, ending the policy's suspension if one holds. The
    Resumed Event is the Suspended condition's own transition (reconcile/events.py); what else
    there is to say is a report, said once per nonce."""
    status = job.status
    written = job.metadata.annotations.get(RESUME_REQUEST_ANNOTATION)
    nonce = pending_resume(job.metadata.annotations, status)
    if written is not None and not _NONCE.match(written):
        refused = EventSpec(
            "Warning",
            RESUME_REQUESTED,
            f"{RESUME_REQUEST_ANNOTATION}={written[:80]!r} is not a nonce (1 to 64 of "
            "A-Z a-z 0-9 . _ -): ignored; write a new one, e.g. $(date +%s)",
        )
        return ResumeOutcome(status, ((f"resume-refused-{written[:64]}", refused),))
    if nonce is None:
        return ResumeOutcome(status)
    held = status.suspension
    done = status.last_resume_request
    record = ResumeRequest(
        id=nonce, handled_at=now, resumed=held is not None, earlier=done.after() if done else []
    )
    status = status.model_copy(update={"last_resume_request": record, "suspension": None})
    request = f"{RESUME_REQUEST_ANNOTATION}={nonce}"
    if held is None:
        message = (
            f"{request}: the failure policy had not suspended the job; recorded, it ends no "
            "later suspension"
        )
    elif job.spec.suspend:
        message = (
            f"{request}: the failure policy's suspension ({held.reason.value}) is lifted; "
            f"{SPEC_SUSPENDED}: the job stays suspended until it is false"
        )
    else:
        return ResumeOutcome(status)
    said = EventSpec("Normal", RESUME_REQUESTED, message)
    return ResumeOutcome(status, ((f"resume-{nonce}", said),))
