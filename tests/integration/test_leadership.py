"""Two operator replicas with leader election: exactly one holds the Lease and acts; when it is
SIGKILLed, the standby takes the Lease over and carries on reconciling."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from rljob.dev.bed import OPERATOR_NAMESPACE, OperatorProcess, start_operator
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import apply_rljob, example, get_rljob, patch_spec, wait_condition

pytestmark = pytest.mark.integration

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
            env=operator.store.env(),
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
    holder = wait_for(lambda: _holder(cluster), 60, "a replica to hold the Lease")
    pids = {replica.process.pid: replica for replica in replicas}
    leader_pid = next(pid for pid in pids if holder.endswith(f"-{pid}"))
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
