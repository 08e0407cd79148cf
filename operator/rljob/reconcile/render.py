"""Desired children of an RLJob as plain manifests ready for server-side apply.

- rollout, reference, verifier: a Deployment and a Service each; rollout also a headless Service,
  and with slotServices one Service per slot.
- trainer: the headless Service `<name>-trainer` and one Indexed Job per attempt.

Each child carries `rljob.io/spec-hash` from rljob.reconcile.spec_hash. Trainer spec changes take
effect at the next attempt: a running trainer Job is never replaced because its hash changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rljob.api import RLJob, Role, RoleName, RolloutRole, ServingRole, TrainerRole, parse_duration
from rljob.api.declared_ports import metrics_port
from rljob.checkpoint_protocol.layout import (
    ENV_CHECKPOINT_URI,
    ENV_JOB_UID,
    ENV_POLICY_GENERATION,
    ENV_S3_ADDRESSING_STYLE,
    ENV_S3_ENDPOINT,
    ENV_S3_REGION,
    DefaultStore,
)
from rljob.reconcile import names, pods
from rljob.reconcile.admission import AdmissionConflict, PodSetInfo, admission_key, merge_admission
from rljob.reconcile.launchers import Launch, LaunchInputs, launch
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.pods import PodInputs, container_ports, pod_template, probes, serving_port
from rljob.reconcile.spec_hash import service_hash, serving_role_hash, spec_hash, trainer_hash
from rljob.reconcile.suspended import suspended
from rljob.vocabulary.enums import EngineExporter
from rljob.vocabulary.labels import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    SLOT_HELD,
    SPEC_HASH_ANNOTATION,
    slot_label,
)

DEFAULT_MASTER_PORT = 29500
ENV_SLOT_ADDRESSES = "RLJOB_ROLLOUT_SLOT_ADDRESSES"
PROGRESS_DEADLINE_SECONDS = 3600
# torchrun SIGKILLs its workers this many seconds after forwarding SIGTERM unless the trainer's
# env sets TORCH_ELASTIC_SHUTDOWN_TIMEOUT (torch 2.15.0, torch/distributed/launcher/api.py,
# LaunchConfig.__post_init__: default "30"; elastic/multiprocessing/api.py, _close).
TORCHRUN_SHUTDOWN_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
TORCHRUN_SHUTDOWN_SECONDS = 30
# After that window torchrun still reaps the killed workers and exits; the kubelet must not
# SIGKILL the agent before it has (its own SIGKILL would lose the workers' exit statuses).
TRAINER_GRACE_MARGIN_SECONDS = 15


def torchrun_shutdown_seconds(role: TrainerRole) -> int:
    """torchrun's SIGTERM -> SIGKILL window for the role's workers: the literal
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT of its env, else torchrun's default."""
    for var in role.env:
        if var.name == TORCHRUN_SHUTDOWN_ENV and var.value is not None:
            try:
                return max(0, int(var.value))
            except ValueError:
                break  # torchrun itself fails to start on such a value
    return TORCHRUN_SHUTDOWN_SECONDS


def trainer_grace_default(job: RLJob) -> int:
    """What torchrun allows a last save after SIGTERM (its SIGKILL window) plus a margin for it
    to exit: a longer grace buys nothing, since the workers are dead by then. Never past
    failurePolicy.teardownTimeout, when the old attempt's ranks are force-deleted."""
    teardown = int(parse_duration(job.spec.failure_policy.teardown_timeout))
    window = torchrun_shutdown_seconds(job.spec.roles.trainer)
    return min(window + TRAINER_GRACE_MARGIN_SECONDS, teardown)


COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"

__all__ = ["DesiredChild", "RenderContext", "render_children", "trainer_job_name"]


@dataclass(frozen=True)
class DesiredChild:
    """One child manifest; `spec_hash` is also its rljob.io/spec-hash annotation."""

    kind: str
    api_version: str
    name: str
    role: str
    spec_hash: str
    body: dict[str, Any]


@dataclass(frozen=True)
class RenderContext:
    """The RLJob's identity and the lifecycle inputs rendering needs besides the spec."""

    name: str
    namespace: str
    uid: str
    attempt: int
    resume_env: Mapping[str, str] = field(default_factory=dict)
    policy_env: Mapping[str, str] = field(default_factory=dict)
    avoid_nodes: tuple[str, ...] = ()
    trainer_master_port: int = DEFAULT_MASTER_PORT
    # Succeeded or Failed: serving roles at zero replicas and no trainer Job, like suspend.
    finished: bool = False
    renamed: frozenset[str] = frozenset()  # status.renamed: scopes named by the fallback name
    # The operator's own S3 store, for a job naming no endpoint.
    default_store: DefaultStore = field(default_factory=DefaultStore)
    # Kueue's admission of a queued job, by role: merged into the role's pods.
    admission: Mapping[str, PodSetInfo] = field(default_factory=dict)
    # Serving roles wait at zero replicas for the trainer's ranks to be placed (placement.py).
    serving_held: bool = False

    @property
    def names(self) -> names.ChildNames:
        return names.ChildNames(self.name, self.uid, self.renamed)


def render_children(job: RLJob, ctx: RenderContext) -> list[DesiredChild]:
    """Every child the job should have now, Services first, roles in a fixed order."""
    roles = job.spec.roles
    children = [
        *(_rollout_children(job, roles.rollout, ctx) if roles.rollout is not None else []),
        *_trainer_children(job, roles.trainer, ctx),
    ]
    for role_name in (RoleName.REFERENCE, RoleName.VERIFIER):
        role = getattr(roles, role_name.value)
        if role is not None:
            children += _serving_children(job, role_name, role, ctx)
    return children


def _rollout_children(job: RLJob, role: RolloutRole, ctx: RenderContext) -> list[DesiredChild]:
    headless = _service(
        ctx,
        RoleName.ROLLOUT,
        ctx.names.rollout_headless(),
        _serving_ports(RoleName.ROLLOUT, role),
        headless=True,
        hash_key="rollout-headless",
    )
    serving = _serving_children(job, RoleName.ROLLOUT, role, ctx)
    return [serving[0], headless, *_slot_services(role, ctx), *serving[1:]]


def _slot_services(role: RolloutRole, ctx: RenderContext) -> list[DesiredChild]:
    """slotServices: one ClusterIP Service per slot, selecting the engine that holds it (the
    operator stamps the slot label on it: reconcile/slots.py)."""
    if not role.slot_services:
        return []
    ports = _serving_ports(RoleName.ROLLOUT, role)
    return [
        _service(
            ctx,
            RoleName.ROLLOUT,
            ctx.names.rollout_slot(slot),
            ports,
            headless=False,
            hash_key=f"rollout-slot-{slot}",
            holding=slot,
        )
        for slot in range(role.replicas)
    ]


def _serving_children(
    job: RLJob, role_name: RoleName, role: ServingRole, ctx: RenderContext
) -> list[DesiredChild]:
    service = _service(
        ctx,
        role_name,
        ctx.names.role(role_name),
        _serving_ports(role_name, role),
        headless=False,
        hash_key=role_name.value,
    )
    return [service, _deployment(job, role_name, role, ctx)]


def _trainer_children(job: RLJob, role: TrainerRole, ctx: RenderContext) -> list[DesiredChild]:
    ports = {"master": ctx.trainer_master_port}
    if (port := metrics_port(RoleName.TRAINER, role)) is not None:
        ports["metrics"] = port
    service = _service(
        ctx,
        RoleName.TRAINER,
        ctx.names.trainer_service(),
        ports,
        headless=True,
        hash_key="trainer",
        publish_not_ready=True,
    )
    if suspended(job) or ctx.finished:
        return [service]
    return [service, _trainer_job(job, role, ctx)]


def _serving_ports(role_name: RoleName, role: Role) -> dict[str, int]:
    port = serving_port(role_name, role)
    ports = {"http": port}
    if role.metrics is not None and role.metrics.port != port:
        ports["metrics"] = role.metrics.port
    return ports


def _service(
    ctx: RenderContext,
    role_name: RoleName,
    name: str,
    ports: Mapping[str, int],
    *,
    headless: bool,
    hash_key: str,
    publish_not_ready: bool = False,
    holding: int | None = None,
) -> DesiredChild:
    """`holding`: a slot Service, selecting only the role's pod that holds that slot."""
    selector = ctx.names.selector(role_name)
    if holding is not None:
        selector[slot_label(holding)] = SLOT_HELD
    spec: dict[str, Any] = {
        "selector": selector,
        "ports": [
            {"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"}
            for port_name, port in ports.items()
        ],
    }
    if headless:
        spec["clusterIP"] = "None"
    if publish_not_ready:
        # Rank 0's name must resolve before any rank is Ready: ranks rendezvous to become Ready.
        spec["publishNotReadyAddresses"] = True
    digest = service_hash(hash_key, ports)
    labels = ctx.names.labels(role_name)
    return _child(ctx, "Service", "v1", name, role_name, digest=digest, labels=labels, spec=spec)


def _deployment(
    job: RLJob, role_name: RoleName, role: ServingRole, ctx: RenderContext
) -> DesiredChild:
    image = _image(job, role)
    scaled_to_zero = suspended(job) or ctx.finished or ctx.serving_held
    policy_env = ctx.policy_env if role_name == RoleName.ROLLOUT else {}
    # A new generation alone never rolls the engines: it rides along whenever the template
    # is applied for another reason (engines load the newest version from the URI anyway).
    hashed_env = {k: v for k, v in policy_env.items() if k != ENV_POLICY_GENERATION}
    digest = serving_role_hash(
        role_name.value,
        role,
        image,
        scaled_to_zero=scaled_to_zero,
        policy_env=hashed_env,
    )
    labels = ctx.names.labels(role_name)
    template = pod_template(
        PodInputs(
            role_name=role_name,
            role=role,
            image=image,
            labels=labels,
            env=[*_common_env(job, role_name, ctx), *_plain_env(policy_env)],
            ports=container_ports(role_name, role),
            probes=probes(role_name, role),
            readiness_gates=pods.readiness_gates(role_name, role),
        )
    )
    template, digest = _admitted(template, digest, role_name, ctx)
    spec = {
        "replicas": 0 if scaled_to_zero else role.replicas,
        "selector": {"matchLabels": ctx.names.selector(role_name)},
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": role.max_unavailable},
        },
        "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
        "template": template,
    }
    name = ctx.names.role(role_name)
    return _child(
        ctx, "Deployment", "apps/v1", name, role_name, digest=digest, labels=labels, spec=spec
    )


def _trainer_job(job: RLJob, role: TrainerRole, ctx: RenderContext) -> DesiredChild:
    image = _image(job, role)
    digest = trainer_hash(
        role,
        image,
        attempt=ctx.attempt,
        resume_env=ctx.resume_env,
        avoid_nodes=ctx.avoid_nodes,
    )
    labels = {**ctx.names.labels(RoleName.TRAINER), ATTEMPT_LABEL: str(ctx.attempt)}
    launched = _trainer_launch(role, ctx)
    entrypoint = (launched.command, launched.args or []) if launched.command else None
    template = pod_template(
        PodInputs(
            role_name=RoleName.TRAINER,
            role=role,
            image=image,
            labels=labels,
            env=[
                *_common_env(job, RoleName.TRAINER, ctx),
                *launched.env,
                *_checkpoint_env(job, ctx),
                *_plain_env(ctx.resume_env),
                *_engine_page_env(role),
            ],
            env_from_secrets=_credentials_secret(job),
            ports=_with_engine_port(
                role, [*container_ports(RoleName.TRAINER, role), *launched.ports]
            ),
            probes=launched.probes,
            entrypoint=entrypoint,
            pod_spec={
                "restartPolicy": "Never",
                # With the Job controller's hostname <job>-<index> this gives every rank a
                # stable DNS name under the trainer's headless Service.
                "subdomain": ctx.names.trainer_service(),
                "terminationGracePeriodSeconds": trainer_grace_default(job),
            },
            avoid_nodes=ctx.avoid_nodes,
        )
    )
    template, digest = _admitted(template, digest, RoleName.TRAINER, ctx)
    spec = {
        "completionMode": "Indexed",
        "completions": role.nodes,
        "parallelism": role.nodes,
        "backoffLimit": 0,
        # The first failed rank fails the whole gang: the operator restarts it as a new attempt.
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]
        },
        "template": template,
        **launched.job_spec,
    }
    name = ctx.names.trainer_job(ctx.attempt)
    return _child(
        ctx, "Job", "batch/v1", name, RoleName.TRAINER, digest=digest, labels=labels, spec=spec
    )


def _admitted(
    template: dict[str, Any], digest: str, role_name: RoleName, ctx: RenderContext
) -> tuple[dict[str, Any], str]:
    """The role's pod template with Kueue's admission merged in, and a spec hash that moves
    with it (a new admission re-applies the role). A conflict was refused before rendering
    (rljob.reconcile.decide); one found here leaves the template as the spec made it."""
    info = ctx.admission.get(role_name.value)
    if info is None:
        return template, digest
    merged = merge_admission(role_name.value, template, info)
    if isinstance(merged, AdmissionConflict):
        return template, digest
    return merged, spec_hash({"spec": digest, "admission": admission_key(info)})


def _with_engine_port(role: TrainerRole, ports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The colocated engines' metrics port declared beside the others, unless one already is
    (the ray launcher's metrics export port)."""
    if role.engines is None or role.engines.metrics_port in {p["containerPort"] for p in ports}:
        return ports
    port = {"name": "engine-metrics", "containerPort": role.engines.metrics_port, "protocol": "TCP"}
    return [*ports, port]


# Read by rljob.sdk.engine_page (PORT_ENV, PAGES_ENV), which the operator may not import.
ENGINE_PAGE_PORT_ENV = "RLJOB_ENGINE_METRICS_PORT"
ENGINE_PAGES_ENV = "RLJOB_ENGINE_METRICS_PAGES"


def _engine_page_env(role: TrainerRole) -> list[dict[str, Any]]:
    """Where the SDK's vLLM plugin serves each engine process's page (exporter plugin; Ray's
    workers inherit the pod's environment, so the engine actors see it)."""
    engines = role.engines
    if engines is None or engines.exporter != EngineExporter.PLUGIN:
        return []
    return _plain_env(
        {ENGINE_PAGE_PORT_ENV: str(engines.metrics_port), ENGINE_PAGES_ENV: str(engines.pages)}
    )


def _trainer_launch(role: TrainerRole, ctx: RenderContext) -> Launch:
    """The launcher's env (topology), entrypoint, ports, probes and Job fields, with the
    attempt."""
    master = ctx.names.trainer_master_address(ctx.namespace, ctx.attempt)
    launched = launch(LaunchInputs(role, master, ctx.trainer_master_port, _node_rank()))
    attempt = {"name": "RLJOB_ATTEMPT", "value": str(ctx.attempt)}
    return dataclasses.replace(launched, env=[*launched.env, attempt])


def _checkpoint_env(job: RLJob, ctx: RenderContext) -> list[dict[str, Any]]:
    """Where the trainer's CheckpointWriter writes (the SDK adds <namespace>/<name>/ itself)."""
    checkpoint = job.spec.checkpoint
    if checkpoint is None:
        return []
    endpoint, region = ctx.default_store.resolve(checkpoint.endpoint, checkpoint.region)
    variables = {
        ENV_CHECKPOINT_URI: checkpoint.uri,
        ENV_JOB_UID: ctx.uid,
        ENV_S3_ADDRESSING_STYLE: checkpoint.addressing_style.value,
        ENV_S3_ENDPOINT: endpoint or "",
        ENV_S3_REGION: region or "",
    }
    return _plain_env({key: value for key, value in variables.items() if value})


def _credentials_secret(job: RLJob) -> tuple[str, ...]:
    checkpoint = job.spec.checkpoint
    return (checkpoint.credentials_secret,) if checkpoint and checkpoint.credentials_secret else ()


def _node_rank() -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}}


def _common_env(job: RLJob, role_name: RoleName, ctx: RenderContext) -> list[dict[str, Any]]:
    """Every pod's identity and the attempt-independent Service addresses of the other roles."""
    env = [
        {"name": "RLJOB_NAME", "value": ctx.name},
        {"name": "RLJOB_NAMESPACE", "value": ctx.namespace},
        {"name": "RLJOB_ROLE", "value": role_name.value},
    ]
    for other in names.ROLE_ORDER:
        if other == role_name or getattr(job.spec.roles, other.value) is None:
            continue
        address = names.service_address(ctx.names.role(other), ctx.namespace)
        env.append({"name": f"RLJOB_{other.value.upper()}_SERVICE", "value": address})
        if other == RoleName.ROLLOUT:
            headless = ctx.names.rollout_headless()
            env.append(
                {
                    "name": "RLJOB_ROLLOUT_HEADLESS_SERVICE",
                    "value": names.service_address(headless, ctx.namespace),
                }
            )
            env += _slot_addresses(job, ctx)
    return env


def _slot_addresses(job: RLJob, ctx: RenderContext) -> list[dict[str, Any]]:
    """slotServices: every slot's host:port, space-separated, as slime's
    --rollout-external-engine-addrs takes them."""
    role = job.spec.roles.rollout
    if role is None or not role.slot_services:
        return []
    port = serving_port(RoleName.ROLLOUT, role)
    addresses = [
        f"{names.service_address(ctx.names.rollout_slot(slot), ctx.namespace)}:{port}"
        for slot in range(role.replicas)
    ]
    return [{"name": ENV_SLOT_ADDRESSES, "value": " ".join(addresses)}]


def _plain_env(variables: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": key, "value": value} for key, value in sorted(variables.items())]


def _image(job: RLJob, role: Role) -> str:
    # The API rejects a role without an image when spec.image is unset.
    return role.image or job.spec.image or ""


def _child(
    ctx: RenderContext,
    kind: str,
    api_version: str,
    name: str,
    role_name: RoleName,
    *,
    digest: str,
    labels: Mapping[str, str],
    spec: dict[str, Any],
) -> DesiredChild:
    body = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": dict(labels),
            "annotations": {SPEC_HASH_ANNOTATION: digest},
            "ownerReferences": [names.owner_reference(ctx.name, ctx.uid)],
        },
        "spec": spec,
    }
    return DesiredChild(kind, api_version, name, role_name.value, digest, body)
