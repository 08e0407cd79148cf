"""A Workload read as Kueue left it, an admission turned into each role's node labels,
tolerations, labels and annotations, and merged into the role's pods with Kueue's conflict
rule; and the job side's Workload status writes (PodsReady, the quota released after an
eviction, Finished)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rljob.reconcile.admission import (
    AdmissionConflict,
    Flavor,
    MissingFlavor,
    PodSetInfo,
    admission_infos,
    merge_admission,
    workload_state,
)
from rljob.reconcile.workload_status import finished, pods_ready, released, with_pods_ready
from tests.unit.reconcile.kueue_world import condition

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {
    "h100": Flavor({"gpu.type": "h100"}, (GPU_TAINT,)),
    "cpu": Flavor({"node.kind": "cpu"}),
}


ADMITTED = [
    condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu"),
    condition("Admitted", "True", "Admitted", "The workload is admitted"),
]


def _workload(*conditions: dict[str, Any], admitted: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if admitted:
        status["admission"] = {
            "clusterQueue": "gpu",
            "podSetAssignments": [
                {"name": "trainer", "flavors": {"nvidia.com/gpu": "h100", "cpu": "h100"}},
                {"name": "rollout", "flavors": {"nvidia.com/gpu": "h100", "cpu": "cpu"}},
            ],
        }
    return {
        "metadata": {"name": "rljob-demo-495a5", "generation": 1},
        "spec": {"queueName": "team-a", "podSets": []},
        "status": status,
    }


def test_an_admission_gives_each_role_its_flavors_labels_and_queue() -> None:
    infos = admission_infos(workload_state(_workload(*ADMITTED)), FLAVORS)
    assert not isinstance(infos, MissingFlavor)
    trainer, rollout = infos["trainer"], infos["rollout"]
    assert trainer.node_selector == {"gpu.type": "h100"}
    assert trainer.tolerations == (GPU_TAINT,)  # once, though two resources name the flavor
    assert rollout.node_selector == {"gpu.type": "h100", "node.kind": "cpu"}
    assert trainer.labels == {
        "kueue.x-k8s.io/podset": "trainer",
        "kueue.x-k8s.io/local-queue-name": "team-a",
        "kueue.x-k8s.io/cluster-queue-name": "gpu",
    }
    assert trainer.annotations == {"kueue.x-k8s.io/workload": "rljob-demo-495a5"}


def test_an_assigned_flavor_not_yet_seen_is_waited_for() -> None:
    state = workload_state(_workload(*ADMITTED))
    assert admission_infos(state, {"cpu": FLAVORS["cpu"]}) == MissingFlavor("h100")


TEMPLATE = {
    "metadata": {"labels": {"rljob.io/role": "trainer"}},
    "spec": {"nodeSelector": {"zone": "a"}, "tolerations": [GPU_TAINT], "containers": []},
}


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        pytest.param(
            PodSetInfo(
                {"kueue.x-k8s.io/podset": "trainer"}, {}, {"gpu.type": "h100"}, (GPU_TAINT,)
            ),
            {
                "labels": {"rljob.io/role": "trainer", "kueue.x-k8s.io/podset": "trainer"},
                "nodeSelector": {"zone": "a", "gpu.type": "h100"},
                "tolerations": [GPU_TAINT],
            },
            id="merged-toleration-not-doubled",
        ),
        pytest.param(
            PodSetInfo(node_selector={"zone": "a"}),
            {
                "labels": {"rljob.io/role": "trainer"},
                "nodeSelector": {"zone": "a"},
                "tolerations": [GPU_TAINT],
            },
            id="same-value-is-no-conflict",
        ),
        pytest.param(
            PodSetInfo(node_selector={"zone": "b"}),
            AdmissionConflict("trainer", "nodeSelector", "zone", "a", "b"),
            id="node-selector-conflict",
        ),
        pytest.param(
            PodSetInfo(labels={"rljob.io/role": "x"}),
            AdmissionConflict("trainer", "labels", "rljob.io/role", "trainer", "x"),
            id="label-conflict",
        ),
    ],
)
def test_an_admission_merges_into_a_pod_template(info: PodSetInfo, expected: Any) -> None:
    merged = merge_admission("trainer", TEMPLATE, info)
    if isinstance(expected, AdmissionConflict):
        assert merged == expected
        return
    assert isinstance(merged, dict)
    got = {
        "labels": merged["metadata"]["labels"],
        "nodeSelector": merged["spec"]["nodeSelector"],
        "tolerations": merged["spec"]["tolerations"],
    }
    assert got == expected


def test_a_conflict_is_said_in_kueues_words() -> None:
    conflict = AdmissionConflict("trainer", "nodeSelector", "zone", "a", "b")
    assert conflict.message() == (
        "role trainer: invalid admission check PodSetUpdate: conflict for nodeSelector: "
        "conflict for key=zone, value1=a, value2=b"
    )


# generatePodsReadyCondition (kueue v0.17.0 pkg/controller/jobframework/reconciler.go:1611-1670)
@pytest.mark.parametrize(
    ("conditions", "ready", "expected"),
    [
        pytest.param([], True, ("False", "WaitForStart"), id="not-admitted"),
        pytest.param(ADMITTED, False, ("False", "WaitForStart"), id="admitted-starting"),
        pytest.param(ADMITTED, True, ("True", "Started"), id="started"),
        pytest.param(
            [*ADMITTED, condition("PodsReady", "True", "Started")],
            False,
            ("False", "WaitForRecovery"),
            id="a-pod-lost",
        ),
        pytest.param(
            [*ADMITTED, condition("PodsReady", "False", "WaitForRecovery")],
            False,
            ("False", "WaitForRecovery"),
            id="still-recovering",
        ),
        pytest.param(
            [*ADMITTED, condition("PodsReady", "False", "WaitForRecovery")],
            True,
            ("True", "Recovered"),
            id="recovered",
        ),
    ],
)
def test_pods_ready_as_kueue_decides_it(
    conditions: list[dict[str, Any]], ready: bool, expected: tuple[str, str]
) -> None:
    state = workload_state(_workload(*conditions, admitted=bool(conditions)))
    assert pods_ready(state, ready)[:2] == expected


def test_pods_ready_is_written_only_when_its_status_or_reason_moves() -> None:
    body = _workload(*ADMITTED, condition("PodsReady", "True", "Started"))
    assert with_pods_ready(body, workload_state(body), True, NOW) is None
    written = with_pods_ready(body, workload_state(body), False, NOW)
    assert written is not None
    ready = next(c for c in written if c["type"] == "PodsReady")
    assert (ready["reason"], ready["lastTransitionTime"]) == (
        "WaitForRecovery",
        "2026-11-30T12:00:00Z",
    )
    assert [c["type"] for c in written] == ["QuotaReserved", "Admitted", "PodsReady"]  # in place


@pytest.mark.parametrize(
    ("reason", "requeued"),
    [
        pytest.param("Preempted", "True", id="preempted"),
        pytest.param("NodeFailures", "True", id="node-failures"),
        pytest.param("PodsReadyTimeout", "False", id="pods-ready-timeout"),
    ],
)
def test_an_evicted_workload_gives_its_quota_back(reason: str, requeued: str) -> None:
    body = _workload(*ADMITTED, condition("Evicted", "True", reason, "Preempted to make room"))
    status = released(body, workload_state(body), NOW)
    assert status is not None
    assert status["admission"] is None
    by_type = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert by_type["Requeued"] == (requeued, reason)
    assert by_type["QuotaReserved"] == ("False", "Pending")
    assert by_type["Admitted"] == ("False", "NoReservation")
    assert by_type["Evicted"] == ("True", reason)


def test_a_workload_neither_evicted_nor_reserved_keeps_its_status() -> None:
    admitted = _workload(*ADMITTED)
    assert released(admitted, workload_state(admitted), NOW) is None
    gone = _workload(condition("Evicted", "True", "Preempted"), admitted=False)
    assert released(gone, workload_state(gone), NOW) is None


def test_finished_is_written_once() -> None:
    body = _workload(*ADMITTED)
    written = finished(body, workload_state(body), "Succeeded", "job done", NOW)
    assert written is not None and written[-1]["reason"] == "Succeeded"
    done = {**body, "status": {**body["status"], "conditions": written}}
    assert finished(done, workload_state(done), "Failed", "later", NOW) is None
