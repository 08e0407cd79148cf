"""The journal of an action in flight (status.inFlight): what it still has to do, when it is
done, and the one Event that announces it. An action is journaled in the same status write as its
restart-ledger entry, before its first side effect, so a restarted operator resumes it."""

from __future__ import annotations

from rljob.api import ActionKind, InFlightAction, RLJobStatus
from rljob.api.status import JOURNAL_FORMAT
from rljob.reconcile.events import EventSpec
from rljob.reconcile.in_turn import RESTARTING_IN_TURN, started_message
from rljob.reconcile.lifecycle import attempt_job
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.serving import SERVING_ROLES
from rljob.vocabulary.enums import TRAINER_RESTART_KINDS

GANG_RESTARTED = "GangRestarted"
JOB_RESTARTED = "JobRestarted"
MANUAL_PREFIX = "manual-"


def roles_to_roll(status: RLJobStatus, observed: Observed) -> list[tuple[str, str]]:
    """(Deployment name, action id) of each roll a journaled action still asks for: a role
    roll's one Deployment, or with RestartJob every serving Deployment not yet annotated (one
    a spec change adds meanwhile is rolled too, so the action can settle)."""
    action = status.in_flight
    if action is None:
        return []
    if action.kind == ActionKind.RESTART_ROLE and action.target is not None:
        return [(action.target.name or "", action.id)]
    if action.kind == ActionKind.RESTART_JOB:
        return [(c.name, action.id) for c in _serving_deployments(observed)
                if c.restarted_at != action.id]  # fmt: skip
    return []


def _serving_deployments(observed: Observed) -> list[ObservedChild]:
    return [
        c
        for c in observed.children
        if c.kind == "Deployment" and c.role in SERVING_ROLES and not c.deleting
    ]


def pod_to_delete(status: RLJobStatus, observed: Observed) -> ObservedPod | None:
    """The pod a journaled pod restart still has to delete."""
    action = status.in_flight
    if action is None or action.kind != ActionKind.RESTART_POD or action.target is None:
        return None
    uid = action.target.uid
    return next((p for p in observed.pods if p.uid == uid and not p.deleting), None)


def settle_journal(status: RLJobStatus, observed: Observed) -> RLJobStatus:
    """Clears the journal once the action is done: a gang restart when the new attempt's Job
    exists, a whole job's restart when besides every serving Deployment carries its roll (each
    rolls on by itself: a Gated engine's replacement waits for the new trainer's weights), a pod
    restart when the pod is gone, a role roll when its Deployment was rolled (an in-turn restart
    settles in reconcile/in_turn.py)."""
    action = status.in_flight
    if action is None or unknown_format(status):
        return status
    if action.kind in TRAINER_RESTART_KINDS:
        done = attempt_job(observed, status.attempt or 1) is not None
        done = done and not roles_to_roll(status, observed)
    elif action.kind == ActionKind.RESTART_POD:
        uid = action.target.uid if action.target else None
        done = not any(p.uid == uid and not p.deleting for p in observed.pods)
    elif action.kind == ActionKind.RESTART_ROLE:
        done = any(_rolled(c, action) for c in observed.children)
    else:
        done = False
    return status.model_copy(update={"in_flight": None}) if done else status


def unknown_format(status: RLJobStatus) -> EventSpec | None:
    """An entry journaled by a newer operator (downgraded mid-action): left alone, never
    settled or replaced, and said (the newer operator resumes it)."""
    action = status.in_flight
    if action is None or action.format <= JOURNAL_FORMAT:
        return None
    message = (
        f"status.inFlight {action.id} has journal format {action.format}; this operator "
        f"knows formats up to {JOURNAL_FORMAT}: the action waits for an operator that knows it"
    )
    return EventSpec("Warning", "JournalFormatUnknown", message)


def _requested(action: InFlightAction) -> str:
    """What a manual restart request journaled: a gang restart, a roll, or (Gated engines) a
    restart in turn."""
    role = action.target.name if action.target and action.target.name else "the role"
    if action.kind in TRAINER_RESTART_KINDS:
        return "trainer gang restart"
    if action.kind == ActionKind.RESTART_ROLE_IN_TURN:
        return f"restart in turn (each engine drained first) of {role}"
    return f"roll of {role}"


def _rolled(child: ObservedChild, action: InFlightAction) -> bool:
    """The Deployment carries the action's restart annotation and every replica was replaced."""
    named = action.target is not None and child.name == action.target.name
    return (
        named
        and child.kind == "Deployment"
        and child.restarted_at == action.id
        # The Deployment controller's status must describe this template, not the one before.
        and child.observed_generation >= child.generation
        and child.updated_replicas >= child.replicas
        and child.ready_replicas >= child.replicas
    )


JOURNALED_EVENT_REASONS = {
    ActionKind.RESTART_TRAINER_GANG: GANG_RESTARTED,
    ActionKind.RESTART_JOB: JOB_RESTARTED,
    ActionKind.RESTART_POD: "PodRestarted",
    ActionKind.RESTART_ROLE: "RoleRestarted",
    ActionKind.RESTART_ROLE_IN_TURN: RESTARTING_IN_TURN,
}


def journaled_event(status: RLJobStatus) -> tuple[str, EventSpec] | None:
    """The one Event of a journaled restart, posted before its first side effect under a name
    that makes posting it idempotent (a restarted operator posts it again; the API answers
    409), so a crash anywhere in the action neither loses nor doubles it."""
    action = status.in_flight
    if action is None or action.kind not in JOURNALED_EVENT_REASONS:
        return None
    if action.id.startswith(MANUAL_PREFIX):
        what = _requested(action)
        message = f"{what} requested ({action.id.removeprefix(MANUAL_PREFIX)})"
        if action.kind in TRAINER_RESTART_KINDS:
            message += f": attempt {status.attempt}"
        return action.id, EventSpec("Normal", "RestartRequested", message)
    if not status.restarts:
        return None
    last = status.restarts.recent[-1] if status.restarts.recent else None
    text = last.message if last else str(action.reason)
    gang = action.kind in TRAINER_RESTART_KINDS
    message = f"attempt {status.attempt}: {text}" if gang else text
    if action.kind == ActionKind.RESTART_ROLE_IN_TURN:
        message = started_message(action, text)
    return action.id, EventSpec("Warning", JOURNALED_EVENT_REASONS[action.kind], message)
