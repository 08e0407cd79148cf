"""RestartRoleInTurn on the real control plane: a rule restarts every rollout engine, the
operator deleting one at a time within maxUnavailable and the longest-running first, counted
once; also when the operator is SIGKILLed at each of the action's crash points, the restart
resumes from its journal without deleting a pod twice or counting again."""

from __future__ import annotations

import pytest

from rljob.crashpoints import IN_TURN_RESTART_CRASH_POINTS
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    PODS,
    apply_rljob,
    children,
    events,
    get_rljob,
    wait_condition,
)
from tests.integration.s3_fixtures import S3Bucket
from tests.integration.test_remediation import NAME, _crash_ids, _oom_twice, _spec

pytestmark = pytest.mark.integration

REPLICAS = 3
RULE = {"roles": ["rollout"], "onReasons": ["OOMKilled"], "action": "RestartRoleInTurn"}


def _created_pods(cluster: Cluster, namespace: str) -> int:
    """Pods the rollout's ReplicaSet created, by its Events (a deleted pod is replaced once)."""
    found = events(cluster, namespace, "SuccessfulCreate")
    return sum(e.get("count", 1) for e in found if "rollout" in e["involvedObject"]["name"])


@pytest.mark.parametrize("crash_at", [None, *IN_TURN_RESTART_CRASH_POINTS], ids=_crash_ids)
def test_an_in_turn_restart_replaces_every_engine_once_oldest_first(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3_bucket: S3Bucket,
    crash_at: str | None,
) -> None:
    body = _spec(s3_bucket, rules=[RULE])
    body["spec"]["roles"]["rollout"].update(replicas=REPLICAS, maxUnavailable=1)
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    before = children(cluster, namespace, PODS, NAME, "rollout")
    uids = {p["metadata"]["uid"] for p in before}
    victim = sorted(p["metadata"]["name"] for p in before)[1]
    _oom_twice(cluster, operator, namespace, victim, crash_at)

    def replaced() -> bool:
        pods = children(cluster, namespace, PODS, NAME, "rollout")
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        fresh = {p["metadata"]["uid"] for p in live}
        return len(fresh) == REPLICAS and not fresh & uids

    wait_for(replaced, 120, "every rollout pod replaced in turn")
    wait_for(
        lambda: "inFlight" not in get_rljob(cluster, namespace, NAME)["status"],
        60,
        "the in-turn restart settled",
    )
    restarts = get_rljob(cluster, namespace, NAME)["status"]["restarts"]
    assert restarts["total"] == 1
    assert (restarts["recent"][-1]["reason"], restarts["recent"][-1]["action"]) == (
        "OOMKilled",
        "RestartRoleInTurn",
    )
    (done,) = events(cluster, namespace, "RoleRestartedInTurn")
    # Oldest first, and by name among pods created in the same second (a loaded machine may
    # create them seconds apart): the order the Event names them in.
    oldest_first = [
        p["metadata"]["name"]
        for p in sorted(
            before, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])
        )
    ]
    assert all(name in done["message"] for name in oldest_first), done["message"]
    went = [done["message"].index(name) for name in oldest_first]
    assert went == sorted(went), done["message"]
    # Each original pod was deleted once: its ReplicaSet created one replacement for each.
    assert _created_pods(cluster, namespace) == 2 * REPLICAS
