"""The one action a pass takes, if any: manual restarts, then the trainer (a failed attempt, a
rank lost with its node), then serving pods crashing in place, then health findings, through the
failure policy; none while another action is in flight, which is finished first, or ended early
when a repair of the trainer preempts it (reconcile/unfinished.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from rljob.api import FailureAction, RLJob, RLJobStatus
from rljob.reconcile.events import EventSpec
from rljob.reconcile.findings import crash_remedy, finding_remedy
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.journal import unknown_format
from rljob.reconcile.lifecycle import TrainerHold
from rljob.reconcile.nodes import lost_rank
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.policy import Decision as PolicyDecision
from rljob.reconcile.remediation import (
    awaiting_root_cause,
    current_trainer_job,
    failed_attempt,
    held_by_action,
    remedy_for,
)
from rljob.reconcile.requests import (
    RestartOrder,
    journal_manual_restart,
    not_started_note,
    pending_restart,
)
from rljob.reconcile.suspension import journal_suspension
from rljob.reconcile.unfinished import Ended, preemptable, preempted


@dataclass(frozen=True)
class Remedy:
    """What remediation made of this pass: the job with its journaled action, a hold on a
    failed attempt, a FailJob message, reports to say, and what the detectors must forget."""

    job: RLJob
    hold: TrainerHold | None = None
    fail: str | None = None
    reports: tuple[tuple[str, EventSpec], ...] = ()
    consumed: str = ""
    restarted: tuple[str, str | None] | None = None


def remedy(job: RLJob, observed: Observed, inputs: PassInputs) -> Remedy:
    """Manual restarts, then the trainer, then serving pods, then health findings: one new
    action at most, and none while another is in flight (it is finished first; a repair of the
    trainer preempts a role restart that sent what it decided instead, reconcile/unfinished.py)."""
    now = inputs.now
    failed = failed_attempt(job, observed) or _lost_attempt(job, observed, inputs)
    if failed is not None and (held := held_by_action(job, observed)) is not None:
        return Remedy(job, hold=held)
    if failed is not None and (waiting := awaiting_root_cause(*failed, now)) is not None:
        return Remedy(job, hold=waiting)
    if failed is not None and (trainer := _trainer_remedy(job, observed, failed, now)) is not None:
        return trainer
    if job.status.in_flight is not None:
        if (preempting := _preempting(job, observed, inputs)) is not None:
            return preempting
        unknown = unknown_format(job.status)
        return Remedy(job, reports=(("journal-format", unknown),) if unknown else ())
    order = pending_restart(job.metadata.annotations, job.status)
    if order is not None:
        return _manual_remedy(job, order, observed, now)
    for pod, evaluation in inputs.crashes:
        crash = crash_remedy(job, observed, pod, evaluation, now)
        if crash.fail is not None:
            return Remedy(job, fail=crash.fail, consumed="crash")
        if crash.suspend is not None:
            return Remedy(suspended_by(job, crash.suspend, now), consumed="crash")
        status = crash.status or job.status
        return Remedy(with_status(job, status), reports=crash.reports, consumed="crash")
    return _health_remedy(job, observed, inputs)


def _lost_attempt(
    job: RLJob, observed: Observed, inputs: PassInputs
) -> tuple[ObservedChild, ObservedPod | None] | None:
    """The current attempt's Job and its rank lost with its node: a failed attempt, though its
    Job never says so (a terminating pod is not failed under a podFailurePolicy)."""
    lost = lost_rank(job, observed, inputs.node_states, inputs.now)
    current = current_trainer_job(job, observed) if lost is not None else None
    return (current, lost) if current is not None else None


def _manual_remedy(job: RLJob, order: RestartOrder, observed: Observed, now: datetime) -> Remedy:
    status = journal_manual_restart(job, order, observed, now)
    merged = order.gang and status.in_flight is None
    notes = ((f"restart-{order.nonce}", not_started_note(order, status)),) if merged else ()
    return Remedy(with_status(job, status), reports=notes)


def _preempting(job: RLJob, observed: Observed, inputs: PassInputs) -> Remedy | None:
    """A manual trainer restart, or a finding on the trainer the policy acts on, ends the role
    restart in flight once it sent what it decided, in the write that journals the trainer's
    repair; None when neither is pending or the policy only reports (the action goes on)."""
    action = preemptable(job, observed)
    if action is None:
        return None
    order = pending_restart(job.metadata.annotations, job.status)
    if order is not None and order.gang:
        ended = preempted(job, action, observed, f"a trainer restart was requested ({order.nonce})")
        remedy = _manual_remedy(with_status(job, ended.status), order, observed, inputs.now)
        return _with_ended(remedy, ended) if _acts(remedy) else None
    found = inputs.findings[0] if inputs.findings else None
    if found is None or found.target != "trainer":
        return None
    why = f"the trainer's {found.reason.value if found.reason else ''} finding goes first"
    ended = preempted(job, action, observed, why)
    remedy = _health_remedy(with_status(job, ended.status), observed, inputs)
    return _with_ended(remedy, ended) if _acts(remedy) else None


def _acts(remedy: Remedy) -> bool:
    """The remedy journals an action, a suspension or the job's end (not only a report)."""
    status = remedy.job.status
    return remedy.fail is not None or status.in_flight is not None or status.suspension is not None


def _with_ended(remedy: Remedy, ended: Ended) -> Remedy:
    return replace(remedy, reports=((ended.key, ended.event), *remedy.reports))


def _trainer_remedy(
    job: RLJob,
    observed: Observed,
    failed: tuple[ObservedChild, ObservedPod | None],
    now: datetime,
) -> Remedy | None:
    """The failure policy on a failed attempt: a gang restart journaled (counted), a backoff
    hold, FailJob or Suspend, in the write that ends a Gated in-turn restart it preempts (with
    a Warning naming the pods left); None when the policy does none of these (the reconcile
    fails the job, the in-turn restart stopping with it)."""
    notes: tuple[tuple[str, EventSpec], ...] = ()
    action = preemptable(job, observed)
    if action is not None:
        why = f"trainer attempt {job.status.attempt or 1} failed"
        ended = preempted(job, action, observed, why)
        job, notes = with_status(job, ended.status), ((ended.key, ended.event),)
    trainer = remedy_for(job, *failed, now)
    if trainer.decision.action == FailureAction.FAIL_JOB:
        return Remedy(job, fail=trainer.decision.message, reports=notes)
    if trainer.decision.action == FailureAction.SUSPEND:
        return Remedy(suspended_by(job, trainer.decision, now), reports=notes)
    if trainer.status is not None:
        restarted = with_status(job, trainer.status)
        return Remedy(restarted, reports=notes, restarted=("trainer", None))
    if trainer.hold is not None:
        return Remedy(job, hold=trainer.hold, reports=notes)
    return None


def _health_remedy(job: RLJob, observed: Observed, inputs: PassInputs) -> Remedy:
    if not inputs.findings:
        return Remedy(job)
    found = finding_remedy(job, observed, inputs.findings[0], inputs.now)
    if found.fail is not None:
        return Remedy(job, fail=found.fail, consumed="finding")
    if found.suspend is not None:
        return Remedy(suspended_by(job, found.suspend, inputs.now), consumed="finding")
    if found.status is None:  # reported, backing off, or waiting for maxUnavailable room
        return Remedy(job, reports=found.reports, consumed="finding")
    status = with_status(job, found.status)
    return Remedy(status, consumed="finding", restarted=found.restarted)


def suspended_by(job: RLJob, decision: PolicyDecision, now: datetime) -> RLJob:
    """The policy's Suspend journaled: no restart, nothing in the ledger (suspension.py)."""
    return with_status(job, journal_suspension(job.status, decision, now))


def with_status(job: RLJob, status: RLJobStatus) -> RLJob:
    return job.model_copy(update={"status": status})
