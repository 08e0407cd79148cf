"""Kueue in the model: a stand-in for Kueue's controllers acting on the model cluster's
Workloads (admit, evict, as Kueue v0.17.0 writes their conditions: pkg/workload/workload.go
SetQuotaReservation and Evict), and the invariants of a queued job, read from the API server's
write log in order, never from what the operator believed:

- no-pod-without-admission: no operator write creates a trainer Job or applies a Deployment
  with replicas above 0 in a pass whose view of the Workload (the watch's) was not admitted, or
  showed an eviction;
- an-eviction-is-no-restart-and-no-failure: the status write that first says the job is
  evicted leaves restarts.counted as it was and does not fail the job.

Re-admission resumes from the newest eligible checkpoint: machine.py's
each-attempt-resumes-from-the-newest-eligible-valid-version covers every attempt's start."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.unit.model.cluster import NAMESPACE, Cluster, Write
from tests.unit.reconcile.kueue_world import condition

JSON = dict[str, Any]
QUEUE_LABELS = {"kueue.x-k8s.io/queue-name": "team-a"}
FLAVOR = "h100"

NO_POD_WITHOUT_ADMISSION = "no-pod-without-admission"
EVICTION_IS_NO_RESTART = "an-eviction-is-no-restart-and-no-failure"
CHECKS = frozenset({NO_POD_WITHOUT_ADMISSION, EVICTION_IS_NO_RESTART})


def holds(body: Mapping[str, Any] | None, kind: str) -> bool:
    conditions = ((body or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def admitted(body: Mapping[str, Any] | None) -> bool:
    """What the job side may run on: admitted and not evicted."""
    return holds(body, "Admitted") and not holds(body, "Evicted")


class Kueue:
    """Kueue's scheduler and workload controller, reduced to what they write on a Workload."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def workload(self) -> Mapping[str, Any] | None:
        live = [
            w for w in self.cluster.view("Workload") if not w["metadata"].get("deletionTimestamp")
        ]
        return live[0] if live else None

    def admit(self) -> bool:
        """Quota reserved on the GPU flavor for every pod set, and admitted (clears Evicted)."""
        body = self.workload()
        if body is None or not body["spec"].get("active", True) or admitted(body):
            return False
        assignments = [
            {"name": s["name"], "flavors": {"nvidia.com/gpu": FLAVOR}, "count": s["count"]}
            for s in body["spec"]["podSets"]
        ]
        kept = [
            c
            for c in _conditions(body)
            if c["type"] not in ("QuotaReserved", "Admitted", "Evicted")
        ]
        status = {
            "admission": {"clusterQueue": "gpus", "podSetAssignments": assignments},
            "conditions": [
                *kept,
                condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in gpus"),
                condition("Admitted", "True", "Admitted", "The workload is admitted"),
                condition("Evicted", "False", "QuotaReserved", "Previously: evicted"),
            ],
        }
        self._write(body, status)
        return True

    def evict(self, reason: str) -> bool:
        """Evicted (a preemption, a PodsReady timeout); the admission stays until the job side
        gives the quota back."""
        body = self.workload()
        if body is None or not admitted(body):
            return False
        kept = [c for c in _conditions(body) if c["type"] != "Evicted"]
        message = f"evicted by the model: {reason}"
        self._write(body, {"conditions": [*kept, condition("Evicted", "True", reason, message)]})
        return True

    def _write(self, body: Mapping[str, Any], status: JSON) -> None:
        ref = ("Workload", NAMESPACE, body["metadata"]["name"])
        self.cluster._patch(ref, {"status": status}, "kueue", status_only=True)


def _conditions(body: Mapping[str, Any]) -> list[JSON]:
    return [dict(c) for c in (body.get("status") or {}).get("conditions") or []]


def _creates_pods(write: Write) -> bool:
    if write.code >= 300:
        return False
    if write.kind == "Job" and write.verb in ("apply", "create", "post"):
        return True
    return (
        write.kind == "Deployment" and write.verb == "apply" and bool(write.detail.get("replicas"))
    )


class QueueChecks:
    """Observes one machine's queued RLJob; `faults(check)` says what broke each invariant."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}
        self.cursor = 0
        self.previous_status: Mapping[str, Any] = {}
        cluster.status_observers.append(self._status_written)

    def before_pass(self) -> None:
        self.cursor = len(self.cluster.log)

    def after_pass(self, seen: Mapping[str, Any] | None) -> None:
        """`seen`: the Workload as the pass's watch showed it (nothing delivers during a pass)."""
        if admitted(seen):
            return
        for write in self.cluster.log[self.cursor :]:
            if write.actor.startswith("operator") and _creates_pods(write):
                self.recorded[NO_POD_WITHOUT_ADMISSION].append(
                    f"{write.verb} {write.kind}/{write.name} while the Workload the pass saw "
                    f"was not admitted: {_said(seen)}"
                )

    def _status_written(self, job: Mapping[str, Any]) -> None:
        status = job.get("status") or {}
        before, self.previous_status = self.previous_status, status
        now_evicted = (status.get("queue") or {}).get("state") == "Evicted"
        was_evicted = (before.get("queue") or {}).get("state") == "Evicted"
        if not now_evicted or was_evicted:
            return
        counted = (status.get("restarts") or {}).get("counted", 0)
        counted_before = (before.get("restarts") or {}).get("counted", 0)
        if counted != counted_before or (
            status.get("phase") == "Failed" and before.get("phase") != "Failed"
        ):
            self.recorded[EVICTION_IS_NO_RESTART].append(
                f"the write that said Evicted: restarts.counted {counted_before} -> {counted}, "
                f"phase {before.get('phase')} -> {status.get('phase')}"
            )

    def faults(self, check: str) -> list[str]:
        return self.recorded[check]


def _said(body: Mapping[str, Any] | None) -> str:
    if body is None:
        return "no Workload"
    return ", ".join(f"{c['type']}={c['status']}" for c in _conditions(body)) or "no condition"
