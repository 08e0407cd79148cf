"""REST paths of the kinds the operator reads and writes (no discovery round-trips needed)."""

from __future__ import annotations

from rljob.api import GROUP, PLURAL, VERSION

_PLURALS: dict[tuple[str, str], str] = {
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "Job"): "jobs",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "Event"): "events",
    ("v1", "Node"): "nodes",
    (f"{GROUP}/{VERSION}", "RLJob"): PLURAL,
    ("coordination.k8s.io/v1", "Lease"): "leases",
    ("kueue.x-k8s.io/v1beta2", "Workload"): "workloads",
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): "resourceflavors",
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"): "workloadpriorityclasses",
    ("scheduling.k8s.io/v1", "PriorityClass"): "priorityclasses",
}
_API_VERSIONS = {kind: api_version for api_version, kind in _PLURALS}


def api_version_of(kind: str) -> str:
    return _API_VERSIONS[kind]


def object_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """/api/v1/namespaces/ns/pods/name, /apis/apps/v1/namespaces/ns/deployments, ..."""
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    tail = f"/{name}" if name else ""
    return f"{prefix}{scope}/{_PLURALS[(api_version, kind)]}{tail}"


def rljob_path(namespace: str, name: str) -> str:
    return object_path(f"{GROUP}/{VERSION}", "RLJob", namespace, name)
