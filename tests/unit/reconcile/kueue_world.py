"""A stand-in for Kueue's own controllers in pure tests: it keeps the Workloads a job's passes
write, and admits, evicts and re-admits them with the conditions Kueue v0.17.0 sets
(pkg/workload/workload.go SetQuotaReservation, Evict; pkg/workload/admissionchecks.go
SyncAdmittedCondition). The bed runs the real Kueue; this keeps the decisions fast to test."""

from __future__ import annotations

import copy
from typing import Any

from rljob.reconcile.admission import Flavor
from rljob.reconcile.queue import (
    CreateWorkload,
    DeleteWorkload,
    PatchWorkloadStatus,
    QueueInputs,
    ReleaseWorkload,
    UpdateWorkloadSpec,
)

GPU_FLAVOR = "h100"
FLAVORS = {GPU_FLAVOR: Flavor({"gpu.type": "h100"}, ({"key": "gpu", "operator": "Exists"},))}


def condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-30T00:00:00Z",
    }


class FakeKueue:
    """The Workloads of one namespace, by name."""

    def __init__(self) -> None:
        self.workloads: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.writes: list[Any] = []

    def inputs(self) -> QueueInputs:
        return QueueInputs(tuple(copy.deepcopy(list(self.workloads.values()))), FLAVORS)

    def carry_out(self, steps: tuple[Any, ...]) -> None:
        """The job side's Workload steps, as the API server would take them."""
        for step in steps:
            match step:
                case CreateWorkload(body=body) if body["metadata"]["name"] not in self.workloads:
                    created = copy.deepcopy(body)
                    created["metadata"]["uid"] = f"wl-{len(self.workloads)}"
                    self._store(created)
                case UpdateWorkloadSpec(name=name, spec=spec) if self._current(name, step):
                    self.workloads[name]["spec"] = copy.deepcopy(spec)
                    self._store(self.workloads[name])
                case PatchWorkloadStatus(name=name, status=status) if self._current(name, step):
                    self.workloads[name].setdefault("status", {}).update(copy.deepcopy(status))
                    if status.get("admission", "kept") is None:
                        self.workloads[name]["status"].pop("admission")
                    self._store(self.workloads[name])
                case ReleaseWorkload(name=name) if name in self.workloads:
                    held = self.workloads[name]
                    held["metadata"]["finalizers"] = []
                    if held["metadata"].get("deletionTimestamp"):
                        del self.workloads[name]
                case DeleteWorkload(name=name) if name in self.workloads:
                    held = self.workloads[name]
                    if held["metadata"].get("finalizers"):
                        held["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
                        self._store(held)
                    else:
                        del self.workloads[name]
                case _:
                    continue
            self.writes.append(step)

    def _current(self, name: str, step: Any) -> bool:
        held = self.workloads.get(name)
        return held is not None and held["metadata"]["resourceVersion"] == step.resource_version

    def _store(self, body: dict[str, Any]) -> None:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.workloads[body["metadata"]["name"]] = body

    def only(self) -> dict[str, Any]:
        (body,) = self.workloads.values()
        return body

    def conditions(self) -> dict[str, tuple[str, str]]:
        found = self.only().get("status", {}).get("conditions", [])
        return {c["type"]: (c["status"], c["reason"]) for c in found}

    def admit(self, cluster_queue: str = "gpu") -> None:
        """The scheduler reserves quota on the GPU flavor and the Workload is admitted."""
        body = self.only()
        sets = body["spec"]["podSets"]
        status = body.setdefault("status", {})
        status["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {"name": s["name"], "flavors": {"nvidia.com/gpu": GPU_FLAVOR}, "count": s["count"]}
                for s in sets
            ],
        }
        kept = [
            c
            for c in status.get("conditions", [])
            if c["type"] not in ("QuotaReserved", "Admitted", "Evicted")
        ]
        status["conditions"] = [
            *kept,
            condition(
                "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in {cluster_queue}"
            ),
            condition("Admitted", "True", "Admitted", "The workload is admitted"),
            condition("Evicted", "False", "QuotaReserved", "Previously: evicted"),
        ]
        self._store(body)

    def pend(self, message: str) -> None:
        """The scheduler cannot reserve quota and says why."""
        body = self.only()
        body.setdefault("status", {})["conditions"] = [
            condition("QuotaReserved", "False", "Pending", message)
        ]
        self._store(body)

    def evict(self, reason: str = "Preempted", message: str = "Preempted to accommodate") -> None:
        body = self.only()
        conditions = [c for c in body["status"]["conditions"] if c["type"] != "Evicted"]
        body["status"]["conditions"] = [*conditions, condition("Evicted", "True", reason, message)]
        self._store(body)
