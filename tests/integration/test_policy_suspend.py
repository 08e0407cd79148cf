"""The failure policy's Suspend on the real control plane: a user rule suspends the job on a
trainer's NCCL watchdog abort (the fault the bed injects most simply); the job is Suspended in
status only (spec.suspend stays false), its trainer Job gone and its Deployment at 0 replicas,
with the PolicySuspended Event; `kubectl annotate rljob.io/resume-request=<nonce>` resumes it as
attempt 2 from the newest checkpoint, counted as no restart."""

from __future__ import annotations

import pytest

from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    DEPLOYMENTS,
    JOBS,
    apply_rljob,
    children,
    condition,
    events,
    fail_rank0,
    kubectl,
    trainer_env,
    wait_condition,
    wait_phase,
)
from tests.integration.s3_fixtures import S3Bucket
from tests.integration.test_operator_checkpoints import _commit, _writer
from tests.integration.test_remediation import NAME, _spec

pytestmark = pytest.mark.integration

RULE = {"roles": ["trainer"], "onReasons": ["NCCLTimeout"], "action": "Suspend"}
NONCE = "1700000000"


def test_a_suspend_rule_stops_the_run_until_a_resume_request(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    apply_rljob(cluster, namespace, _spec(s3_bucket, rules=[RULE]))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _commit(_writer(s3_bucket, namespace, attempt=1), 50)

    fail_rank0(cluster, namespace, NAME)

    job = wait_phase(cluster, namespace, NAME, "Suspended", timeout=60)
    suspended = condition(job, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "NCCLTimeout")
    assert "rljob.io/resume-request" in suspended["message"]
    assert not job["spec"].get("suspend"), "spec.suspend stays the user's"
    held = job["status"]["suspension"]
    assert (held["reason"], held["rule"]) == ("NCCLTimeout", "failurePolicy.rules[0]")
    # Posted by the pass that journaled the suspension, just after its status write.
    wait_for(lambda: events(cluster, namespace, "PolicySuspended"), 30, "the PolicySuspended Event")
    (said,) = events(cluster, namespace, "PolicySuspended")
    assert said["type"] == "Warning" and "failurePolicy.rules[0]" in said["message"]
    assert "Watchdog caught collective operation timeout" in said["message"]
    wait_for(lambda: not children(cluster, namespace, JOBS, NAME), 60, "the trainer Job gone")
    (rollout,) = children(cluster, namespace, DEPLOYMENTS, NAME, "rollout")
    assert rollout["spec"]["replicas"] == 0
    assert job["status"]["restarts"]["total"] == 0

    kubectl(cluster, "annotate", "rljob", NAME, "-n", namespace, f"rljob.io/resume-request={NONCE}")

    env = trainer_env(cluster, namespace, 2)
    assert env["RLJOB_RESUME_STEP"] == "50", "attempt 2 resumes from the newest checkpoint"
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=60)
    status = job["status"]
    assert status["attempt"] == 2 and "suspension" not in status
    assert status["lastResumeRequest"]["id"] == NONCE and status["lastResumeRequest"]["resumed"]
    assert status["restarts"]["total"] == 0, "a suspension is no restart"
    assert [a["endReason"] for a in status["attempts"][:1]] == ["Suspended"]
    (resumed,) = events(cluster, namespace, "Resumed")
    assert f"rljob.io/resume-request={NONCE}" in resumed["message"]
