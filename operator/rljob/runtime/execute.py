"""Carries out a decision's steps after its journal write: a table maps each kind of step to its
applier (as JobSet maps each failure-policy action to its applier). Appliers are idempotent."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from rljob.adapters.checkpoints import Checkpoints
from rljob.adapters.events import post_event
from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.observe import controller_uid
from rljob.adapters.paths import api_version_of, object_path
from rljob.adapters.workloads import drop_in_use_finalizer, guarded_patch
from rljob.api import API_VERSION, KIND, InFlightAction, RLJob
from rljob.crashpoints import crash_point
from rljob.reconcile.events import EventSpec
from rljob.reconcile.gate import DRAINING, RESTARTED
from rljob.reconcile.journal import JOURNALED_EVENT_REASONS
from rljob.reconcile.queue import (
    CreateWorkload,
    DeleteWorkload,
    PatchWorkloadStatus,
    ReleaseWorkload,
    UpdateWorkloadSpec,
)
from rljob.reconcile.slots import SlotMove, WeightCopy
from rljob.reconcile.steps import (
    ApplyChild,
    ApplyRetention,
    CrashPoint,
    DeleteObject,
    DeleteRLJob,
    PostEvent,
    RollDeployment,
    SetPolicyCurrent,
    Step,
    WriteMarker,
)
from rljob.runtime.memory import JobMemory
from rljob.runtime.weight_copies import WeightCopies
from rljob.vocabulary import kueue
from rljob.vocabulary.labels import (
    POLICY_CURRENT_GATE,
    RENDER_MARKER_ANNOTATION,
    RESTARTED_AT_ANNOTATION,
    SLOT_HELD,
    slot_label,
)

log = structlog.get_logger("rljob.runtime")
RESTART_FIELD_MANAGER = "rljob-operator-restart"
# Tests only: stands in for "a new operator version renders templates differently".
RENDER_MARKER_ENV = "RLJOB_TEST_RENDER_MARKER"


@dataclass(frozen=True)
class Context:
    """What every applier may use: the clients, the RLJob as read and as decided, its memory."""

    kube: Kube
    checkpoints: Checkpoints
    body: dict[str, Any]
    job: RLJob
    memory: JobMemory
    now: dt.datetime
    acting: Callable[[], bool]  # this replica still holds the Lease
    copies: WeightCopies | None = None  # slotServices' weight copies (None: none start)

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])


async def _crash_point(step: CrashPoint, ctx: Context) -> None:
    crash_point(step.name, ctx.namespace)


async def _post_event(step: PostEvent, ctx: Context) -> None:
    posted = f"{ctx.namespace}/{step.name}"
    if step.once and posted in ctx.memory.events_posted.current(time.monotonic()):
        return  # posted by this process while the action waits: the API would answer 409
    await post_event(ctx.kube, ctx.body, step.event, ctx.now, name=step.name)
    if step.once:
        ctx.memory.events_posted.add(posted, time.monotonic())


async def _delete_object(step: DeleteObject, ctx: Context) -> None:
    await ctx.kube.delete(
        api_version_of(step.kind),
        step.kind,
        ctx.namespace,
        step.name,
        step.uid,
        grace_period_seconds=step.grace_period_seconds,
    )
    action = ctx.job.status.in_flight
    ctx.memory.deletes_issued.add(step.uid, time.monotonic(), action.id if action else None)


async def _roll(step: RollDeployment, ctx: Context) -> None:
    """As `kubectl rollout restart`, under a field manager of its own so that our server-side
    applies leave the annotation alone; the same nonce twice is a no-op."""
    annotations = {RESTARTED_AT_ANNOTATION: step.nonce}
    await ctx.kube.request(
        "patch",
        object_path("apps/v1", "Deployment", ctx.namespace, step.name),
        {"spec": {"template": {"metadata": {"annotations": annotations}}}},
        content_type="application/merge-patch+json",
        field_manager=RESTART_FIELD_MANAGER,
    )


async def _set_policy_current(step: SetPolicyCurrent, ctx: Context) -> None:
    """The engine's readiness gate opens (the kubelet turns it Ready once its probes pass) or
    closes (it turns NotReady: its Service stops routing to it, its in-flight requests go on)."""
    if step.current:
        reason, message = "PolicyCurrent", f"engine reports policy generation {step.generation}"
    else:
        reason, message = step.reason, _CLOSED_MESSAGES.get(step.reason, step.reason)
    condition = {
        "type": POLICY_CURRENT_GATE,
        "status": "True" if step.current else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    await ctx.kube.set_pod_condition(ctx.namespace, step.pod, condition)


async def _move_slot(step: SlotMove, ctx: Context) -> None:
    """Stamps or removes one slot label: the slot's Service routes to the pods holding it."""
    value = SLOT_HELD if step.held else None
    await ctx.kube.set_pod_labels(ctx.namespace, step.pod, step.uid, {slot_label(step.slot): value})


async def _copy_weights(step: WeightCopy, ctx: Context) -> None:
    """Starts the copy in the background (runtime/weight_copies.py): a model load outlasts a
    pass."""
    if ctx.copies is None:
        return
    kube, body = ctx.kube, ctx.body

    async def tell(event: EventSpec, name: str) -> None:
        await post_event(kube, body, event, dt.datetime.now(dt.UTC), name=name)

    ctx.copies.start(f"{ctx.namespace}/{ctx.job.metadata.name}", step, tell)


_CLOSED_MESSAGES = {
    DRAINING: "engine draining before its replacement: no new request",
    RESTARTED: "engine container restarted: its weights must be pushed again",
}


async def _write_marker(step: WriteMarker, ctx: Context) -> None:
    await ctx.checkpoints.write_marker(ctx.job, step.marker)


async def _apply(step: ApplyChild, ctx: Context) -> None:
    """A new child's name may be held by an object that is not the job's and carries none of
    its labels (the watches never showed it): it is left alone, and the next pass renames."""
    if step.new and not await _free(step.body, ctx):
        return
    await ctx.kube.apply(_with_render_marker(step.body))


async def _free(body: dict[str, Any], ctx: Context) -> bool:
    """Whether the name is free, or held by this job's own object (a watch that lags)."""
    meta = body["metadata"]
    path = object_path(body["apiVersion"], body["kind"], meta["namespace"], meta["name"])
    try:
        held = await ctx.kube.request("get", path)
    except KubeError as exc:
        if exc.not_found:
            return True
        raise
    if controller_uid(held) == ctx.job.metadata.uid:
        return True
    ctx.memory.taken.add((body["kind"], meta["name"]))
    log.warning("name held by another object", kind=body["kind"], name=meta["name"])
    return False


async def _retention(step: ApplyRetention, ctx: Context) -> None:
    """Retention never fails the pass: a delete refused becomes a condition on the next one."""
    ctx.memory.retention_problem = await ctx.checkpoints.apply_retention(ctx.job, step.deletions)


async def _delete_rljob(step: DeleteRLJob, ctx: Context) -> None:
    meta = ctx.body["metadata"]
    await ctx.kube.delete(API_VERSION, KIND, meta["namespace"], meta["name"], meta["uid"])


def _workload_path(ctx: Context, name: str | None = None) -> str:
    return object_path(kueue.API_VERSION, "Workload", ctx.namespace, name)


async def _create_workload(step: CreateWorkload, ctx: Context) -> None:
    """Created, never applied: a Workload is the queue's record, and one already there (a pass
    that ran before its watch event) is the same Workload (409 is success)."""
    try:
        await ctx.kube.request("post", _workload_path(ctx), step.body)
    except KubeError as exc:
        if not exc.conflict:
            raise


async def _update_workload_spec(step: UpdateWorkloadSpec, ctx: Context) -> None:
    body = {"metadata": {"resourceVersion": step.resource_version}, "spec": step.spec}
    await guarded_patch(ctx.kube, _workload_path(ctx, step.name), body)


async def _patch_workload_status(step: PatchWorkloadStatus, ctx: Context) -> None:
    body = {"metadata": {"resourceVersion": step.resource_version}, "status": step.status}
    await guarded_patch(ctx.kube, _workload_path(ctx, step.name) + "/status", body)


async def _release_workload(step: ReleaseWorkload, ctx: Context) -> None:
    await drop_in_use_finalizer(ctx.kube, ctx.namespace, step.name)


async def _delete_workload(step: DeleteWorkload, ctx: Context) -> None:
    await ctx.kube.delete(kueue.API_VERSION, "Workload", ctx.namespace, step.name, step.uid)


Applier = Callable[[Any, Context], Awaitable[None]]
APPLIERS: dict[type, Applier] = {
    CrashPoint: _crash_point,
    PostEvent: _post_event,
    DeleteObject: _delete_object,
    RollDeployment: _roll,
    SetPolicyCurrent: _set_policy_current,
    SlotMove: _move_slot,
    WeightCopy: _copy_weights,
    WriteMarker: _write_marker,
    ApplyChild: _apply,
    ApplyRetention: _retention,
    DeleteRLJob: _delete_rljob,
    CreateWorkload: _create_workload,
    UpdateWorkloadSpec: _update_workload_spec,
    PatchWorkloadStatus: _patch_workload_status,
    ReleaseWorkload: _release_workload,
    DeleteWorkload: _delete_workload,
}


def ensure_leading(acting: Callable[[], bool]) -> None:
    """Raises the API error a deposed leader's write would meet, before the write."""
    if not acting():
        raise KubeError(0, "no longer the leader")


async def execute(steps: Sequence[Step], ctx: Context) -> None:
    """Each step only while this replica leads: the API refuses a deposed leader's writes, but
    the checkpoint store would not."""
    for step in steps:
        ensure_leading(ctx.acting)
        if (said := step_fields(step)) is not None:
            said = with_action(said, ctx.job.status.in_flight)
            log.info("action", job=f"{ctx.namespace}/{ctx.job.metadata.name}", **said)
        await APPLIERS[type(step)](step, ctx)


def with_action(said: dict[str, Any], action: InFlightAction | None) -> dict[str, Any]:
    """A step of a journaled action carries that action's Event reason, its cause and its id."""
    if action is None:
        return said
    reason = JOURNALED_EVENT_REASONS.get(action.kind, str(action.kind))
    cause = str(action.reason) if action.reason is not None else None
    return {**said, "reason": reason, "cause": cause, "action_id": action.id}


def step_fields(step: Step) -> dict[str, Any] | None:
    """The log line of a step that changes the world (`action`, `objects`, and the `reason` its
    Event says; steps come only when something changes: a steady job logs nothing); None for a
    test's crash point and for Events, which are their own record."""
    match step:
        case ApplyChild(body=body, new=new):
            verb, reason = ("create", "Created") if new else ("update", "Updated")
            return _said(f"{verb} {body['kind']}", reason, body["metadata"]["name"])
        case DeleteObject(kind=kind, name=name):
            return _said(f"delete {kind}", "Deleted", name)
        case RollDeployment(name=name):
            return _said("roll Deployment", "RoleRestarted", name)
        case SetPolicyCurrent(pod=pod, current=current, reason=why):
            return _said(f"set policy-current {current}", why or "PolicyCurrent", pod)
        case SlotMove(pod=pod, slot=slot, held=held):
            verb = "stamp" if held else "remove"
            return _said(f"{verb} slot {slot}", "SlotMoved", pod)
        case WeightCopy(source=source, target=target, generation=generation):
            return _said(f"copy weights of generation {generation}", "WeightCopy", source, target)
        case WriteMarker(marker=marker):
            return _said("write attempt marker", "AttemptStarted", f"attempt {marker.attempt}")
        case ApplyRetention(deletions=plan):
            versions = [str(deletion.version) for deletion in plan.deletions]
            return _said("delete checkpoint versions", "Retention", *versions)
        case DeleteRLJob():
            return _said("delete RLJob", "TTLExpired")
    return None


def _said(action: str, reason: str, *objects: str) -> dict[str, Any]:
    return {"action": action, "reason": reason, "objects": list(objects)}


def _with_render_marker(body: dict[str, Any]) -> dict[str, Any]:
    marker = os.environ.get(RENDER_MARKER_ENV)
    template = body.get("spec", {}).get("template")
    if not marker or template is None:
        return body
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[RENDER_MARKER_ANNOTATION] = marker
    return body
