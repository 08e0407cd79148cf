"""Suspect nodes on the real control plane: a trainer rank lost with its node (DisruptionTarget
DeletionByTaintManager) gang-restarts the trainer, marks that node suspect for the TTL, and the
next attempt gets a preferred, never a required, anti-affinity: pinned to that one node, it is
scheduled there anyway and SuspectNodeInUse says so."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    JOBS,
    PODS,
    apply_rljob,
    children,
    condition,
    example,
    wait_condition,
)
from tests.integration.s3_fixtures import S3Bucket

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
NODE = "gpu-node-2"  # the only node the trainer's nodeSelector admits
HOSTNAME = "kubernetes.io/hostname"
# What the taint manager sets on a pod of a lost node (Kubernetes >= 1.26), and the SIGKILL.
NODE_LOST = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
             "message": "Taint manager: deleting due to NoExecute taint"}  # fmt: skip
KILLED = {"sim.rljob.io/fail-exit-code": "137", "sim.rljob.io/fail-reason": "Error"}


def _spec(bucket: S3Bucket) -> dict[str, Any]:
    return example(
        roles={
            "rollout": {"replicas": 1, "gpus": 1},
            "trainer": {"nodes": 1, "gpus": 8, "nodeSelector": {HOSTNAME: NODE}},
        },
        checkpoint={"uri": f"s3://{bucket.name}/ckpt", "addressingStyle": "path"},
        failurePolicy={"backoff": {"initial": "1s", "max": "2s"}},
    )


def _running_rank(cluster: Cluster, namespace: str, attempt: int) -> dict[str, Any]:
    def rank() -> dict[str, Any] | None:
        return next(
            (
                pod
                for pod in children(cluster, namespace, PODS, NAME, "trainer")
                if pod["metadata"]["labels"].get("rljob.io/attempt") == str(attempt)
                and pod["status"].get("phase") == "Running"
            ),
            None,
        )

    found: dict[str, Any] = wait_for(rank, 60, f"a rank of attempt {attempt} running")
    return found


def _lose_the_node_of(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    """The rank's pod as the taint manager leaves it when its node is lost: DisruptionTarget,
    then its container killed (the simulator's kwok stage ends it with exit 137)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"
    conditions = cluster.api.get(path)["status"].get("conditions") or []
    stamped = {**NODE_LOST, "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%FT%TZ")}
    cluster.api.merge_patch(f"{path}/status", {"status": {"conditions": [*conditions, stamped]}})
    cluster.api.merge_patch(path, {"metadata": {"annotations": KILLED}})


def test_a_lost_node_is_preferred_against_and_still_runs_the_job_when_it_is_the_only_one(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    apply_rljob(cluster, namespace, _spec(s3_bucket))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    rank = _running_rank(cluster, namespace, 1)
    assert rank["spec"]["nodeName"] == NODE
    _lose_the_node_of(cluster, namespace, rank)

    assert _running_rank(cluster, namespace, 2)["spec"]["nodeName"] == NODE
    job = wait_condition(cluster, namespace, NAME, "SuspectNodeInUse", timeout=90)
    in_use = condition(job, "SuspectNodeInUse")
    assert in_use["reason"] == "ScheduledOnSuspectNode" and NODE in in_use["message"]
    [suspect] = job["status"]["suspectNodes"]
    assert (suspect["name"], suspect["reason"]) == (NODE, "NodeLost")
    marked = dt.datetime.fromisoformat(suspect["markedAt"].replace("Z", "+00:00"))
    until = dt.datetime.fromisoformat(suspect["until"].replace("Z", "+00:00"))
    assert until - marked == dt.timedelta(hours=6)
    [trainer] = children(cluster, namespace, JOBS, NAME, "trainer")
    assert trainer["metadata"]["name"] == f"{NAME}-trainer-a2"
    node_affinity = trainer["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in node_affinity
    [avoid] = node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert avoid["preference"]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": [NODE]}
    ]
