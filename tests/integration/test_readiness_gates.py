"""The bed's kwok honours readiness gates as a kubelet does: a pod with spec.readinessGates runs
with its containers ready (ContainersReady True) but turns Ready only once every gate's
condition is True in its status, which its owner sets through pods/status (a strategic merge
patch, as the operator sets rljob.io/policy-current); kwok never sets a gate itself, and its
later status updates keep the gate's condition. A pod without gates turns Ready as before, and a
Deployment's readyReplicas follows its pods' Ready."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from rljob.vocabulary.labels import POLICY_CURRENT_GATE
from tests.helpers import wait_for
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration

OTHER_GATE = "example.com/warm-cache"
# How long a gated pod must stay not Ready: kwok applies a stage within milliseconds of the event.
HOLD_SECONDS = 5
STRATEGIC = "application/strategic-merge-patch+json"

Pod = dict[str, Any]


def _template(gates: tuple[str, ...], restart_policy: str = "Always") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "engine", "image": "sim/engine:1"}],
        "restartPolicy": restart_policy,
    }
    if gates:
        spec["readinessGates"] = [{"conditionType": gate} for gate in gates]
    return {"metadata": {"labels": {"app": "gated"}}, "spec": spec}


def _create_deployment(cluster: Cluster, namespace: str, gates: tuple[str, ...]) -> None:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gated"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "gated"}},
            "template": _template(gates),
        },
    }
    cluster.api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", body)


def _create_pod(cluster: Cluster, namespace: str, gates: tuple[str, ...]) -> str:
    body = {"apiVersion": "v1", "kind": "Pod", **_template(gates, restart_policy="Never")}
    body["metadata"]["name"] = "gated"
    cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return "gated"


def _pods(cluster: Cluster, namespace: str) -> list[Pod]:
    items: list[Pod] = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return items


def _pod(cluster: Cluster, namespace: str, name: str) -> Pod:
    return cluster.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def _condition(pod: Pod, kind: str) -> dict[str, Any]:
    found = [c for c in pod["status"].get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def _is_true(pod: Pod, kind: str) -> bool:
    return _condition(pod, kind).get("status") == "True"


def _running_pod(cluster: Cluster, namespace: str) -> str:
    """The one pod's name once kwok runs it with its containers ready."""

    def running() -> str | None:
        pods = [p for p in _pods(cluster, namespace) if p["status"].get("phase") == "Running"]
        ready = [p for p in pods if _is_true(p, "ContainersReady")]
        return str(ready[0]["metadata"]["name"]) if ready else None

    return wait_for(running, 60, f"a Running pod with ContainersReady in {namespace}")


def _holds(probe: Callable[[], bool], seconds: float, message: str) -> None:
    """Fails as soon as probe is false within the next `seconds`."""
    deadline = time.monotonic() + seconds

    def still() -> bool:
        assert probe(), f"{message} stopped holding"
        return time.monotonic() >= deadline

    wait_for(still, seconds + 10, f"{message} for {seconds:.0f}s", interval=0.5)


def _set_gate(cluster: Cluster, namespace: str, pod: str, gate: str) -> None:
    """What the operator does: a strategic merge patch of the condition on pods/status."""
    condition = {"type": gate, "status": "True", "reason": "PolicyCurrent"}
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/status"
    cluster.api.request("PATCH", path, {"status": {"conditions": [condition]}}, STRATEGIC)


def _ready_replicas(cluster: Cluster, namespace: str) -> int:
    deployment = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/gated")
    return int(deployment["status"].get("readyReplicas") or 0)


def _not_ready_behind_gates(cluster: Cluster, namespace: str, pod: str) -> bool:
    seen = _pod(cluster, namespace, pod)
    ready = _condition(seen, "Ready")
    return ready.get("status") == "False" and ready.get("reason") == "ReadinessGatesNotReady"


def test_a_gated_pod_turns_ready_only_when_its_gate_is_true(
    cluster: Cluster, namespace: str
) -> None:
    _create_deployment(cluster, namespace, (POLICY_CURRENT_GATE,))
    pod = _running_pod(cluster, namespace)
    _holds(
        lambda: (
            _not_ready_behind_gates(cluster, namespace, pod)
            and _ready_replicas(cluster, namespace) == 0
        ),
        HOLD_SECONDS,
        "Ready False (ReadinessGatesNotReady) and no ready replica",
    )
    assert _condition(_pod(cluster, namespace, pod), POLICY_CURRENT_GATE) == {}

    _set_gate(cluster, namespace, pod, POLICY_CURRENT_GATE)
    wait_for(lambda: _is_true(_pod(cluster, namespace, pod), "Ready"), 30, f"{pod} Ready")
    wait_for(lambda: _ready_replicas(cluster, namespace) == 1, 30, "one ready replica")
    seen = _pod(cluster, namespace, pod)
    assert "reason" not in _condition(seen, "Ready")
    assert _condition(seen, POLICY_CURRENT_GATE)["reason"] == "PolicyCurrent"


def test_every_gate_must_be_true(cluster: Cluster, namespace: str) -> None:
    _create_deployment(cluster, namespace, (POLICY_CURRENT_GATE, OTHER_GATE))
    pod = _running_pod(cluster, namespace)
    _set_gate(cluster, namespace, pod, POLICY_CURRENT_GATE)
    _holds(
        lambda: _not_ready_behind_gates(cluster, namespace, pod),
        HOLD_SECONDS,
        "Ready False with one of two gates True",
    )
    _set_gate(cluster, namespace, pod, OTHER_GATE)
    wait_for(lambda: _is_true(_pod(cluster, namespace, pod), "Ready"), 30, f"{pod} Ready")


def test_a_pod_without_gates_turns_ready_as_before(cluster: Cluster, namespace: str) -> None:
    _create_deployment(cluster, namespace, ())
    pod = _running_pod(cluster, namespace)
    wait_for(lambda: _ready_replicas(cluster, namespace) == 1, 30, "one ready replica")
    seen = _pod(cluster, namespace, pod)
    assert _is_true(seen, "Ready") and _is_true(seen, "Initialized")
    assert {c["type"] for c in seen["status"]["conditions"]} <= {
        "PodScheduled",
        "Initialized",
        "Ready",
        "ContainersReady",
    }


def test_the_gate_survives_kwoks_later_status_updates(cluster: Cluster, namespace: str) -> None:
    """kwok's completion stage patches the pod's conditions (Ready and ContainersReady False,
    phase Succeeded): a strategic merge by condition type leaves the gate as its owner set it."""
    pod = _create_pod(cluster, namespace, (POLICY_CURRENT_GATE,))
    _running_pod(cluster, namespace)
    _set_gate(cluster, namespace, pod, POLICY_CURRENT_GATE)
    wait_for(lambda: _is_true(_pod(cluster, namespace, pod), "Ready"), 30, f"{pod} Ready")

    annotate = {"metadata": {"annotations": {"sim.rljob.io/complete-after": "0s"}}}
    cluster.api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{pod}", annotate)
    wait_for(
        lambda: _pod(cluster, namespace, pod)["status"].get("phase") == "Succeeded",
        30,
        f"{pod} to complete",
    )
    seen = _pod(cluster, namespace, pod)
    assert _condition(seen, "Ready")["reason"] == "PodCompleted"
    assert _condition(seen, POLICY_CURRENT_GATE)["status"] == "True"
