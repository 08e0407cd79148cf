"""The trainer's lifecycle: which attempt is current, whether its Job may be created, and what
happened to it (succeeded, failed, suspended, not scheduled in time).

`status.attempt` is the source of truth across operator restarts. A new attempt starts on resume
after a suspend (spec.suspend or the failure policy's) and after a scheduling timeout; neither
counts as a restart. A new attempt's Job is created only once every pod of earlier attempts has
terminated, so two attempts never run (or write checkpoints) at once, and after a scheduling
timeout only once failurePolicy.backoff.initial has passed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise

from rljob.api import (
    AttemptRecord,
    ConditionType,
    FailureReason,
    JobPhase,
    QueueState,
    RLJob,
    RoleName,
    parse_duration,
)
from rljob.api.spec import CHECKPOINT_VERSION_PATTERN
from rljob.api.status import MAX_ATTEMPTS
from rljob.reconcile.conditions import is_true, one_line, valid_reason
from rljob.reconcile.names import child_names
from rljob.reconcile.nodes import without_lost
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.root_cause import root_cause
from rljob.reconcile.suspended import suspended, suspended_because

TERMINAL_PHASES = (JobPhase.SUCCEEDED, JobPhase.FAILED)
RESUME_STEP_ENV = "RLJOB_RESUME_STEP"
RESUME_VERSION_ENV = "RLJOB_RESUME_VERSION"
END_REASON_MAX_LENGTH = 64
SUCCEEDED_END = "Succeeded"
SUSPENDED_END = "Suspended"
EVICTED_END = "Evicted"  # by Kueue: status.queue says why (preemption, a timeout, ...)
JOB_DELETED_END = "JobDeleted"
RESTART_REQUESTED_END = "RestartRequested"
FAIL_JOB_END = "FailJob"
# Ends after which the next attempt is not the failure policy's gang restart.
NOT_RESTARTED_ENDS = frozenset(
    {
        SUSPENDED_END,
        EVICTED_END,
        JOB_DELETED_END,
        RESTART_REQUESTED_END,
        FailureReason.UNSCHEDULABLE.value,
    }
)
TRAINER_FAILED = "TrainerFailed"


class TrainerState(StrEnum):
    """What the current trainer attempt is doing in this pass."""

    FINISHED = "Finished"  # the job had already Succeeded or Failed
    SUCCEEDED = "Succeeded"  # the attempt's Job completed: the job succeeds now
    FAILED = "Failed"  # the attempt's Job failed: the job fails now
    SUSPENDED = "Suspended"
    TIMED_OUT = "TimedOut"  # not all pods scheduled in time: Job deleted, next attempt
    WAITING = "Waiting"  # the attempt's Job waits for older pods to go or for the backoff
    STARTING = "Starting"  # the attempt's Job is created now or exists, not every rank ready
    RUNNING = "Running"  # every rank ready


STOPPED_STATES = frozenset(
    {TrainerState.FINISHED, TrainerState.SUCCEEDED, TrainerState.FAILED, TrainerState.SUSPENDED}
)
FINISHED_STATES = frozenset({TrainerState.FINISHED, TrainerState.SUCCEEDED, TrainerState.FAILED})


@dataclass(frozen=True)
class TrainerFailure:
    """Why the trainer failed: the failing rank's termination reason and message."""

    reason: str
    message: str


@dataclass(frozen=True)
class TrainerDecision:
    state: TrainerState
    attempt: int
    job: ObservedChild | None = None  # the current attempt's Job, when it exists
    create_job: bool = False
    wait_seconds: float | None = None  # until the scheduling deadline or the end of the backoff
    after_unschedulable: bool = False  # the previous attempt timed out, this one is not yet placed
    failure: TrainerFailure | None = None
    message: str = ""
    replaced: str = ""  # the previous attempt's Job, deleted outside the operator: this one follows
    end: str = ""  # why a stopped attempt ends, when the state alone does not say

    @property
    def stopped(self) -> bool:
        return self.state in STOPPED_STATES

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class TrainerHold:
    """A failed attempt the failure policy will restart after its backoff: not a job failure."""

    seconds: float
    message: str


def decide_trainer(
    job: RLJob,
    observed: Observed,
    now: datetime,
    hold: TrainerHold | None = None,
    lost_nodes: frozenset[str] = frozenset(),
) -> TrainerDecision:
    """`lost_nodes`: nodes gone or unreachable for good; the next attempt does not wait for pods
    there (a rank that still runs is fenced from the checkpoint store by the newer marker)."""
    status = job.status
    attempt = status.attempt or 1
    current = attempt_job(observed, attempt)
    if status.phase in TERMINAL_PHASES:
        return TrainerDecision(TrainerState.FINISHED, attempt, job=current)
    if hold is not None:
        return TrainerDecision(
            TrainerState.WAITING,
            attempt,
            job=current,
            wait_seconds=hold.seconds,
            message=hold.message,
        )
    live = current if current is not None and not current.deleting else None
    if live is not None and live.succeeded:
        message = f"trainer Job {live.name} completed"
        return TrainerDecision(TrainerState.SUCCEEDED, attempt, job=live, message=message)
    # The policy suspending on this very failure stops the attempt: no job failure.
    if live is not None and live.failed and status.suspension is None:
        failure = failing_rank(_attempt_pods(observed, attempt), live)
        return TrainerDecision(
            TrainerState.FAILED, attempt, job=live, failure=failure, message=failure.message
        )
    if suspended(job):
        evicted = job.status.queue is not None and job.status.queue.state == QueueState.EVICTED
        return TrainerDecision(
            TrainerState.SUSPENDED,
            attempt,
            message=suspended_because(job),
            end=EVICTED_END if evicted else SUSPENDED_END,
        )
    observed = without_lost(observed, lost_nodes)
    if is_true(status.conditions, ConditionType.SUSPENDED) and _started(job, attempt, current):
        return _next_attempt(job, observed, attempt + 1, now)
    deleted = _deleted_outside(job, attempt, current)
    if deleted:
        return replace(_next_attempt(job, observed, attempt + 1, now), replaced=deleted)
    if live is not None:
        return _running_attempt(job, observed, live, attempt, now)
    return _next_attempt(job, observed, attempt, now)


def trainer_pods(observed: Observed, attempt: int) -> list[ObservedPod]:
    return [pod for pod in _attempt_pods(observed, attempt) if not pod.deleting]


def _attempt_pods(observed: Observed, attempt: int) -> list[ObservedPod]:
    return [
        pod
        for pod in observed.pods
        if pod.role == RoleName.TRAINER.value and pod.attempt == attempt
    ]


def attempt_job(observed: Observed, attempt: int) -> ObservedChild | None:
    """The trainer Job of `attempt` (by its attempt label: observed holds only this job's)."""
    return next(
        (
            c
            for c in observed.children
            if c.kind == "Job" and c.role == RoleName.TRAINER.value and c.attempt == attempt
        ),
        None,
    )


def _started(job: RLJob, attempt: int, current: ObservedChild | None) -> bool:
    """Whether the attempt's Job was ever seen (a job created suspended has not started; an
    attempt journaled but whose Job a crash or the store held back has not either)."""
    record = _record(job.status.attempts, attempt)
    return current is not None or (record is not None and record.job_uid is not None)


def _deleted_outside(job: RLJob, attempt: int, current: ObservedChild | None) -> str:
    """The name of the attempt's Job when it is gone though the operator saw it and never
    deleted it (the operator ends an attempt in the same write that deletes its Job): someone
    deleted it by hand. Seen once, a Job missing from the index is gone, whatever the lag."""
    record = _record(job.status.attempts, attempt)
    if current is not None or record is None or record.job_uid is None:
        return ""
    return "" if record.ended_at is not None else child_names(job).trainer_job(attempt)


def _running_attempt(
    job: RLJob, observed: Observed, live: ObservedChild, attempt: int, now: datetime
) -> TrainerDecision:
    nodes = job.spec.roles.trainer.nodes
    pods = trainer_pods(observed, attempt)
    scheduled = sum(1 for pod in pods if pod.node)
    state = TrainerState.RUNNING if live.ready_replicas >= nodes else TrainerState.STARTING
    placed = scheduled >= nodes or _ran_before(job, attempt)
    decision = TrainerDecision(
        state, attempt, job=live, after_unschedulable=not placed and _after_timeout(job, attempt)
    )
    if placed or live.created_at is None:
        return decision
    timeout = job.spec.roles.trainer.scheduling_timeout
    remaining = (live.created_at - now).total_seconds() + parse_duration(timeout)
    if remaining > 0:
        return replace(decision, wait_seconds=remaining)
    return _timed_out(job, live, pods, scheduled, attempt)


def _ran_before(job: RLJob, attempt: int) -> bool:
    return job.status.phase == JobPhase.RUNNING and job.status.attempt == attempt


def _timed_out(
    job: RLJob,
    live: ObservedChild,
    pods: Sequence[ObservedPod],
    scheduled: int,
    attempt: int,
) -> TrainerDecision:
    trainer = job.spec.roles.trainer
    backoff = job.spec.failure_policy.backoff.initial
    scheduler_says = next((p.unschedulable_message for p in pods if p.unschedulable_message), "")
    message = (
        f"trainer attempt {attempt}: {scheduled}/{trainer.nodes} pods scheduled within "
        f"schedulingTimeout {trainer.scheduling_timeout}; deleted Job {live.name} to free its "
        f"GPUs; attempt {attempt + 1} starts in {backoff}"
    )
    if scheduler_says:
        message += f": {scheduler_says}"
    return TrainerDecision(
        TrainerState.TIMED_OUT,
        attempt + 1,
        job=live,
        wait_seconds=parse_duration(backoff),
        after_unschedulable=True,
        message=one_line(message),
    )


def _after_timeout(job: RLJob, attempt: int) -> bool:
    previous = _record(job.status.attempts, attempt - 1)
    return previous is not None and previous.end_reason == FailureReason.UNSCHEDULABLE.value


def _next_attempt(job: RLJob, observed: Observed, attempt: int, now: datetime) -> TrainerDecision:
    """The current attempt has no live Job: create it unless something must go first."""
    after_timeout = _after_timeout(job, attempt)
    lingering = _lingering_trainer(observed, attempt)
    if lingering:
        message = f"trainer attempt {attempt} waits for {lingering} to terminate"
        return TrainerDecision(
            TrainerState.WAITING, attempt, after_unschedulable=after_timeout, message=message
        )
    remaining = _backoff_remaining(job, attempt, now) if after_timeout else 0.0
    if remaining > 0:
        backoff = job.spec.failure_policy.backoff.initial
        message = f"trainer attempt {attempt} starts {backoff} after the scheduling timeout"
        return TrainerDecision(
            TrainerState.WAITING,
            attempt,
            wait_seconds=remaining,
            after_unschedulable=True,
            message=message,
        )
    return TrainerDecision(
        TrainerState.STARTING, attempt, create_job=True, after_unschedulable=after_timeout
    )


def _lingering_trainer(observed: Observed, attempt: int) -> str:
    """Trainer pods still running or terminating (of earlier attempts, or of this attempt's Job
    being deleted), an earlier attempt's Job (its foreground deletion ends only once its pods,
    terminated ones too, are gone) or this attempt's Job being deleted: the new Job waits."""
    pods = [pod for pod in observed.pods if pod.role == RoleName.TRAINER.value and not pod.terminal]
    if pods:
        return f"{len(pods)} trainer pod{'s' if len(pods) > 1 else ''}"
    older = sorted(
        c.name
        for c in observed.children
        if c.kind == "Job" and c.attempt is not None and c.attempt < attempt
    )
    if older:
        return f"Job {older[0]}"
    current = attempt_job(observed, attempt)
    if current is not None and current.deleting:
        return f"Job {current.name}"
    return ""


def _backoff_remaining(job: RLJob, attempt: int, now: datetime) -> float:
    previous = _record(job.status.attempts, attempt - 1)
    if previous is None or previous.ended_at is None:
        return 0.0
    delay = timedelta(seconds=parse_duration(job.spec.failure_policy.backoff.initial))
    return (previous.ended_at + delay - now).total_seconds()


def failing_rank(pods: Sequence[ObservedPod], job: ObservedChild) -> TrainerFailure:
    """The failed rank (non-zero exit) that explains the attempt, as rljob.reconcile.root_cause
    ranks them (the first observed failure); the Job's Failed condition when no such pod is
    observed."""
    pod = root_cause([p for p in pods if p.phase == "Failed" and p.exit_code not in (None, 0)])
    if pod is None:
        return TrainerFailure(TRAINER_FAILED, one_line(job.failed_message or f"{job.name} failed"))
    rank = "?" if pod.completion_index is None else str(pod.completion_index)
    reason = valid_reason(pod.reason, TRAINER_FAILED)
    message = f"trainer rank {rank} (pod {pod.name}) exited with code {pod.exit_code} ({reason})"
    if pod.message:
        message += f": {pod.message}"
    return TrainerFailure(reason, one_line(message))


def updated_attempts(
    records: Sequence[AttemptRecord],
    decision: TrainerDecision,
    now: datetime,
    resume_env: Mapping[str, str],
) -> list[AttemptRecord]:
    """The attempt history after this pass: an attempt is recorded when its Job is first
    created and closed (once) when it ends."""
    updated = list(records)
    if decision.replaced:
        updated = close_attempt(updated, decision.attempt - 1, JOB_DELETED_END, now)
    if decision.job is not None and not decision.job.deleting:
        updated = [_seen(record, decision.job) for record in updated]
    ended = _end_reason(decision)
    if ended is not None:
        # A timed-out decision already names the next attempt.
        timed_out = decision.state == TrainerState.TIMED_OUT
        updated = close_attempt(
            updated, decision.attempt - 1 if timed_out else decision.attempt, ended, now
        )
    if decision.create_job and _unstarted(_record(updated, decision.attempt)):
        # Recorded afresh; a record ended before its Job was ever seen is started again.
        updated = [r for r in updated if r.attempt != decision.attempt]
        updated.append(_new_record(decision.attempt, now, resume_env))
    return updated[-MAX_ATTEMPTS:]


def _end_reason(decision: TrainerDecision) -> str | None:
    if decision.state == TrainerState.SUCCEEDED:
        return SUCCEEDED_END
    if decision.state == TrainerState.FAILED and decision.failure is not None:
        return decision.failure.reason[:END_REASON_MAX_LENGTH]
    if decision.state == TrainerState.SUSPENDED:
        return decision.end or SUSPENDED_END
    if decision.state == TrainerState.TIMED_OUT:
        return FailureReason.UNSCHEDULABLE.value
    return None


def close_attempt(
    records: Sequence[AttemptRecord], attempt: int, reason: str, now: datetime
) -> list[AttemptRecord]:
    """The records with `attempt` ended now for `reason`, unless it had already ended."""
    return [
        record.model_copy(update={"ended_at": now, "end_reason": reason})
        if record.attempt == attempt and record.ended_at is None
        else record
        for record in records
    ]


def resumed_by_gang_restarts(records: Sequence[AttemptRecord]) -> list[int | None]:
    """The step each attempt started by a failure-policy gang restart resumed from, oldest first
    (an attempt after a suspend, a manual restart, a deleted Job or a scheduling timeout is not
    one; records of an older release, never closed on a gang restart, are)."""
    return [
        record.resumed_from_step
        for before, record in pairwise(records)
        if before.end_reason not in NOT_RESTARTED_ENDS
    ]


def _seen(record: AttemptRecord, job: ObservedChild) -> AttemptRecord:
    """The attempt's record with its Job's uid, once the Job of that attempt is observed."""
    if record.job_uid is not None or job.attempt != record.attempt or not job.uid:
        return record
    return record.model_copy(update={"job_uid": job.uid})


def _unstarted(record: AttemptRecord | None) -> bool:
    return record is None or (record.ended_at is not None and record.job_uid is None)


def _record(records: Sequence[AttemptRecord], attempt: int) -> AttemptRecord | None:
    return next((record for record in records if record.attempt == attempt), None)


def _new_record(attempt: int, now: datetime, resume_env: Mapping[str, str]) -> AttemptRecord:
    step = resume_env.get(RESUME_STEP_ENV, "")
    version = resume_env.get(RESUME_VERSION_ENV, "")
    return AttemptRecord(
        attempt=attempt,
        started_at=now,
        resumed_from_step=int(step) if step.isdigit() else None,
        resumed_from_version=version if re.match(CHECKPOINT_VERSION_PATTERN, version) else None,
    )
