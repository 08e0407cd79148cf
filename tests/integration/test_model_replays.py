"""Sequences the action engine's model found breaking it (tests/unit/model/), replayed on the real
control plane and S3 server once fixed: what the in-memory cluster proved must hold on the real
one, with the real Job controller, garbage collector and watches."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.pod_history import trainer_pod_history
from tests.integration.rljobs import (
    JOBS,
    apply_rljob,
    children,
    events,
    fail_rank0,
    get_rljob,
    kubectl,
    trainer_env,
    wait_condition,
)
from tests.integration.s3_fixtures import S3Bucket
from tests.integration.test_operator_checkpoints import (
    _commit,
    _restart_trainer,
    _writer,
)
from tests.integration.test_remediation import NAME, _assert_one_attempt_at_a_time, _spec

pytestmark = pytest.mark.integration


def test_a_trainer_job_deleted_by_hand_starts_the_next_attempt_from_the_newest_checkpoint(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """Replay `trainer-job-deleted-by-hand-starts-the-next-attempt`: the Job was re-created as
    the same attempt, from that attempt's original resume point, losing what it had saved."""
    with trainer_pod_history(cluster, namespace) as history:
        apply_rljob(cluster, namespace, _spec(s3_bucket))
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
        wait_for(
            lambda: all(r.get("jobUid") for r in _attempts(cluster, namespace)),
            60,
            "the operator to record attempt 1's Job",
        )
        _commit(_writer(s3_bucket, namespace, attempt=1), 50)
        kubectl(cluster, "delete", "job", "-n", namespace, f"{NAME}-trainer-a1", "--wait=false")
        env = trainer_env(cluster, namespace, 2)
        job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _assert_one_attempt_at_a_time(history, attempts={"1", "2"})
    assert env["RLJOB_RESUME_STEP"] == "50"
    status = job["status"]
    assert [(r["attempt"], r.get("endReason")) for r in status["attempts"]] == [
        (1, "JobDeleted"),
        (2, None),
    ]
    assert status["restarts"]["total"] == 0, "the user's deletion is not a policy restart"
    assert len(events(cluster, namespace, "TrainerJobDeleted")) == 1


def test_a_manual_restart_during_a_gang_restart_starts_one_attempt_after_it(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """Replay `manual-trainer-restart-during-a-gang-restart`: the request bumped the attempt a
    second time, attempt 2 never got its marker and attempt 3 resumed from scratch."""
    with trainer_pod_history(cluster, namespace) as history:
        apply_rljob(cluster, namespace, _spec(s3_bucket))
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
        _commit(_writer(s3_bucket, namespace, attempt=1), 50)
        fail_rank0(cluster, namespace, NAME)
        wait_for(lambda: _restarts(cluster, namespace) == 1, 60, "the gang restart's journal")
        _restart_trainer(cluster, namespace, "during-gang")
        env = trainer_env(cluster, namespace, 3)
        job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _assert_one_attempt_at_a_time(history, attempts={"1", "2", "3"})
    assert env["RLJOB_RESUME_STEP"] == "50", "attempt 3 resumes in attempt 2's lineage"
    status = job["status"]
    # The policy's gang restart and the user's requested one, both in the ledger.
    assert (status["attempt"], status["restarts"]["total"]) == (3, 2)
    assert [r["reason"] for r in status["restarts"]["recent"]] == [
        "NCCLTimeout",
        "RestartRequested",
    ]
    assert status["lastRestartRequest"]["id"] == "during-gang"
    assert [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)] == [
        f"{NAME}-trainer-a3"
    ]


def _attempts(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list((get_rljob(cluster, namespace, NAME).get("status") or {}).get("attempts") or [])


def _restarts(cluster: Cluster, namespace: str) -> int:
    status = get_rljob(cluster, namespace, NAME).get("status") or {}
    return int((status.get("restarts") or {}).get("total", 0))
