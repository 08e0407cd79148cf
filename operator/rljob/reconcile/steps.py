"""The side effects a pass carries out after its journal write, in order, as plain data; the
runtime maps each kind of step to its applier. Every step is idempotent: deletes carry the uid
as a precondition, created objects have deterministic names, a named Event is posted once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rljob.api import ActionKind, ActionPod, InFlightAction, RLJob, RLJobStatus
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.checkpoints.attempt_plan import AttemptPlan
from rljob.checkpoints.retention import RetentionPlan
from rljob.reconcile.attempt_start import creates_attempt
from rljob.reconcile.drain import (
    action_entry,
    drain_waits,
    draining,
    ended_event,
    started_event,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.events import EventSpec
from rljob.reconcile.gate import to_close, to_open
from rljob.reconcile.in_turn import ROLE_READY_STEP, in_turn_to_delete, restarted_event
from rljob.reconcile.journal import journaled_event, pod_to_delete, roles_to_roll
from rljob.reconcile.nodes import GONE, OUT_OF_SERVICE_TAINT, UNKNOWN, UNREAD, NodeState, NodeStates
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.plan import Plan
from rljob.reconcile.queue import WorkloadStep
from rljob.reconcile.remediation import stuck_pods
from rljob.reconcile.slots import SlotMove, WeightCopy, slot_moves, weight_copies
from rljob.reconcile.suspension import suspended_event

# Node states for which nothing will ever confirm a pod's deletion (docs/architecture.md section 8).
_CRASH_PREFIXES = {
    ActionKind.RESTART_TRAINER_GANG: "gang-restart",
    ActionKind.RESTART_JOB: "job-restart",
    ActionKind.RESTART_POD: "pod-restart",
    ActionKind.RESTART_ROLE: "role-restart",
    ActionKind.RESTART_ROLE_IN_TURN: "in-turn",
}


@dataclass(frozen=True)
class CrashPoint:
    """Tests only: where a SIGKILL proves the action resumes rather than repeats."""

    name: str


@dataclass(frozen=True)
class PostEvent:
    """An Event; `name` makes it idempotent, `once` posts it once per process while it lasts."""

    event: EventSpec
    name: str = ""
    once: bool = False


@dataclass(frozen=True)
class DeleteObject:
    kind: str
    name: str
    uid: str
    grace_period_seconds: int | None = None


@dataclass(frozen=True)
class RollDeployment:
    """`kubectl rollout restart` with the action id as the restart annotation."""

    name: str
    nonce: str


@dataclass(frozen=True)
class SetPolicyCurrent:
    """Sets a Gated rollout pod's rljob.io/policy-current condition (its readiness gate): True
    once it reports `generation`, at least its required one; False (`reason`: Draining or
    ContainerRestarted) to take it out of its Service while it drains or rejoins."""

    pod: str
    uid: str
    current: bool
    generation: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class ApplyChild:
    """A child applied; `new`: not observed as the job's, so the executor first makes sure no
    other object holds its name (it never takes one over)."""

    body: dict[str, Any]
    new: bool = False


@dataclass(frozen=True)
class WriteMarker:
    """The attempt's marker in the checkpoint store, written before its Job is created."""

    marker: AttemptMarker


@dataclass(frozen=True)
class ApplyRetention:
    deletions: RetentionPlan


@dataclass(frozen=True)
class DeleteRLJob:
    """ttlSecondsAfterFinished expired."""


Step = (
    CrashPoint
    | PostEvent
    | DeleteObject
    | RollDeployment
    | SetPolicyCurrent
    | ApplyChild
    | WriteMarker
    | ApplyRetention
    | DeleteRLJob
    | WorkloadStep
    | SlotMove
    | WeightCopy
)


def execution_steps(
    job: RLJob,
    plan: Plan,
    observed: Observed,
    *,
    attempt_plan: AttemptPlan | None,
    node_states: NodeStates,
    now: datetime,
    settled: InFlightAction | None = None,
    readings: tuple[EngineReading, ...] = (),
) -> tuple[Step, ...]:
    """The plan's side effects in the order that keeps every crash resumable: the policy's
    suspension's Event, the journaled action's Event, deletes, the pod restart, in-turn deletes
    or role roll, stuck pods, the attempt marker, the applies, retention, and the RLJob's own
    deletion. Slot labels move before any gate closes (reconcile/slots.py) and weight copies
    start last. `settled`: an in-turn
    restart this pass cleared, whose closing Event is posted again (named: once). A drained
    engine (Gated) is deleted only once its drain ended (`readings`), its Events around it; a
    draining one's gate is set False first. The gates follow the roster in the plan's status."""
    status = plan.status
    action = status.in_flight
    prefix = _CRASH_PREFIXES.get(action.kind, "") if action is not None else ""
    steps: list[Step] = []
    held = suspended_event(job.metadata.name, status)
    if held is not None:  # said before the pods go, once: named after the suspension
        steps.append(PostEvent(held[1], held[0], once=True))
    journaled = journaled_event(status)
    if journaled is not None and action is not None:
        name = f"{job.metadata.name}.{journaled[0]}"
        steps += [CrashPoint(f"{prefix}:journaled"), PostEvent(journaled[1], name, once=True)]
    steps += _drains_started(job, status, now)
    steps += slot_moves(job, status, observed, readings)  # lent before a gate closes
    steps += _gates_closed(job, status, observed)
    steps += [DeleteObject(d.kind, d.name, d.uid) for d in plan.delete]
    trainer_restart = prefix in ("gang-restart", "job-restart")
    if plan.delete and trainer_restart:
        steps.append(CrashPoint(f"{prefix}:old-job-deleted"))
    victim = pod_to_delete(status, observed)
    if victim is not None and not drain_waits(job, _entry(action, victim), readings, now):
        steps += _pod_delete(job, action, victim, readings, now)
        steps.append(CrashPoint("pod-restart:pod-deleted"))
    for turn in in_turn_to_delete(status, observed):
        stamped = _entry(action, turn)
        at = stamped.deleted_at if stamped is not None and stamped.deleted_at else now
        steps += [*_pod_delete(job, action, turn, readings, at), CrashPoint("in-turn:pod-deleted")]
    for rolling in roles_to_roll(status, observed):
        steps += [RollDeployment(*rolling), CrashPoint(f"{prefix}:rolled")]
    ended = action if action is not None and action.step == ROLE_READY_STEP else settled
    if ended is not None and ended.kind == ActionKind.RESTART_ROLE_IN_TURN:
        name, event = restarted_event(job.metadata.name, ended)
        steps.append(PostEvent(event, name, once=True))
    steps += _gates_opened(job, status, observed, readings)
    steps += weight_copies(job, status, observed, readings)
    steps += _teardown_steps(job, observed, node_states, now)
    creates = creates_attempt(plan)
    if creates and attempt_plan is not None:
        steps += [WriteMarker(attempt_plan.marker), CrashPoint("attempt:marker-written")]
    ours = {(c.kind, c.name) for c in observed.children}
    steps += [ApplyChild(c.body, new=(c.kind, c.name) not in ours) for c in plan.apply]
    if creates and trainer_restart:
        steps.append(CrashPoint(f"{prefix}:new-job-created"))
    if creates and attempt_plan is not None and not attempt_plan.retention.empty:
        steps.append(ApplyRetention(attempt_plan.retention))
    if plan.delete_job:
        steps.append(DeleteRLJob())
    return tuple(steps)


def _gates_closed(job: RLJob, status: RLJobStatus, observed: Observed) -> list[Step]:
    """The gate set False of each Gated engine draining or restarted in place."""
    return [
        SetPolicyCurrent(pod.name, pod.uid, False, reason=reason)
        for pod, reason in to_close(job, status, observed)
    ]


def _gates_opened(
    job: RLJob, status: RLJobStatus, observed: Observed, readings: tuple[EngineReading, ...]
) -> list[Step]:
    """The gate set True of each Gated engine reporting at least its required generation."""
    return [
        SetPolicyCurrent(pod.name, pod.uid, True, generation=generation)
        for pod, generation in to_open(job, status, observed, readings)
    ]


def _entry(action: InFlightAction | None, pod: ObservedPod) -> ActionPod | None:
    return action_entry(action, pod.uid)


def _drains_started(job: RLJob, status: RLJobStatus, now: datetime) -> list[Step]:
    """Each drain under way said (named: once), after a crash point where one began now."""
    action = status.in_flight
    if action is None:
        return []
    entries = draining(status)
    steps: list[Step] = []
    if any(e.drain_started_at == now for e in entries):
        steps.append(CrashPoint("drain:started"))
    for entry in entries:
        name, event = started_event(job, action, entry)
        steps.append(PostEvent(event, name, once=True))
    return steps


def _pod_delete(
    job: RLJob,
    action: InFlightAction | None,
    pod: ObservedPod,
    readings: tuple[EngineReading, ...],
    at: datetime,
) -> list[Step]:
    """A journaled pod's delete; a drained one's end said first, its crash point after."""
    entry = _entry(action, pod)
    ended = ended_event(job, action, entry, readings, at) if action and entry else None
    if ended is None:
        return [DeleteObject("Pod", pod.name, pod.uid)]
    return [
        PostEvent(ended[1], ended[0], once=True),
        DeleteObject("Pod", pod.name, pod.uid),
        CrashPoint("drain:pod-deleted"),
    ]


def _teardown_steps(
    job: RLJob, observed: Observed, node_states: NodeStates, now: datetime
) -> list[Step]:
    """Old attempts' pods still terminating past teardownTimeout: force-deleted only where
    nothing can still run them (their Node gone or out of service); a pod on a healthy node may
    still be saving its checkpoint on SIGTERM, and one on an unreachable node may still run (a
    partition), so it is reported instead (TrainerTeardownStuck)."""
    steps: list[Step] = []
    timeout = job.spec.failure_policy.teardown_timeout
    for pod in stuck_pods(job, observed, now):
        state = node_states.get(pod.node, NodeState(UNREAD)) if pod.node else NodeState(GONE)
        if state.released:
            steps += _force_delete(job, pod, _said(state), timeout)
            continue
        message = (
            f"pod {pod.name} on node {pod.node} (node {_said(state)}) still terminating after "
            f"{timeout} (teardownTimeout): not force-deleted while its node may run it"
        )
        if state.ready == UNKNOWN:
            message += (
                "; the next attempt does not wait for it (fenced from the checkpoint store), "
                f"and deleting the Node or tainting it {OUT_OF_SERVICE_TAINT} releases it"
            )
        else:
            message += "; the next attempt waits"
        event = EventSpec("Warning", "TrainerTeardownStuck", message)
        steps.append(PostEvent(event, f"{job.metadata.name}.stuck-{pod.uid}", once=True))
    return steps


def _said(state: NodeState) -> str:
    return f"{state.ready}, out of service" if state.out_of_service else state.ready


def _force_delete(job: RLJob, pod: ObservedPod, state: str, timeout: str) -> list[Step]:
    message = (
        f"pod {pod.name} on node {pod.node or '?'} ({state}) still terminating after {timeout} "
        "(teardownTimeout): force-deleted"
    )
    event = EventSpec("Warning", "PodForceDeleted", message)
    return [
        DeleteObject("Pod", pod.name, pod.uid, grace_period_seconds=0),
        PostEvent(event, f"{job.metadata.name}.force-{pod.uid}"),
    ]
