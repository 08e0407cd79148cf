"""Names, labels and addresses of an RLJob's children. Fixed by DESIGN section 2: changing them
orphans live objects."""

from __future__ import annotations

from rljob.api import API_VERSION, KIND, RoleName
from rljob.api.labels import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY_LABEL,
    ROLE_LABEL,
    SPEC_HASH_ANNOTATION,
)
from rljob.api.labels import MANAGED_BY as MANAGER

# The label names stay importable from here (rljob.reconcile and benchmarks take them here).
__all__ = [
    "ATTEMPT_LABEL",
    "COMPLETION_INDEX_ANNOTATION",
    "JOB_LABEL",
    "MANAGED_BY_LABEL",
    "MANAGER",
    "ROLE_LABEL",
    "ROLE_ORDER",
    "SPEC_HASH_ANNOTATION",
    "child_labels",
    "owner_reference",
    "role_child_name",
    "rollout_headless_service_name",
    "selector_labels",
    "service_address",
    "trainer_job_name",
    "trainer_master_address",
    "trainer_service_name",
]

# Deterministic order: Services before workloads, rollout first.
ROLE_ORDER = (RoleName.ROLLOUT, RoleName.TRAINER, RoleName.REFERENCE, RoleName.VERIFIER)


def role_child_name(job_name: str, role: RoleName) -> str:
    """The Deployment and Service of a serving role, and the trainer's headless Service."""
    return f"{job_name}-{role.value}"


def rollout_headless_service_name(job_name: str) -> str:
    return f"{job_name}-rollout-headless"


def trainer_service_name(job_name: str) -> str:
    return role_child_name(job_name, RoleName.TRAINER)


def trainer_job_name(job_name: str, attempt: int) -> str:
    """The trainer's Indexed Job of one attempt: "<name>-trainer-a<attempt>"."""
    return f"{job_name}-trainer-a{attempt}"


def service_address(service_name: str, namespace: str) -> str:
    return f"{service_name}.{namespace}.svc"


def trainer_master_address(job_name: str, namespace: str, attempt: int) -> str:
    """Rank 0's stable DNS name: the Job controller sets hostname <job>-<index>, and the pod's
    subdomain is the trainer's headless Service."""
    pod_hostname = f"{trainer_job_name(job_name, attempt)}-0"
    return f"{pod_hostname}.{trainer_service_name(job_name)}.{namespace}.svc"


def selector_labels(job_name: str, role: RoleName) -> dict[str, str]:
    """What Services and Deployments select on: job and role only, never the attempt."""
    return {JOB_LABEL: job_name, ROLE_LABEL: role.value}


def child_labels(job_name: str, role: RoleName) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGER, **selector_labels(job_name, role)}


def owner_reference(job_name: str, job_uid: str) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job_name,
        "uid": job_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
