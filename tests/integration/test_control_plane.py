"""The local control plane is real: scheduler, controllers, kwok stages, RBAC and the audit log."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

import psutil
import pytest

from rljob.dev.audit import count_writes
from rljob.dev.components import HEARTBEAT_STOP_LABEL
from rljob.dev.kubeapi import ApiError, Credentials, KubeApi
from rljob.dev.nodes import GPU_RESOURCE
from tests.helpers import count_quantity, wait_for
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration

NCCL_MESSAGE = (
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE) "
    "ran for 600000 milliseconds before timing out."
)


def _container(gpus: int = 0) -> dict[str, Any]:
    limits = {GPU_RESOURCE: str(gpus)} if gpus else {}
    return {"name": "main", "image": "sim/engine:1", "resources": {"limits": limits}}


def _deployment(name: str, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations or {}},
                "spec": {"containers": [_container(gpus)]},
            },
        },
    }


def _pods(cluster: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.api.get(
        f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}"
    )["items"]
    return items


def _running_pod(cluster: Cluster, ns: str, selector: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        pods = [p for p in _pods(cluster, ns, selector) if p["status"].get("phase") == "Running"]
        return pods[0] if pods else None

    return wait_for(running, 60, f"a Running pod matching {selector} in {ns}")


def test_gpu_deployment_is_scheduled_onto_a_gpu_node_and_runs(
    cluster: Cluster, namespace: str
) -> None:
    cluster.api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("gpu", 1))
    pod = _running_pod(cluster, namespace, "app=gpu")
    node = cluster.api.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
    assert count_quantity(node["status"]["allocatable"][GPU_RESOURCE]) >= 1
    assert pod["status"]["containerStatuses"][0]["ready"] is True


def test_pod_asking_for_more_gpus_than_any_node_stays_pending(
    cluster: Cluster, namespace: str
) -> None:
    too_many = (
        max(
            count_quantity(n["status"]["allocatable"].get(GPU_RESOURCE, "0"))
            for n in cluster.api.get("/api/v1/nodes")["items"]
        )
        + 1
    )
    pod = {"metadata": {"name": "greedy"}, "spec": {"containers": [_container(too_many)]}}
    cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", pod)

    def unschedulable_message() -> str | None:
        status = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods/greedy")["status"]
        for cond in status.get("conditions", []):
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return str(cond["message"])
        return None

    message = wait_for(unschedulable_message, 60, "the scheduler's Unschedulable condition")
    assert f"Insufficient {GPU_RESOURCE}" in message
    status = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods/greedy")["status"]
    assert status["phase"] == "Pending"


def test_deleting_a_deployment_garbage_collects_replicasets_and_pods(
    cluster: Cluster, namespace: str
) -> None:
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    cluster.api.create(deployments, _deployment("gc", 1))
    _running_pod(cluster, namespace, "app=gc")
    cluster.api.delete(f"{deployments}/gc", {"propagationPolicy": "Background"})

    def all_gone() -> bool:
        rs = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
        return not rs and not _pods(cluster, namespace, "app=gc")

    wait_for(all_gone, 60, "the ReplicaSet and pods to be garbage-collected")


def test_job_pod_fault_annotations_end_it_failed_with_exact_status(
    cluster: Cluster, namespace: str
) -> None:
    annotations = {
        "sim.rljob.io/fail-exit-code": "134",
        "sim.rljob.io/fail-reason": "Error",
        "sim.rljob.io/fail-message": NCCL_MESSAGE,
        "sim.rljob.io/fail-after": "1s",
    }
    job = {
        "metadata": {"name": "trainer"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "trainer"}, "annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [_container(8)]},
            },
        },
    }
    cluster.api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)

    def failed_pod() -> dict[str, Any] | None:
        pods = [
            p
            for p in _pods(cluster, namespace, "app=trainer")
            if p["status"].get("phase") == "Failed"
        ]
        return pods[0] if pods else None

    pod = wait_for(failed_pod, 60, "the annotated Job pod to fail")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        134,
        "Error",
        NCCL_MESSAGE,
    )

    def job_failed() -> bool:
        status = cluster.api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/trainer")["status"]
        return any(
            c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions", [])
        )

    wait_for(job_failed, 60, "the Job controller to mark the Job Failed")


def test_deployment_pod_fault_annotations_restart_the_container_like_a_kubelet(
    cluster: Cluster, namespace: str
) -> None:
    cluster.api.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("engine", 1)
    )
    pod = _running_pod(cluster, namespace, "app=engine")
    name = pod["metadata"]["name"]
    fault = {"sim.rljob.io/fail-exit-code": "137", "sim.rljob.io/fail-reason": "OOMKilled"}
    cluster.api.merge_patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}", {"metadata": {"annotations": fault}}
    )

    def restarted() -> dict[str, Any] | None:
        current = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        status = current["status"]["containerStatuses"][0]
        return current if status.get("restartCount") == 1 else None

    current = wait_for(restarted, 60, "restartCount to become 1")
    status = current["status"]["containerStatuses"][0]
    assert current["status"]["phase"] == "Running"
    assert status["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert "sim.rljob.io/fail-exit-code" not in current["metadata"].get("annotations", {})


def test_node_whose_heartbeat_stops_goes_not_ready(cluster: Cluster) -> None:
    name = f"lost-node-{secrets.token_hex(3)}"
    node = {
        "metadata": {
            "name": name,
            "labels": {"type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [{"key": "rljob.io/test-only", "effect": "NoSchedule"}]},
    }
    cluster.api.create("/api/v1/nodes", node)

    def ready_status() -> str:
        conditions = cluster.api.get(f"/api/v1/nodes/{name}")["status"].get("conditions", [])
        return next((c["status"] for c in conditions if c["type"] == "Ready"), "")

    try:
        wait_for(lambda: ready_status() == "True", 60, f"{name} to become Ready")
        cluster.api.merge_patch(
            f"/api/v1/nodes/{name}", {"metadata": {"labels": {HEARTBEAT_STOP_LABEL: "true"}}}
        )
        wait_for(lambda: ready_status() not in ("True", ""), 90, f"{name} to go NotReady")
    finally:
        cluster.api.delete(f"/api/v1/nodes/{name}")


def _service_account_api(cluster: Cluster, namespace: str, rules: list[dict[str, Any]]) -> KubeApi:
    """A client authenticated as a new ServiceAccount bound to a Role with `rules`."""
    base = f"/api/v1/namespaces/{namespace}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    cluster.api.create(f"{base}/serviceaccounts", {"metadata": {"name": "narrow"}})
    cluster.api.create(f"{rbac}/roles", {"metadata": {"name": "narrow"}, "rules": rules})
    binding = {
        "metadata": {"name": "narrow"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "narrow"},
        "subjects": [{"kind": "ServiceAccount", "name": "narrow", "namespace": namespace}],
    }
    cluster.api.create(f"{rbac}/rolebindings", binding)
    token = cluster.api.create(
        f"{base}/serviceaccounts/narrow/token", {"spec": {"expirationSeconds": 3600}}
    )["status"]["token"]
    return KubeApi(Credentials(server=cluster.server, ca_file=cluster.run.pki.ca_crt, token=token))


def test_service_account_with_narrow_role_is_denied_a_verb_it_lacks(
    cluster: Cluster, namespace: str
) -> None:
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    sa = _service_account_api(cluster, namespace, rules)
    assert sa.get(f"/api/v1/namespaces/{namespace}/pods")["items"] == []
    with pytest.raises(ApiError) as denied:
        sa.create(
            f"/api/v1/namespaces/{namespace}/pods",
            {"metadata": {"name": "x"}, "spec": {"containers": [_container()]}},
        )
    assert denied.value.status == 403
    assert 'cannot create resource "pods"' in denied.value.body["message"]


def test_audit_helper_counts_exactly_the_writes_a_user_made(
    cluster: Cluster, namespace: str
) -> None:
    rules = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        }
    ]
    sa = _service_account_api(cluster, namespace, rules)
    user = f"system:serviceaccount:{namespace}:narrow"
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    for name in ("a", "b"):
        sa.create(configmaps, {"metadata": {"name": name}, "data": {"k": "v"}})
    sa.merge_patch(f"{configmaps}/a", {"data": {"k": "w"}})
    sa.delete(f"{configmaps}/b")
    sa.get(f"{configmaps}/a")  # reads are not writes
    expected = {"create": 2, "patch": 1, "delete": 1}
    counted = wait_for(
        lambda: (c := count_writes(cluster.run.audit_log, user, since)) == expected and c,
        30,
        f"the audit log to show {expected} by {user}",
    )
    assert counted == expected
    assert count_writes(cluster.run.audit_log, user, since=dt.datetime.now(dt.UTC)) == {}


def test_every_listening_socket_is_on_loopback(cluster: Cluster) -> None:
    roots = [psutil.Process(pid) for pid in cluster.state.pids.values()]
    processes = {p.pid: p for root in roots for p in [root, *root.children(recursive=True)]}
    listening = [
        (proc.name(), conn.laddr)
        for proc in processes.values()
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert {name for name, _ in listening} >= {"etcd", "kube-apiserver", "kwok"}
    assert [(name, addr) for name, addr in listening if addr.ip != "127.0.0.1"] == []
