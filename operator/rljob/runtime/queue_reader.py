"""The read-only half of a queued job's pass (operator run with `--kueue`): its Workloads and
the ResourceFlavors from the watches, and, while it has no Workload yet, the value of the
priority class it names (one read, as Kueue's ExtractPriority does, reconciler.go:1485)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.paths import object_path
from rljob.api import RLJob
from rljob.reconcile.admission import Flavor
from rljob.reconcile.queue import QueueInputs
from rljob.reconcile.workload import Priority, priority_source, queue_name, workload_name
from rljob.vocabulary import kueue

JobKey = tuple[str, str]

_CLASS_API_VERSIONS = {
    "WorkloadPriorityClass": kueue.API_VERSION,
    "PriorityClass": "scheduling.k8s.io/v1",
}


@dataclass(frozen=True)
class QueueReader:
    kube: Kube
    workloads: Callable[[JobKey], list[Mapping[str, Any]]]
    flavors: Callable[[], Mapping[str, Flavor]]

    async def inputs(self, job: RLJob, key: JobKey) -> QueueInputs | None:
        """None for a job without the queue label: it runs as without Kueue."""
        if queue_name(job) is None:
            return None
        workloads = tuple(self.workloads(key))
        name = workload_name(job.metadata.name, job.metadata.uid or "")
        if any((w.get("metadata") or {}).get("name") == name for w in workloads):
            return QueueInputs(workloads, self.flavors())
        priority, error = await self._priority(job)
        return QueueInputs(workloads, self.flavors(), priority, error)

    async def _priority(self, job: RLJob) -> tuple[Priority | None, str]:
        source = priority_source(job)
        if source is None:
            return None, ""
        kind, name = source
        path = object_path(_CLASS_API_VERSIONS[kind], kind, None, name)
        try:
            held = await self.kube.request("get", path)
        except KubeError as exc:
            if exc.not_found:
                return None, f"{kind} {name} does not exist"
            return None, f"{kind} {name} could not be read: {exc.message}"
        return Priority(kind, name, int(held.get("value") or 0)), ""
