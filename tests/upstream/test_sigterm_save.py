"""A last save on SIGTERM is best effort (issue #13): torchrun SIGKILLs its workers
TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds after forwarding SIGTERM (default 30; torch 2.15.0,
torch/distributed/launcher/api.py: LaunchConfig.shutdown_timeout, and
torch/distributed/elastic/multiprocessing/api.py: SubprocessContext._close), and a save cut off
there leaves shards without a manifest. The next attempt, planned as the operator plans it,
resumes from the previous complete version, never from the cut-off one."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.validity import Problem
from rljob.dev.controlplane import wait_until
from rljob.sdk.checkpoint import resolve_resume
from tests.integration.s3_fixtures import S3Bucket, s3_bucket_fixture, s3_server_fixture
from tests.upstream.dcp_attempts import pod_env, start_attempt
from tests.upstream.dcp_torchrun import NODES, PROCS_PER_NODE, start_gang

__all__ = ["s3_bucket_fixture", "s3_server_fixture"]

WORLD = NODES * PROCS_PER_NODE
SAVE_STEP = 3  # workloads/dcp_train.py
# Short so the test does not sit out torchrun's default 30 s; long enough for DCP and the
# node uploads to finish on a loaded machine (the commit waits on a slow shard regardless).
SHUTDOWN_TIMEOUT = 8


def test_save_cut_off_by_torchrun_sigkill_is_never_resumed_from(
    torch_venv: Path, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    store = s3_bucket.store()
    plan = start_attempt(store, 1)
    env = {
        **pod_env(s3_bucket, store, plan),
        "DCP_MODE": "sigterm",
        "DCP_OUT": str(tmp_path),
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT),
    }
    with start_gang(torch_venv, "dcp_train.py", env, tmp_path / "attempt1") as gang:
        ready = [tmp_path / f"ready-rank{r}" for r in range(WORLD)]
        wait_until(lambda: all(p.exists() for p in ready), 180, "the first committed save")
        gang.signal(signal.SIGTERM)
        stopped = time.monotonic()
        codes = gang.wait(SHUTDOWN_TIMEOUT + 60)
        took = time.monotonic() - stopped
        logs = gang.logs()
    assert all(code != 0 for code in codes), logs
    # torchrun's own words when its window ends (multiprocessing/api.py, _close).
    assert "forcefully exiting via" in logs, logs
    assert took >= SHUTDOWN_TIMEOUT, took
    uploaded = [tmp_path / f"uploaded-rank{r}" for r in range(WORLD)]
    assert all(p.exists() for p in uploaded), "the last save never reached its uploads"

    complete = VersionId(SAVE_STEP, 1)
    versions = store.list_versions()
    cut = [v for v in versions if v != complete]
    assert len(cut) == 1 and cut[0].step > SAVE_STEP, versions
    cut_verdict = store.validate(cut[0])
    assert cut_verdict.problem is Problem.INCOMPLETE, cut_verdict  # shards, no manifest
    assert any(k.startswith("dcp/") for k in versions[cut[0]].objects), "nothing uploaded"

    following = start_attempt(store, 2)
    assert following.chosen is not None and following.chosen.version == complete
    assert cut[0].name in following.problem, following.problem  # seen, and passed over
    resume = resolve_resume(pod_env(s3_bucket, store, following))
    assert resume is not None and resume.version == complete
