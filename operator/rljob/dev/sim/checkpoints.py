"""Optional: simulated trainers write real checkpoints through the SDK's CheckpointWriter.

Off by default (`--checkpoints` turns it on). Rank 0 of a trainer pod whose spec carries
RLJOB_CHECKPOINT_URI writes one small version per checkpoint phase, to the store named by the
simulator's own environment (RLJOB_S3_ENDPOINT, AWS credentials: the bed's S3 server), with the
pod's job, namespace and attempt. boto3 is imported only when this is enabled.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rljob.dev.sim.models import TrainerModel

if TYPE_CHECKING:
    from rljob.dev.sim.sim_metrics import SimMetrics
    from rljob.dev.sim.workload import Workload

log = logging.getLogger(__name__)

ENV_CHECKPOINT_URI = "RLJOB_CHECKPOINT_URI"


class CheckpointSink:
    """Writes versions on a small thread pool; at most one write in flight per trainer."""

    def __init__(self, env: Mapping[str, str] | None = None, workers: int = 2) -> None:
        from rljob.checkpoint_protocol.s3.transport import StoreEndpoint

        self.endpoint = StoreEndpoint.from_env(os.environ if env is None else env)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sim-ckpt")
        self._writers: dict[str, Any] = {}

    def wants(self, pod_env: Mapping[str, str], completion_index: int) -> bool:
        return completion_index == 0 and bool(pod_env.get(ENV_CHECKPOINT_URI))

    def submit(
        self,
        instance: str,
        pod_env: Mapping[str, str],
        step: int,
        generation: int,
        shard_bytes: int,
    ) -> Future[int]:
        return self._pool.submit(
            self._write, instance, dict(pod_env), step, generation, shard_bytes
        )

    def _write(
        self, instance: str, pod_env: dict[str, str], step: int, generation: int, size: int
    ) -> int:
        from rljob.sdk import CheckpointWriter

        writer = self._writers.get(instance)
        if writer is None:
            writer = CheckpointWriter.from_env(pod_env, endpoint=self.endpoint)
            self._writers[instance] = writer
        shard = random.Random(f"{instance}:{step}").randbytes(size)
        with writer.version(step, policy_generation=generation) as version:
            version.write_bytes("model/rank0.pt", shard)
            state = {"step": step, "policy_generation": generation, "simulated": True}
            version.write_bytes("train_state.json", json.dumps(state).encode())
        return step

    def tick(self, workloads: Iterable[Workload], metrics: SimMetrics) -> None:
        """Collects finished writes and starts the next due one of each writing trainer."""
        for workload in workloads:
            model = workload.model
            if not isinstance(model, TrainerModel) or not workload.writes_checkpoints:
                continue
            pending = workload.pending_write
            if pending is not None and pending.done():
                workload.pending_write = None
                try:
                    model.committed(pending.result())
                    metrics.checkpoints.labels("committed").inc()
                except Exception as exc:
                    metrics.checkpoints.labels("failed").inc()
                    log.warning("%s: checkpoint failed: %s", workload.pod.key, exc)
            if workload.pending_write is None and model.checkpoints_due and not model.hung:
                step = model.checkpoints_due.pop()
                model.checkpoints_due.clear()
                workload.pending_write = self.submit(
                    workload.instance,
                    workload.pod.env,
                    step,
                    model.generation,
                    model.profile.shard_bytes,
                )

    def forget(self, instance: str) -> None:
        self._writers.pop(instance, None)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
