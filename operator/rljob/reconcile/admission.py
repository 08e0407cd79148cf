"""What Kueue decided about a job's Workload, and an admission applied to the job's pods, pure.

Mirrors Kueue v0.17.0's job side (kubernetes-sigs/kueue at 4d5f7ff): the Workload's conditions
read as pkg/workload/workload.go reads them, and an admission turned into each role's node
labels, tolerations, labels and annotations as pkg/podset/podset.go and pkg/controller/
jobframework/reconciler.go:1506-1561 (getPodSetsInfoFromStatus) do, merged into the role's pod
template with the same conflict rule (podset.go:117-175)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rljob.vocabulary import kueue

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class WorkloadCondition:
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class WorkloadState:
    """One Workload as Kueue left it."""

    name: str
    queue: str
    conditions: Mapping[str, WorkloadCondition]
    cluster_queue: str | None  # status.admission.clusterQueue while the quota is reserved
    assignments: Mapping[str, tuple[str, ...]]  # pod set -> the flavors assigned to it
    active: bool
    deleting: bool
    in_use: bool  # Kueue's resource-in-use finalizer is still on it

    def holds(self, kind: str) -> bool:
        condition = self.conditions.get(kind)
        return condition is not None and condition.status == "True"

    @property
    def admitted(self) -> bool:
        """workload.go:1302 IsAdmitted: the Admitted condition is True."""
        return self.holds(kueue.ADMITTED)

    @property
    def quota_reserved(self) -> bool:
        """workload.go:1278 HasQuotaReservation."""
        return self.holds(kueue.QUOTA_RESERVED)

    @property
    def finished(self) -> bool:
        return self.holds(kueue.FINISHED)

    @property
    def evicted(self) -> WorkloadCondition | None:
        """The Evicted condition while it holds (workload.go:1399 IsEvicted)."""
        return self.conditions[kueue.EVICTED] if self.holds(kueue.EVICTED) else None

    def pending_reason(self) -> str:
        """Kueue's reason for the wait (Pending: no room yet; Inadmissible: e.g. a LocalQueue
        that does not exist, workload_controller.go:603), or Queued before it said any."""
        reserved = self.conditions.get(kueue.QUOTA_RESERVED)
        if reserved is not None and reserved.status != "True" and reserved.reason:
            return reserved.reason
        return "Queued"

    def pending_message(self) -> str:
        """Why the Workload waits, in Kueue's words: QuotaReserved False carries the scheduler's
        reason (e.g. insufficient quota, a LocalQueue that does not exist)."""
        reserved = self.conditions.get(kueue.QUOTA_RESERVED)
        if reserved is not None and reserved.status != "True" and reserved.message:
            return reserved.message
        return "waiting for Kueue to reserve quota"


def workload_state(body: Mapping[str, Any]) -> WorkloadState:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    conditions = {
        str(c.get("type")): WorkloadCondition(
            str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", ""))
        )
        for c in status.get("conditions") or []
    }
    admission = status.get("admission") or {}
    assignments = {
        str(a.get("name")): tuple(dict.fromkeys((a.get("flavors") or {}).values()))
        for a in admission.get("podSetAssignments") or []
    }
    return WorkloadState(
        name=str(meta.get("name", "")),
        queue=str(spec.get("queueName", "")),
        conditions=conditions,
        cluster_queue=admission.get("clusterQueue"),
        assignments=assignments,
        active=spec.get("active", True) is not False,
        deleting=bool(meta.get("deletionTimestamp")),
        in_use=kueue.RESOURCE_IN_USE_FINALIZER in (meta.get("finalizers") or ()),
    )


@dataclass(frozen=True)
class Flavor:
    """What a ResourceFlavor gives the pods admitted on it (resourceflavor_types.go)."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def flavor_of(body: Mapping[str, Any]) -> Flavor:
    spec = body.get("spec") or {}
    return Flavor(dict(spec.get("nodeLabels") or {}), tuple(spec.get("tolerations") or ()))


@dataclass(frozen=True)
class PodSetInfo:
    """What an admission adds to one role's pods (podset.go:43-52, PodSetInfo)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def admission_key(info: PodSetInfo) -> dict[str, Any]:
    """The info as plain JSON-able data (for a spec hash)."""
    return {
        "labels": dict(info.labels),
        "annotations": dict(info.annotations),
        "nodeSelector": dict(info.node_selector),
        "tolerations": [dict(t) for t in info.tolerations],
    }


@dataclass(frozen=True)
class MissingFlavor:
    """An assigned ResourceFlavor the operator cannot see (yet): the job waits for it."""

    name: str


def admission_infos(
    state: WorkloadState, flavors: Mapping[str, Flavor]
) -> dict[str, PodSetInfo] | MissingFlavor:
    """Each admitted pod set's additions: its flavors' node labels and tolerations once per
    flavor (podset.go:56-91, FromAssignment), the pod-set and queue labels and the Workload
    annotation (reconciler.go:1517-1532, 1549-1561, with TopologyAwareScheduling and
    AssignQueueLabelsForPods on, their v0.17.0 defaults)."""
    infos: dict[str, PodSetInfo] = {}
    for pod_set, names in state.assignments.items():
        node_selector: dict[str, str] = {}
        tolerations: list[Mapping[str, Any]] = []
        for name in names:
            flavor = flavors.get(name)
            if flavor is None:
                return MissingFlavor(name)
            node_selector.update(flavor.node_labels)
            tolerations += flavor.tolerations
        labels = {kueue.PODSET_LABEL: pod_set, kueue.LOCAL_QUEUE_LABEL: state.queue}
        if state.cluster_queue and _DNS_LABEL.match(state.cluster_queue):
            labels[kueue.CLUSTER_QUEUE_LABEL] = state.cluster_queue
        annotations = {kueue.WORKLOAD_ANNOTATION: state.name}
        infos[pod_set] = PodSetInfo(labels, annotations, node_selector, tuple(tolerations))
    return infos


@dataclass(frozen=True)
class AdmissionConflict:
    """The admission sets a key the role's own template sets to another value: the pods cannot
    honour both. Kueue treats it as permanent and finishes the Workload as FailedToStart
    (podset.go:204-214, reconciler.go:614-621)."""

    role: str
    field: str  # annotations | labels | nodeSelector
    key: str
    template_value: str
    admission_value: str

    def message(self) -> str:
        """In Kueue's words (podset.go:204-206, BadPodSetsUpdateError; maps.go:43-50)."""
        return (
            f"role {self.role}: invalid admission check PodSetUpdate: conflict for {self.field}: "
            f"conflict for key={self.key}, value1={self.template_value}, "
            f"value2={self.admission_value}"
        )


def merge_admission(
    role: str, template: Mapping[str, Any], info: PodSetInfo
) -> dict[str, Any] | AdmissionConflict:
    """The role's pod template with the admission merged in (podset.go:117-175, Merge): the
    same key with another value in labels, annotations or nodeSelector is a conflict;
    tolerations are appended unless already there."""
    meta = dict(template.get("metadata") or {})
    spec = dict(template.get("spec") or {})
    merged: dict[str, dict[str, str]] = {}
    for name, own, added in (
        ("annotations", meta.get("annotations") or {}, info.annotations),
        ("labels", meta.get("labels") or {}, info.labels),
        ("nodeSelector", spec.get("nodeSelector") or {}, info.node_selector),
    ):
        for key, value in added.items():
            if key in own and own[key] != value:
                return AdmissionConflict(role, name, key, own[key], value)
        merged[name] = {**own, **added}
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in info.tolerations if t not in tolerations]
    meta.update(annotations=merged["annotations"], labels=merged["labels"])
    spec["nodeSelector"] = merged["nodeSelector"]
    if tolerations:
        spec["tolerations"] = tolerations
    return {**template, "metadata": meta, "spec": _without_empty(spec, "nodeSelector")}


def _without_empty(spec: dict[str, Any], key: str) -> dict[str, Any]:
    return spec if spec.get(key) else {k: v for k, v in spec.items() if k != key}
