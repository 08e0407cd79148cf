"""The new status of an RLJob: phase, per-role counts, conditions and the attempt history.
Nothing time-dependent changes on a pass where nothing changed, so an unchanged job compares
equal and causes no write."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rljob.api import (
    ConditionType,
    JobPhase,
    QueueState,
    RestartsStatus,
    RLJob,
    RLJobStatus,
    RoleName,
    RolesStatus,
    RoleStatus,
    TrainerRole,
)
from rljob.reconcile.conditions import (
    ConditionState,
    find,
    merge_conditions,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.gate import awaiting_gate
from rljob.reconcile.lifecycle import (
    TERMINAL_PHASES,
    TrainerDecision,
    TrainerState,
    updated_attempts,
)
from rljob.reconcile.names import ROLE_ORDER
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.roster import engine_roster
from rljob.reconcile.suspects import active_suspects, suspect_in_use_state, suspect_ttl
from rljob.reconcile.suspended import queue_holds

NOT_SUSPENDED = "spec.suspend is false and the failure policy holds no suspension"
_STOPPED_PHASE = {
    TrainerState.SUCCEEDED: JobPhase.SUCCEEDED,
    TrainerState.FAILED: JobPhase.FAILED,
    TrainerState.SUSPENDED: JobPhase.SUSPENDED,
}
_STOPPED_READY_MESSAGE = {
    JobPhase.SUCCEEDED: "the job succeeded; no pods run",
    JobPhase.FAILED: "the job failed; no pods run",
    JobPhase.SUSPENDED: "the job is suspended; no pods run",
}


def build_status(
    job: RLJob,
    observed: Observed,
    decision: TrainerDecision,
    now: datetime,
    *,
    has_children: bool,
    resume_env: Mapping[str, str],
    engine_readings: tuple[EngineReading, ...] = (),
    trainer_generation: int | None = None,
) -> RLJobStatus:
    old = job.status
    roles = role_statuses(job, observed, decision, engine_readings, trainer_generation)
    phase = _phase(job, decision, roles)
    generation = job.metadata.generation
    suspects = active_suspects(old.suspect_nodes, now, suspect_ttl(job))
    conditions = (
        list(old.conditions)
        if decision.state == TrainerState.FINISHED
        else merge_conditions(
            old.conditions,
            [
                *_condition_states(job, observed, decision, roles, phase),
                *suspect_in_use_state(suspects, observed, decision.attempt),
            ],
            now,
            generation,
        )
    )
    finished_now = phase in TERMINAL_PHASES and old.completion_time is None
    return old.model_copy(
        update={
            "phase": phase,
            "observed_generation": old.observed_generation if generation is None else generation,
            "attempt": decision.attempt,
            "start_time": old.start_time or (now if has_children else None),
            "completion_time": now if finished_now else old.completion_time,
            "conditions": conditions,
            "roles": roles,
            "attempts": updated_attempts(old.attempts, decision, now, resume_env),
            # An empty ledger rather than none: the Restarts printer column shows 0, not blank.
            "restarts": old.restarts or RestartsStatus(),
            "suspect_nodes": suspects,
        }
    )


def role_statuses(
    job: RLJob,
    observed: Observed,
    decision: TrainerDecision,
    engine_readings: tuple[EngineReading, ...] = (),
    trainer_generation: int | None = None,
) -> RolesStatus:
    """Desired and ready pods per role; restarts are the restart ledger's for the role (so the
    roles' restarts add up to its total); the rollout role's engine roster (reconcile/roster.py;
    `trainer_generation`: the trainer's live policy generation, a joining Gated engine's
    target)."""
    previous = job.status.roles or RolesStatus()
    restarts = role_restarts(job.status.restarts)
    counts: dict[str, RoleStatus] = {}
    for role_name in ROLE_ORDER:
        role = getattr(job.spec.roles, role_name.value)
        if role is None:
            continue
        size = role.nodes if isinstance(role, TrainerRole) else role.replicas
        counts[role_name.value] = RoleStatus(
            desired=0 if decision.stopped else size,
            ready=_ready(job, observed, decision, role_name),
            restarts=restarts.get(role_name.value, 0),
        )
    if (rollout := counts.get(RoleName.ROLLOUT.value)) is not None:
        previous_engines = previous.rollout.engines if previous.rollout else None
        engines = engine_roster(
            job, observed, engine_readings, previous_engines, trainer_generation
        )
        counts[RoleName.ROLLOUT.value] = rollout.model_copy(update={"engines": engines or []})
    return RolesStatus(**counts)


def role_restarts(ledger: RestartsStatus | None) -> dict[str, int]:
    """Restarts per role as the ledger counts them: gang restarts of the trainer, pod, role and
    in-turn restarts of serving roles, the policy's and the user-requested ones."""
    return ledger.role_counts() if ledger is not None else {}


def _ready(job: RLJob, observed: Observed, decision: TrainerDecision, role: RoleName) -> int:
    if role == RoleName.TRAINER:
        active = decision.state in (TrainerState.STARTING, TrainerState.RUNNING)
        return decision.job.ready_replicas if active and decision.job is not None else 0
    deployment = next(
        (c for c in observed.children if c.kind == "Deployment" and c.role == role.value), None
    )
    ready = deployment.ready_replicas if deployment is not None else 0
    if role == RoleName.ROLLOUT:  # a Gated engine waiting only for weights counts as ready
        ready += sum(1 for pod in awaiting_gate(job, observed) if pod.containers_ready)
    return ready


def _role_counts(roles: RolesStatus) -> list[tuple[str, RoleStatus]]:
    return [
        (name.value, count)
        for name in ROLE_ORDER
        if (count := getattr(roles, name.value)) is not None
    ]


def _all_ready(roles: RolesStatus) -> bool:
    return all(c.desired > 0 and c.ready >= c.desired for _, c in _role_counts(roles))


def _summary(counts: Sequence[tuple[str, RoleStatus]]) -> str:
    return ", ".join(f"{name} {c.ready}/{c.desired}" for name, c in counts) + " ready"


def _phase(job: RLJob, decision: TrainerDecision, roles: RolesStatus) -> JobPhase | None:
    if decision.state == TrainerState.FINISHED:
        return job.status.phase
    if decision.state in _STOPPED_PHASE:
        return _STOPPED_PHASE[decision.state]
    if decision.state not in (TrainerState.STARTING, TrainerState.RUNNING):
        return JobPhase.PENDING
    # Running once every role has been ready together; later dips show as Degraded.
    ran_before = job.status.phase == JobPhase.RUNNING and job.status.attempt == decision.attempt
    if ran_before or (decision.state == TrainerState.RUNNING and _all_ready(roles)):
        return JobPhase.RUNNING
    return JobPhase.PENDING


def _condition_states(
    job: RLJob,
    observed: Observed,
    decision: TrainerDecision,
    roles: RolesStatus,
    phase: JobPhase | None,
) -> list[ConditionState]:
    return [
        _ready_state(roles, phase),
        _progressing_state(job, decision, roles, phase),
        _degraded_state(roles, phase),
        _suspended_state(job, decision),
        _restarting_state(job),
        _pods_scheduled_state(job, observed, decision),
        *_terminal_states(decision),
    ]


def _ready_state(roles: RolesStatus, phase: JobPhase | None) -> ConditionState:
    kind = ConditionType.READY.value
    if phase in _STOPPED_READY_MESSAGE:
        return ConditionState.of(kind, False, str(phase), _STOPPED_READY_MESSAGE[phase])
    summary = _summary(_role_counts(roles))
    if phase == JobPhase.RUNNING and _all_ready(roles):
        return ConditionState.of(kind, True, "AllRolesReady", summary)
    return ConditionState.of(kind, False, "RolesNotReady", summary)


def _progressing_state(
    job: RLJob, decision: TrainerDecision, roles: RolesStatus, phase: JobPhase | None
) -> ConditionState:
    kind = ConditionType.PROGRESSING.value
    if decision.state in _STOPPED_PHASE:
        return ConditionState.of(kind, False, str(_STOPPED_PHASE[decision.state]), decision.message)
    if decision.after_unschedulable:
        return ConditionState.of(
            kind, False, "Unschedulable", _unschedulable_message(job, decision)
        )
    if phase == JobPhase.RUNNING:
        return ConditionState.of(kind, True, "Running", f"trainer attempt {decision.attempt} runs")
    if decision.state == TrainerState.WAITING:
        return ConditionState.of(kind, True, "Starting", decision.message)
    message = f"trainer attempt {decision.attempt} starting: {_summary(_role_counts(roles))}"
    return ConditionState.of(kind, True, "Starting", message)


def _unschedulable_message(job: RLJob, decision: TrainerDecision) -> str:
    """The timeout's own message, kept (with the scheduler's words) until the next attempt is
    placed."""
    if decision.state == TrainerState.TIMED_OUT:
        return decision.message
    old = find(job.status.conditions, ConditionType.PROGRESSING.value)
    if old is not None and old.reason == "Unschedulable":
        return old.message
    timeout = job.spec.roles.trainer.scheduling_timeout
    return f"trainer attempt {decision.attempt - 1} was not scheduled within {timeout}"


def _degraded_state(roles: RolesStatus, phase: JobPhase | None) -> ConditionState:
    kind = ConditionType.DEGRADED.value
    short = [(name, c) for name, c in _role_counts(roles) if c.ready < c.desired]
    if phase == JobPhase.RUNNING and short:
        return ConditionState.of(kind, True, "RolesUnavailable", _summary(short))
    return ConditionState.of(kind, False, "AsExpected", "no role is degraded")


def _restarting_state(job: RLJob) -> ConditionState:
    """True while a journaled restart is under way (status.inFlight)."""
    kind = ConditionType.RESTARTING.value
    action = job.status.in_flight
    if action is None:
        return ConditionState.of(kind, False, "NoRestart", "no restart in progress")
    target = action.target.name if action.target and action.target.name else ""
    reason = action.reason.value if action.reason else action.kind.value
    message = f"{action.kind.value} {target} ({action.id}) since {action.started_at:%H:%M:%SZ}"
    if action.pods:  # an in-turn restart: how far it got ("Deleted 2/8")
        message += f": {action.step}"
    return ConditionState.of(kind, True, reason, message.replace("  ", " "))


def _suspended_state(job: RLJob, decision: TrainerDecision) -> ConditionState:
    """True while suspended; by the policy, its reason is the finding's (e.g.
    RewardHackingSuspected) and the message how to resume."""
    kind = ConditionType.SUSPENDED.value
    if decision.state == TrainerState.SUSPENDED:
        message = f"every pod removed, job state and checkpoints kept: {decision.message}"
        return ConditionState.of(kind, True, _suspended_reason(job), message)
    return ConditionState.of(kind, False, "NotSuspended", NOT_SUSPENDED)


def _suspended_reason(job: RLJob) -> str:
    """The policy's finding, else Kueue's (Queued, or the eviction's reason), else the user's."""
    held, queue = job.status.suspension, job.status.queue
    if held is not None:
        return held.reason.value
    if queue_holds(queue) and queue is not None:
        return (queue.reason or "Evicted") if queue.state == QueueState.EVICTED else "Queued"
    return "Suspended"


def _pods_scheduled_state(
    job: RLJob, observed: Observed, decision: TrainerDecision
) -> ConditionState:
    waiting = _unschedulable_pods(job, observed, decision)
    if not waiting:
        return ConditionState.of(
            ConditionType.PODS_SCHEDULED, True, "AllPodsScheduled", "no pod unschedulable"
        )
    pod = waiting[0]
    message = f"{pod.role} pod {pod.name}: {pod.unschedulable_message}"
    return ConditionState.of(ConditionType.PODS_SCHEDULED, False, "Unschedulable", message)


def _unschedulable_pods(
    job: RLJob, observed: Observed, decision: TrainerDecision
) -> list[ObservedPod]:
    order = {role.value: index for index, role in enumerate(ROLE_ORDER)}
    present = {r.value for r in ROLE_ORDER if getattr(job.spec.roles, r.value) is not None}
    pods = [
        pod
        for pod in observed.pods
        if pod.unschedulable_message
        and not pod.node
        and not pod.deleting
        and pod.role in present
        and (pod.role != RoleName.TRAINER.value or pod.attempt == decision.attempt)
    ]
    return sorted(pods, key=lambda pod: (order[pod.role], pod.name))


def _terminal_states(decision: TrainerDecision) -> list[ConditionState]:
    if decision.state == TrainerState.SUCCEEDED:
        kind = ConditionType.SUCCEEDED.value
        return [ConditionState.of(kind, True, "TrainerSucceeded", decision.message)]
    if decision.state == TrainerState.FAILED and decision.failure is not None:
        failure = decision.failure
        return [
            ConditionState.of(ConditionType.FAILED.value, True, failure.reason, failure.message)
        ]
    return []
