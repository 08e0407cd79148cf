"""Children as the operator remembers them: small frozen tuples summarised from watch events
(kopf indexes keep these, never whole bodies)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.vocabulary.labels import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POLICY_CURRENT_GATE,
    RESTARTED_AT_ANNOTATION,
    ROLE_LABEL,
    SPEC_HASH_ANNOTATION,
    slots_held,
)

# MANAGED_BY and its label stay importable from here for handlers.py.
__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "Body",
    "JobKey",
    "job_key",
    "observed_from",
    "summarize_child",
    "summarize_owner_link",
    "summarize_pod",
]
_MESSAGE_LIMIT = 4096

Body = Mapping[str, Any]
JobKey = tuple[str, str]  # (namespace, RLJob name)


def job_key(body: Body) -> JobKey | None:
    """The owning RLJob of a child, from its labels."""
    meta = body.get("metadata", {})
    job = (meta.get("labels") or {}).get(JOB_LABEL)
    return (meta.get("namespace", ""), job) if job else None


def workload_owner(body: Body) -> JobKey | None:
    """The RLJob that controls a Kueue Workload, from its controller ownerReference."""
    meta = body.get("metadata", {})
    for owner in meta.get("ownerReferences") or ():
        if owner.get("controller") and owner.get("kind") == "RLJob" and owner.get("name"):
            return meta.get("namespace", ""), owner["name"]
    return None


def _time(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def controller_uid(body: Body) -> str:
    """The uid of the object's controller (its ownerReference with controller true), or ""."""
    owners = body.get("metadata", {}).get("ownerReferences") or []
    return next((str(o.get("uid", "")) for o in owners if o.get("controller")), "")


def summarize_owner_link(body: Body) -> tuple[str, str]:
    """A ReplicaSet as (its uid, its controller's uid): a link of its pods' controller chain."""
    return str(body["metadata"]["uid"]), controller_uid(body)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _condition(status: Body, kind: str) -> Body:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def summarize_child(body: Body) -> ObservedChild:
    """A Deployment, Service or Job reduced to what reconcile needs."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    kind = body["kind"]
    replicas = spec.get("parallelism" if kind == "Job" else "replicas", 0) or 0
    ready = status.get("ready" if kind == "Job" else "readyReplicas", 0) or 0
    # FailureTarget comes first: Failed waits for every pod to end, and a rank on a dead node
    # never does, so waiting for Failed would hang the gang restart with it.
    failed = _condition(status, "FailureTarget") or _condition(status, "Failed")
    template_annotations = ((spec.get("template") or {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    return ObservedChild(
        kind=kind,
        name=meta["name"],
        uid=meta["uid"],
        role=labels.get(ROLE_LABEL, ""),
        spec_hash=annotations.get(SPEC_HASH_ANNOTATION, ""),
        attempt=_int_or_none(labels.get(ATTEMPT_LABEL)),
        replicas=int(replicas),
        ready_replicas=int(ready),
        updated_replicas=int(status.get("updatedReplicas", 0) or 0),
        succeeded=_condition(status, "Complete").get("status") == "True",
        failed=failed.get("status") == "True",
        failed_message=str(failed.get("message", ""))[:_MESSAGE_LIMIT],
        failed_at=_time(failed.get("lastTransitionTime")),
        deleting=bool(meta.get("deletionTimestamp")),
        created_at=_time(meta.get("creationTimestamp")),
        restarted_at=str(template_annotations.get(RESTARTED_AT_ANNOTATION, "")),
        generation=int(meta.get("generation", 0) or 0),
        observed_generation=int(status.get("observedGeneration", 0) or 0),
        owner_uid=controller_uid(body),
    )


def _termination(status: Body) -> Body:
    """The first terminated state among containers: current state first, then lastState."""
    containers = status.get("containerStatuses") or []
    for key in ("state", "lastState"):
        for container in containers:
            terminated = (container.get(key) or {}).get("terminated")
            if terminated:
                return dict(terminated)
    return {}


def summarize_pod(body: Body) -> ObservedPod:
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    scheduled = _condition(status, "PodScheduled")
    unschedulable = (
        scheduled.get("reason") == "Unschedulable" and scheduled.get("status") == "False"
    )
    terminated = _termination(status)
    containers = status.get("containerStatuses") or []
    disruption = _condition(status, "DisruptionTarget")
    disrupted = disruption.get("status") == "True"
    role = labels.get(ROLE_LABEL, "")
    running = _main_containers_running(containers, role)
    return ObservedPod(
        name=meta["name"],
        uid=meta["uid"],
        role=role,
        attempt=_int_or_none(labels.get(ATTEMPT_LABEL)),
        node=spec.get("nodeName", "") or "",
        phase=status.get("phase", "Unknown") or "Unknown",
        ready=_condition(status, "Ready").get("status") == "True",
        containers_ready=_condition(status, "ContainersReady").get("status") == "True",
        restart_count=sum(int(c.get("restartCount", 0) or 0) for c in containers),
        unschedulable_message=str(scheduled.get("message", ""))[:_MESSAGE_LIMIT]
        if unschedulable
        else "",
        exit_code=terminated.get("exitCode"),
        reason=str(terminated.get("reason", "") or ""),
        message=str(terminated.get("message", "") or "")[:_MESSAGE_LIMIT],
        completion_index=_int_or_none(annotations.get(COMPLETION_INDEX_ANNOTATION)),
        deleting=bool(meta.get("deletionTimestamp")),
        created_at=_time(meta.get("creationTimestamp")),
        disruption=str(disruption.get("reason", "") or "DisruptionTarget") if disrupted else "",
        disruption_message=str(disruption.get("message", "") or "")[:_MESSAGE_LIMIT]
        if disrupted
        else "",
        ip=str(status.get("podIP", "") or ""),
        metrics_port=_metrics_port(spec),
        finished_at=_time(terminated.get("finishedAt")),
        policy_current=_condition(status, POLICY_CURRENT_GATE).get("status") == "True",
        container_running=bool(running),
        started_at=_started_at(running),
        owner_uid=controller_uid(body),
        slots=slots_held(labels),
    )


def _main_containers_running(containers: list[Body], role: str) -> list[Body]:
    """The role's own containers (named after the role as rendered; any container when none is)
    that are running: a sidecar running beside a crash-looping engine says nothing."""
    main = [c for c in containers if c.get("name") == role] or containers
    return [c for c in main if "running" in (c.get("state") or {})]


def _started_at(running: list[Body]) -> dt.datetime | None:
    """When the latest of them (re)started."""
    starts = [_time((c["state"]["running"] or {}).get("startedAt")) for c in running]
    return max((s for s in starts if s is not None), default=None)


def _metrics_port(spec: Mapping[str, Any]) -> int | None:
    """The port the operator rendered for the role's metrics: named metrics, else the engine's
    http port (vLLM and SGLang serve /metrics there)."""
    ports = {
        port.get("name"): port.get("containerPort")
        for container in spec.get("containers") or []
        for port in container.get("ports") or []
    }
    port = ports.get("metrics") or ports.get("http")
    return port if isinstance(port, int) else None


def observed_from(
    children: Iterable[ObservedChild],
    pods: Iterable[ObservedPod],
    owners: Iterable[tuple[str, str]] = (),
) -> Observed:
    return Observed(
        children=tuple(sorted(children, key=lambda c: (c.kind, c.name))),
        pods=tuple(sorted(pods, key=lambda p: p.name)),
        owners=tuple(sorted(owners)),
    )
