"""Optional: simulated trainers write real checkpoints through the SDK's CheckpointWriter.

Off by default (`--checkpoints` turns it on). Rank 0 of a trainer pod whose spec carries
RLJOB_CHECKPOINT_URI writes one small version per checkpoint phase, to the store named by the
simulator's own environment (RLJOB_S3_ENDPOINT, AWS credentials: the bed's S3 server), with the
pod's job, namespace and attempt (a pod without RLJOB_ATTEMPT, a JobSet's, writes under the
attempt its labels give). boto3 is imported only when this is enabled.

A trainer whose profile sets `resume_from_store` and whose pod names no RLJOB_RESUME_STEP
resumes, as a framework does from its own checkpoint directory (verl's resume_mode auto reads
its latest_checkpointed_iteration.txt), from the version the store's latest.json names:
`newest_step`.
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
ENV_ATTEMPT = "RLJOB_ATTEMPT"
ENV_NAMESPACE = "RLJOB_NAMESPACE"
ENV_JOB = "RLJOB_NAME"


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
        *,
        attempt: int | None = None,
    ) -> Future[int]:
        return self._pool.submit(
            self._write, instance, dict(pod_env), step, generation, shard_bytes, attempt=attempt
        )

    def _write(
        self,
        instance: str,
        pod_env: dict[str, str],
        step: int,
        generation: int,
        size: int,
        *,
        attempt: int | None = None,
    ) -> int:
        from rljob.sdk import CheckpointWriter

        writer = self._writers.get(instance)
        if writer is None:
            # The operator's variable first; else the attempt the pod's labels give (JobSet's
            # restart count), else 0.
            number = None if pod_env.get(ENV_ATTEMPT) else (attempt or 0)
            writer = CheckpointWriter.from_env(pod_env, endpoint=self.endpoint, attempt=number)
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
                    attempt=workload.pod.attempt,
                )

    def newest_step(self, pod_env: Mapping[str, str]) -> int | None:
        """The step of the version latest.json names under the pod's checkpoint location (its
        RLJOB_CHECKPOINT_URI, RLJOB_NAMESPACE and RLJOB_NAME); None without one, or when the store
        cannot say (the trainer then starts from scratch, as a framework finding no checkpoint
        does)."""
        from rljob.checkpoint_protocol.layout import CheckpointLocation
        from rljob.checkpoint_protocol.s3 import CheckpointStore

        uri, namespace, job = (pod_env.get(k) for k in (ENV_CHECKPOINT_URI, ENV_NAMESPACE, ENV_JOB))
        if not (uri and namespace and job):
            return None
        try:
            store = CheckpointStore(CheckpointLocation.from_uri(uri, namespace, job), self.endpoint)
            pointer = store.read_pointer()
            return None if pointer is None else pointer[0].version_id.step
        except Exception as exc:  # a store that cannot answer: from scratch, said
            log.warning("%s/%s: cannot read the newest checkpoint: %s", namespace, job, exc)
            return None

    def forget(self, instance: str) -> None:
        self._writers.pop(instance, None)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
