"""Names, labels and addresses of an RLJob's children. Fixed by docs/architecture.md section 2:
changing them orphans live objects.

A name another object already holds (a leftover of a deleted namesake: an RLJob of the same name,
deleted with --cascade=orphan or not yet collected) is never taken over: the role, or the
trainer attempt, that needs it uses the fallback name instead, `<name>-<5 characters of the
uid>-...` (a pure function of the RLJob's name, uid and attempt, so a restarted operator names
it alike), recorded in status.renamed. A renamed role's pods carry rljob.io/instance and its
selectors ask for it, so its Services never route to the pods a namesake's leftover still runs."""

from __future__ import annotations

from dataclasses import dataclass

from rljob.api import API_VERSION, KIND, RLJob, RoleName
from rljob.vocabulary.labels import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    INSTANCE_LABEL,
    JOB_LABEL,
    MANAGED_BY_LABEL,
    ROLE_LABEL,
    SPEC_HASH_ANNOTATION,
)
from rljob.vocabulary.labels import MANAGED_BY as MANAGER

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
    "ChildNames",
    "child_labels",
    "child_names",
    "fallback_suffix",
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
    """The usual name of a serving role's Deployment and Service, and of the trainer's headless
    Service (a job's own: child_names(job).role)."""
    return ChildNames(job_name).role(role)


def rollout_headless_service_name(job_name: str) -> str:
    return ChildNames(job_name).rollout_headless()


def trainer_service_name(job_name: str) -> str:
    return ChildNames(job_name).trainer_service()


def trainer_job_name(job_name: str, attempt: int) -> str:
    """The usual name of the trainer's Indexed Job of one attempt: "<name>-trainer-a<attempt>"."""
    return ChildNames(job_name).trainer_job(attempt)


def service_address(service_name: str, namespace: str) -> str:
    return f"{service_name}.{namespace}.svc"


def trainer_master_address(job_name: str, namespace: str, attempt: int) -> str:
    """Rank 0's stable DNS name: the Job controller sets hostname <job>-<index>, and the pod's
    subdomain is the trainer's headless Service."""
    return ChildNames(job_name).trainer_master_address(namespace, attempt)


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


FALLBACK_SUFFIX_LENGTH = 5


def fallback_suffix(uid: str) -> str:
    """The RLJob's own part of its fallback names: the first characters of its uid."""
    return uid.replace("-", "")[:FALLBACK_SUFFIX_LENGTH].lower() or "x"


def trainer_scope(attempt: int) -> str:
    """The status.renamed entry of one trainer attempt's Job."""
    return f"trainer-a{attempt}"


@dataclass(frozen=True)
class ChildNames:
    """The names an RLJob's children take: the usual ones, the fallback for renamed scopes."""

    job: str
    uid: str = ""
    renamed: frozenset[str] = frozenset()

    def _base(self, scope: str) -> str:
        return f"{self.job}-{fallback_suffix(self.uid)}" if scope in self.renamed else self.job

    def role(self, role: RoleName) -> str:
        """The Deployment and Service of a serving role, and the trainer's headless Service."""
        return f"{self._base(role.value)}-{role.value}"

    def rollout_headless(self) -> str:
        return f"{self._base(RoleName.ROLLOUT.value)}-rollout-headless"

    def rollout_slot(self, slot: int) -> str:
        """Slot `slot`'s ClusterIP Service (slotServices): the address a driver keeps."""
        return f"{self._base(RoleName.ROLLOUT.value)}-rollout-{slot}"

    def trainer_service(self) -> str:
        return self.role(RoleName.TRAINER)

    def trainer_job(self, attempt: int) -> str:
        return f"{self._base(trainer_scope(attempt))}-trainer-a{attempt}"

    def trainer_master_address(self, namespace: str, attempt: int) -> str:
        """Rank 0's stable DNS name under the trainer's headless Service."""
        return service_address(f"{self.trainer_job(attempt)}-0.{self.trainer_service()}", namespace)

    def selector(self, role: RoleName) -> dict[str, str]:
        """What the role's Services and Deployment select, and its pods carry."""
        labels = selector_labels(self.job, role)
        if role.value in self.renamed:
            labels[INSTANCE_LABEL] = fallback_suffix(self.uid)
        return labels

    def labels(self, role: RoleName) -> dict[str, str]:
        return {MANAGED_BY_LABEL: MANAGER, **self.selector(role)}


def child_names(job: RLJob) -> ChildNames:
    return ChildNames(job.metadata.name, job.metadata.uid or "", frozenset(job.status.renamed))
