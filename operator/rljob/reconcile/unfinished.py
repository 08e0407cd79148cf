"""An action in flight that ends before it finished, so that nothing waits behind it for ever:

- Preempted: a repair of the trainer (a failed attempt, a stalled trainer the policy restarts, a
  manual trainer restart) ends a role restart in turn or a role roll once the side effects it
  decided were sent, instead of waiting behind it. A Gated rollout's replacements turn Ready only
  once the trainer's driver pushed them weights, so waiting there would be a deadlock; for other
  roles it would hold the costliest repair behind the cheapest. Pods not yet taken are left
  running (a draining one stops draining, back in the roster behind its gate); the Deployment
  carries on rolling on its own.
- Timed out: a role restart in turn or a role roll that makes no progress (no turn taken, the
  role not ready again) for failurePolicy.actionTimeout ends, said in a Warning (a replacement
  that never turns Ready: a node lost, quota, an image that does not pull). A drain under way is
  bounded by its own drainTimeout, so the clock runs between turns.

A trainer gang restart is neither: it is the trainer's repair itself, and its waits are bounded
elsewhere (pods on lost nodes are not waited for; the checkpoint store is needed to resume).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rljob.api import ActionKind, InFlightAction, RLJob, RLJobStatus
from rljob.api.durations import parse_duration
from rljob.api.status import JOURNAL_FORMAT
from rljob.reconcile.drain import drains
from rljob.reconcile.events import EventSpec
from rljob.reconcile.in_turn import ROLE_READY_STEP, in_turn_to_delete
from rljob.reconcile.observed import Observed

PREEMPTED_IN_TURN = "RoleRestartInTurnPreempted"
PREEMPTED_ROLL = "RoleRestartPreempted"
TIMED_OUT = "RoleRestartTimedOut"
_ENDABLE = (ActionKind.RESTART_ROLE_IN_TURN, ActionKind.RESTART_ROLE)


@dataclass(frozen=True)
class Ended:
    """The status without the action, and the Warning that says what it left; `key`: the
    report's throttle key (said once)."""

    status: RLJobStatus
    event: EventSpec
    key: str


def preemptable(job: RLJob, observed: Observed) -> InFlightAction | None:
    """The role restart a repair of the trainer ends rather than waits for: an in-turn restart
    whose decided deletes were all sent, or a roll whose patch the Deployment shows."""
    action = _endable(job.status)
    if action is None:
        return None
    if action.kind == ActionKind.RESTART_ROLE_IN_TURN:
        return None if in_turn_to_delete(job.status, observed) else action
    return action if _roll_landed(action, observed) else None


def preempted(job: RLJob, action: InFlightAction, observed: Observed, why: str) -> Ended:
    """`action` ended because `why` (the trainer's repair) goes first."""
    role = _role(action)
    if action.kind == ActionKind.RESTART_ROLE:
        message = (
            f"{role} restart ({action.id}) ended early: {why}; the Deployment finishes its roll "
            "on its own"
        )
        return _ended(job, action, PREEMPTED_ROLL, message)
    message = f"{role} restart in turn ({action.id}) ended early: {why}"
    if drains(job, role):
        message += (
            ", and Gated engines' replacements turn Ready only once the trainer pushes them weights"
        )
    return _ended(job, action, PREEMPTED_IN_TURN, message + _left(action, observed))


def timed_out(job: RLJob, observed: Observed, now: datetime) -> Ended | None:
    """The role restart that made no progress for actionTimeout, ended; None otherwise."""
    action = _endable(job.status)
    if action is None or _draining(action, observed):
        return None
    timeout = job.spec.failure_policy.action_timeout
    if now < last_progress(action) + timedelta(seconds=parse_duration(timeout)):
        return None
    role = _role(action)
    if action.kind == ActionKind.RESTART_ROLE:
        message = (
            f"{role} restart ({action.id}): the role is not ready {timeout} (actionTimeout) after "
            "its roll; no longer waiting for it (the Deployment rolls on)"
        )
    else:
        message = (
            f"{role} restart in turn ({action.id}) ended unfinished: no turn taken and the role "
            f"not ready for {timeout} (actionTimeout)" + _left(action, observed)
        )
    return _ended(job, action, TIMED_OUT, message)


def last_progress(action: InFlightAction) -> datetime:
    """When the action last moved: journaled, a drain begun, a turn taken."""
    stamps = [
        stamp
        for entry in action.pods or []
        for stamp in (entry.drain_started_at, entry.deleted_at)
        if stamp is not None
    ]
    return max([action.started_at, *stamps])


def _endable(status: RLJobStatus) -> InFlightAction | None:
    action = status.in_flight
    if action is None or action.kind not in _ENDABLE or action.format > JOURNAL_FORMAT:
        return None
    return None if action.step == ROLE_READY_STEP else action


def _roll_landed(action: InFlightAction, observed: Observed) -> bool:
    name = action.target.name if action.target is not None else None
    return any(
        c.kind == "Deployment" and c.name == name and c.restarted_at == action.id
        for c in observed.children
    )


def _draining(action: InFlightAction, observed: Observed) -> bool:
    """A listed pod still seen drains (its drain is bounded by drainTimeout)."""
    live = {p.uid for p in observed.pods if not p.terminal and not p.deleting}
    return any(
        entry.drain_started_at is not None and entry.deleted_at is None and entry.uid in live
        for entry in action.pods or []
    )


def _left(action: InFlightAction, observed: Observed) -> str:
    """ "; not restarted: a, b (a stopped draining); gone before their turn: c"."""
    live = {p.uid for p in observed.pods if not p.terminal and not p.deleting}
    left = [p for p in action.pods or [] if p.deleted_at is None]
    running = [p.name for p in left if p.uid in live]
    stopped = [p.name for p in left if p.uid in live and p.drain_started_at is not None]
    gone = [p.name for p in left if p.uid not in live]
    text = f"; not restarted: {', '.join(running) or 'none'}"
    if stopped:
        text += f" ({', '.join(stopped)} stopped draining)"
    if gone:
        text += f"; gone before their turn: {', '.join(gone)}"
    return text


def _ended(job: RLJob, action: InFlightAction, reason: str, message: str) -> Ended:
    status = job.status.model_copy(update={"in_flight": None})
    return Ended(status, EventSpec("Warning", reason, message), f"ended-{action.id}")


def _role(action: InFlightAction) -> str:
    return action.target.role.value if action.target is not None else ""
