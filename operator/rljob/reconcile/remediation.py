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
    SuspectNode,
)
from rljob.api.durations import parse_duration
from rljob.api.status import MAX_SUSPECT_NODES
from rljob.health.evaluation import Evaluation
from rljob.health.policy import Decision, Failure, PolicyContext, decide, record_restart
from rljob.health.termination import (
    ContainerTermination,
    CrashRepeatTracker,
    PodCondition,
    classify_disruption,
    classify_termination,
)
from rljob.reconcile.events import EventSpec
from rljob.reconcile.lifecycle import TrainerHold
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod

GANG_RESTARTED = "GangRestarted"


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
    """The current attempt's failed Job and its root-cause rank, if it failed."""
    attempt = job.status.attempt or 1
    name = trainer_job_name(job.metadata.name, attempt)
    failed = next(
        (
            c
            for c in observed.children
            if c.kind == "Job" and c.name == name and c.failed and not c.deleting
        ),
        None,
    )
    if failed is None:
        return None
    ranks = [
        p
        for p in observed.pods
        if p.role == RoleName.TRAINER.value and p.attempt == attempt
        and (p.disruption or (p.phase == "Failed" and p.exit_code not in (None, 0)))
    ]  # fmt: skip
    root = min(  # a disrupted rank (preempted, node lost) explains the others' failures
        ranks,
        key=lambda p: (
            not p.disruption,
            p.deleting,
            p.completion_index is None,
            p.completion_index or 0,
        ),
        default=None,
    )
    return failed, root


def trainer_failure(failed: ObservedChild, root: ObservedPod | None) -> Failure:
    """The failing rank classified (NCCL watchdog, OOM, ...), with its evidence."""
    if root is None:
        return Failure(
            FailureReason.CONTAINER_FAILED, RoleName.TRAINER, message=failed.failed_message
        )
    termination = ContainerTermination(root.exit_code, root.reason or None, root.message or None)
    disruption = PodCondition("DisruptionTarget", "True", root.disruption, root.disruption_message)
    classified = (
        classify_disruption([disruption]) if root.disruption else None
    ) or classify_termination(termination)
    reason = classified.reason if classified else FailureReason.CONTAINER_FAILED
    rank = "?" if root.completion_index is None else str(root.completion_index)
    evidence = classified.message if classified else root.message
    ended = "was disrupted" if root.disruption else f"exited {root.exit_code}"
    message = f"rank {rank} ({root.name} on {root.node or 'no node'}) {ended}: {evidence}"
    return Failure(
        reason, RoleName.TRAINER, target=root.name, exit_code=root.exit_code, message=message
    )


def remedy_for(
    job: RLJob, failed: ObservedChild, root: ObservedPod | None, now: datetime
) -> TrainerRemedy:
    failure = trainer_failure(failed, root)
    decision = decide(failure, job.spec.failure_policy, job.status.restarts, now, _context(job))
    if decision.action != FailureAction.RESTART_TRAINER_GANG:
        return TrainerRemedy(decision)
    if decision.delay_seconds > 0:
        return TrainerRemedy(decision, hold=TrainerHold(decision.delay_seconds, decision.message))
    return TrainerRemedy(decision, status=journal_gang_restart(job, decision, failed, root, now))


@dataclass(frozen=True)
class FindingRemedy:
    """What the policy made of a health finding: a new status (journaled restart) with the
    restarted (role, pod) for the detectors, and the Events to post."""

    status: RLJobStatus | None
    restarted: tuple[str, str | None]
    events: tuple[EventSpec, ...]


def remedy_for_finding(
    job: RLJob, observed: Observed, finding: Evaluation, now: datetime
) -> FindingRemedy:
    """A detector's finding through the failure policy: an engine restart (its pod deleted
    after the journal) or a trainer gang restart; anything else is reported."""
    reason = finding.reason or FailureReason.CONTAINER_FAILED
    trainer = finding.target == "trainer"
    role = RoleName.TRAINER if trainer else _finding_role(finding, observed)
    pod = None if trainer else next((p for p in observed.pods if p.name == finding.target), None)
    failure = Failure(
        reason, role, target=None if trainer else finding.target, message=finding.message
    )
    decision = decide(failure, job.spec.failure_policy, job.status.restarts, now, _context(job))
    report = (EventSpec("Warning", reason.value, decision.message),)
    if decision.delay_seconds > 0:
        return FindingRemedy(None, (role.value, None), report)
    if pod is not None and (serving := journal_serving_restart(job, decision, pod, now)):
        return FindingRemedy(serving, (role.value, pod.name), ())
    current = _current_job(job, observed)
    if decision.action == FailureAction.RESTART_TRAINER_GANG and current is not None:
        status = journal_gang_restart(job, decision, current, None, now)
        return FindingRemedy(status, (RoleName.TRAINER.value, None), ())
    return FindingRemedy(None, (role.value, None), report)


def _finding_role(finding: Evaluation, observed: Observed) -> RoleName:
    pod = next((p for p in observed.pods if p.name == finding.target), None)
    return RoleName(pod.role) if pod is not None and pod.role else RoleName.ROLLOUT


def _current_job(job: RLJob, observed: Observed) -> ObservedChild | None:
    name = trainer_job_name(job.metadata.name, job.status.attempt or 1)
    return next(
        (c for c in observed.children if c.kind == "Job" and c.name == name and not c.deleting),
        None,
    )


def journal_gang_restart(
    job: RLJob, decision: Decision, failed: ObservedChild, root: ObservedPod | None, now: datetime
) -> RLJobStatus:
    status = job.status
    attempt = (status.attempt or 1) + 1
    action = InFlightAction(
        id=f"gang-a{attempt}",
        kind=ActionKind.RESTART_TRAINER_GANG,
        target=ActionTarget(role=RoleName.TRAINER, name=failed.name, uid=failed.uid),
        reason=decision.reason,
        step="Journaled",
        started_at=now,
    )
    return status.model_copy(
        update={
            "attempt": attempt,
            "restarts": record_restart(status.restarts, decision, now, job.spec.failure_policy),
            "in_flight": action,
            "suspect_nodes": _suspects(status.suspect_nodes, root, decision.reason, now),
        }
    )


SERVING_ROLES = frozenset(
    {RoleName.ROLLOUT.value, RoleName.REFERENCE.value, RoleName.VERIFIER.value}
)


def crash_findings(
    tracker: CrashRepeatTracker, observed: Observed, now: datetime
) -> list[tuple[ObservedPod, Evaluation]]:
    """Serving pods whose containers restarted in place often enough to act on."""
    running = [
        p
        for p in observed.pods
        if p.role in SERVING_ROLES and p.phase == "Running" and not p.deleting
    ]
    tracker.retain({p.name for p in running})
    findings = []
    for pod in running:
        last = (
            None
            if pod.exit_code is None
            else ContainerTermination(pod.exit_code, pod.reason or None, pod.message or None)
        )
        evaluation = tracker.observe(pod.name, pod.role, pod.restart_count, last, now.timestamp())
        if evaluation.is_finding:
            findings.append((pod, evaluation))
    return findings


def journal_pod_restart(
    job: RLJob, decision: Decision, pod: ObservedPod, now: datetime
) -> RLJobStatus:
    """The restart of one serving pod, counted and journaled before the pod is deleted."""
    status = job.status
    action = InFlightAction(
        id=f"pod-{pod.uid[:8]}",
        kind=ActionKind.RESTART_POD,
        target=ActionTarget(role=RoleName(pod.role), name=pod.name, uid=pod.uid),
        reason=decision.reason,
        step="Journaled",
        started_at=now,
    )
    ledger = record_restart(status.restarts, decision, now, job.spec.failure_policy)
    return status.model_copy(update={"restarts": ledger, "in_flight": action})


def journal_role_restart(
    job: RLJob, decision: Decision, role: RoleName, now: datetime
) -> RLJobStatus:
    """The roll of a whole serving role, counted and journaled before its Deployment's template
    is annotated (Kubernetes then rolls it keeping `replicas - maxUnavailable` ready)."""
    status = job.status
    ledger = record_restart(status.restarts, decision, now, job.spec.failure_policy)
    action = InFlightAction(
        id=f"role-{role.value}-{ledger.total}",
        kind=ActionKind.RESTART_ROLE,
        target=ActionTarget(role=role, name=f"{job.metadata.name}-{role.value}"),
        reason=decision.reason,
        step="Journaled",
        started_at=now,
    )
    return status.model_copy(update={"restarts": ledger, "in_flight": action})


def journal_serving_restart(
    job: RLJob, decision: Decision, pod: ObservedPod, now: datetime
) -> RLJobStatus | None:
    """A serving pod's restart or its role's roll, journaled (its Event: `journaled_event`);
    None for any other decision or while the policy's backoff runs."""
    if decision.delay_seconds > 0 or pod.role not in SERVING_ROLES:
        return None
    if decision.action == FailureAction.RESTART_POD:
        return journal_pod_restart(job, decision, pod, now)
    if decision.action == FailureAction.RESTART_ROLE:
        return journal_role_restart(job, decision, RoleName(pod.role), now)
    return None


def role_to_roll(status: RLJobStatus) -> tuple[str, str] | None:
    """(Deployment name, action id) of a journaled role roll."""
    action = status.in_flight
    if action is None or action.kind != ActionKind.RESTART_ROLE or action.target is None:
        return None
    return action.target.name or "", action.id


def stuck_pods(job: RLJob, observed: Observed, now: datetime) -> list[ObservedPod]:
    """Older attempts' trainer pods still terminating `teardownTimeout` after a gang restart
    began: their node stopped confirming deletions, so they are force-deleted."""
    action = job.status.in_flight
    if action is None or action.kind != ActionKind.RESTART_TRAINER_GANG:
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


def disrupted_serving_pods(observed: Observed) -> list[ObservedPod]:
    """Serving pods that Kubernetes disrupted (preempted, evicted, node lost): their
    ReplicaSet replaces them; the operator only tells the story, outside the restart budget."""
    return [p for p in observed.pods if p.role in SERVING_ROLES and p.disruption]


def pod_to_delete(status: RLJobStatus, observed: Observed) -> ObservedPod | None:
    """The pod a journaled pod restart still has to delete."""
    action = status.in_flight
    if action is None or action.kind != ActionKind.RESTART_POD or action.target is None:
        return None
    uid = action.target.uid
    return next((p for p in observed.pods if p.uid == uid and not p.deleting), None)


def settle_journal(status: RLJobStatus, observed: Observed, job_name: str) -> RLJobStatus:
    """Clears the journal once the action is done: a gang restart when the new attempt's Job
    exists, a pod restart when the pod is gone, a role roll when its Deployment was rolled."""
    action = status.in_flight
    if action is None:
        return status
    if action.kind == ActionKind.RESTART_TRAINER_GANG:
        created = trainer_job_name(job_name, status.attempt or 1)
        done = any(c.kind == "Job" and c.name == created for c in observed.children)
    elif action.kind == ActionKind.RESTART_POD:
        uid = action.target.uid if action.target else None
        done = not any(p.uid == uid and not p.deleting for p in observed.pods)
    elif action.kind == ActionKind.RESTART_ROLE:
        done = any(_rolled(c, action) for c in observed.children)
    else:
        done = False
    return status.model_copy(update={"in_flight": None}) if done else status


def _rolled(child: ObservedChild, action: InFlightAction) -> bool:
    """The Deployment carries the action's restart annotation and every replica was replaced."""
    named = action.target is not None and child.name == action.target.name
    return (
        named
        and child.kind == "Deployment"
        and child.restarted_at == action.id
        and child.updated_replicas >= child.replicas
    )


JOURNALED_EVENT_REASONS = {
    ActionKind.RESTART_TRAINER_GANG: GANG_RESTARTED,
    ActionKind.RESTART_POD: "PodRestarted",
    ActionKind.RESTART_ROLE: "RoleRestarted",
}


def journaled_event(status: RLJobStatus) -> tuple[str, EventSpec] | None:
    """The one Event of a journaled restart, posted before its first side effect under a name
    that makes posting it idempotent (a restarted operator posts it again; the API answers
    409), so a crash anywhere in the action neither loses nor doubles it."""
    action = status.in_flight
    if action is None or action.kind not in JOURNALED_EVENT_REASONS or not status.restarts:
        return None
    last = status.restarts.recent[-1] if status.restarts.recent else None
    text = last.message if last else str(action.reason)
    gang = action.kind == ActionKind.RESTART_TRAINER_GANG
    message = f"attempt {status.attempt}: {text}" if gang else text
    return action.id, EventSpec("Warning", JOURNALED_EVENT_REASONS[action.kind], message)


def _context(job: RLJob) -> PolicyContext:
    steps = [record.resumed_from_step for record in job.status.attempts[1:]]
    latest = job.status.checkpoint.latest if job.status.checkpoint else None
    return PolicyContext(resumed_from_steps=steps, next_resume_step=latest.step if latest else None)


def _suspects(
    current: list[SuspectNode], root: ObservedPod | None, reason: FailureReason, now: datetime
) -> list[SuspectNode]:
    if root is None or not root.node or any(s.name == root.node for s in current):
        return current
    return [*current, SuspectNode(name=root.node, reason=reason, marked_at=now)][
        -MAX_SUSPECT_NODES:
    ]
