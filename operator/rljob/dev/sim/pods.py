"""Which pods get a simulated workload, read from pod objects (pure)."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rljob.dev.sim.profiles import PROFILE_ANNOTATION, PROFILE_ENV, ROLES

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rljob-operator"
JOB_LABEL = "rljob.io/job"
ROLE_LABEL = "rljob.io/role"
ATTEMPT_LABEL = "rljob.io/attempt"
# A JobSet's pods carry no operator attempt: its controller labels each with the JobSet's restart
# count (sigs.k8s.io/jobset v0.12.0: pkg/constants RestartsKey, set on every Job and its pod
# template by pkg/controllers/jobset_controller.go), which stands in for it.
JOBSET_RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the simulator needs from one pod."""

    namespace: str
    name: str
    uid: str
    job: str
    role: str
    restarts: int
    running: bool
    terminating: bool
    attempt: int | None = None
    completion_index: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    profile: Mapping[str, Any] = field(default_factory=dict)
    profile_error: str | None = None
    ip: str = ""  # status.podIP: the bed gives kwok a pod range inside 127.0.0.0/8
    metrics_port: int | None = None  # the container port named metrics, else http
    # Colocated engines' page (trainer pods): a port of their own, else Ray's metrics agent.
    engines_port: int | None = None
    engines_through_ray: bool = False
    # Under exporter plugin: one page per engine process, on engines_port + its index.
    engine_pages: int = 0
    created: float | None = None  # metadata.creationTimestamp, unix seconds
    node: str = ""  # spec.nodeName
    # When its deletion was asked (deletionTimestamp less the grace period, whole seconds): the
    # kubelet's SIGTERM, which ends an engine's requests in flight (docs/engine-fidelity.md).
    stop_asked: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def instance(self) -> str:
        """One run of the pod's containers: a container restart is a new instance."""
        return f"{self.uid}#{self.restarts}"

    @property
    def attachable(self) -> bool:
        return self.running and not self.terminating


def _int(value: Any, default: int | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _profile(
    annotations: Mapping[str, str], env: Mapping[str, str]
) -> tuple[dict[str, Any], str | None]:
    """Profile overrides: the container variable, then the annotation on top."""
    merged: dict[str, Any] = {}
    for source, text in (
        (PROFILE_ENV, env.get(PROFILE_ENV)),
        (PROFILE_ANNOTATION, annotations.get(PROFILE_ANNOTATION)),
    ):
        if not text:
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            return {}, f"{source} is not JSON: {exc}"
        if not isinstance(value, dict):
            return {}, f"{source} must be a JSON object"
        merged.update(value)
    return merged, None


# rljob.sdk.engine_page's PAGES_ENV, which the operator renders for exporter plugin.
ENGINE_PAGES_ENV = "RLJOB_ENGINE_METRICS_PAGES"


def parse_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """The pod as the simulator sees it, or None when it is not an rljob child it can serve."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return None
    role, job = labels.get(ROLE_LABEL), labels.get(JOB_LABEL)
    if role not in ROLES or not job:
        return None
    annotations = meta.get("annotations") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    env: dict[str, str] = {}
    ports: dict[str, int | None] = {}
    for container in spec.get("containers") or []:
        for var in container.get("env") or []:
            if isinstance(var, Mapping) and "value" in var and var.get("name"):
                env.setdefault(str(var["name"]), str(var["value"]))
        for port in container.get("ports") or []:
            if isinstance(port, Mapping):
                ports.setdefault(str(port.get("name")), _int(port.get("containerPort"), None))
    restarts = sum(
        _int(c.get("restartCount"), 0) or 0 for c in status.get("containerStatuses") or []
    )
    index = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX))
    profile, error = _profile(annotations, env)
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        job=str(job),
        role=str(role),
        restarts=restarts,
        running=status.get("phase") == "Running",
        terminating=meta.get("deletionTimestamp") is not None,
        attempt=_int(labels.get(ATTEMPT_LABEL, labels.get(JOBSET_RESTART_ATTEMPT_LABEL)), None),
        completion_index=_int(index, 0) or 0,
        env=env,
        profile=profile,
        profile_error=error,
        ip=str(status.get("podIP") or ""),
        metrics_port=ports.get("metrics") or ports.get("http"),
        engines_port=ports.get("engine-metrics") or ports.get("ray-metrics"),
        engines_through_ray=not ports.get("engine-metrics") and bool(ports.get("ray-metrics")),
        engine_pages=_int(env.get(ENGINE_PAGES_ENV), 0) or 0,
        created=_timestamp(meta.get("creationTimestamp")),
        node=str(spec.get("nodeName") or ""),
        stop_asked=_stop_asked(meta),
    )


def is_pattern(namespace: str) -> bool:
    """A glob such as "gw0-*" rather than one namespace's name."""
    return any(ch in namespace for ch in "*?[")


def in_namespaces(namespace: str, namespaces: Collection[str]) -> bool:
    """Whether a namespace is one of these names or patterns (all when there are none)."""
    return not namespaces or any(fnmatch.fnmatchcase(namespace, each) for each in namespaces)


def attachable_pods(
    pods: Iterable[Mapping[str, Any]], namespaces: Collection[str]
) -> tuple[dict[str, PodInfo], dict[str, float]]:
    """The attachable pods (in `namespaces`, names or patterns, all when empty) by key, and when
    each terminating pod's deletion was asked, by uid."""
    seen: dict[str, PodInfo] = {}
    stopping: dict[str, float] = {}
    for obj in pods:
        info = parse_pod(obj)
        if info is None or not in_namespaces(info.namespace, namespaces):
            continue
        if info.stop_asked is not None:
            stopping[info.uid] = info.stop_asked
        if info.attachable:
            seen[info.key] = info
    return seen, stopping


def _stop_asked(meta: Mapping[str, Any]) -> float | None:
    deleting = _timestamp(meta.get("deletionTimestamp"))
    if deleting is None:
        return None
    return deleting - (_int(meta.get("deletionGracePeriodSeconds"), 0) or 0)


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def listen_address(pod: PodInfo) -> tuple[str, int]:
    """Where the pod serves on a cluster: its pod IP and metrics port. Only a loopback pod IP
    can be served here; any other pod (or one without a metrics port) gets a free port on
    127.0.0.1, reachable through the Prometheus targets only."""
    if is_loopback(pod.ip) and pod.metrics_port:
        return pod.ip, pod.metrics_port
    return LOOPBACK, 0
