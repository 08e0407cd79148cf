"""Detector findings and serving pods crashing in place, through the failure policy: a journaled
engine restart, role roll, in-turn role restart, trainer gang restart or whole job restart
(RestartJob, whichever role the finding came from); a FailJob or a Suspend
(job-wide: decide.py applies them); or a report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from rljob.api import FailureAction, FailureReason, RLJob, RLJobStatus, RoleName
from rljob.health.evaluation import AMONG_FAST_PEERS_EVIDENCE, ENGINES_EVIDENCE, Evaluation
from rljob.reconcile.drain import drains
from rljob.reconcile.events import EventSpec
from rljob.reconcile.in_turn import journal_in_turn_restart
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.policy import Decision, Failure, choose_action
from rljob.reconcile.remediation import current_trainer_job, journal_gang_restart, policy_context
from rljob.reconcile.serving import (
    SERVING_ROLES,
    journal_serving_restart,
    room_to_restart,
    unavailable,
)
from rljob.vocabulary.enums import TRAINER_RESTART_ACTIONS

Report = tuple[str, EventSpec]  # (throttle key, Event)
RESTART_JOB = FailureAction.RESTART_JOB


@dataclass(frozen=True)
class FindingRemedy:
    """A journaled status, or a FailJob message, or a Suspend decision, or reports; `restarted`:
    the (role, pod) whose detectors start afresh once the journal is written."""

    status: RLJobStatus | None = None
    fail: str | None = None
    suspend: Decision | None = None
    reports: tuple[Report, ...] = ()
    restarted: tuple[str, str | None] | None = None


def finding_remedy(
    job: RLJob, observed: Observed, finding: Evaluation, now: datetime
) -> FindingRemedy:
    """A detector's finding: an engine restart (its pod deleted after the journal, within
    maxUnavailable), a role roll, a trainer gang restart, a FailJob, or a report."""
    reason = finding.reason or FailureReason.CONTAINER_FAILED
    trainer = finding.target == "trainer"
    pod = None if trainer else next((p for p in observed.pods if p.name == finding.target), None)
    role = RoleName.TRAINER if trainer else _role_of(pod)
    target = None if trainer else finding.target
    among_fast = finding.evidence.get(AMONG_FAST_PEERS_EVIDENCE) == 1.0
    failure = Failure(
        reason, role, target=target, message=finding.message, among_fast_peers=among_fast
    )
    decision = _decide(job, failure, now)
    key = f"{reason.value}/{finding.target}"
    if decision.action in _JOB_WIDE:
        return _JOB_WIDE[decision.action](decision)
    if pod is not None and pod.role in SERVING_ROLES and decision.action != RESTART_JOB:
        named = named_engines(finding)
        return _serving(job, observed, decision, pod, key=key, now=now, named=named)
    return _trainer_restart(job, observed, decision, key, now)


def _trainer_restart(
    job: RLJob, observed: Observed, decision: Decision, key: str, now: datetime
) -> FindingRemedy:
    """A gang restart, or the whole job's, journaled against the running attempt; reported
    while the backoff runs or when no attempt runs (the next one starts afresh anyway)."""
    current = current_trainer_job(job, observed)
    restarts = decision.action in TRAINER_RESTART_ACTIONS
    if restarts and decision.delay_seconds <= 0 and current is not None:
        status = journal_gang_restart(job, decision, current, None, now)
        return FindingRemedy(status=status, restarted=(RoleName.TRAINER.value, None))
    return FindingRemedy(reports=_report(key, decision))


def crash_remedy(
    job: RLJob, observed: Observed, pod: ObservedPod, evaluation: Evaluation, now: datetime
) -> FindingRemedy:
    """A serving pod whose container keeps restarting in place (OOMKilled, CrashLoop)."""
    reason = evaluation.reason or FailureReason.CRASH_LOOP
    failure = Failure(reason, RoleName(pod.role), pod.name, pod.exit_code, evaluation.message)
    decision = _decide(job, failure, now)
    if decision.action in _JOB_WIDE:
        return _JOB_WIDE[decision.action](decision)
    # Keyed by the restart count: each crash is said once.
    key = f"{reason.value}/{pod.name}/{pod.restart_count}"
    if decision.action == RESTART_JOB:
        return _trainer_restart(job, observed, decision, key, now)
    return _serving(job, observed, decision, pod, key=key, now=now)


# Actions on the whole job, whichever role the finding came from; decide.py applies them.
_JOB_WIDE: dict[FailureAction, Callable[[Decision], FindingRemedy]] = {
    FailureAction.FAIL_JOB: lambda decision: FindingRemedy(fail=decision.message),
    FailureAction.SUSPEND: lambda decision: FindingRemedy(suspend=decision),
}


def _serving(
    job: RLJob,
    observed: Observed,
    decision: Decision,
    pod: ObservedPod,
    *,
    key: str,
    now: datetime,
    named: frozenset[str] | None = None,
) -> FindingRemedy:
    """`named`: the engines a finding on several of them named; an in-turn restart takes only
    these (the others were not judged down, or are in their cooldown)."""
    # A Gated engine's role restarts in turn (a Deployment roll cannot drain).
    rolled = decision.action == FailureAction.RESTART_ROLE and drains(job, pod.role)
    # A pod restart for a cause every engine of the role has (the finding names them all).
    every_engine = decision.action == FailureAction.RESTART_POD and len(named or ()) > 1
    if every_engine:
        decision = replace(decision, action=FailureAction.RESTART_ROLE_IN_TURN)
    if decision.action == FailureAction.RESTART_ROLE_IN_TURN or rolled:
        return _in_turn(job, observed, decision, RoleName(pod.role), now=now, key=key, only=named)
    if decision.action == FailureAction.RESTART_POD and not room_to_restart(job, observed, pod):
        spec = getattr(job.spec.roles, pod.role)
        waiting = (
            f"{decision.message}; waiting: {unavailable(job, observed, pod.role)} {pod.role} "
            f"pods unavailable already (maxUnavailable {spec.max_unavailable})"
        )
        return FindingRemedy(reports=((key, EventSpec("Warning", decision.reason.value, waiting)),))
    status = journal_serving_restart(job, decision, pod, now)
    if status is None:
        return FindingRemedy(reports=_report(key, decision))
    whole_role = decision.action == FailureAction.RESTART_ROLE
    return FindingRemedy(status=status, restarted=(pod.role, None if whole_role else pod.name))


def _in_turn(
    job: RLJob,
    observed: Observed,
    decision: Decision,
    role: RoleName,
    *,
    now: datetime,
    key: str,
    only: frozenset[str] | None = None,
) -> FindingRemedy:
    """The role (or the pods in `only`) restarted in turn, journaled with its first pod's turn
    when there is room (the passes after take the others); reported while the backoff runs."""
    turn = None
    if decision.delay_seconds <= 0:
        turn = journal_in_turn_restart(job, decision, role, observed, now, only=only)
    if turn is None:
        return FindingRemedy(reports=_report(key, decision))
    restarted = (role.value, turn.turn) if turn.turn is not None else None
    return FindingRemedy(status=turn.status, restarted=restarted)


def named_engines(finding: Evaluation) -> frozenset[str] | None:
    """The pods a finding on several engines named (the fleet finding); None: it names one."""
    names = str(finding.evidence.get(ENGINES_EVIDENCE, "")).split()
    return frozenset(names) if names else None


def _decide(job: RLJob, failure: Failure, now: datetime) -> Decision:
    return choose_action(
        failure, job.spec.failure_policy, job.status.restarts, now, policy_context(job)
    )


def _report(key: str, decision: Decision) -> tuple[Report, ...]:
    return ((key, EventSpec("Warning", decision.reason.value, decision.message)),)


def _role_of(pod: ObservedPod | None) -> RoleName:
    return RoleName(pod.role) if pod is not None and pod.role else RoleName.ROLLOUT
