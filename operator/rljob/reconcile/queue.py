"""Kueue's side of one pass, pure: from the job's Workload, its queue status, the Workload
writes that are the job side's (docs/kueue.md), and, once admitted, what the admission adds to
each role's pods.

A job with the kueue.x-k8s.io/queue-name label, on an operator run with Kueue, has no pod
until its Workload is admitted: status.queue holds it the way spec.suspend does
(rljob.reconcile.suspended), so an eviction stops its pods as a suspension does (the trainer
gets its grace to save, no restart counted) and a re-admission starts the next attempt from the
newest checkpoint. The rules mirror Kueue v0.17.0's generic job reconciler
(pkg/controller/jobframework/reconciler.go, cited by line) for a kind Kueue builds nothing for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rljob.api import JobPhase, QueueState, QueueStatus, RLJob, RLJobStatus
from rljob.reconcile.admission import (
    AdmissionConflict,
    Flavor,
    MissingFlavor,
    PodSetInfo,
    WorkloadState,
    admission_infos,
    merge_admission,
    workload_state,
)
from rljob.reconcile.observed import ObservedPod
from rljob.reconcile.render import RenderContext, render_children
from rljob.reconcile.workload import (
    PodSet,
    Priority,
    equivalent,
    pod_sets,
    queue_name,
    workload_manifest,
    workload_name,
)
from rljob.reconcile.workload_status import finished, released, with_pods_ready
from rljob.vocabulary import kueue


@dataclass(frozen=True)
class QueueInputs:
    """What a pass gathered for a queued job. PassInputs.queue is None on an operator run
    without Kueue: the label is then ignored and the job runs as before."""

    workloads: tuple[Mapping[str, Any], ...] = ()  # the Workloads this job controls
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    priority: Priority | None = None
    priority_error: str = ""  # the priority class named could not be read


@dataclass(frozen=True)
class CreateWorkload:
    body: dict[str, Any]


@dataclass(frozen=True)
class UpdateWorkloadSpec:
    """Pod sets or spec.active changed while no quota is reserved (reconciler.go:942-945,
    998-1000): the Workload is updated in place, guarded by its resourceVersion."""

    name: str
    resource_version: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class PatchWorkloadStatus:
    """A merge patch of the Workload's status, guarded by its resourceVersion."""

    name: str
    resource_version: str
    status: dict[str, Any]


@dataclass(frozen=True)
class DeleteWorkload:
    name: str
    uid: str


@dataclass(frozen=True)
class ReleaseWorkload:
    """Removes Kueue's resource-in-use finalizer (reconciler.go:460-481): a finished or
    deleted Workload's quota is accounted no more."""

    name: str
    resource_version: str


WorkloadStep = (
    CreateWorkload | UpdateWorkloadSpec | PatchWorkloadStatus | DeleteWorkload | ReleaseWorkload
)


@dataclass(frozen=True)
class QueuePass:
    status: RLJobStatus
    steps: tuple[WorkloadStep, ...] = ()
    infos: Mapping[str, PodSetInfo] = field(default_factory=dict)  # once admitted, by role


def queue_pass(
    job: RLJob, pods: tuple[ObservedPod, ...], inputs: QueueInputs | None, now: datetime
) -> QueuePass:
    """The job's queue status and Workload steps for this pass; `pods`: its pods now. A job
    that is not queued costs nothing here."""
    local_queue = queue_name(job)
    if inputs is None or local_queue is None:
        status = job.status
        return QueuePass(
            status if status.queue is None else status.model_copy(update={"queue": None})
        )
    name = workload_name(job.metadata.name, job.metadata.uid or "")
    said = _Said(job, local_queue, name, now)
    return _Pass(job, running_sets(job), pods, inputs, said).decide()


@dataclass(frozen=True)
class _Pass:
    job: RLJob
    sets: tuple[PodSet, ...]
    pods: tuple[ObservedPod, ...]
    inputs: QueueInputs
    said: _Said

    @property
    def running(self) -> bool:
        """A pod of the job still runs or is still going (Kueue's IsActive)."""
        return any(not pod.terminal for pod in self.pods)

    def decide(self) -> QueuePass:
        name, uid = self.said.workload, self.job.metadata.uid or ""
        ours = [w for w in self.inputs.workloads if controller_uid(w) == uid]
        bodies = [w for w in ours if _name(w) == name]
        # Another Workload this job controls (an older name): Kueue deletes extras (845-1015).
        extras = tuple(DeleteWorkload(_name(w), _uid(w)) for w in ours if _name(w) != name)
        if not bodies:
            return self._absent(extras)
        body = bodies[0]
        state = workload_state(body)
        if state.deleting or state.finished:  # reconciler.go:460-481: stop, then release
            release = state.in_use and not self.running
            steps = (ReleaseWorkload(name, _version(body)),) if release else ()
            return QueuePass(self._gone(state), (*extras, *steps))
        if (ended := _ended(self.job)) is not None:  # reconciler.go:483-505
            conditions = finished(body, state, *ended, self.said.now)
            patch = (PatchWorkloadStatus(name, _version(body), {"conditions": conditions}),)
            return QueuePass(self.said.status(QueueState.FINISHED, *ended), (*extras, *patch))
        active = not self.job.spec.suspend
        if not equivalent(self.sets, body) or (state.active != active and self._ours(active)):
            return self._resync(body, state, extras)
        return self._decided(body, state, extras)

    def _gone(self, state: WorkloadState) -> RLJobStatus:
        if state.finished:
            condition = state.conditions[kueue.FINISHED]
            return self.said.status(QueueState.FINISHED, condition.reason, condition.message)
        message = "the Workload is being deleted; a new one is made once it is gone"
        return self.said.status(QueueState.PENDING, "WorkloadDeleted", message)

    def _absent(self, extras: tuple[WorkloadStep, ...]) -> QueuePass:
        """No Workload yet (reconciler.go:507-523, 1563-1601)."""
        if _ended(self.job) is not None:
            return QueuePass(self.job.status, extras)
        if self.inputs.priority_error:
            error = self.inputs.priority_error
            return QueuePass(
                self.said.status(QueueState.PENDING, "PriorityNotFound", error), extras
            )
        active = not self.job.spec.suspend
        manifest = workload_manifest(self.job, self.sets, self.inputs.priority, active=active)
        message = "Workload created; waiting for Kueue"
        status = self.said.status(QueueState.PENDING, "Queued", message, deactivated=not active)
        return QueuePass(status, (*extras, CreateWorkload(manifest)))

    def _resync(
        self, body: Mapping[str, Any], state: WorkloadState, extras: tuple[WorkloadStep, ...]
    ) -> QueuePass:
        """The job changed what its admission covers, or spec.suspend moved. Without a quota
        reservation the Workload is updated in place; with one, the pods stop and the Workload
        is deleted for a new one to queue, as Kueue does for a Workload out of sync
        (reconciler.go:941-1000). spec.active may change while reserved: Kueue then evicts."""
        active = not self.job.spec.suspend
        if not state.quota_reserved or equivalent(self.sets, body):
            spec = {**dict(body.get("spec") or {}), "active": active}
            if not state.quota_reserved:
                spec["podSets"] = [s.manifest() for s in self.sets]
            update = UpdateWorkloadSpec(state.name, _version(body), spec)
            message = "Workload updated; waiting for Kueue"
            status = self.said.status(QueueState.PENDING, "Queued", message, deactivated=not active)
            return QueuePass(status, (*extras, update))
        message = "the job's pods no longer match its admission: stopping them to queue again"
        status = self.said.status(QueueState.PENDING, "OutOfSync", message)
        steps = () if self.running else (DeleteWorkload(state.name, _uid(body)),)
        return QueuePass(status, (*extras, *steps))

    def _decided(
        self, body: Mapping[str, Any], state: WorkloadState, extras: tuple[WorkloadStep, ...]
    ) -> QueuePass:
        """Evicted (reconciler.go:579-604), admitted (606-642) or waiting; PodsReady as the
        job side writes it (545-577)."""
        version, now = _version(body), self.said.now
        steps: list[WorkloadStep] = list(extras)
        evicted = state.evicted
        if evicted is not None and not state.quota_reserved:
            # Kueue keeps Evicted True until it reserves quota again (workload.go:849-867,
            # SetQuotaReservation): the pods are gone and the quota given back, so it queues.
            message = f"evicted ({evicted.reason}: {evicted.message}); {state.pending_message()}"
            status = self.said.status(QueueState.PENDING, state.pending_reason(), message)
            return QueuePass(status, tuple(steps))
        if evicted is not None:
            status = self.said.status(QueueState.EVICTED, evicted.reason, evicted.message)
            patch = None if self.running else released(body, state, now)
            if patch is not None:
                steps.append(PatchWorkloadStatus(state.name, version, patch))
            return QueuePass(status, tuple(steps))
        started = pods_started(_counts(body), self.pods)
        conditions = with_pods_ready(body, state, started, now)
        if conditions is not None:
            steps.append(PatchWorkloadStatus(state.name, version, {"conditions": conditions}))
        if not state.admitted:
            reason = state.pending_reason() if state.active else "Deactivated"
            status = self.said.status(QueueState.PENDING, reason, state.pending_message())
            return QueuePass(status, tuple(steps))
        infos = admission_infos(state, self.inputs.flavors)
        if isinstance(infos, MissingFlavor):
            message = f"admitted on ResourceFlavor {infos.name}, which the operator cannot read"
            status = self.said.status(QueueState.PENDING, "FlavorNotFound", message)
            return QueuePass(status, tuple(steps))
        admitted = self.said.status(
            QueueState.ADMITTED,
            "Admitted",
            f"admitted by ClusterQueue {state.cluster_queue}",
            cluster_queue=state.cluster_queue,
        )
        return QueuePass(admitted, tuple(steps), infos)

    def _ours(self, active: bool) -> bool:
        """spec.active is the operator's to move only for spec.suspend: false -> true undoes
        only its own deactivation, never an administrator's (Kueue evicts; the job waits)."""
        queue = self.job.status.queue
        return not active or (queue is not None and queue.deactivated)


def running_sets(job: RLJob) -> tuple[PodSet, ...]:
    """The job's pod sets as its spec makes them when it runs, whatever holds it now: the
    children of a view of it that is not suspended, attempt and nodes to avoid aside (a gang
    restart keeps the admission)."""
    return pod_sets(render_children(_running_view(job), _context(job)))


def admission_conflict(job: RLJob, infos: Mapping[str, PodSetInfo]) -> AdmissionConflict | None:
    """The first role whose own pod template sets a key the admission sets otherwise."""
    if not infos:
        return None
    for child in render_children(_running_view(job), _context(job)):
        info = infos.get(child.role)
        template = (child.body.get("spec") or {}).get("template")
        if info is None or template is None:
            continue
        merged = merge_admission(child.role, template, info)
        if isinstance(merged, AdmissionConflict):
            return merged
    return None


def _running_view(job: RLJob) -> RLJob:
    spec = job.spec.model_copy(update={"suspend": False})
    status = RLJobStatus(attempt=job.status.attempt, renamed=job.status.renamed)
    return job.model_copy(update={"spec": spec, "status": status})


def _context(job: RLJob) -> RenderContext:
    meta = job.metadata
    return RenderContext(
        name=meta.name,
        namespace=meta.namespace or "",
        uid=meta.uid or "",
        attempt=job.status.attempt or 1,
        renamed=frozenset(job.status.renamed),
    )


def pods_started(counts: Mapping[str, int], pods: tuple[ObservedPod, ...]) -> bool:
    """PodsReady for an RLJob: every role has as many pods scheduled with their main container
    started as its pod set counts. Not readiness: a Gated engine turns Ready only after the
    trainer's first weight sync, which a waitForPodsReady timeout must not have to cover."""
    started: dict[str, int] = {}
    for pod in pods:
        if (
            pod.node
            and pod.container_running
            and pod.started_at
            and not (pod.terminal or pod.deleting)
        ):
            started[pod.role] = started.get(pod.role, 0) + 1
    return all(started.get(role, 0) >= count for role, count in counts.items())


@dataclass(frozen=True)
class _Said:
    """Writes status.queue: the state's `since` moves only when the state does."""

    job: RLJob
    local_queue: str
    workload: str
    now: datetime

    def status(
        self,
        state: QueueState,
        reason: str | None = None,
        message: str = "",
        *,
        cluster_queue: str | None = None,
        deactivated: bool | None = None,
    ) -> RLJobStatus:
        old = self.job.status.queue
        since = old.since if old is not None and old.state == state else self.now
        if deactivated is None:
            deactivated = old.deactivated if old is not None else False
        queue = QueueStatus(
            workload=self.workload,
            local_queue=self.local_queue,
            state=state,
            cluster_queue=cluster_queue,
            reason=reason,
            message=message,
            since=since,
            deactivated=deactivated,
        )
        return self.job.status.model_copy(update={"queue": queue})


def _ended(job: RLJob) -> tuple[str, str] | None:
    """(Finished reason, message) once the job has ended."""
    phase = job.status.phase
    if phase == JobPhase.SUCCEEDED:
        return kueue.FINISHED_SUCCEEDED, "the RLJob succeeded"
    if phase == JobPhase.FAILED:
        failed = next((c for c in job.status.conditions if c.type == "Failed"), None)
        if failed is not None and failed.reason == kueue.FAILED_TO_START:
            return kueue.FAILED_TO_START, failed.message
        return kueue.FINISHED_FAILED, "the RLJob failed"
    return None


def _counts(body: Mapping[str, Any]) -> dict[str, int]:
    """Pods per pod set, as the Workload counts them."""
    return {
        str(p.get("name")): int(p.get("count") or 0)
        for p in (body.get("spec") or {}).get("podSets") or []
    }


def controller_uid(body: Mapping[str, Any]) -> str:
    """The uid of the Workload's controller ownerReference ("" without one)."""
    for owner in (body.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller"):
            return str(owner.get("uid", ""))
    return ""


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name", ""))


def _uid(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid", ""))


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion", ""))
