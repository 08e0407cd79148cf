"""One pure, idempotent reconcile pass: (spec, status, observed children) -> a plan of applies,
deletes, the new status and Events. The adapter carries it out; a healthy unchanged job yields an
empty plan and an equal status, so nothing is written.

Recommended adapter order: write the status (resourceVersion-guarded) first, then delete, then
apply, then emit the Events. The status records the attempt a delete or create belongs to, so a
pass that dies half-way is completed, never repeated, by the next one.

Trainer spec changes take effect at the next attempt: a running trainer Job is never replaced
because its spec hash changed (a Job's pod template is immutable, and replacing it would be an
uncounted gang restart).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rljob.api import RLJob, RLJobStatus, RoleName
from rljob.api.durations import parse_duration
from rljob.checkpoint_protocol.layout import DefaultStore
from rljob.reconcile.admission import PodSetInfo
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.events import EventSpec, transition_events
from rljob.reconcile.lifecycle import (
    TERMINAL_PHASES,
    TrainerDecision,
    TrainerHold,
    TrainerState,
    decide_trainer,
)
from rljob.reconcile.observed import Observed, ObservedChild
from rljob.reconcile.placement import serving_held
from rljob.reconcile.render import (
    DEFAULT_MASTER_PORT,
    DesiredChild,
    RenderContext,
    render_children,
)
from rljob.reconcile.status import build_status
from rljob.reconcile.suspects import active_suspects, suspect_ttl
from rljob.vocabulary.enums import TRAINER_RESTART_KINDS

DEFAULT_NAMESPACE = "default"

__all__ = [
    "DeleteChild",
    "DesiredChild",
    "EventSpec",
    "Plan",
    "ReconcileExtras",
    "dump_status",
    "reconcile",
    "render_context",
    "status_patch",
]


@dataclass(frozen=True)
class DeleteChild:
    """A child to delete. The adapter always sends preconditions.uid, and for Jobs
    propagationPolicy Foreground (the API's default for Jobs orphans their pods)."""

    kind: str
    name: str
    uid: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What one pass decided."""

    apply: tuple[DesiredChild, ...]  # children missing or whose spec hash differs
    delete: tuple[DeleteChild, ...]
    status: RLJobStatus  # the complete new status
    events: tuple[EventSpec, ...]  # emitted after the status write succeeds
    requeue_after: float | None  # seconds until a pass is due without any event
    delete_job: bool = False  # ttlSecondsAfterFinished expired: delete the RLJob itself


@dataclass(frozen=True)
class ReconcileExtras:
    """Inputs that come from outside the RLJob and its children (checkpoint store, metrics)."""

    # RLJOB_RESUME_URI/STEP/VERSION for the trainer attempt about to be created.
    resume_env: Mapping[str, str] = field(default_factory=dict)
    # RLJOB_POLICY_URI/RLJOB_POLICY_GENERATION for the rollout engines. Part of the rollout's
    # spec hash: change it only when engines should roll, never per training step.
    policy_env: Mapping[str, str] = field(default_factory=dict)
    trainer_master_port: int = DEFAULT_MASTER_PORT
    # The failure policy holds a failed trainer attempt for its backoff before the gang restart.
    trainer_hold: TrainerHold | None = None
    # The health loop's latest reading of each rollout engine (the roster's generations).
    engine_readings: tuple[EngineReading, ...] = ()
    # The trainer's live policy generation this round: a joining Gated engine's target.
    trainer_generation: int | None = None
    # Nodes gone or unreachable past nodeLostTimeout: the next attempt does not wait for them.
    lost_nodes: frozenset[str] = frozenset()
    # Where a job naming no endpoint is kept: the operator's own S3 store.
    default_store: DefaultStore = field(default_factory=DefaultStore)
    # Kueue's admission of a queued job, by role (rljob.reconcile.queue).
    admission: Mapping[str, PodSetInfo] = field(default_factory=dict)


def reconcile(
    job: RLJob,
    observed: Observed,
    now: datetime,
    extras: ReconcileExtras | None = None,
) -> Plan:
    """The plan that moves the job's children and status towards its spec. `observed` must
    hold only this job's children and pods; `now` is timezone-aware."""
    extras = extras or ReconcileExtras()
    now = now.replace(microsecond=0)
    decision = decide_trainer(job, observed, now, extras.trainer_hold, extras.lost_nodes)
    desired = render_children(job, render_context(job, observed, decision, extras, now))
    apply = _to_apply(desired, observed, decision)
    status = build_status(
        job,
        observed,
        decision,
        now,
        has_children=bool(apply or observed.children),
        resume_env=extras.resume_env,
        engine_readings=extras.engine_readings,
        trainer_generation=extras.trainer_generation,
    )
    events = transition_events(job.metadata.name, job.status, status, decision, apply)
    requeue_after, delete_job = _timing(job, decision, status, now)
    return Plan(
        apply=tuple(apply),
        delete=_to_delete(job, desired, observed, decision),
        status=status,
        events=tuple(events),
        requeue_after=requeue_after,
        delete_job=delete_job,
    )


def render_context(
    job: RLJob,
    observed: Observed,
    decision: TrainerDecision,
    extras: ReconcileExtras,
    now: datetime,
) -> RenderContext:
    suspects = active_suspects(job.status.suspect_nodes, now, suspect_ttl(job))
    return RenderContext(
        name=job.metadata.name,
        namespace=job.metadata.namespace or DEFAULT_NAMESPACE,
        uid=job.metadata.uid or "",
        attempt=decision.attempt,
        resume_env=dict(extras.resume_env),
        policy_env=dict(extras.policy_env),
        avoid_nodes=tuple(sorted(node.name for node in suspects)),
        trainer_master_port=extras.trainer_master_port,
        finished=decision.finished,
        renamed=frozenset(job.status.renamed),
        default_store=extras.default_store,
        admission=extras.admission,
        serving_held=serving_held(job, observed, decision.attempt),
    )


def _to_apply(
    desired: Sequence[DesiredChild], observed: Observed, decision: TrainerDecision
) -> list[DesiredChild]:
    seen = {(child.kind, child.name): child for child in observed.children}
    apply = []
    for child in desired:
        current = seen.get((child.kind, child.name))
        if child.kind == "Job":
            # Created once per attempt, never re-applied: see the module docstring.
            if decision.create_job and current is None:
                apply.append(child)
        elif current is None or (not current.deleting and current.spec_hash != child.spec_hash):
            apply.append(child)
    return apply


def _to_delete(
    job: RLJob, desired: Sequence[DesiredChild], observed: Observed, decision: TrainerDecision
) -> tuple[DeleteChild, ...]:
    wanted = {(child.kind, child.name) for child in desired}
    ended = decision.job is not None and (decision.job.succeeded or decision.job.failed)
    if decision.finished and decision.job is not None and ended:
        # An ended Job is kept for its logs; a live one (a FailJob decided while it ran) is
        # deleted so that its ranks give their GPUs back.
        wanted.add((decision.job.kind, decision.job.name))
    return tuple(
        DeleteChild(child.kind, child.name, child.uid, _delete_reason(job, child, decision))
        for child in observed.children
        if not child.deleting and (child.kind, child.name) not in wanted
    )


def _delete_reason(job: RLJob, child: ObservedChild, decision: TrainerDecision) -> str:
    if child.kind == "Job" and child.role == RoleName.TRAINER.value:
        if decision.state == TrainerState.TIMED_OUT and child == decision.job:
            return "SchedulingTimeout"
        if decision.state == TrainerState.SUSPENDED:
            return "Suspended"
        return "SupersededAttempt"
    if child.role in {role.value for role in RoleName} and (
        getattr(job.spec.roles, child.role) is None
    ):
        return "RoleRemoved"
    return "NotDesired"


def _timing(
    job: RLJob, decision: TrainerDecision, status: RLJobStatus, now: datetime
) -> tuple[float | None, bool]:
    """(requeue_after, delete_job): the next deadline, and whether the TTL has expired. The job
    is deleted only on a pass after the terminal status was written."""
    deadlines = [] if decision.wait_seconds is None else [decision.wait_seconds]
    teardown = _teardown_remaining(job, status, now)
    if teardown is not None:
        deadlines.append(teardown)
    ttl = job.spec.ttl_seconds_after_finished
    if ttl is not None and status.phase in TERMINAL_PHASES and status.completion_time:
        expiry = status.completion_time + timedelta(seconds=ttl)
        remaining = (expiry - now).total_seconds()
        if decision.state == TrainerState.FINISHED and remaining <= 0:
            return None, True
        deadlines.append(max(remaining, 0.0))
    return (min(deadlines) if deadlines else None), False


def _teardown_remaining(job: RLJob, status: RLJobStatus, now: datetime) -> float | None:
    """Seconds until a gang restart's teardownTimeout expires: old pods still terminating then
    are force-deleted on that pass (nothing else would wake the job while they hang)."""
    action = status.in_flight
    if action is None or action.kind not in TRAINER_RESTART_KINDS:
        return None
    timeout = parse_duration(job.spec.failure_policy.teardown_timeout)
    remaining = (action.started_at - now).total_seconds() + timeout
    return remaining + 1.0 if remaining >= 0 else None


def status_patch(old: RLJobStatus | None, new: RLJobStatus) -> dict[str, Any] | None:
    """None when nothing changed; else the full new status (dump_status) as a JSON merge patch,
    with null for every field (at any depth) that the new status no longer has: a list emptied
    since the old status is written as null."""
    new_dump = dump_status(new)
    old_dump = dump_status(old) if old is not None else {}
    if new_dump == old_dump:
        return None
    # Against the old status with its empty collections, so that the empty lists and objects an
    # older operator stored are nulled by the next write (merge patch ignores a null for a key
    # that is not there).
    return _with_removals(_json(old) if old is not None else {}, new_dump)


def dump_status(status: RLJobStatus) -> dict[str, Any]:
    """The status as the operator writes it: camelCase JSON, floats rounded by the models, and no
    nulls, empty lists or empty objects at any depth (`kubectl describe` would show each as a
    bare key). A key left out reads back as its field's default: none, or the empty value."""
    dumped: dict[str, Any] = _without_empty(_json(status))
    return dumped


def _json(status: RLJobStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _without_empty(value: Any) -> Any:
    """`value` without empty lists and objects in any object, an object emptied by that too;
    list items are kept (their positions mean something)."""
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    if not isinstance(value, dict):
        return value
    kept = {key: _without_empty(item) for key, item in value.items()}
    return {key: item for key, item in kept.items() if item not in ([], {})}


def _with_removals(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        previous = old.get(key)
        if isinstance(value, dict) and isinstance(previous, dict):
            patch[key] = _with_removals(previous, value)
        else:
            patch[key] = value
    return patch
