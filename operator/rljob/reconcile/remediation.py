"""Trainer failures through the failure policy: a failed attempt becomes a journaled gang
restart (attempt + 1, the restart counted, status.inFlight set) in ONE status write before any
side effect; the reconcile then retires the old Job and creates the next attempt, and the
journal is cleared once that attempt's Job exists. Restarting after a crash resumes the journal;
it never repeats the restart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rljob.api import (
    ActionKind,
    ActionTarget,
    FailureAction,
    FailureReason,
    InFlightAction,
    RLJob,
    RLJobStatus,
    RoleName,
)
from rljob.api.durations import parse_duration
from rljob.health.termination import Classification
from rljob.reconcile.in_turn import ROLE_READY_STEP
from rljob.reconcile.lifecycle import (
    SUSPENDED_END,
    TrainerHold,
    attempt_job,
    close_attempt,
    resumed_by_gang_restarts,
)
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.policy import (
    Decision,
    Failure,
    PolicyContext,
    choose_action,
    cooldowns_from_health,
    record_restart,
)
from rljob.reconcile.root_cause import classify_rank, root_cause
from rljob.reconcile.suspects import marked_suspects, suspect_ttl
from rljob.reconcile.unfinished import preemptable
from rljob.vocabulary.enums import TRAINER_RESTART_ACTIONS, TRAINER_RESTART_KINDS

BUSY_RETRY_SECONDS = 1.0
# A Job's failure can reach the operator before its failed rank does (two watches): the policy
# waits this long for the rank, whose exit code may decide FailJob rather than a restart.
ROOT_CAUSE_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class TrainerRemedy:
    """What the policy made of a failed attempt: a new status (journaled gang restart), a hold
    (backoff still running), or neither (the job fails as the reconcile decides)."""

    decision: Decision
    status: RLJobStatus | None = None
    hold: TrainerHold | None = None


def failed_attempt(
    job: RLJob, observed: Observed
) -> tuple[ObservedChild, ObservedPod | None] | None:
    """The current attempt's failed Job and its root-cause rank, if it failed (an attempt a
    suspension ended is over, whatever a lagging view still shows of its Job)."""
    attempt = job.status.attempt or 1
    if any(r.attempt == attempt and r.end_reason == SUSPENDED_END for r in job.status.attempts):
        return None
    failed = attempt_job(observed, attempt)
    if failed is None or not failed.failed or failed.deleting:
        return None
    ranks = [
        p
        for p in observed.pods
        if p.role == RoleName.TRAINER.value and p.attempt == attempt
        and (p.disruption or (p.phase == "Failed" and p.exit_code not in (None, 0)))
    ]  # fmt: skip
    return failed, root_cause(ranks)


def trainer_failure(failed: ObservedChild, root: ObservedPod | None) -> Failure:
    """The failing rank classified (NCCL watchdog, OOM, ...), with its evidence."""
    if root is None:
        return Failure(
            FailureReason.CONTAINER_FAILED, RoleName.TRAINER, message=failed.failed_message
        )
    classified = classify_rank(root)
    reason = classified.reason if classified else FailureReason.CONTAINER_FAILED
    evidence = classified.message if classified else root.message
    # Under torchrun the container exits 1: the failing worker's own status (93, 128+N) and
    # global rank come from the wrapper's evidence, where it has them.
    exit_code = classified.exit_code if classified and classified.exit_code else root.exit_code
    ended = "was disrupted" if root.disruption else f"exited {exit_code}"
    where = f"{root.name} on {root.node or 'no node'}"
    message = f"{_rank_of(root, classified)} ({where}) {ended}: {evidence}"
    return Failure(reason, RoleName.TRAINER, target=root.name, exit_code=exit_code, message=message)


def _rank_of(root: ObservedPod, classified: Classification | None) -> str:
    """The global rank when the evidence names it, else the pod's completion index (a node)."""
    if classified is not None and classified.rank is not None:
        return f"rank {classified.rank}"
    return f"node {'?' if root.completion_index is None else root.completion_index}"


def remedy_for(
    job: RLJob, failed: ObservedChild, root: ObservedPod | None, now: datetime
) -> TrainerRemedy:
    failure = trainer_failure(failed, root)
    decision = choose_action(
        failure, job.spec.failure_policy, job.status.restarts, now, policy_context(job)
    )
    if decision.action not in TRAINER_RESTART_ACTIONS:
        return TrainerRemedy(decision)
    if decision.delay_seconds > 0:
        return TrainerRemedy(decision, hold=TrainerHold(decision.delay_seconds, decision.message))
    return TrainerRemedy(decision, status=journal_gang_restart(job, decision, failed, root, now))


def awaiting_root_cause(
    failed: ObservedChild, root: ObservedPod | None, now: datetime
) -> TrainerHold | None:
    """A hold while the failed Job's failing rank is not observed yet, bounded in time."""
    if root is not None or failed.failed_at is None:
        return None
    remaining = ROOT_CAUSE_WAIT_SECONDS - (now - failed.failed_at).total_seconds()
    if remaining <= 0:
        return None
    message = f"trainer Job {failed.name} failed; waiting for its failed rank to be observed"
    return TrainerHold(min(remaining, BUSY_RETRY_SECONDS), message)


def held_by_action(job: RLJob, observed: Observed) -> TrainerHold | None:
    """A failed attempt waits for the action in flight to finish, then goes through the policy:
    it is neither skipped nor read as the job's end. None: nothing in flight, or a role restart
    that sent what it decided, which the failure preempts (unfinished.preemptable). So the hold
    lasts a pass for a role restart, and a pod restart's drain (drainTimeout) at most."""
    action = job.status.in_flight
    if action is None or preemptable(job, observed) is not None:
        return None
    what = f"{action.kind} {action.id}"
    done = "is done"
    endable = (ActionKind.RESTART_ROLE_IN_TURN, ActionKind.RESTART_ROLE)
    if action.kind in endable and action.step != ROLE_READY_STEP:
        done = "sent what it decided (the failure then ends it)"
    message = f"trainer attempt {job.status.attempt or 1} failed; handled once {what} {done}"
    return TrainerHold(BUSY_RETRY_SECONDS, message)


def current_trainer_job(job: RLJob, observed: Observed) -> ObservedChild | None:
    current = attempt_job(observed, job.status.attempt or 1)
    return current if current is not None and not current.deleting else None


def journal_gang_restart(
    job: RLJob, decision: Decision, failed: ObservedChild, root: ObservedPod | None, now: datetime
) -> RLJobStatus:
    """The next attempt journaled: a trainer gang restart, or with RestartJob the whole job's
    (every serving role rolled too: reconcile/journal.py `roles_to_roll`)."""
    status = job.status
    attempt = (status.attempt or 1) + 1
    whole_job = decision.action == FailureAction.RESTART_JOB
    action = InFlightAction(
        id=f"{'job' if whole_job else 'gang'}-a{attempt}",
        kind=ActionKind.RESTART_JOB if whole_job else ActionKind.RESTART_TRAINER_GANG,
        target=ActionTarget(role=RoleName.TRAINER, name=failed.name, uid=failed.uid),
        reason=decision.reason,
        step="Journaled",
        started_at=now,
    )
    return status.model_copy(
        update={
            "attempt": attempt,
            "attempts": close_attempt(status.attempts, attempt - 1, decision.reason.value, now),
            "restarts": record_restart(status.restarts, decision, now, job.spec.failure_policy),
            "in_flight": action,
            "suspect_nodes": marked_suspects(
                status.suspect_nodes, root, decision.reason, now, suspect_ttl(job)
            ),
        }
    )


def stuck_pods(job: RLJob, observed: Observed, now: datetime) -> list[ObservedPod]:
    """Older attempts' trainer pods still terminating `teardownTimeout` after a gang restart
    began: their node stopped confirming deletions, so they are force-deleted."""
    action = job.status.in_flight
    if action is None or action.kind not in TRAINER_RESTART_KINDS:
        return []
    timeout = parse_duration(job.spec.failure_policy.teardown_timeout)
    if (now - action.started_at).total_seconds() < timeout:
        return []
    attempt = job.status.attempt or 1
    return [
        pod
        for pod in observed.pods
        if pod.role == RoleName.TRAINER.value
        and pod.deleting
        and pod.attempt is not None
        and pod.attempt < attempt
    ]


def policy_context(job: RLJob) -> PolicyContext:
    steps = resumed_by_gang_restarts(job.status.attempts)
    latest = job.status.checkpoint.latest if job.status.checkpoint else None
    return PolicyContext(
        resumed_from_steps=steps,
        next_resume_step=latest.step if latest else None,
        cooldowns=cooldowns_from_health(job.spec.health),
    )
