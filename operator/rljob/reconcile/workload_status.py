"""The Workload status writes that belong to the job side, pure: each returns the Workload's
new `status.conditions` (and admission, when released), or None when nothing changes.

Kueue writes these for its built-in kinds from its job reconciler; for an external framework
nobody does unless the operator does (kubernetes-sigs/kueue v0.17.0, pkg/controller/
jobframework/reconciler.go): PodsReady (545-577, 1611-1670), the quota released after an
eviction once no pod runs (579-604), Finished when the job ends (483-505). The writer sends them
as a merge patch guarded by the Workload's resourceVersion: Kueue notes that server-side apply
cannot clear a field another manager owns, and merge patch can (workload_controller.go:461)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rljob.reconcile.admission import WorkloadState
from rljob.vocabulary import kueue

Conditions = list[dict[str, Any]]

NOT_READY = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"
NO_RESERVATION = "The workload has no reservation"
MAX_MESSAGE = 32768  # metav1.Condition.message; api.TruncateConditionMessage


def pods_ready(state: WorkloadState, ready: bool) -> tuple[str, str, str]:
    """(status, reason, message) of PodsReady, as generatePodsReadyCondition decides it
    (reconciler.go:1611-1670). `ready`: every pod of every role counts as started (the caller
    says what counts, see rljob.reconcile.queue)."""
    previous = state.conditions.get(kueue.PODS_READY)
    if not state.admitted:
        return "False", kueue.WAIT_FOR_START, NOT_READY
    if ready:
        recovering = previous is not None and previous.reason in (
            kueue.WAIT_FOR_RECOVERY,
            kueue.RECOVERED,
        )
        return "True", kueue.RECOVERED if recovering else kueue.STARTED, READY
    if previous is not None and (
        previous.status == "True" or previous.reason == kueue.WAIT_FOR_RECOVERY
    ):
        return "False", kueue.WAIT_FOR_RECOVERY, WAITING_FOR_RECOVERY
    return "False", kueue.WAIT_FOR_START, NOT_READY


def with_pods_ready(
    body: Mapping[str, Any], state: WorkloadState, ready: bool, now: datetime
) -> Conditions | None:
    """The conditions with PodsReady as it should be; None when its status and reason are
    already that (reconciler.go:550, HasConditionWithTypeAndReason)."""
    status, reason, message = pods_ready(state, ready)
    current = state.conditions.get(kueue.PODS_READY)
    if current is not None and (current.status, current.reason) == (status, reason):
        return None
    return _Conditions(body, now).set(kueue.PODS_READY, status, reason, message).items


def released(body: Mapping[str, Any], state: WorkloadState, now: datetime) -> dict[str, Any] | None:
    """The status that gives an evicted Workload's quota back once the job has no pod left
    (reconciler.go:585-600): Requeued True after a preemption or node failures, else False with
    the eviction's reason; QuotaReserved False (Pending); admission cleared; Admitted False
    (NoReservation), as workload.go:703-724 and admissionchecks.go:36-66 write them."""
    evicted = state.evicted
    if evicted is None or not state.quota_reserved:
        return None
    requeue = evicted.reason in (kueue.EVICTED_BY_PREEMPTION, kueue.EVICTED_BY_NODE_FAILURES)
    conditions = (
        _Conditions(body, now)
        .set(kueue.REQUEUED, _bool(requeue), evicted.reason, evicted.message)
        .set(kueue.QUOTA_RESERVED, "False", "Pending", evicted.message)
        .set(kueue.ADMITTED, "False", "NoReservation", NO_RESERVATION)
    )
    return {"conditions": conditions.items, "admission": None}


def finished(
    body: Mapping[str, Any], state: WorkloadState, reason: str, message: str, now: datetime
) -> Conditions | None:
    """Finished True, once (workload.go:1629-1640: a finished Workload is left as it is):
    Succeeded or Failed with the job's own last words when it ends (reconciler.go:483-505), or
    FailedToStart when its pods cannot take the admission, a permanent error (614-621)."""
    if state.finished:
        return None
    return _Conditions(body, now).set(kueue.FINISHED, "True", reason, message).items


class _Conditions:
    """A Workload's conditions being changed, as apimeta.SetStatusCondition changes them: one
    replaced in place or appended; its transition time moves only when its status does."""

    def __init__(self, body: Mapping[str, Any], now: datetime) -> None:
        self.items: Conditions = [
            dict(c) for c in (body.get("status") or {}).get("conditions") or []
        ]
        self.generation = int((body.get("metadata") or {}).get("generation") or 0)
        self.now = _time(now)

    def set(self, kind: str, status: str, reason: str, message: str) -> _Conditions:
        old = next((c for c in self.items if c.get("type") == kind), None)
        moved = old is None or old.get("status") != status
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "lastTransitionTime": self.now
            if old is None or moved
            else old.get("lastTransitionTime", self.now),
            "observedGeneration": self.generation,
        }
        self.items = (
            [*self.items, condition]
            if old is None
            else [condition if c is old else c for c in self.items]
        )
        return self


def _bool(value: bool) -> str:
    return "True" if value else "False"


def _time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")
