"""A trainer rank lost with its node: a node Ready Unknown for nodeLostTimeout (or gone) under a
running rank is a failed attempt (NodeLost): the gang restarts, the node turns suspect, and the
next attempt does not wait for the old pod that no kubelet will confirm gone."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from rljob.api import ActionKind, FailureReason
from rljob.reconcile.decide import Decision
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.nodes import NodeState, lost_rank, nodes_to_read
from rljob.runtime.gather import node_state
from tests.unit.reconcile.test_decide import decide_now, journal, running_world
from tests.unit.reconcile.world import World

MINUTE = dt.timedelta(minutes=1)


def unreachable(w: World, index: int = 1) -> str:
    """The rank's node stopped reporting: the node lifecycle controller set its pods not ready."""
    name = f"{trainer_job_name(w.name, 1)}-{index}"
    w.pods[name] = dataclasses.replace(w.pods[name], ready=False)
    return w.pods[name].node


@pytest.mark.parametrize(
    ("ready", "since", "seconds", "lost"),
    [
        pytest.param("Unknown", False, 600, False, id="unknown-since-when-unread"),
        pytest.param("Unknown", True, 59, False, id="unknown-within-the-timeout"),
        pytest.param("Unknown", True, 60, True, id="unknown-for-the-timeout"),
        pytest.param("Gone", False, 0, True, id="gone-at-once"),
        pytest.param("NotReady", True, 600, False, id="not-ready-kubelet-alive"),
        pytest.param("Unread", False, 600, False, id="unread-proves-nothing"),
        pytest.param("Ready", True, 600, False, id="ready"),
    ],
)  # fmt: skip
def test_a_rank_is_lost_when_its_node_stays_unreachable(
    ready: str, since: bool, seconds: float, lost: bool
) -> None:
    w = running_world()
    node = unreachable(w)
    state = NodeState(ready, since=w.now if since else None)
    w.advance(seconds)

    found = lost_rank(w.job, w.observed, {node: state}, w.now)

    assert (found is not None) is lost
    if found is not None:
        assert found.disruption == "NodeLost" and node in found.disruption_message


def test_a_lost_rank_restarts_the_gang_marking_its_node_suspect() -> None:
    w = running_world()
    node = unreachable(w)
    nodes = {node: NodeState("Unknown", since=w.now)}
    w.advance(61)

    decision = decide_now(w, node_states=nodes)

    status = decision.plan.status
    action = status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_TRAINER_GANG
    assert action.reason == FailureReason.NODE_LOST and status.attempt == 2
    assert [s.name for s in status.suspect_nodes] == [node]
    assert status.restarts is not None and status.restarts.recent[-1].reason == "NodeLost"
    assert f"node {node} unreachable" in status.restarts.recent[-1].message


def _created(decision: Decision) -> list[str]:
    return [c.name for c in decision.plan.apply if c.kind == "Job"]


@pytest.mark.parametrize(
    ("ready", "waits"),
    [
        pytest.param("Unknown", False, id="lost-node-not-waited-for"),
        pytest.param("NotReady", True, id="a-live-kubelet-is-waited-for"),
    ],
)
def test_the_next_attempt_does_not_wait_for_a_pod_on_a_lost_node(ready: str, waits: bool) -> None:
    """The old Job's foreground deletion waits for a pod no kubelet will ever confirm gone."""
    w = running_world(checkpoint=None)  # no store to wait for
    node = unreachable(w)
    went = w.now
    w.advance(61)
    journal(w, decide_now(w, node_states={node: NodeState("Unknown", since=went)}))
    old_job = ("Job", trainer_job_name(w.name, 1))
    w.children[old_job] = dataclasses.replace(w.children[old_job], deleting=True)
    stuck = f"{trainer_job_name(w.name, 1)}-1"
    w.pods[stuck] = dataclasses.replace(w.pods[stuck], deleting=True)
    w.pods.pop(f"{trainer_job_name(w.name, 1)}-0")  # the reachable rank is gone
    w.advance(5)

    decision = decide_now(w, node_states={node: NodeState(ready, since=went)})

    assert _created(decision) == ([] if waits else [trainer_job_name(w.name, 2)])


@pytest.mark.parametrize(
    ("pod_fields", "phase", "read"),
    [
        pytest.param({"ready": False}, "Running", True, id="a-rank-of-a-running-attempt-not-ready"),
        pytest.param({"ready": False}, "Pending", True,
                     id="a-rank-of-an-attempt-never-all-ready:-the-job-may-never-be-ready"),
        pytest.param({}, "Running", False, id="a-ready-rank"),
        pytest.param({"ready": False, "deleting": True}, "Pending", True, id="a-terminating-pod"),
        pytest.param({"ready": False, "phase": "Failed"}, "Running", False, id="an-ended-pod"),
    ],
)  # fmt: skip
def test_which_nodes_a_pass_reads(pod_fields: dict[str, object], phase: str, read: bool) -> None:
    w = running_world()
    name = f"{trainer_job_name(w.name, 1)}-1"
    w.pods[name] = dataclasses.replace(w.pods[name], **pod_fields)  # type: ignore[arg-type]
    w.body["status"]["phase"] = phase

    assert nodes_to_read(w.job, w.observed) == ([w.pods[name].node] if read else [])


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                     NodeState("Ready"), id="ready"),
        pytest.param({"status": {"conditions": [
                         {"type": "Ready", "status": "Unknown",
                          "lastTransitionTime": "2026-03-01T12:00:00Z"}]}},
                     NodeState("Unknown", dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)),
                     id="unknown-since-its-transition"),
        pytest.param({"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service",
                                           "effect": "NoExecute"}]},
                      "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
                     NodeState("NotReady", out_of_service=True), id="out-of-service"),
        pytest.param({}, NodeState("Unknown"), id="no-ready-condition"),
    ],
)  # fmt: skip
def test_a_node_as_read(body: dict[str, object], expected: NodeState) -> None:
    assert node_state(body) == expected


@pytest.mark.parametrize(
    ("seconds", "requeue"),
    [
        pytest.param(0, 60.0, id="just-unknown:-back-when-the-timeout-ends"),
        pytest.param(45, 15.0, id="midway"),
        pytest.param(61, None, id="lost-already:-acted-on-now"),
    ],
)
def test_a_pass_comes_back_when_a_silent_node_turns_lost(
    seconds: float, requeue: float | None
) -> None:
    """No other event need come: the node's silence is the only signal left."""
    w = running_world()
    node = unreachable(w)
    went = w.now
    w.advance(seconds)

    decision = decide_now(w, node_states={node: NodeState("Unknown", since=went)})

    if requeue is None:
        assert decision.plan.status.attempt == 2
    else:
        assert decision.plan.requeue_after is not None
        assert decision.plan.requeue_after <= requeue
