"""RestartRoleInTurn: every pod of a serving role restarted by the operator deleting it, the
longest-running first, never taking the role past maxUnavailable (a Deployment rollout would
pick its own order). Counted once, journaled once.

The journal (status.inFlight) lists the role's pods when the action starts, oldest first. A pass
gives the next pod its turn by stamping its `deletedAt` in the status write that precedes its
delete: every delete is fenced by that write's resourceVersion, and a restarted operator knows
which pods had their turn (it re-sends only the delete of a stamped pod it still sees running,
uid-guarded: a no-op if the first one landed). A pod that went on its own is skipped. Once no
listed pod is left and the role is ready again, the entry's step says so and its Event is
posted; the pass after clears it (posting the named Event again, so a crash between the two
loses nothing).

A Gated rollout engine drains first (reconcile/drain.py): its turn stamps `drainStartedAt` (the
roster says draining; the pod counts as down from then on), and once it drained a later pass
stamps `deletedAt` and deletes it, through the same fence.

A repair of the trainer preempts it, and it times out without progress (reconcile/unfinished.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rljob.api import (
    ActionKind,
    ActionPod,
    ActionTarget,
    FailureReason,
    InFlightAction,
    JobPhase,
    RLJob,
    RLJobStatus,
    RoleName,
)
from rljob.api.roles import MAX_REPLICAS
from rljob.api.status import JOURNAL_FORMAT
from rljob.reconcile.drain import delete_stamped_uids, drain_end, drain_entry, drains
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.events import EventSpec
from rljob.reconcile.names import child_names
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.policy import Decision, record_restart
from rljob.reconcile.policy.ledger import utc
from rljob.reconcile.serving import unavailable
from rljob.reconcile.suspended import suspended

JOURNALED_STEP = "Journaled"
ROLE_READY_STEP = "RoleReady"  # every listed pod gone and the role ready: settled next pass
RESTARTING_IN_TURN = "RestartingRoleInTurn"
RESTARTED_IN_TURN = "RoleRestartedInTurn"
_NEVER = datetime.max.replace(tzinfo=UTC)  # a pod without a creation time goes last


@dataclass(frozen=True)
class InTurnPass:
    """The status after this pass's part of an in-turn restart; `turn`: the pod whose turn came
    (its detectors start afresh once the journal is written); `settled`: the entry cleared."""

    status: RLJobStatus
    turn: str | None = None
    settled: InFlightAction | None = None


def in_turn_action(status: RLJobStatus) -> InFlightAction | None:
    """The journaled in-turn restart this operator knows how to carry on, if any."""
    action = status.in_flight
    if action is None or action.kind != ActionKind.RESTART_ROLE_IN_TURN:
        return None
    if action.target is None or action.format > JOURNAL_FORMAT:
        return None
    return action


def oldest_first(pods: list[ObservedPod]) -> list[ObservedPod]:
    """Longest-running first: by creation time, then name (one second holds several pods)."""
    return sorted(pods, key=lambda p: (utc(p.created_at) if p.created_at else _NEVER, p.name))


def journal_in_turn_restart(
    job: RLJob,
    decision: Decision,
    role: RoleName,
    observed: Observed,
    now: datetime,
    *,
    only: frozenset[str] | None = None,
) -> InTurnPass | None:
    """The in-turn restart of `role` (of its pods in `only`, when given), counted and journaled
    with the pods in order, and the first pod's turn if there is room; None when there is no
    pod to restart."""
    ledger = record_restart(job.status.restarts, decision, now, job.spec.failure_policy)
    action_id = f"turn-{role.value}-{ledger.total}"
    action = in_turn_entry(job, role, observed, action_id, now, reason=decision.reason, only=only)
    if action is None:
        return None
    status = job.status.model_copy(update={"restarts": ledger, "in_flight": action})
    return advance_in_turn(job.model_copy(update={"status": status}), observed, now)


def in_turn_entry(
    job: RLJob,
    role: RoleName,
    observed: Observed,
    action_id: str,
    now: datetime,
    *,
    reason: FailureReason | None = None,
    only: frozenset[str] | None = None,
) -> InFlightAction | None:
    """The journal entry of an in-turn restart of `role` with its live pods (those in `only`,
    when given) oldest first (nobody's turn yet); None when there is no pod to restart."""
    live = [
        p
        for p in observed.pods
        if p.role == role.value
        and not p.terminal
        and not p.deleting
        and (only is None or p.name in only)
    ]
    if not live:
        return None
    return InFlightAction(
        id=action_id,
        kind=ActionKind.RESTART_ROLE_IN_TURN,
        target=ActionTarget(role=role, name=child_names(job).role(role)),
        reason=reason,
        step=JOURNALED_STEP,
        started_at=now,
        pods=[ActionPod(name=p.name, uid=p.uid) for p in oldest_first(live)[:MAX_REPLICAS]],
    )


def advance_in_turn(
    job: RLJob, observed: Observed, now: datetime, readings: tuple[EngineReading, ...] = ()
) -> InTurnPass:
    """One pass of a journaled in-turn restart: cleared once it said the role is ready again,
    marked ready when it is, else the next pod's turn when the role has room for it (a Gated
    engine's turn: its drain, then its delete once drained)."""
    status = job.status
    action = in_turn_action(status)
    if action is None:
        return InTurnPass(status)
    if action.step == ROLE_READY_STEP:
        return InTurnPass(status.model_copy(update={"in_flight": None}), settled=action)
    if _role_back(job, observed, action):
        ready = action.model_copy(update={"step": ROLE_READY_STEP})
        return InTurnPass(status.model_copy(update={"in_flight": ready}))
    if _stopped(job, action):
        return InTurnPass(status)  # suspended or finished: the scale-down removes the rest
    pods = list(action.pods or [])
    drained = _drained_turns(job, observed, action, readings, now)
    index = drained[0] if drained else _next_turn(job, observed, action)
    if index is None:
        return InTurnPass(status)
    entry = pods[index]
    if not drained and drains(job, _role(action)):
        pods[index] = drain_entry(entry.name, entry.uid, now)
        taken = sum(1 for p in pods if p.deleted_at is not None)
        step = f"Draining {entry.name} (deleted {taken}/{len(pods)})"
        marked = action.model_copy(update={"pods": pods, "step": step})
        return InTurnPass(status.model_copy(update={"in_flight": marked}))
    for each in drained or [index]:  # every drained pod goes: its room was taken already
        pods[each] = pods[each].model_copy(update={"deleted_at": now})
    taken = sum(1 for p in pods if p.deleted_at is not None)
    step = f"Deleted {taken}/{len(pods)}"
    marked = action.model_copy(update={"pods": pods, "step": step})
    return InTurnPass(status.model_copy(update={"in_flight": marked}), turn=entry.name)


def in_turn_to_delete(status: RLJobStatus, observed: Observed) -> list[ObservedPod]:
    """Pods whose turn the journal records and that are still seen running: this pass's delete,
    or the resumed one of an operator that died between its journal write and the delete."""
    action = in_turn_action(status)
    if action is None or action.step == ROLE_READY_STEP:
        return []
    marked = delete_stamped_uids(action)
    return [p for p in observed.pods if p.uid in marked and not p.deleting and not p.terminal]


def started_message(action: InFlightAction, evidence: str) -> str:
    """The journaled Event's message: the evidence, then the order the pods go in."""
    order = ", ".join(p.name for p in action.pods or [])
    return f"{evidence}; in turn, oldest first: {order}"


def restarted_event(job_name: str, action: InFlightAction) -> tuple[str, EventSpec]:
    """(Event name, Event) announcing the end: the pods restarted, in the order they went."""
    taken = [(utc(p.deleted_at), p.name) for p in action.pods or [] if p.deleted_at is not None]
    done = [name for _, name in sorted(taken, key=lambda t: t[0])]  # stable: ties keep list order
    skipped = [p.name for p in action.pods or [] if p.deleted_at is None]
    message = f"{_role(action)} pods restarted in turn ({action.id}): {', '.join(done)}"
    if skipped:
        message += f"; not restarted (gone before their turn): {', '.join(skipped)}"
    return f"{job_name}.{action.id}.done", EventSpec("Normal", RESTARTED_IN_TURN, message)


def _role(action: InFlightAction) -> str:
    return action.target.role.value if action.target is not None else ""


def _stopped(job: RLJob, action: InFlightAction) -> bool:
    role = _role(action)
    finished = job.status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED)
    return suspended(job) or finished or getattr(job.spec.roles, role, None) is None


def _desired(job: RLJob, action: InFlightAction) -> int:
    if _stopped(job, action):
        return 0
    return int(getattr(getattr(job.spec.roles, _role(action)), "replicas", 0))


def _ready_pods(observed: Observed, role: str) -> int:
    return sum(
        1 for p in observed.pods if p.role == role and p.ready and not p.deleting and not p.terminal
    )


def _role_back(job: RLJob, observed: Observed, action: InFlightAction) -> bool:
    """No listed pod is left (terminating ones count) and the role is ready: its Deployment says
    so and so do its pods (either may lag the other)."""
    listed = {p.uid for p in action.pods or []}
    if any(p.uid in listed and not p.terminal for p in observed.pods):
        return False
    desired = _desired(job, action)
    if desired == 0:
        return True
    name = action.target.name if action.target is not None else ""
    deployment = next(
        (c for c in observed.children if c.kind == "Deployment" and c.name == name), None
    )
    ready = deployment.ready_replicas if deployment is not None else 0
    return ready >= desired and _ready_pods(observed, _role(action)) >= desired


def _down(job: RLJob, observed: Observed, action: InFlightAction) -> int:
    """The role's pods serving nothing now, counted the strictest way: the Deployment's and the
    pods' view, replicas with no ready pod, and pods whose turn came that a lagging view still
    shows running (their delete is sent, or about to be)."""
    role = _role(action)
    marked = {
        p.uid for p in action.pods or [] if p.deleted_at is not None or p.drain_started_at
    }  # a draining pod serves nothing new: down from its drain on
    pending = sum(
        1
        for p in observed.pods
        if p.uid in marked and p.ready and not p.deleting and not p.terminal
    )
    missing = _desired(job, action) - _ready_pods(observed, role)
    return max(unavailable(job, observed, role), missing + pending)


def _next_turn(job: RLJob, observed: Observed, action: InFlightAction) -> int | None:
    """The index of the next pod to delete: the oldest still running whose turn has not come,
    if the role has room for one more down; a pod that serves nothing (not ready) needs no room
    and may go before an older one waiting for room."""
    spec = getattr(job.spec.roles, _role(action), None)
    limit = max(1, getattr(spec, "max_unavailable", 1))
    room = _down(job, observed, action) < limit
    seen = {p.uid: p for p in observed.pods if not p.terminal}
    for index, entry in enumerate(action.pods or []):
        pod = seen.get(entry.uid)
        had_turn = entry.deleted_at is not None or entry.drain_started_at is not None
        if had_turn or pod is None or pod.deleting:
            continue  # had (or has) its turn, or gone (or going) on its own: skipped
        if not pod.ready or room:
            return index
        # A serving pod waiting for room: no younger serving pod overtakes it (room stays False).
    return None


def _drained_turns(
    job: RLJob,
    observed: Observed,
    action: InFlightAction,
    readings: tuple[EngineReading, ...],
    now: datetime,
) -> list[int]:
    """The indexes of draining pods, still seen, whose drain ended: their deletes come first
    (their room was taken when their drains began)."""
    seen = {p.uid for p in observed.pods if not p.terminal and not p.deleting}
    return [
        index
        for index, entry in enumerate(action.pods or [])
        if entry.deleted_at is None
        and entry.uid in seen
        and drain_end(job, entry, readings, now) is not None
    ]
