"""The Kueue Workload of a queued RLJob, pure: its name, its pod sets and its manifest.

The operator is the job side of Kueue's integration for the RLJob kind (Kueue builds nothing for
an entry of integrations.externalFrameworks), so this mirrors what Kueue's generic job reconciler
does for a built-in kind (kubernetes-sigs/kueue v0.17.0, pkg/controller/jobframework/
reconciler.go, cited by line). One Workload per RLJob, controller-owned by it; one pod set per
pod-bearing role, so the whole job is one gang: admitted together or not at all."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rljob.api import RLJob
from rljob.reconcile.render import DesiredChild
from rljob.vocabulary import kueue

# apis/kueue/v1beta2/workload_types.go: podSets MaxItems=8; a pod set's name is a DNS label.
MAX_POD_SETS = 8
# pkg/controller/jobframework/workload_names.go: the name's hash part, and the longest name
# (253, or 63 under the ShortWorkloadNames gate, off in v0.17.0) less the hash and its dash.
HASH_LENGTH = 5
MAX_PREFIX_LENGTH = 253 - HASH_LENGTH - 1
RLJOB_KIND, RLJOB_GROUP, RLJOB_API_VERSION = "RLJob", "rljob.io", "rljob.io/v1alpha1"

# What Kueue reads from a pod set's template to admit it: the requests (with init containers and
# overhead), where the pods may run (flavor fit and taints) and their priority. The rest (env,
# commands, probes, volumes) changes with each attempt and would make a gang restart's template
# differ from the admitted one for nothing.
_POD_SPEC_KEPT = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "priorityClassName",
    "runtimeClassName",
    "overhead",
    "topologySpreadConstraints",
    "schedulerName",
)
_CONTAINER_KEPT = ("name", "image", "resources")


def queue_name(job: RLJob) -> str | None:
    """The LocalQueue the job asks for: its kueue.x-k8s.io/queue-name label (interface.go:
    200-202, QueueName). None: the job is not queued, and runs as it did without Kueue."""
    name = job.metadata.labels.get(kueue.QUEUE_NAME_LABEL, "")
    return name or None


def workload_name(job_name: str, uid: str) -> str:
    """Kueue's own name for the Workload of an object: `rljob-<name>-<5 hex of a SHA-1>`
    (workload_names.go:64-100, GetWorkloadNameForOwnerWithGVK: Kind, Group, name, uid)."""
    digest = hashlib.sha1(
        f"{RLJOB_KIND}\n{RLJOB_GROUP}\n{job_name}\n{uid}".encode(), usedforsecurity=False
    ).hexdigest()
    prefix = f"{RLJOB_KIND.lower()}-{job_name}"[:MAX_PREFIX_LENGTH]
    return f"{prefix}-{digest[:HASH_LENGTH]}"


@dataclass(frozen=True)
class PodSet:
    """One role's pods as Kueue counts them: `count` pods of `template` (only what admission
    reads, see _POD_SPEC_KEPT)."""

    name: str
    count: int
    template: dict[str, Any]

    def manifest(self) -> dict[str, Any]:
        return {"name": self.name, "count": self.count, "template": self.template}


def pod_sets(children: Iterable[DesiredChild]) -> tuple[PodSet, ...]:
    """A pod set per pod-bearing child of a running job (a rollout, reference or verifier
    Deployment and the trainer Job), named after its role (jobset_controller.go:114-135 makes
    one per replicatedJob the same way). `children`: rendered as if admitted and running."""
    sets = []
    for child in children:
        spec = child.body.get("spec") or {}
        if child.kind == "Deployment":
            count = int(spec.get("replicas") or 0)
        elif child.kind == "Job":
            count = int(spec.get("parallelism") or 0)
        else:
            continue
        sets.append(PodSet(child.role, count, admission_template(spec.get("template") or {})))
    return tuple(sets)


def admission_template(template: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a pod template Kueue admits by: requests, placement, priority, and Kueue's
    own labels and annotations (the only metadata a pod set may carry is labels and
    annotations, workload_types.go PodSet.template)."""
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    kept: dict[str, Any] = {key: spec[key] for key in _POD_SPEC_KEPT if spec.get(key)}
    for key in ("containers", "initContainers"):
        if spec.get(key):
            kept[key] = [_container(c) for c in spec[key]]
    metadata = {key: kueue_keys(meta.get(key) or {}) for key in ("labels", "annotations")}
    return {"metadata": {key: value for key, value in metadata.items() if value}, "spec": kept}


def kueue_keys(mapping: Mapping[str, str]) -> dict[str, str]:
    """Kueue's own keys (e.g. kueue.x-k8s.io/podset-required-topology, jobframework/tas.go):
    the operator's labels name an attempt and change with it, and admission reads none."""
    return {k: v for k, v in mapping.items() if k.startswith(f"{kueue.GROUP}/")}


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    return {key: container[key] for key in _CONTAINER_KEPT if key in container}


@dataclass(frozen=True)
class Priority:
    """The Workload's priority and where it came from: a WorkloadPriorityClass (the job's
    kueue.x-k8s.io/priority-class label) or a PriorityClass (the trainer role's)."""

    kind: str  # "WorkloadPriorityClass" | "PriorityClass"
    name: str
    value: int

    def ref(self) -> dict[str, str]:
        group = kueue.GROUP if self.kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
        return {"group": group, "kind": self.kind, "name": self.name}


def priority_source(job: RLJob) -> tuple[str, str] | None:
    """(kind, name) of the class the Workload's priority comes from. The WorkloadPriorityClass
    label wins (reconciler.go:1485-1493, ExtractPriority); else the trainer's PriorityClass,
    as a Kubeflow job takes its replica's (kubeflowjob_controller.go:161-172); else none."""
    label = job.metadata.labels.get(kueue.PRIORITY_CLASS_LABEL, "")
    if label:
        return "WorkloadPriorityClass", label
    trainer = job.spec.roles.trainer.priority_class_name
    return ("PriorityClass", trainer) if trainer else None


def workload_manifest(
    job: RLJob, sets: tuple[PodSet, ...], priority: Priority | None, *, active: bool = True
) -> dict[str, Any]:
    """The Workload to create (reconciler.go:1375-1404, ConstructWorkload; interface.go:
    234-249, NewWorkload): the job's uid label, Kueue's finalizer, the job as controller owner,
    the queue, the pod sets and the priority. `active` false: the user suspended the job, and
    Kueue evicts a deactivated Workload and frees its quota (reconciler.go:450-458)."""
    meta = job.metadata
    uid = meta.uid or ""
    spec: dict[str, Any] = {
        "queueName": queue_name(job) or "",
        "podSets": [s.manifest() for s in sets],
        "active": active,
    }
    if priority is not None:
        spec["priorityClassRef"] = priority.ref()
        spec["priority"] = priority.value
    if (limit := meta.labels.get(kueue.MAX_EXEC_TIME_LABEL, "")).isdigit() and int(limit) > 0:
        spec["maximumExecutionTimeSeconds"] = int(limit)
    owner = {
        "apiVersion": RLJOB_API_VERSION,
        "kind": RLJOB_KIND,
        "name": meta.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta.name, uid),
            "namespace": meta.namespace,
            "labels": {kueue.JOB_UID_LABEL: uid},
            "finalizers": [kueue.RESOURCE_IN_USE_FINALIZER],
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def equivalent(sets: tuple[PodSet, ...], existing: Mapping[str, Any]) -> bool:
    """Whether a Workload's pod sets admit the same pods as `sets`: the same names in order,
    counts and templates (reconciler.go:1196-1227 compares counts, containers and tolerations;
    ours compares the whole admission template, which is all it keeps). A change means the
    job's admission no longer covers it (Kueue's OutOfSync)."""
    current = (existing.get("spec") or {}).get("podSets") or []
    wanted = [s.manifest() for s in sets]
    return [_comparable(p) for p in current] == [_comparable(p) for p in wanted]


def _comparable(pod_set: Mapping[str, Any]) -> tuple[str, int, dict[str, Any]]:
    template = admission_template(pod_set.get("template") or {})
    return str(pod_set.get("name")), int(pod_set.get("count") or 0), template
