"""A queued RLJob against the real Kueue (its manager built from sigs.k8s.io/kueue v0.17.0, its
webhooks on, RLJob under integrations.externalFrameworks): the Workload the operator writes
passes Kueue's validation, no pod exists before Kueue admits it, the admission's flavor is in
its pods, the operator writes PodsReady, and a queue without quota keeps it waiting with
Kueue's reason."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rljob.dev.bed import BED_ALLOWLIST, OperatorProcess, start_operator
from rljob.dev.binaries import bin_dir
from rljob.dev.kubeapi import ApiError
from rljob.dev.kueue import KUEUE_NAMESPACE_LABEL, KueueManager
from rljob.reconcile.workload import workload_name
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator, delete_namespace
from tests.integration.rljobs import apply_rljob, example, get_rljob

pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

GPU_PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}  # every bed node's
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "rl-gpus"
FLAVOR = "h100"


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> Iterator[KueueManager]:
    manager = KueueManager(cluster.run, bin_dir())
    manager.start(cluster.api)
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
        "spec": {"nodeLabels": GPU_PRODUCT},
    }
    cluster.api.apply(f"{KUEUE}/resourceflavors/{FLAVOR}", flavor, field_manager="test")
    try:
        yield manager
    finally:
        manager.stop(cluster.api)


def _cluster_queue(cluster: Cluster, gpus: int) -> None:
    quota = {"cpu": "1000", "memory": "10Ti", "nvidia.com/gpu": str(gpus)}
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {"name": name, "nominalQuota": value}
                                for name, value in quota.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }
    cluster.api.apply(f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}", body, field_manager="test")


@pytest.fixture
def queued_namespace(cluster: Cluster, kueue: KueueManager) -> Iterator[str]:
    """A namespace Kueue manages, with a LocalQueue `team-a` on the ClusterQueue."""
    name = f"kueue-{secrets.token_hex(3)}"
    meta = {"name": name, "labels": {KUEUE_NAMESPACE_LABEL: "true"}}
    cluster.api.create("/api/v1/namespaces", {"metadata": meta})
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        f"the default ServiceAccount in {name}",
    )
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team-a", "namespace": name},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    cluster.api.create(f"{KUEUE}/namespaces/{name}/localqueues", local)
    yield name
    delete_namespace(cluster, name)


@pytest.fixture
def kueue_operator(
    cluster: Cluster, operator: Operator, queued_namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator run as with the chart's kueue.enabled, alone on the queued namespace (the
    session's operator stops meanwhile: it might watch every namespace)."""
    operator.current.stop()
    started = start_operator(
        cluster.api, cluster.run, tmp_path / "operator", "--resync-seconds=20", *BED_ALLOWLIST,
        watch=(queued_namespace,), kueue=True,
    )  # fmt: skip
    try:
        yield started
    finally:
        started.stop()
        operator.ensure_default()


def _queued_job(name: str) -> dict[str, Any]:
    body = example("rljob-minimal")
    body["metadata"] = {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}
    return body


def _workload(cluster: Cluster, namespace: str, job: dict[str, Any]) -> dict[str, Any] | None:
    name = workload_name(job["metadata"]["name"], job["metadata"]["uid"])
    try:
        return cluster.api.get(f"{KUEUE}/namespaces/{namespace}/workloads/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _condition(body: dict[str, Any] | None, kind: str) -> tuple[str, str] | None:
    for c in ((body or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"], c["reason"]
    return None


def _pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"])


def test_a_queued_job_runs_once_kueue_admits_it(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    _cluster_queue(cluster, gpus=0)
    job = apply_rljob(cluster, ns, _queued_job("queued"))
    workload = wait_for(lambda: _workload(cluster, ns, job), 60, "the job's Workload")
    assert workload["spec"]["queueName"] == "team-a"
    assert "reserved for internal kueue use" in _refused(cluster, ns, workload)
    assert [s["name"] for s in workload["spec"]["podSets"]] == ["rollout", "trainer"]

    def waiting() -> dict[str, Any] | None:
        queue = (get_rljob(cluster, ns, "queued").get("status") or {}).get("queue") or {}
        return queue if "insufficient quota" in queue.get("message", "") else None

    queue = wait_for(waiting, 60, "the job to say why Kueue keeps it waiting")
    assert queue["state"] == "Pending"
    assert _pods(cluster, ns) == []

    _cluster_queue(cluster, gpus=16)  # rollout 2 x 1 + trainer 1 x 8
    wait_for(
        lambda: _condition(_workload(cluster, ns, job), "Admitted") == ("True", "Admitted"),
        60,
        "Kueue to admit the Workload",
    )
    trainer = wait_for(
        lambda: _trainer_job(cluster, ns), 60, "the trainer Job, once the job is admitted"
    )
    template = trainer["spec"]["template"]
    assert template["spec"]["nodeSelector"] == GPU_PRODUCT
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "trainer"
    assert not trainer["spec"].get("suspend"), "Kueue's job integration suspended our child"
    wait_for(
        lambda: _condition(_workload(cluster, ns, job), "PodsReady") == ("True", "Started"),
        120,
        "the operator to report PodsReady",
    )
    status = get_rljob(cluster, ns, "queued")["status"]
    assert (status["queue"]["state"], status["queue"]["clusterQueue"]) == (
        "Admitted",
        CLUSTER_QUEUE,
    )


def test_a_job_whose_queue_does_not_exist_says_so(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    body = _queued_job("lost")
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "nowhere"
    apply_rljob(cluster, ns, body)

    def said() -> dict[str, Any] | None:
        queue = (get_rljob(cluster, ns, "lost").get("status") or {}).get("queue") or {}
        return queue if "nowhere" in queue.get("message", "") else None

    # Kueue's words: "LocalQueue nowhere doesn't exist" (workload_controller.go:603)
    queue = wait_for(said, 60, "the job to say its LocalQueue does not exist")
    assert (queue["state"], queue["reason"], queue["localQueue"]) == (
        "Pending",
        "Inadmissible",
        "nowhere",
    )
    assert _pods(cluster, ns) == []


def _refused(cluster: Cluster, namespace: str, workload: dict[str, Any]) -> str:
    """Kueue's validating webhook answers for this namespace: a copy of the operator's Workload
    asking for the `pods` resource (Kueue's own, workload_webhook.go:165-174) is refused."""
    bad = {k: workload[k] for k in ("apiVersion", "kind", "spec")}
    bad["metadata"] = {"name": "refused", "namespace": namespace}
    container = bad["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    container.setdefault("resources", {}).setdefault("requests", {})["pods"] = "1"
    with pytest.raises(ApiError) as refused:
        cluster.api.create(f"{KUEUE}/namespaces/{namespace}/workloads", bad)
    return str(refused.value.body)


def _trainer_job(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    jobs = cluster.api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return next(iter(jobs), None)
