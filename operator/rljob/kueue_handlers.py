"""kopf routing for Kueue, registered only when the operator runs with `--kueue`: the Workloads
RLJobs control (Kueue's Owns(&Workload{}), reconciler.go:1709) wake their job, or are released
when their RLJob is gone (rljob.adapters.workloads), and the ResourceFlavors an admission names
are kept to merge their node labels and tolerations."""

from __future__ import annotations

from typing import Any

import kopf

from rljob.adapters.observe import workload_owner
from rljob.adapters.workloads import release_if_orphaned
from rljob.handlers import in_scope
from rljob.reconcile.admission import flavor_of
from rljob.runtime.runtime import Runtime
from rljob.vocabulary import kueue

# Of a Workload, what the job side reads (its pod set templates included: a change of the job
# is judged against them).
_KEPT = ("spec", "status")
_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "finalizers",
    "ownerReferences",
    "deletionTimestamp",
)


@kopf.index(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, when=in_scope)
def workloads_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = workload_owner(body)
    if key is None:
        return {}
    meta = body["metadata"]
    kept_meta = {k: meta[k] for k in _KEPT_METADATA if meta.get(k)}
    return {key: {"metadata": kept_meta, **{k: dict(body.get(k) or {}) for k in _KEPT}}}


@kopf.index(kueue.GROUP, kueue.VERSION, kueue.RESOURCE_FLAVORS)
def resourceflavors_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {body["metadata"]["name"]: flavor_of(body)}


@kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, when=in_scope)
async def workload_changed(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    runtime: Runtime = memo["runtime"]
    runtime.bind_indexes(kwargs)
    key = workload_owner(body)
    if key is None:
        return
    if not await release_if_orphaned(runtime.kube, body, key):
        runtime.workers.wake(key, "workload")
