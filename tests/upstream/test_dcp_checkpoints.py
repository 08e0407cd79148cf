"""Real DCP checkpoints through the SDK (issue #13): a 2 nodes x 2 processes torchrun job saves an
FSDP2 model and its AdamW state with torch.distributed.checkpoint, each node uploads its own
files into one version and rank 0 commits it; the next attempt, started with the RLJOB_RESUME_*
the operator plans, downloads that version and loads it with DCP bitwise equal."""

from __future__ import annotations

import json
from pathlib import Path

from rljob.checkpoint_protocol.layout import VersionId
from tests.integration.s3_fixtures import S3Bucket, s3_bucket_fixture, s3_server_fixture
from tests.upstream.dcp_attempts import pod_env, start_attempt
from tests.upstream.dcp_torchrun import NODES, PROCS_PER_NODE, start_gang

__all__ = ["s3_bucket_fixture", "s3_server_fixture"]

WORLD = NODES * PROCS_PER_NODE
SAVE_STEP = 3  # workloads/dcp_train.py
RUN_TIMEOUT = 240.0


def run_attempt(
    venv: Path, bucket: S3Bucket, attempt: int, mode: str, run_dir: Path
) -> dict[str, str]:
    """Plans the attempt as the operator does, runs it to the end, returns its pod env."""
    store = bucket.store()
    plan = start_attempt(store, attempt)
    env = {**pod_env(bucket, store, plan), "DCP_MODE": mode, "DCP_OUT": str(run_dir.parent)}
    with start_gang(venv, "dcp_train.py", env, run_dir) as gang:
        codes = gang.wait(RUN_TIMEOUT)
        assert codes == [0] * NODES, gang.logs()
    return env


def test_dcp_version_from_every_node_resumes_bitwise_equal(
    torch_venv: Path, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    first = run_attempt(torch_venv, s3_bucket, 1, "train", tmp_path / "attempt1")
    assert "RLJOB_RESUME_URI" not in first

    saved = VersionId(SAVE_STEP, 1)
    manifest = s3_bucket.store().validate(saved).manifest
    assert manifest is not None
    keys = {shard.key for shard in manifest.shards}
    # One version holds every rank's DCP file (from both nodes) and the coordinator's metadata.
    assert keys == {f"dcp/__{r}_0.distcp" for r in range(WORLD)} | {"dcp/.metadata"}

    second = run_attempt(torch_venv, s3_bucket, 2, "resume", tmp_path / "attempt2")
    assert second["RLJOB_RESUME_VERSION"] == saved.name
    results = [json.loads((tmp_path / f"result-rank{r}.json").read_text()) for r in range(WORLD)]
    for result in results:
        assert result["version"] == saved.name
        assert result["tensors"] >= 20  # 3 layers' weight and bias, each with step, exp_avg(_sq)
        assert result["differed_before_load"] > 0  # the fresh model was not already equal
        assert result["mismatches"] == [], result
