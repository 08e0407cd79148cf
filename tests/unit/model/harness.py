"""Everything that knows how to build and drive the operator's runtime on the model: only this
module changes when the runtime moves. Today's entry is rljob.runtime.runtime.Runtime:
`run_pass(body)` is one pass of one RLJob; it reads children through its kopf indexes (bound
here to the model's Index), writes through `kube` (the model's Cluster), reaches S3 through its
checkpoint client cache (the model's FakeS3) and reads the time through the modules patched in
`use_clock`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import types
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import rljob.reconcile.decide
import rljob.runtime.execute
import rljob.runtime.gather
import rljob.runtime.passes
import rljob.runtime.runtime
from rljob.adapters.checkpoints import Checkpoints
from rljob.adapters.leadership import Leadership
from rljob.health.evaluation import (
    CHECKPOINT_STEP_EVIDENCE,
    POLICY_GENERATION_EVIDENCE,
    TRAINER_STALL,
    Evaluation,
    healthy,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.slots import WeightCopy
from rljob.runtime.runtime import Runtime, RuntimeOptions
from rljob.runtime.weight_copies import Tell, WeightCopies
from rljob.runtime.workers import JobWorkers
from tests.unit.model.cluster import Clock, Cluster
from tests.unit.model.s3 import FakeClients, FakeS3

JSON = dict[str, Any]
JobKey = tuple[str, str]
Operator = Runtime  # what make_runtime builds: one operator process

_LOOP = asyncio.new_event_loop()  # one loop for every pass: the runtime keeps no loop state


class _Bodies(JobWorkers):
    """The worker table without workers: it keeps the newest body per job, from the watch
    (`submit`) or from the runtime's own status writes (`refresh`), as the real one does."""

    def __init__(self) -> None:
        super().__init__(_no_pass)
        self.bodies: dict[str, JSON] = {}

    def submit(self, body: JSON) -> None:
        self.bodies[body["metadata"]["uid"]] = body

    def refresh(self, body: JSON, *, settled: bool = False) -> None:
        uid = body.get("metadata", {}).get("uid", "")
        if uid in self.bodies:
            self.bodies[uid] = body

    def forget(self, body: JSON) -> None:
        super().forget(body)
        self.bodies.pop(body["metadata"]["uid"], None)

    def forget_uid(self, uid: str) -> None:
        self.bodies.pop(uid, None)

    def wake(self, key: JobKey, cause: str = "child") -> None:
        return None

    def wake_all(self) -> None:
        return None


async def _no_pass(body: JSON) -> float | None:
    return None


class _Lease(Leadership):
    """Leader election on the model's Lease (`cluster.lease_holder`): this replica acts while
    it holds it (the real one also stops once its renewals are overdue; in the model the Lease
    only moves after they are)."""

    def __init__(self, cluster: Cluster, identity: str) -> None:
        super().__init__(None, None)
        self.enabled = True
        self.identity = identity
        self._cluster = cluster

    def acting(self) -> bool:
        return self._cluster.lease_holder == self.identity


class RecordedCopies(WeightCopies):
    """Passes.weight_copies without the network: each copy a pass starts is handed to
    `started` (the model's engines load it, model/weights.py) and kept in `started_copies`;
    nothing runs in the background, so nothing is ever in flight."""

    def __init__(self, started: Callable[[WeightCopy], None] | None = None) -> None:
        super().__init__()
        self._started_hook = started
        self.started_copies: list[WeightCopy] = []

    def start(self, job: str, copy: WeightCopy, tell: Tell) -> bool:
        self.started_copies.append(copy)
        if self._started_hook is not None:
            self._started_hook(copy)
        return True

    def running(self) -> int:
        return 0

    async def idle(self) -> None:
        return None

    async def close(self) -> None:
        return None


def make_runtime(
    cluster: Cluster,
    s3: FakeS3,
    identity: str,
    options: RuntimeOptions | None = None,
    copies: RecordedCopies | None = None,
) -> Runtime:
    """A fresh operator process (replica `identity`, electing its leader on the model's Lease):
    nothing survives from an earlier one but cluster and S3. Its weight copies are `copies`
    (a RecordedCopies that records to nowhere when not given: no I/O ever)."""
    checkpoints = Checkpoints()
    checkpoints._clients = FakeClients(s3)
    lease = _Lease(cluster, identity)
    runtime = Runtime(cluster, options or RuntimeOptions(), lease, checkpoints=checkpoints)
    runtime.passes.weight_copies = copies or RecordedCopies()
    runtime.workers = _Bodies()
    runtime.bind_indexes(cluster.index.kopf_indexes())
    return runtime


def run_pass(
    runtime: Runtime, body: JSON, readings: tuple[EngineReading, ...] = ()
) -> float | None:
    """One reconcile pass of one RLJob body; returns the requeue hint. The cluster serves the
    runtime's replica, whose Kube adapter sends writes only while its leadership acts (as
    Runtime.start wires it). `readings`: the rollout engines' latest, as the health loop hands
    them to the pass (PassInputs.engine_readings)."""
    cluster = runtime.kube
    assert isinstance(cluster, Cluster)
    cluster.actor = runtime.leadership.identity
    cluster.may_write = runtime.leadership.acting
    decide = rljob.reconcile.decide.decide

    def with_readings(job: Any, observed: Any, inputs: PassInputs) -> Any:
        return decide(job, observed, dataclasses.replace(inputs, engine_readings=readings))

    with mock.patch.object(rljob.runtime.passes, "decide", with_readings):
        return _LOOP.run_until_complete(runtime.run_pass(body))


def submit(runtime: Runtime, body: JSON) -> None:
    """The RLJob's watch delivered `body` to the runtime's worker."""
    runtime.workers.submit(body)


def forget(runtime: Runtime, body: JSON) -> None:
    """The RLJob's watch delivered its deletion (kopf's DELETED event)."""
    runtime.forget(body)


def prune(runtime: Runtime) -> None:
    """The prune loop's turn: jobs the RLJob index no longer shows are forgotten."""
    runtime.prune()


def remembered(runtime: Runtime, uid: str, key: JobKey) -> list[str]:
    """What the process still holds of the RLJob `uid` (named `key`): its memory, its worker's
    body, the health loop's state (unless a job of the same name it remembers holds it)."""
    held = []
    if uid in runtime.memories:
        held.append("memory")
    if worker_body(runtime, uid) is not None:
        held.append("worker")
    if key in runtime.health.job_keys() and runtime.memories.by_key(key) is None:
        held.append("health-loop")
    return held


def trainer_generation(runtime: Runtime, key: JobKey) -> int | None:
    """The trainer's policy generation the health loop's latest round handed the job's passes."""
    memory = runtime.memories.by_key(key)
    progress = memory.progress if memory is not None else None
    return progress.policy_generation if progress is not None else None


def worker_body(runtime: Runtime, uid: str) -> JSON | None:
    """The body the runtime's worker would pass next: the newest it was given or wrote."""
    workers = runtime.workers
    return workers.bodies.get(uid) if isinstance(workers, _Bodies) else None


def feed_health(runtime: Runtime, key: JobKey, evaluations: list[Evaluation]) -> None:
    """One health round's verdicts for a job, as the health scheduler hands them over (a job
    this process has not run a pass of yet is not watched: the round is dropped)."""
    _LOOP.run_until_complete(runtime._on_health(key, evaluations))


def report_checkpoint(runtime: Runtime, key: JobKey, step: int) -> None:
    """The trainer's checkpoint-step metric reports a save at `step`."""
    evidence: dict[str, float | str] = {CHECKPOINT_STEP_EVIDENCE: step}
    feed_health(runtime, key, [healthy(TRAINER_STALL, "trainer", "heartbeat fresh", evidence)])


def report_generation(runtime: Runtime, key: JobKey, generation: int) -> None:
    """The trainer's rljob_policy_generation reads `generation` (its current attempt's)."""
    evidence: dict[str, float | str] = {POLICY_GENERATION_EVIDENCE: generation}
    feed_health(runtime, key, [healthy(TRAINER_STALL, "trainer", "heartbeat fresh", evidence)])


@contextlib.contextmanager
def use_clock(clock: Clock) -> Iterator[None]:
    """The runtime's wall clock and monotonic clock read the model's clock."""
    shim = types.SimpleNamespace(time=clock.time, monotonic=clock.monotonic)

    def now() -> dt.datetime:
        return clock.now.replace(microsecond=0)  # status times in whole seconds

    with contextlib.ExitStack() as patches:
        patches.enter_context(mock.patch.object(rljob.runtime.passes, "_now", now))
        modules = (rljob.runtime.passes, rljob.runtime.execute, rljob.runtime.runtime,
                   rljob.runtime.gather)  # fmt: skip
        for module in modules:
            patches.enter_context(mock.patch.object(module, "time", shim))
        yield
