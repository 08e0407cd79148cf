"""Kueue's resource-in-use finalizer taken off a Workload, the write that gives its quota back
for good: for a finished or deleted Workload of a live job (a pass's ReleaseWorkload), and for
the Workload of an RLJob that is gone, which no pass reconciles any more (Kueue's job
reconciler does the same when the job is not found, reconciler.go:290-335)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.observe import JobKey, controller_uid
from rljob.adapters.paths import object_path, rljob_path
from rljob.vocabulary import kueue

MERGE_PATCH = "application/merge-patch+json"


async def guarded_patch(kube: Kube, path: str, body: dict[str, Any]) -> None:
    """A merge patch of a Workload that loses to any write since it was read (409): the next
    pass or event reads it again and decides afresh; a Workload gone (404) needs nothing."""
    try:
        await kube.request("patch", path, body, content_type=MERGE_PATCH)
    except KubeError as exc:
        if not (exc.conflict or exc.not_found):
            raise


async def drop_in_use_finalizer(kube: Kube, namespace: str, name: str) -> None:
    """The finalizer list replaced without Kueue's, guarded by the resourceVersion read."""
    path = object_path(kueue.API_VERSION, "Workload", namespace, name)
    try:
        held = await kube.request("get", path)
    except KubeError as exc:
        if exc.not_found:
            return
        raise
    finalizers = [
        f for f in held["metadata"].get("finalizers") or [] if f != kueue.RESOURCE_IN_USE_FINALIZER
    ]
    version = held["metadata"]["resourceVersion"]
    await guarded_patch(
        kube, path, {"metadata": {"resourceVersion": version, "finalizers": finalizers}}
    )


async def release_if_orphaned(kube: Kube, workload: Mapping[str, Any], owner: JobKey) -> bool:
    """A deleted Workload still holding its quota whose RLJob `owner` (its controller) is gone,
    or is another RLJob of the same name, is released; True if it was."""
    meta = workload.get("metadata") or {}
    held = kueue.RESOURCE_IN_USE_FINALIZER in (meta.get("finalizers") or ())
    if not (held and meta.get("deletionTimestamp")):
        return False
    namespace, name = owner
    try:
        job = await kube.request("get", rljob_path(namespace, name))
    except KubeError as exc:
        if not exc.not_found:
            raise
        job = None
    if job is not None and job["metadata"].get("uid") == controller_uid(workload):
        return False
    await drop_in_use_finalizer(kube, namespace, str(meta.get("name")))
    return True
