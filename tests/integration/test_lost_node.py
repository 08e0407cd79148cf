"""A trainer rank lost with its node, on the real control plane: the test's own kwok nodes run the
trainer, one stops its kubelet heartbeat (the node lifecycle controller turns it Ready Unknown
after the bed's --node-monitor-grace-period of 20 s), and the simulator's ranks left hang in
their next collective as NCCL's would. With failurePolicy.nodeLostTimeout the operator restarts
the gang (NodeLost) and the next attempt runs without waiting for the lost pod, which no kubelet
will ever confirm gone; with a long timeout the simulator's NCCL watchdog (60 s) ends the attempt
instead, as it would on a cluster (ten minutes there)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rljob.dev.components import HEARTBEAT_STOP_LABEL
from rljob.dev.nodes import GPU_RESOURCE
from rljob.dev.sim import Simulator
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    FAST_BACKOFF,
    PODS,
    apply_rljob,
    children,
    example,
    get_rljob,
    wait_condition,
)

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
POOL = "rljob.io/test-pool"
CAPACITY = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU_RESOURCE: "8"}


@pytest.fixture
def pool(cluster: Cluster) -> Iterator[tuple[str, list[str]]]:
    """Three kwok nodes of 8 GPUs that only this test's trainer tolerates."""
    pool = secrets.token_hex(3)
    names = [f"lost-{pool}-{index}" for index in range(3)]
    for name in names:
        cluster.api.create("/api/v1/nodes", {
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"type": "kwok", "kubernetes.io/hostname": name, POOL: pool},
            },
            "spec": {"taints": [{"key": POOL, "value": pool, "effect": "NoSchedule"}]},
            "status": {"capacity": CAPACITY, "allocatable": CAPACITY},
        })  # fmt: skip
    wait_for(lambda: all(_ready(cluster, n) == "True" for n in names), 60, "the pool Ready")
    yield pool, names
    for name in names:
        cluster.api.delete(f"/api/v1/nodes/{name}")


def _ready(cluster: Cluster, node: str) -> str:
    conditions = cluster.api.get(f"/api/v1/nodes/{node}")["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "")


def _job(pool: str, node_lost_timeout: str) -> dict[str, Any]:
    toleration = {"key": POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    return example(
        roles={
            "rollout": {"replicas": 1, "gpus": 1},
            "trainer": {
                "nodes": 2,
                "gpus": 8,
                "nodeSelector": {POOL: pool},
                "tolerations": [toleration],
            },
        },
        failurePolicy={**FAST_BACKOFF, "nodeLostTimeout": node_lost_timeout},
    )


def _ranks(cluster: Cluster, namespace: str, attempt: int) -> list[dict[str, Any]]:
    return [
        pod
        for pod in children(cluster, namespace, PODS, NAME, "trainer")
        if pod["metadata"]["labels"].get("rljob.io/attempt") == str(attempt)
    ]


def _lose_a_rank_node(cluster: Cluster, namespace: str) -> tuple[str, float]:
    """Stops the heartbeat of the node under rank 1; (that node, when)."""
    running = wait_for(
        lambda: [p for p in _ranks(cluster, namespace, 1) if p["status"].get("phase") == "Running"]
        if len(_ranks(cluster, namespace, 1)) == 2 else None,
        60, "both ranks of attempt 1 running",
    )  # fmt: skip
    rank1 = next(
        p for p in running
        if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "1"
    )  # fmt: skip
    node = rank1["spec"]["nodeName"]
    cluster.api.merge_patch(f"/api/v1/nodes/{node}",
                            {"metadata": {"labels": {HEARTBEAT_STOP_LABEL: "true"}}})  # fmt: skip
    return node, time.monotonic()


def _attempt(cluster: Cluster, namespace: str, attempt: int, timeout: float) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = get_rljob(cluster, namespace, NAME)
        return job if (job.get("status") or {}).get("attempt") == attempt else None

    return wait_for(reached, timeout, f"{NAME} at attempt {attempt}")


def test_a_rank_lost_with_its_node_restarts_the_gang_without_waiting_for_it(
    cluster: Cluster,
    operator: Operator,
    simulator: Simulator,
    namespace: str,
    pool: tuple[str, list[str]],
) -> None:
    apply_rljob(cluster, namespace, _job(pool[0], "5s"))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    node, stopped = _lose_a_rank_node(cluster, namespace)
    wait_for(lambda: _ready(cluster, node) == "Unknown", 90, f"{node} Ready Unknown")
    unknown = time.monotonic()

    job = _attempt(cluster, namespace, 2, timeout=90)
    restarted = time.monotonic()
    status = job["status"]
    assert status["restarts"]["recent"][-1]["reason"] == "NodeLost", status["restarts"]
    assert node in status["restarts"]["recent"][-1]["message"]
    assert [(s["name"], s["reason"]) for s in status["suspectNodes"]] == [(node, "NodeLost")]

    def next_attempt_runs() -> bool:
        ranks = _ranks(cluster, namespace, 2)
        return len(ranks) == 2 and all(p["status"].get("phase") == "Running" for p in ranks)

    wait_for(next_attempt_runs, 90, "attempt 2's ranks running")
    ran = time.monotonic()
    left = [p for p in _ranks(cluster, namespace, 1) if p["spec"]["nodeName"] == node]
    assert left, "the lost pod is still there (no kubelet confirms it): attempt 2 did not wait"
    assert all(p["spec"]["nodeName"] != node for p in _ranks(cluster, namespace, 2))
    print(  # the closing note's figures (pytest -s)
        f"\nlost node: Unknown {unknown - stopped:.1f} s after the heartbeat stopped; gang "
        f"restart {restarted - unknown:.1f} s after Unknown (nodeLostTimeout 5s); attempt 2 "
        f"running {ran - restarted:.1f} s later, the lost pod still "
        f"{'Terminating' if left[0]['metadata'].get('deletionTimestamp') else 'Running'}"
    )


def test_without_the_node_read_the_hung_ranks_watchdog_ends_the_attempt(
    cluster: Cluster,
    operator: Operator,
    simulator: Simulator,
    namespace: str,
    pool: tuple[str, list[str]],
) -> None:
    """The baseline the operator shortens: the rank left blocks in its next collective and its
    NCCL watchdog aborts it (the simulator's 60 s stand for torch's 600 s); the gang restart
    follows that failure, its root cause still the rank whose node was lost (disrupted ranks
    come first in the root-cause order)."""
    apply_rljob(cluster, namespace, _job(pool[0], "10m"))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _, stopped = _lose_a_rank_node(cluster, namespace)

    job = _attempt(cluster, namespace, 2, timeout=180)
    restarted = time.monotonic()

    events = simulator.client().events()
    aborted = [e for e in events if e["event"] == "nccl-watchdog" and namespace in e["pod"]]
    assert [e["pod"].rsplit("/", 1)[1].split("-")[-2] for e in aborted] == ["0"], aborted
    [record] = job["status"]["restarts"]["recent"]
    assert record["reason"] == "NodeLost", record
    print(f"\nwatchdog baseline: gang restart {restarted - stopped:.1f} s after the heartbeat "
          "stopped, once the simulator's NCCL watchdog (60 s) failed rank 0")  # fmt: skip
