"""The running operator process: shared clients, kopf's child indexes, the per-job workers, the
health loop and the per-job memories; kopf handlers only feed it."""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rljob.adapters.checkpoints import Checkpoints
from rljob.adapters.kube import Kube, connect
from rljob.adapters.leadership import Leadership
from rljob.adapters.metrics import MetricsSources, PodAddresses, SourceKey
from rljob.adapters.observe import JobKey, observed_from
from rljob.health.evaluation import CHECKPOINT_STEP_EVIDENCE, Evaluation
from rljob.health.monitor_engines import EngineGauges, readings_moved
from rljob.observability import JOB_SERIES, JOBS_BY_PHASE, TRAINER_STEP, TRAINER_STEP_RATE
from rljob.reconcile.admission import Flavor
from rljob.reconcile.bottleneck import advice_moved
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.progress import (
    StepSample,
    progress_reading,
    step_rate,
    step_window,
    with_step,
)
from rljob.reconcile.reach import Allowlist
from rljob.runtime.health_loop import HealthScheduler
from rljob.runtime.loop_lag import watch_loop_lag
from rljob.runtime.memory import JobMemory, Memories
from rljob.runtime.passes import Passes
from rljob.runtime.queue_reader import QueueReader
from rljob.runtime.workers import JobWorkers

CHILD_INDEXES = ("deployments_idx", "replicasets_idx", "jobs_idx", "services_idx", "pods_idx")
RLJOB_INDEX = "rljobs_idx"
WORKLOAD_INDEX, FLAVOR_INDEX = "workloads_idx", "resourceflavors_idx"  # with --kueue


@dataclass(frozen=True)
class RuntimeOptions:
    """How the operator process was started."""

    kubeconfig: str | None = None
    # Watch only these namespaces (names or kopf's patterns, e.g. "team-*"); empty: every one.
    namespaces: tuple[str, ...] = ()
    resync_seconds: float = 300.0
    api_timeout: float = 10.0
    lease_namespace: str | None = None  # leader election on: the Lease lives there
    # Where jobs without spec.health.source get their signals; None: their detection is off.
    default_source: SourceKey | None = None
    # The Prometheus URLs, S3 endpoints and buckets jobs may name (rljob.reconcile.reach).
    allowlist: Allowlist = field(default_factory=Allowlist)
    # Kueue runs the cluster's queues: a job with the kueue.x-k8s.io/queue-name label waits for
    # its Workload's admission (docs/kueue.md).
    kueue: bool = False

    @property
    def clusterwide(self) -> bool:
        """Whether kopf watches every namespace: with no namespaces named, or with a pattern
        (e.g. "team-*"), which the handlers then apply (see watches)."""
        return not self.namespaces or any(map(_is_pattern, self.namespaces))

    def watches(self, namespace: str | None) -> bool:
        """Whether the operator acts in this namespace: any when none is named; else one that
        matches a pattern and no "!pattern" (kopf's syntax; a name matches itself)."""
        if namespace is None or not self.namespaces:
            return True
        excluded = [p[1:] for p in self.namespaces if p.startswith("!")]
        included = [p for p in self.namespaces if not p.startswith("!")] or ["*"]
        return any(fnmatch.fnmatchcase(namespace, p) for p in included) and not any(
            fnmatch.fnmatchcase(namespace, p) for p in excluded
        )


def _is_pattern(namespace: str) -> bool:
    return any(ch in namespace for ch in "*?[!")


def engine_readings(gauges: Mapping[str, EngineGauges]) -> tuple[EngineReading, ...]:
    """The health loop's readings as a pass takes them, sorted by pod (times in UTC)."""
    return tuple(
        EngineReading(pod, dt.datetime.fromtimestamp(g.t, dt.UTC), g.running, g.generation)
        for pod, g in sorted(gauges.items())
    )


class Runtime:
    """Shared clients, the child indexes, the per-job workers and memories of one process."""

    def __init__(
        self,
        kube: Kube,
        options: RuntimeOptions,
        leadership: Leadership,
        checkpoints: Checkpoints | None = None,
        health: HealthScheduler | None = None,
    ) -> None:
        self.kube = kube
        self.leadership = leadership
        self.options = options
        self.checkpoints = checkpoints or Checkpoints(timeout=options.api_timeout)
        self.memories = Memories(self._forgotten)
        self.health = health or self._health_scheduler(options)
        self._indexes: dict[str, Mapping[Any, Iterable[Any]]] = {}
        self.passes = Passes(
            kube,
            self.checkpoints,
            leadership,
            memories=self.memories,
            health=self.health,
            observed=self.observed,
            refresh=self._refresh,
            allowlist=self._allowlist(options),
            queue=QueueReader(kube, self._workloads, self._flavors) if options.kueue else None,
        )
        self.workers = JobWorkers(self.passes.run, resync_seconds=options.resync_seconds)
        self._health_task: asyncio.Task[None] | None = None
        self._prune_task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None

    def _allowlist(self, options: RuntimeOptions) -> Allowlist:
        """The platform's allowlist plus the operator's own default source and S3 endpoint."""
        source = options.default_source
        default_url = source.url if source is not None and source.kind == "prometheus" else None
        return options.allowlist.with_defaults(default_url, self.checkpoints.default_endpoint)

    def _health_scheduler(self, options: RuntimeOptions) -> HealthScheduler:
        """Direct scraping resolves pod addresses from the pods the passes observe."""
        addresses = PodAddresses()
        return HealthScheduler(
            MetricsSources(direct_resolver=addresses),
            self._on_health,
            default_source=options.default_source,
            addresses=addresses,
        )

    @classmethod
    async def start(cls, options: RuntimeOptions) -> Runtime:
        api = await connect(options.kubeconfig)
        leadership = Leadership(api, options.lease_namespace)
        kube = Kube(api, timeout=options.api_timeout, may_write=leadership.acting)
        runtime = cls(kube, options, leadership)
        runtime.leadership.start(runtime._elected)
        runtime._health_task = asyncio.create_task(runtime.health.run(), name="rljob:health")
        runtime._prune_task = asyncio.create_task(runtime._prune_loop(), name="rljob:prune")
        runtime._lag_task = asyncio.create_task(watch_loop_lag(), name="rljob:loop-lag")
        return runtime

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(self.options.resync_seconds)
            self.prune()

    async def run_pass(self, body: dict[str, Any]) -> float | None:
        return await self.passes.run(body)

    async def stop(self) -> None:
        for task in (self._health_task, self._prune_task, self._lag_task):
            if task is not None:
                task.cancel()
        await self.leadership.stop()
        await self.workers.stop()
        await self.passes.weight_copies.close()
        await self.kube.close()

    def bind_indexes(self, kwargs: Mapping[str, Any]) -> None:
        """kopf hands its indexes to handlers only; keep a reference for the workers."""
        if not self._indexes:
            names = (*CHILD_INDEXES, RLJOB_INDEX, WORKLOAD_INDEX, FLAVOR_INDEX)
            self._indexes = {name: kwargs[name] for name in names if name in kwargs}

    def observed(self, key: JobKey) -> Observed:
        def values(name: str) -> list[Any]:
            index = self._indexes.get(name)
            return list(index.get(key, ())) if index is not None else []

        children: list[ObservedChild] = [
            *values("deployments_idx"),
            *values("jobs_idx"),
            *values("services_idx"),
        ]
        pods: list[ObservedPod] = values("pods_idx")
        return observed_from(children, pods, values("replicasets_idx"))

    def _workloads(self, key: JobKey) -> list[Mapping[str, Any]]:
        index = self._indexes.get(WORKLOAD_INDEX)
        return list(index.get(key, ())) if index is not None else []

    def _flavors(self) -> dict[str, Flavor]:
        index = self._indexes.get(FLAVOR_INDEX)
        if index is None:
            return {}
        return {name: next(iter(flavors)) for name, flavors in index.items() if flavors}

    def submit(self, body: dict[str, Any]) -> None:
        self.workers.submit(body)

    def forget(self, body: dict[str, Any]) -> None:
        """The RLJob is gone: its worker stops and nothing of it remains in memory."""
        self.workers.forget(body)
        self.memories.forget(body["metadata"]["uid"])

    def prune(self) -> list[str]:
        """Forgets every job a re-list no longer shows (a watch gap sends no DELETED)."""
        index = self._indexes.get(RLJOB_INDEX)
        if index is None:
            return []
        live = {uid for uids in index.values() for uid in uids}
        gone = self.memories.retain(live)
        # A standby has workers but no memories: its workers are pruned on their own.
        for uid in {*gone, *(uid for uid in self.workers.uids() if uid not in live)}:
            self.workers.forget_uid(uid)
        return gone

    def _refresh(self, body: dict[str, Any], *, settled: bool = False) -> None:
        self.workers.refresh(body, settled=settled)

    async def _elected(self) -> None:
        self.workers.wake_all()  # a standby that takes over acts on every job at once

    async def _on_health(self, key: JobKey, evaluations: list[Evaluation]) -> None:
        """One health round of a job: keep its findings for its next pass, and wake it."""
        memory = self.memories.by_key(key)
        if memory is None:
            return
        self._note_saved_step(memory, evaluations)
        reading = progress_reading(evaluations)
        if reading.step is not None:
            sample = StepSample(reading.step, time.time())
            memory.steps_seen = with_step(memory.steps_seen, sample)
            self._export_step(memory, sample)
        if memory.steps_seen:
            seen = memory.steps_seen[-1]
            reading = replace(
                reading, seen_step=seen.step, step_at=seen.at, steps_seen=memory.steps_seen
            )
        memory.progress = reading
        findings = [e for e in evaluations if e.is_finding]
        if findings or memory.findings:
            memory.findings = findings
            self.workers.wake(key, "finding")
        self._note_diagnosis(memory)
        self._note_engines(memory)

    def _note_diagnosis(self, memory: JobMemory) -> None:
        """A diagnosis whose advice moved wakes the job to write it (and say a new role)."""
        diagnosis = self.health.bottleneck(memory.key)
        if diagnosis is not None and advice_moved(memory.diagnosis, diagnosis):
            memory.diagnosis = diagnosis
            self.workers.wake(memory.key, "diagnosis")

    def _note_engines(self, memory: JobMemory) -> None:
        """The rollout engines' readings for the passes; a Gated job is woken when one could
        move a drain or a gate (a running count reached 0, a generation changed)."""
        readings = engine_readings(self.health.engine_gauges(memory.key))
        moved = readings_moved(memory.engine_readings, readings)
        memory.engine_readings = readings
        if moved and self.health.weight_gated(memory.key):
            self.workers.wake(memory.key, "engines")

    def _note_saved_step(self, memory: JobMemory, evaluations: list[Evaluation]) -> None:
        """The trainer's checkpoint-step metric: a new save wakes the job to refresh latest."""
        steps = [e.evidence.get(CHECKPOINT_STEP_EVIDENCE) for e in evaluations]
        saved = max((int(s) for s in steps if isinstance(s, int | float)), default=None)
        if saved is not None and memory.saved_step != saved:
            memory.saved_step = saved
            self.workers.wake(memory.key, "checkpoint")

    @staticmethod
    def _export_step(memory: JobMemory, sample: StepSample) -> None:
        """rljob_job_trainer_step and its rate over the last few minutes."""
        memory.step_window = step_window(memory.step_window, sample)
        JOB_SERIES.set(memory.key, TRAINER_STEP, sample.step)
        rate = step_rate(memory.step_window)
        if rate is not None:
            JOB_SERIES.set(memory.key, TRAINER_STEP_RATE, rate)

    def _forgotten(self, key: JobKey, memory: JobMemory) -> None:
        """What lives outside a JobMemory: its gauges and the health loop's state."""
        self.health.forget(key)
        JOB_SERIES.forget(key)
        if memory.phase is not None:
            JOBS_BY_PHASE.labels(phase=memory.phase).dec()
