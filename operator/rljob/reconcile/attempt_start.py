"""The start of a trainer attempt, decided: the resume version, the attempt marker and retention
deletions come from the store's pure plan (rljob.checkpoints.attempt_plan) over what the runtime
gathered read-only; this records them in status (the journal) and hands the side effects to the
steps, which write the marker before the Job and delete nothing before the write."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from rljob.api import RLJob, RLJobStatus
from rljob.checkpoints.attempt_plan import AttemptInputs, AttemptPlan, plan_attempt_start
from rljob.reconcile.checkpoint_status import (
    AttemptCheckpoint,
    checkpoint_conditions,
    checkpoint_status,
    store_down,
)
from rljob.reconcile.conditions import with_condition
from rljob.reconcile.events import EventSpec, announces_attempt
from rljob.reconcile.lifecycle import decide_trainer
from rljob.reconcile.observed import Observed
from rljob.reconcile.plan import Plan, ReconcileExtras, reconcile
from rljob.reconcile.suspension import handle_resume

STORE_RETRY_SECONDS = 15.0
GATHER_RETRY_SECONDS = 0.2


@dataclass(frozen=True)
class AttemptGathered:
    """The store's answer for `attempt`: what it holds (read-only), or why it could not say."""

    attempt: int
    inputs: AttemptInputs | None = None
    error: str = ""


@dataclass(frozen=True)
class AttemptStarted:
    job: RLJob
    plan: Plan
    events: tuple[EventSpec, ...] = ()
    store_plan: AttemptPlan | None = None


def attempt_to_start(
    job: RLJob, observed: Observed, now: datetime, lost_nodes: frozenset[str] = frozenset()
) -> int | None:
    """The attempt whose Job this pass may create, so the runtime reads the store for it first
    (decide() makes the same call with more inputs; it can only hold an attempt back)."""
    # A resume request this pass takes lets the attempt start in it.
    resumed = job.model_copy(update={"status": handle_resume(job, now).status})
    decision = decide_trainer(resumed, observed, now, lost_nodes=lost_nodes)
    return decision.attempt if decision.create_job else None


def creates_attempt(plan: Plan) -> bool:
    """Whether the plan creates a trainer attempt's Job."""
    return any(child.kind == "Job" for child in plan.apply)


def with_attempt_start(
    job: RLJob,
    observed: Observed,
    plan: Plan,
    extras: ReconcileExtras,
    *,
    gathered: AttemptGathered | None,
    now: datetime,
) -> AttemptStarted:
    """The plan with the attempt's resume env and checkpoint status, or without its Job while
    the store's answer is missing (gathered next pass) or the store is down (retried)."""
    if not creates_attempt(plan) or job.spec.checkpoint is None:
        return AttemptStarted(job, plan)
    attempt = plan.status.attempt or 1
    if gathered is None or gathered.attempt != attempt:
        return AttemptStarted(job, _without_job(job, plan, plan.status, GATHER_RETRY_SECONDS))
    if gathered.inputs is None:
        status = with_condition(
            plan.status, store_down(attempt, gathered.error), now, job.metadata.generation
        )
        if not job.status.attempts:  # nothing started: the attempt number is not settled
            status = status.model_copy(update={"attempt": job.status.attempt, "attempts": []})
        return AttemptStarted(job, _without_job(job, plan, status, STORE_RETRY_SECONDS))
    store_plan = plan_attempt_start(gathered.inputs)
    outcome = AttemptCheckpoint(
        attempt,
        store_plan.resumed_from,
        store_plan.capabilities,
        store_plan.problem,
        store_plan.retention_problem,
    )
    checkpoint = checkpoint_status(job.status.checkpoint, outcome)
    job = job.model_copy(
        update={"status": job.status.model_copy(update={"checkpoint": checkpoint})}
    )
    plan = reconcile(job, observed, now, replace(extras, resume_env=dict(store_plan.resume_env)))
    status = plan.status
    for state in checkpoint_conditions(job.status.conditions or [], outcome):
        status = with_condition(status, state, now, job.metadata.generation)
    events = tuple(EventSpec(*event) for event in store_plan.events)
    return AttemptStarted(job, replace(plan, status=status), events, store_plan)


def _without_job(job: RLJob, plan: Plan, status: RLJobStatus, retry: float) -> Plan:
    """The plan with its attempt held back: no Job, no record of the attempt (it starts when its
    Job is created; a suspend meanwhile must not end it) and no Event announcing it."""
    waiting = tuple(child for child in plan.apply if child.kind != "Job")
    updated = {record.attempt: record for record in status.attempts}
    known = [updated.get(record.attempt, record) for record in job.status.attempts]
    status = status.model_copy(update={"attempts": known})
    events = tuple(event for event in plan.events if not announces_attempt(event))
    return replace(plan, apply=waiting, status=status, events=events, requeue_after=retry)
