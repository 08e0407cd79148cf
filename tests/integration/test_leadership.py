"""Two operator replicas with leader election: exactly one holds the Lease and acts; when it is
SIGKILLed or frozen, the standby takes the Lease over and carries on reconciling, and a frozen
leader that wakes up exits without writing."""

from __future__ import annotations

import datetime as dt
import os
import signal
from collections.abc import Iterator

import pytest

from rljob.adapters.leadership import LEASE_SECONDS
from rljob.dev.audit import AuditWrite, writes_by_user
from rljob.dev.bed import BED_ALLOWLIST, OPERATOR_NAMESPACE, OperatorProcess, start_operator
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    apply_rljob,
    example,
    fail_rank0,
    get_rljob,
    patch_spec,
    wait_condition,
)

# cluster_wide: cluster-wide operator replicas.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

NAME = "grpo-minimal"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/rljob-operator"


@pytest.fixture
def replicas(
    cluster: Cluster, operator: Operator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[OperatorProcess]]:
    operator.current.stop()  # the session's single replica steps aside for this test
    operator.custom = True
    started = [
        start_operator(
            cluster.api, cluster.run, tmp_path_factory.mktemp(f"replica{i}"),
            f"--leader-election-namespace={OPERATOR_NAMESPACE}", "--resync-seconds=20",
            *BED_ALLOWLIST, env=operator.store.env(),
        )
        for i in range(2)
    ]  # fmt: skip
    yield started
    for replica in started:
        replica.stop()


def _holder(cluster: Cluster) -> str:
    return str(cluster.api.get(LEASE)["spec"].get("holderIdentity", ""))


def test_only_the_lease_holder_acts_and_the_standby_takes_over(
    cluster: Cluster, replicas: list[OperatorProcess], namespace: str
) -> None:
    pids = {replica.process.pid: replica for replica in replicas}
    leader_pid = _leader(cluster, replicas).process.pid
    apply_rljob(cluster, namespace, example())
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)

    os.kill(leader_pid, signal.SIGKILL)
    patch_spec(cluster, namespace, NAME, {"roles": {"rollout": {"replicas": 3}}})
    wait_for(
        lambda: get_rljob(cluster, namespace, NAME)["status"]["roles"]["rollout"]["ready"] == 3,
        90,
        "the standby to take over and scale the rollout role",
    )
    standby = next(pid for pid in pids if pid != leader_pid)
    assert _holder(cluster).endswith(f"-{standby}")


def test_a_frozen_leader_is_replaced_and_exits_without_a_write_when_it_wakes(
    cluster: Cluster, replicas: list[OperatorProcess], namespace: str
) -> None:
    """SIGSTOP the leader past the Lease: the standby takes over and carries out the gang
    restart the leader may have begun; SIGCONT: the old leader exits, writing nothing (audit
    log, by each replica's User-Agent)."""
    leader = _leader(cluster, replicas)
    holder = _holder(cluster)
    standby = next(r for r in replicas if r is not leader)
    apply_rljob(cluster, namespace, example())
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)

    fail_rank0(cluster, namespace, NAME)
    os.kill(leader.process.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: _holder(cluster).endswith(f"-{standby.process.pid}"),
            LEASE_SECONDS + 30,
            "the standby to take the Lease over",
        )
        job = wait_for(
            lambda: (
                (j := get_rljob(cluster, namespace, NAME))["status"].get("attempt") == 2
                and not j["status"].get("inFlight")
                and j
            ),
            90,
            "the gang restart to be finished by the new leader",
        )
    finally:
        woke = dt.datetime.now(dt.UTC)
        os.kill(leader.process.pid, signal.SIGCONT)
    assert job["status"]["restarts"]["total"] == 1
    wait_for(lambda: leader.process.poll() is not None, 60, "the old leader to exit")
    old_agent = f"rljob-operator/{holder}"
    late = [
        w
        for w in writes_by_user(cluster.run.audit_log, leader.user, since=woke)
        if (w.user_agent.startswith(old_agent) or w.user_agent.startswith("kopf"))
        and not _refused_renewal(w)
    ]
    assert late == [], late[:3]


def _refused_renewal(write: AuditWrite) -> bool:
    """A Lease renewal the leader had in flight when it froze, sent on waking with the Lease's
    old resourceVersion and refused (409): the guard working, nothing written. The leader
    election library takes the time before its read, so no check of ours comes between."""
    return write.resource == "leases" and write.verb == "update" and write.code == 409


def _leader(cluster: Cluster, replicas: list[OperatorProcess]) -> OperatorProcess:
    """The replica holding the Lease (an earlier test's holder may linger until it expires)."""

    def leader() -> OperatorProcess | None:
        holder = _holder(cluster)
        return next((r for r in replicas if holder.endswith(f"-{r.process.pid}")), None)

    return wait_for(leader, 60, "one of these replicas to hold the Lease")
