"""Serving roles (rollout, reference, verifier): a pod restart or a role roll journaled with the
ledger before its side effect, the maxUnavailable room an operator-caused disruption needs, and
the story of pods Kubernetes itself disrupted."""

from __future__ import annotations

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
from rljob.health.evaluation import Evaluation
from rljob.health.termination import DISRUPTION_REASONS, ContainerTermination, CrashRepeatTracker
from rljob.reconcile.drain import DRAINING_STEP, drain_entry, draining_uids, drains
from rljob.reconcile.events import EventSpec
from rljob.reconcile.names import child_names
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.policy import Decision, record_restart

SERVING_ROLES = frozenset(
    {RoleName.ROLLOUT.value, RoleName.REFERENCE.value, RoleName.VERIFIER.value}
)


def crash_findings(
    tracker: CrashRepeatTracker, job: RLJob, observed: Observed, now: datetime
) -> list[tuple[ObservedPod, Evaluation]]:
    """Serving pods whose containers restarted in place often enough to act on. A pod's first
    observation starts from the restart count the rollout roster in status last recorded, so
    that crashes while no operator watched (a restart, a failover) are counted, not taken as
    the baseline."""
    recorded = recorded_restarts(job)
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
        evaluation = tracker.observe(
            pod.name,
            pod.role,
            pod.restart_count,
            last,
            now.timestamp(),
            recorded=recorded.get(pod.name),
        )
        if evaluation.is_finding:
            findings.append((pod, evaluation))
    return findings


def recorded_restarts(job: RLJob) -> dict[str, int]:
    """Each rollout engine's container restarts as the roster in status last recorded them."""
    rollout = job.status.roles.rollout if job.status.roles else None
    return {m.pod: m.restarts for m in (rollout.engines or [])} if rollout else {}


def journal_pod_restart(
    job: RLJob, decision: Decision, pod: ObservedPod, now: datetime
) -> RLJobStatus:
    """The restart of one serving pod, counted and journaled before the pod is deleted; a Gated
    rollout engine's drain begins with this write (deleted once drained: reconcile/drain.py)."""
    status = job.status
    drained = drains(job, pod.role)
    action = InFlightAction(
        id=f"pod-{pod.uid[:8]}",
        kind=ActionKind.RESTART_POD,
        target=ActionTarget(role=RoleName(pod.role), name=pod.name, uid=pod.uid),
        reason=decision.reason,
        step=DRAINING_STEP if drained else "Journaled",
        started_at=now,
        pods=[drain_entry(pod.name, pod.uid, now)] if drained else [],
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


def disrupted_serving_pods(observed: Observed) -> list[ObservedPod]:
    """Serving pods that Kubernetes disrupted (preempted, evicted, node lost): their
    ReplicaSet replaces them; the operator only tells the story, outside the restart budget."""
    return [p for p in observed.pods if p.role in SERVING_ROLES and p.disruption]


def unavailable(job: RLJob, observed: Observed, role: str) -> int:
    """Pods of a serving role that serve nothing now: the Deployment's own count, or the pods
    seen not ready or terminating if more (its status lags a deletion we just made)."""
    spec = getattr(job.spec.roles, role, None)
    desired = getattr(spec, "replicas", 0) if spec is not None else 0
    name = child_names(job).role(RoleName(role))
    deployment = next(
        (c for c in observed.children if c.kind == "Deployment" and c.name == name), None
    )
    from_status = desired - (deployment.ready_replicas if deployment is not None else 0)
    pods = [p for p in observed.pods if p.role == role and not p.terminal]
    leaving = draining_uids(job.status)  # a draining engine serves nothing new
    from_pods = sum(1 for p in pods if p.deleting or not p.ready or p.uid in leaving)
    return max(0, from_status, from_pods)


def room_to_restart(job: RLJob, observed: Observed, pod: ObservedPod) -> bool:
    """Whether deleting `pod` keeps its role within maxUnavailable, counting pods already
    unavailable; a pod that serves nothing anyway can always go."""
    if not pod.ready or pod.deleting:
        return True
    spec = getattr(job.spec.roles, pod.role, None)
    limit = max(1, getattr(spec, "max_unavailable", 1) if spec is not None else 1)
    return unavailable(job, observed, pod.role) + 1 <= limit


def disruption_reports(observed: Observed) -> tuple[tuple[str, EventSpec], ...]:
    """One Event per serving pod Kubernetes disrupted (preempted, evicted, node lost): its
    ReplicaSet replaces it, outside the restart budget; the operator only tells the story."""
    reports = []
    for pod in disrupted_serving_pods(observed):
        reason = DISRUPTION_REASONS.get(pod.disruption, FailureReason.EVICTED).value
        message = (
            f"{pod.role} pod {pod.name} on {pod.node or 'no node'}: {pod.disruption}: "
            f"{pod.disruption_message} (replaced by its Deployment; not counted)"
        )[:1000]
        reports.append((f"disrupted/{pod.uid}", EventSpec("Warning", reason, message)))
    return tuple(reports)
