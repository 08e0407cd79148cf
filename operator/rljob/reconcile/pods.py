"""The pod template of one role: the main container, injected environment, GPUs, /dev/shm and
the user's free-form podTemplate merged last (see rljob.reconcile.merge for the rules)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rljob.api import Engine, Role, RoleName, RolloutRole, WeightSync
from rljob.api.declared_ports import engine_port, is_http_engine, metrics_port
from rljob.reconcile.merge import merge_overrides
from rljob.vocabulary.labels import POLICY_CURRENT_GATE

HEALTH_PATH = "/health"
PROBE_PERIOD_SECONDS = 10
PROBE_TIMEOUT_SECONDS = 5
# SGLang's /health runs a one-token generation and answers 503 only after 20 s
# (entrypoints/http_server.py, HEALTH_CHECK_TIMEOUT): a 5 s probe would fail a busy engine.
SLOW_HEALTH_PROBE = (30, 25)  # (period, timeout) seconds
# Loading a large model and compiling CUDA graphs can take most of an hour.
STARTUP_SECONDS = 3600
READINESS_FAILURE_THRESHOLD = 3
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
PREFERRED_NODE_AFFINITY = "preferredDuringSchedulingIgnoredDuringExecution"
# The highest weight the API allows: avoiding a suspect node outweighs other preferences.
SUSPECT_AVOIDANCE_WEIGHT = 100

EnvList = list[dict[str, Any]]


@dataclass(frozen=True)
class PodInputs:
    """What, besides the role's own fields, shapes one role's pod template."""

    role_name: RoleName
    role: Role
    image: str
    labels: Mapping[str, str]
    env: EnvList
    ports: Sequence[Mapping[str, Any]] = ()
    probes: Mapping[str, Any] = field(default_factory=dict)
    pod_spec: Mapping[str, Any] = field(default_factory=dict)
    avoid_nodes: tuple[str, ...] = ()
    env_from_secrets: tuple[str, ...] = ()  # Secrets exposed as env by reference, never read
    # A launcher's entrypoint replacing the role's command and args (None: the role's own).
    entrypoint: tuple[list[str], list[str]] | None = None
    # Readiness gate condition types the operator sets itself (pods/status): added to the user's.
    readiness_gates: tuple[str, ...] = ()


def pod_template(inputs: PodInputs) -> dict[str, Any]:
    """The pod template: rendered fields, then the user's podTemplate, then what the operator
    relies on (its labels, readiness gates, the nodes to avoid), which the podTemplate cannot
    remove."""
    template: dict[str, Any] = {
        "metadata": {"labels": dict(inputs.labels)},
        "spec": _pod_spec(inputs),
    }
    if inputs.role.pod_template:
        template = merge_overrides(template, inputs.role.pod_template)
    _secure_main_container(template, inputs.role_name.value)
    metadata = template.setdefault("metadata", {}) or {}
    template["metadata"] = metadata
    metadata["labels"] = {**(metadata.get("labels") or {}), **inputs.labels}
    if inputs.readiness_gates:
        _add_readiness_gates(template.setdefault("spec", {}), inputs.readiness_gates)
    if inputs.avoid_nodes:
        _avoid_nodes(template.setdefault("spec", {}), inputs.avoid_nodes)
    return template


def _add_readiness_gates(spec: dict[str, Any], condition_types: tuple[str, ...]) -> None:
    """Appends the operator's gates after the user's own, each condition type once."""
    gates = list(spec.get("readinessGates") or [])
    present = {gate.get("conditionType") for gate in gates if isinstance(gate, Mapping)}
    gates += [{"conditionType": kind} for kind in condition_types if kind not in present]
    spec["readinessGates"] = gates


def _pod_spec(inputs: PodInputs) -> dict[str, Any]:
    role = inputs.role
    volumes = [v.model_dump(by_alias=True, exclude_none=True) for v in role.volumes]
    if _wants_shm(role):
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    optional = {
        "volumes": volumes,
        "nodeSelector": dict(role.node_selector),
        "tolerations": [t.model_dump(by_alias=True, exclude_none=True) for t in role.tolerations],
        "priorityClassName": role.priority_class_name,
        "schedulerName": role.scheduler_name,
        "serviceAccountName": role.service_account_name,
        "imagePullSecrets": [{"name": s.name} for s in role.image_pull_secrets],
        "terminationGracePeriodSeconds": role.termination_grace_period_seconds,
    }
    spec: dict[str, Any] = {
        # Service links add one variable per Service in the namespace to every container.
        "enableServiceLinks": False,
        **dict(inputs.pod_spec),
        "containers": [_main_container(inputs)],
    }
    spec.update({key: value for key, value in optional.items() if value not in (None, [], {})})
    return spec


CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _secure_main_container(template: dict[str, Any], name: str) -> None:
    """Safe defaults for the main container, unless the podTemplate gave it a securityContext
    of its own (which then replaces them whole: `{}` opts out)."""
    containers = (template.get("spec") or {}).get("containers") or []
    for container in containers:
        if isinstance(container, dict) and container.get("name") == name:
            container.setdefault("securityContext", copy.deepcopy(CONTAINER_SECURITY))


def _main_container(inputs: PodInputs) -> dict[str, Any]:
    role = inputs.role
    mounts = [m.model_dump(by_alias=True, exclude_none=True) for m in role.volume_mounts]
    if _wants_shm(role):
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    command, args = inputs.entrypoint or (role.command, role.args)
    optional = {
        "command": command,
        "args": args,
        "ports": [dict(port) for port in inputs.ports],
        "resources": _resources(role),
        "volumeMounts": mounts,
    }
    container: dict[str, Any] = {
        "name": inputs.role_name.value,
        "image": inputs.image,
        "env": _merged_env(inputs.env, role),
        # The SDK entrypoint writes a root-cause summary to the termination message; without it
        # the tail of the log is the best evidence of why a container died.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **dict(inputs.probes),
    }
    container.update({key: value for key, value in optional.items() if value not in (None, [], {})})
    if inputs.env_from_secrets:
        container["envFrom"] = [{"secretRef": {"name": name}} for name in inputs.env_from_secrets]
    return container


def _merged_env(operator_env: EnvList, role: Role) -> EnvList:
    """Operator variables first (so user values can reference them as $(VAR)); a user variable
    of the same name is dropped: they describe the topology the operator built."""
    reserved = {variable["name"] for variable in operator_env}
    user = [
        variable.model_dump(by_alias=True, exclude_none=True)
        for variable in role.env
        if variable.name not in reserved
    ]
    return [*operator_env, *user]


def _resources(role: Role) -> dict[str, Any]:
    limits: dict[str, Any] = dict(role.resources.limits) if role.resources else {}
    requests: dict[str, Any] = dict(role.resources.requests) if role.resources else {}
    if role.gpus > 0:
        limits[role.gpu_resource_name] = role.gpus
        requests[role.gpu_resource_name] = role.gpus
    return {key: value for key, value in (("limits", limits), ("requests", requests)) if value}


def _wants_shm(role: Role) -> bool:
    return role.gpus > 0 and not _user_has_shm(role)


def _user_has_shm(role: Role) -> bool:
    """Whether the user already provides /dev/shm or a volume named dshm, in the role's fields or
    in its podTemplate."""
    override_spec = (role.pod_template or {}).get("spec") or {}
    volume_names = {v.name for v in role.volumes} | {
        v.get("name") for v in override_spec.get("volumes") or [] if isinstance(v, Mapping)
    }
    mount_paths = {m.mount_path for m in role.volume_mounts} | {
        mount.get("mountPath")
        for container in override_spec.get("containers") or []
        if isinstance(container, Mapping)
        for mount in container.get("volumeMounts") or []
        if isinstance(mount, Mapping)
    }
    return SHM_VOLUME in volume_names or SHM_PATH in mount_paths


def _avoid_nodes(spec: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """Adds one preferred term that scores nodes other than `nodes` (`metadata.name NotIn`, one
    value per field requirement as the API demands; requirements within a term are ANDed).
    Preferred, never required: a cluster whose only fitting node is suspect still runs the job.
    By node name, not the kubernetes.io/hostname label, which may differ from it."""
    avoid = [
        {"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in sorted(nodes)
    ]
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    preferred = node_affinity.get(PREFERRED_NODE_AFFINITY) or []
    term = {"weight": SUSPECT_AVOIDANCE_WEIGHT, "preference": {"matchFields": avoid}}
    node_affinity[PREFERRED_NODE_AFFINITY] = [*preferred, term]


def serving_port(role_name: RoleName, role: Role) -> int:
    """The port a serving role's Service forwards: an HTTP engine serves its API, health and
    metrics on one port (the metrics port, or the engines' default 8000)."""
    if is_http_engine(role_name, role) and role.metrics is not None:
        return role.metrics.port
    return engine_port(role)


def container_ports(role_name: RoleName, role: Role) -> list[dict[str, Any]]:
    """The main container's own port: its metrics port, else an HTTP engine's (the trainer's
    launcher and gang engines add theirs; rljob.api.declared_ports lists them all)."""
    port = metrics_port(role_name, role)
    if port is not None:
        return [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    if is_http_engine(role_name, role):
        return [{"name": "http", "containerPort": engine_port(role), "protocol": "TCP"}]
    return []


def probes(role_name: RoleName, role: Role) -> dict[str, Any]:
    """Startup and readiness probes per engine profile; never a liveness probe (a busy engine
    that misses one would be killed mid-generation; health detection decides restarts)."""
    if is_http_engine(role_name, role):
        check = {"httpGet": {"path": HEALTH_PATH, "port": serving_port(role_name, role)}}
        slow = isinstance(role, RolloutRole) and role.engine == Engine.SGLANG
        period, timeout = (
            SLOW_HEALTH_PROBE if slow else (PROBE_PERIOD_SECONDS, PROBE_TIMEOUT_SECONDS)
        )
        return {
            "startupProbe": _probe(check, -(-STARTUP_SECONDS // period), period, timeout),
            "readinessProbe": _probe(check, READINESS_FAILURE_THRESHOLD, period, timeout),
        }
    if role_name != RoleName.TRAINER and role.metrics is not None:
        check = {"tcpSocket": {"port": role.metrics.port}}
        return {"readinessProbe": _probe(check, READINESS_FAILURE_THRESHOLD)}
    return {}


def readiness_gates(role_name: RoleName, role: Role) -> tuple[str, ...]:
    """The gates the operator sets on a role's pods: Gated engines turn Ready only once the
    operator has seen them report the job's current policy generation."""
    gated = isinstance(role, RolloutRole) and role.weight_sync == WeightSync.GATED
    return (POLICY_CURRENT_GATE,) if role_name == RoleName.ROLLOUT and gated else ()


def _probe(
    check: Mapping[str, Any],
    failure_threshold: int,
    period: int = PROBE_PERIOD_SECONDS,
    timeout: int = PROBE_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    return {
        **copy.deepcopy(dict(check)),
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failure_threshold,
    }
