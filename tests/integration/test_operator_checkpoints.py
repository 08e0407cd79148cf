"""The operator and versioned checkpoints on the real S3 server: each attempt resumes from the
newest eligible valid version (falling back past a broken one), attempt numbers survive a
re-created RLJob, and a store outage makes the attempt wait with a condition."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.checkpoint_protocol.layout import CheckpointLocation
from rljob.dev.prometheus import PrometheusServer
from rljob.sdk.checkpoint import CheckpointWriter
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    JOBS,
    apply_rljob,
    children,
    condition,
    example,
    get_rljob,
    kubectl,
    rljob_path,
    trainer_env,
    wait_condition,
)
from tests.integration.s3_fixtures import S3Bucket

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"


def _job_with_checkpoints(bucket: S3Bucket, **checkpoint: Any) -> dict[str, Any]:
    return example(
        checkpoint={"uri": f"s3://{bucket.name}/ckpt", "addressingStyle": "path", **checkpoint}
    )


def _writer(bucket: S3Bucket, namespace: str, attempt: int) -> CheckpointWriter:
    location = CheckpointLocation(bucket.name, "ckpt", namespace, NAME)
    return CheckpointWriter(location, attempt, endpoint=bucket.endpoint)


def _commit(writer: CheckpointWriter, step: int) -> None:
    with writer.version(step) as version:
        version.write_bytes("model/rank0.pt", b"weights" * 100)
        version.write_bytes("optim/rank0.pt", b"state" * 100)


def _restart_trainer(cluster: Cluster, namespace: str, nonce: str) -> None:
    annotations = {"rljob.io/restart-request": f"trainer/{nonce}"}
    cluster.api.merge_patch(rljob_path(namespace, NAME), {"metadata": {"annotations": annotations}})


def test_next_attempt_resumes_from_the_newest_checkpoint(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    apply_rljob(cluster, namespace, _job_with_checkpoints(s3_bucket))
    first = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    assert condition(first, "CheckpointReady")["reason"] == "NoCheckpoint"
    env = trainer_env(cluster, namespace, 1)
    assert env["RLJOB_CHECKPOINT_URI"] == f"s3://{s3_bucket.name}/ckpt"
    assert "RLJOB_RESUME_STEP" not in env

    writer = _writer(s3_bucket, namespace, attempt=1)
    _commit(writer, 100)
    _restart_trainer(cluster, namespace, "after-100")

    env = trainer_env(cluster, namespace, 2)
    assert (env["RLJOB_RESUME_STEP"], env["RLJOB_RESUME_VERSION"]) == (
        "100",
        "v000000000100-a000001",
    )
    assert (
        env["RLJOB_RESUME_URI"].rstrip("/").endswith(f"/{namespace}/{NAME}/v000000000100-a000001")
    )
    job = wait_condition(cluster, namespace, NAME, "CheckpointReady")
    assert job["status"]["checkpoint"]["resumedFrom"]["version"] == "v000000000100-a000001"
    markers = s3_bucket.all_keys(f"ckpt/{namespace}/{NAME}/attempts/")
    assert [k.rsplit("/", 1)[1] for k in markers] == ["a000001.json", "a000002.json"]
    # A zombie of attempt 1 commits a higher step after attempt 2 started: never resumed from.
    zombie = CheckpointWriter(
        writer.location, 1, endpoint=s3_bucket.endpoint, check_newer_attempt=False
    )
    _commit(zombie, 150)
    _restart_trainer(cluster, namespace, "after-zombie")
    assert trainer_env(cluster, namespace, 3)["RLJOB_RESUME_STEP"] == "100"


def test_a_broken_newest_version_falls_back_with_a_warning(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    apply_rljob(cluster, namespace, _job_with_checkpoints(s3_bucket))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    writer = _writer(s3_bucket, namespace, attempt=1)
    _commit(writer, 100)
    _commit(writer, 200)
    broken = f"ckpt/{namespace}/{NAME}/v000000000200-a000001/optim/rank0.pt"
    s3_bucket.client.delete_object(Bucket=s3_bucket.name, Key=broken)
    _restart_trainer(cluster, namespace, "broken")

    assert trainer_env(cluster, namespace, 2)["RLJOB_RESUME_STEP"] == "100"
    ready = condition(
        wait_condition(cluster, namespace, NAME, "CheckpointReady"), "CheckpointReady"
    )
    assert ready["reason"] == "FellBack" and "optim/rank0.pt" in ready["message"]
    events = kubectl(
        cluster, "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}"
    )
    assert "CheckpointFallback" in events


def test_a_recreated_job_continues_attempt_numbers(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    apply_rljob(cluster, namespace, _job_with_checkpoints(s3_bucket))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _restart_trainer(cluster, namespace, "once")
    trainer_env(cluster, namespace, 2)
    cluster.api.delete(rljob_path(namespace, NAME))
    wait_for(
        lambda: not children(cluster, namespace, JOBS, NAME), 60, "the old job's children to go"
    )

    apply_rljob(cluster, namespace, _job_with_checkpoints(s3_bucket))
    trainer_env(cluster, namespace, 3)
    assert get_rljob(cluster, namespace, NAME)["status"]["attempt"] == 3
    events = kubectl(
        cluster, "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}"
    )
    assert "AttemptsContinued" in events


def test_a_store_outage_makes_the_attempt_wait_with_a_condition(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    dead = "http://127.0.0.1:9"  # discard port: nothing answers S3 there
    apply_rljob(cluster, namespace, _job_with_checkpoints(s3_bucket, endpoint=dead))
    job = wait_condition(cluster, namespace, NAME, "CheckpointStoreUnavailable", timeout=90)
    assert "attempt 1 waits" in condition(job, "CheckpointStoreUnavailable")["message"]
    assert children(cluster, namespace, JOBS, NAME) == []

    cluster.api.merge_patch(
        rljob_path(namespace, NAME), {"spec": {"checkpoint": {"endpoint": operator.store.endpoint}}}
    )
    trainer_env(cluster, namespace, 1)
    wait_condition(
        cluster, namespace, NAME, "CheckpointStoreUnavailable", status="False", timeout=60
    )


def test_a_save_reported_by_the_trainer_refreshes_latest_without_a_restart(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3_bucket: S3Bucket,
    prometheus: PrometheusServer,
) -> None:
    body = _job_with_checkpoints(s3_bucket)
    body["spec"]["health"] = {"source": {"prometheus": {"url": prometheus.url}}, "interval": "1s"}
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _commit(_writer(s3_bucket, namespace, attempt=1), 100)

    def latest() -> str | None:
        checkpoint = get_rljob(cluster, namespace, NAME)["status"].get("checkpoint") or {}
        return (checkpoint.get("latest") or {}).get("version")

    # The simulated trainer's rljob_checkpoint_step moves as it "saves": the operator lists then.
    assert (
        wait_for(latest, 90, "status.checkpoint.latest from the trainer's report")
        == "v000000000100-a000001"
    )
    assert get_rljob(cluster, namespace, NAME)["status"]["attempt"] == 1
    listing = kubectl(cluster, "get", "rlj", NAME, "-n", namespace)
    assert "CHECKPOINT" in listing.splitlines()[0]
