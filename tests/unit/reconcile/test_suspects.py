"""Suspect nodes (pure): only hardware-like evidence on the root-cause rank marks its node, an
entry lasts until `until` (failurePolicy.suspectNodeTTL, 6 h by default), new attempts get a
preferred (never a required) anti-affinity, and SuspectNodeInUse says when a trainer runs on one
anyway."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from rljob.api import ConditionType, FailureReason, SuspectNode
from rljob.reconcile import Observed
from rljob.reconcile.conditions import find
from rljob.reconcile.suspects import marked_suspects, suspect_in_use_state
from tests.unit.reconcile.test_plan import running_world
from tests.unit.reconcile.world import T0, World, example_body, pod

JOB = "grpo-demo"
TTL = dt.timedelta(hours=6)
HOUR = dt.timedelta(hours=1)
ROOT = pod("t-0", "trainer", attempt=1, node="gpu-3", phase="Failed", exit_code=1)
R = FailureReason


@pytest.mark.parametrize(
    ("reason", "marks"),
    [
        pytest.param(R.GPU_HARDWARE_ERROR, True, id="gpu-hardware-error-ecc-or-xid"),
        pytest.param(R.NCCL_NETWORK_ERROR, True, id="nccl-network-error"),
        pytest.param(R.NODE_LOST, True, id="node-lost"),
        pytest.param(R.PREEMPTED, False, id="preempted"),
        pytest.param(R.EVICTED, False, id="evicted"),
        pytest.param(R.CUDA_ERROR, False, id="illegal-memory-access"),
        pytest.param(R.CUDA_OUT_OF_MEMORY, False, id="cuda-out-of-memory"),
        pytest.param(R.NCCL_TIMEOUT, False, id="watchdog-timeout"),
        pytest.param(R.CONTAINER_FAILED, False, id="container-failed"),
        pytest.param(R.OOM_KILLED, False, id="oom-killed"),
        pytest.param(R.TRAINER_STALLED, False, id="trainer-stalled"),
    ],
)
def test_only_hardware_like_evidence_marks_the_node(reason: FailureReason, marks: bool) -> None:
    marked = marked_suspects([], ROOT, reason, T0, TTL)
    expected = [SuspectNode(name="gpu-3", reason=reason, marked_at=T0, until=T0 + TTL)]
    assert marked == (expected if marks else [])


def suspect(name: str, marked_hours_ago: float, until_in_hours: float | None) -> SuspectNode:
    until = None if until_in_hours is None else T0 + until_in_hours * HOUR
    return SuspectNode(
        name=name, reason=R.NODE_LOST, marked_at=T0 - marked_hours_ago * HOUR, until=until
    )


@pytest.mark.parametrize(
    ("current", "root", "names"),
    [
        pytest.param([suspect("gpu-1", 7, -1)], ROOT, ["gpu-3"], id="expired-entries-dropped"),
        pytest.param([suspect("gpu-1", 7, None)], None, [], id="no-until-lasts-the-ttl"),
        pytest.param([suspect("gpu-1", 5, None)], None, ["gpu-1"], id="no-until-within-the-ttl"),
        pytest.param([suspect("gpu-3", 1, 5)], ROOT, ["gpu-3"], id="remarked-once"),
        pytest.param(
            [suspect("gpu-1", 1, 5)],
            dataclasses.replace(ROOT, node=""),
            ["gpu-1"],
            id="no-node-nothing-marked",
        ),
    ],
)
def test_marking_drops_expired_entries_and_refreshes_a_node(
    current: list[SuspectNode], root: Any, names: list[str]
) -> None:
    marked = marked_suspects(current, root, R.GPU_HARDWARE_ERROR, T0, TTL)
    assert [s.name for s in marked] == names
    refreshed = [s for s in marked if s.name == "gpu-3"]
    assert all(s.until == T0 + TTL for s in refreshed)


def with_suspects(body: dict[str, Any], *entries: dict[str, Any]) -> dict[str, Any]:
    body["status"] = {"attempt": 3, "suspectNodes": list(entries)}
    return body


def entry(name: str, marked: dt.datetime, until: dt.datetime | None = None) -> dict[str, Any]:
    stamp: dict[str, Any] = {"name": name, "reason": "GPUHardwareError"}
    stamp["markedAt"] = marked.isoformat()
    if until is not None:
        stamp["until"] = until.isoformat()
    return stamp


@pytest.mark.parametrize(
    ("entries", "ttl", "avoided"),
    [
        pytest.param([entry("gpu-9", T0 - HOUR, T0 + HOUR)], None, ["gpu-9"], id="active"),
        pytest.param([entry("gpu-9", T0 - 7 * HOUR, T0 - HOUR)], None, [], id="expired"),
        pytest.param([entry("gpu-9", T0 - 7 * HOUR)], None, [], id="older-entry-past-the-ttl"),
        pytest.param([entry("gpu-9", T0 - 7 * HOUR)], "12h", ["gpu-9"], id="configured-ttl"),
        pytest.param(
            [entry("gpu-9", T0 - HOUR, T0 + HOUR), entry("gpu-2", T0, T0 + HOUR)],
            None,
            ["gpu-2", "gpu-9"],
            id="two-nodes-one-term",
        ),
    ],
)
def test_the_next_attempt_prefers_other_nodes_until_the_suspects_expire(
    entries: list[dict[str, Any]], ttl: str | None, avoided: list[str]
) -> None:
    body = with_suspects(example_body(), *entries)
    if ttl is not None:
        body["spec"].setdefault("failurePolicy", {})["suspectNodeTTL"] = ttl
    plan = World(body).plan()
    trainer = next(child for child in plan.apply if child.kind == "Job")
    assert trainer.name == f"{JOB}-trainer-a3"
    affinity = trainer.body["spec"]["template"]["spec"].get("affinity", {})
    node_affinity = affinity.get("nodeAffinity", {})
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in node_affinity
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    fields = [f for term in preferred for f in term["preference"]["matchFields"]]
    assert [f["values"][0] for f in fields] == avoided
    assert {(f["key"], f["operator"]) for f in fields} <= {("metadata.name", "NotIn")}
    assert sorted(s.name for s in plan.status.suspect_nodes) == avoided


def test_suspect_node_in_use_is_said_and_clears() -> None:
    world = running_world()
    status = world.body["status"]
    status["suspectNodes"] = [entry("gpu-1", T0, T0 + HOUR)]
    plan = world.step()
    in_use = find(plan.status.conditions, ConditionType.SUSPECT_NODE_IN_USE)
    assert in_use is not None and in_use.status == "True"
    assert in_use.reason == "ScheduledOnSuspectNode"
    assert "gpu-1" in in_use.message and f"{JOB}-trainer-a1-1" in in_use.message
    world.advance(2 * 3600)
    plan = world.step()
    assert find(plan.status.conditions, ConditionType.SUSPECT_NODE_IN_USE) is None
    assert plan.status.suspect_nodes == []


@pytest.mark.parametrize(
    ("node", "phase", "deleting", "status"),
    [
        pytest.param("gpu-1", "Running", False, "True", id="on-a-suspect"),
        pytest.param("gpu-2", "Running", False, "False", id="elsewhere"),
        pytest.param("gpu-1", "Failed", False, "False", id="ended"),
        pytest.param("gpu-1", "Running", True, "False", id="going"),
    ],
)
def test_suspect_node_in_use_looks_at_live_pods_of_the_attempt(
    node: str, phase: str, deleting: bool, status: str
) -> None:
    suspects = [SuspectNode(name="gpu-1", reason=R.NODE_LOST, marked_at=T0)]
    rank = pod("t-0", "trainer", attempt=2, node=node, phase=phase, deleting=deleting)
    states = suspect_in_use_state(suspects, Observed((), (rank,)), 2)
    assert [state.status.value for state in states] == [status]
    assert suspect_in_use_state([], Observed((), (rank,)), 2) == []
