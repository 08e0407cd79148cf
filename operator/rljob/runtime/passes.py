"""One pass of one RLJob: gather -> decide() -> journal -> execute.

The journal is one resourceVersion-guarded status write holding everything the pass decided
(the action in flight with its ledger entry, the attempt and its resume choice). Only after it
succeeds does anything happen: pending findings are consumed, detectors are reset, and the
steps run. A 409 on the write loses nothing; a crash after it is resumed, never repeated."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import structlog

from rljob.adapters.checkpoints import Checkpoints
from rljob.adapters.events import post_event
from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.leadership import Leadership
from rljob.adapters.observe import JobKey
from rljob.api import InvalidRLJobError, RLJob, RLJobStatus, parse_rljob
from rljob.api.goodput import GoodputStatus
from rljob.health.monitor import pods_by_role
from rljob.observability import (
    ACTION_LATENCY,
    GOODPUT_RATIO,
    JOB_SERIES,
    JOBS_BY_PHASE,
    LOST_SECONDS,
    PRODUCTIVE_SECONDS,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    RESTARTS,
    SPEC_REJECTIONS,
    SUSPENDED_SECONDS,
)
from rljob.reconcile.acceptance import invalid_spec_status, with_accepted
from rljob.reconcile.conditions import ConditionState, with_condition
from rljob.reconcile.decide import Decision, decide
from rljob.reconcile.expectations import with_deletes_issued
from rljob.reconcile.guidance import guidance_event
from rljob.reconcile.observed import Observed
from rljob.reconcile.ownership import owned_by, recorded_jobs
from rljob.reconcile.plan import status_patch
from rljob.reconcile.reach import NOT_ALLOWED, Allowlist
from rljob.runtime.execute import Context, ensure_leading, execute
from rljob.runtime.gather import Gatherer
from rljob.runtime.health_loop import HealthScheduler
from rljob.runtime.memory import JobMemory, Memories, patch_digest
from rljob.runtime.queue_reader import QueueReader
from rljob.runtime.weight_copies import WeightCopies

log = structlog.get_logger("rljob.runtime")
STALE_RETRY_SECONDS = 0.2
REJECTED_RETRY_SECONDS = 60.0


class Refresh(Protocol):
    """Hands the body our write got back to the job's worker (JobWorkers.refresh)."""

    def __call__(self, body: dict[str, Any], *, settled: bool = False) -> None: ...


class Passes:
    """Runs passes for the per-job workers; owns nothing but references."""

    def __init__(
        self,
        kube: Kube,
        checkpoints: Checkpoints,
        leadership: Leadership,
        *,
        memories: Memories,
        health: HealthScheduler,
        observed: Callable[[JobKey], Observed],
        refresh: Refresh,
        allowlist: Allowlist,
        queue: QueueReader | None = None,
    ) -> None:
        self.kube = kube
        self.allowlist = allowlist
        self.checkpoints = checkpoints
        self.leadership = leadership
        self.memories = memories
        self.health = health
        self.observed = observed
        self.refresh = refresh
        self.gatherer = Gatherer(kube, checkpoints)
        self.queue = queue  # None: the operator runs without Kueue
        self.weight_copies = WeightCopies()  # slotServices' copies, in the background

    async def run(self, body: dict[str, Any]) -> float | None:
        if not self.leadership.acting():
            return None  # a standby observes and waits; the leader acts
        meta = body["metadata"]
        bound = log.bind(namespace=meta["namespace"], name=meta["name"])
        with RECONCILE_SECONDS.time():
            try:
                return await self.run_once(body)
            except InvalidRLJobError as exc:
                SPEC_REJECTIONS.labels(reason=exc.reason).inc()
                status = invalid_spec_status(body, exc.violations, _now(), exc.reason)
                await self.write_status(body, status, self._memory(body))
                bound.warning("invalid spec", violations=[str(v) for v in exc.violations])
                return None
            except KubeError as exc:
                return await self._api_error(body, exc, bound)

    async def _api_error(self, body: dict[str, Any], exc: KubeError, bound: Any) -> float:
        if exc.conflict:  # our copy of the RLJob was stale: the fresh one is on its way
            return STALE_RETRY_SECONDS
        if exc.namespace_terminating:  # the job goes with its namespace: nothing to do
            bound.info("namespace is being deleted; not acting", error=exc.message)
            return REJECTED_RETRY_SECONDS
        if exc.status in (400, 422):  # a child the API rejects: say so, retry slowly
            job = parse_rljob(body)
            state = ConditionState.of("Degraded", True, "ChildRejected", exc.message)
            status = with_condition(job.status, state, _now(), job.metadata.generation)
            await self.write_status(body, status, self._memory(body))
            bound.warning("child rejected by the API", error=exc.message)
            return REJECTED_RETRY_SECONDS
        RECONCILE_ERRORS.labels(kind=f"api_{exc.status}").inc()
        bound.warning("API call failed; retrying", status=exc.status, error=exc.message)
        raise exc

    async def run_once(self, body: dict[str, Any]) -> float | None:
        """gather -> decide -> journal -> execute."""
        now = _now()
        job = parse_rljob(body)
        refused = self.allowlist.violations(job.spec)
        if refused:  # before any request to what the job names
            raise InvalidRLJobError(refused, reason=NOT_ALLOWED)
        memory = self._memory(body)
        action = job.status.in_flight
        issued = memory.deletes_issued.current(time.monotonic(), action.id if action else None)
        everything = with_deletes_issued(self.observed(memory.key), issued)
        # What is gathered (crash loops, nodes) is of the job's own; decide() sorts again.
        observed, _ = owned_by(everything, job.metadata.uid or "", recorded_jobs(job))
        inputs = await self.gatherer.inputs(
            job, observed, memory, now, self.health.source_error(memory.key)
        )
        source = self.health.source_for(job)
        inputs = replace(
            inputs,
            signals_source=source.describe() if source else None,
            signals_detectors=self.health.judging(memory.key),
        )
        summaries = self.health.engine_summaries(memory.key)
        if summaries is not None:
            inputs = replace(inputs, engine_summaries=tuple(summaries))
        inputs = replace(inputs, bottleneck=self.health.bottleneck(memory.key))
        if self.queue is not None:
            inputs = replace(inputs, queue=await self.queue.inputs(job, memory.key))
        decision = decide(job, everything, inputs)
        self._watch(decision, memory)
        status = with_accepted(decision.plan.status, decision.job, now)
        wrote = await self.write_status(
            body, status, memory, observed=job.status, settled=not decision.steps
        )
        self._journaled(body, decision, memory, wrote, now)
        ctx = Context(
            self.kube,
            self.checkpoints,
            body,
            decision.job,
            memory,
            now,
            self.leadership.acting,
            self.weight_copies,
        )
        await execute(decision.steps, ctx)
        plan = decision.plan
        events = decision.events if (wrote or plan.apply or plan.delete) else ()
        for event in events:
            await post_event(self.kube, body, event, now)
        if wrote and (guidance := guidance_event(job)) is not None:
            await post_event(self.kube, body, guidance, now, name=_guidance_event_name(job))
        await self._report(body, decision, memory, now)
        self._count_phase(memory, plan.status.phase)
        export_goodput(memory.key, plan.status.goodput)
        return plan.requeue_after

    def _watch(self, decision: Decision, memory: JobMemory) -> None:
        if decision.watch:
            self.health.register(decision.job, pods_by_role(decision.observed.pods))
            return
        self.health.forget(memory.key)
        memory.findings, memory.crashes, memory.progress = [], [], None

    def _journaled(
        self,
        body: dict[str, Any],
        decision: Decision,
        memory: JobMemory,
        wrote: bool,
        now: dt.datetime,
    ) -> None:
        """What only happens once the journal is written: findings consumed, detectors of a
        restarted target start afresh, the ledger's new restarts counted in metrics."""
        if decision.consumed == "finding":
            memory.findings = []
        if decision.consumed == "crash":
            memory.crashes = memory.crashes[1:]
        memory.retention_problem = ""
        if decision.restarted is not None:
            role, pod = decision.restarted
            self.health.note_restart(memory.key, role, pod, now.timestamp())
        if wrote:
            _count_restarts(body, decision.plan.status)
            _observe_settled(body, decision.plan.status, now)

    async def _report(
        self, body: dict[str, Any], decision: Decision, memory: JobMemory, now: dt.datetime
    ) -> None:
        """Reports are said whether or not the pass wrote, at most every 10 minutes each."""
        for key, event in decision.reports:
            if memory.reported.admit(key, now.timestamp()):
                await post_event(self.kube, body, event, now)

    async def write_status(
        self,
        body: dict[str, Any],
        status: RLJobStatus,
        memory: JobMemory,
        *,
        observed: RLJobStatus | None = None,
        settled: bool = False,
    ) -> bool:
        """Patches status only when it differs from both the observed (`observed`: the body's,
        when the pass parsed it already) and our last write, and only while this replica still
        holds the lease. `settled`: the pass has no step to take after the write."""
        ensure_leading(self.leadership.acting)
        meta = body["metadata"]
        if observed is None:
            observed = RLJobStatus.model_validate(body.get("status") or {})
        patch = status_patch(observed, status)
        if patch is None:
            return False
        digest = patch_digest(patch)
        if memory.written == digest:
            return False
        updated = await self.kube.patch_status(
            meta["namespace"], meta["name"], patch, resource_version=meta.get("resourceVersion")
        )
        memory.written = digest
        self.refresh(updated, settled=settled)
        return True

    def _memory(self, body: dict[str, Any]) -> JobMemory:
        meta = body["metadata"]
        return self.memories.of(meta["uid"], (meta["namespace"], meta["name"]))

    @staticmethod
    def _count_phase(memory: JobMemory, phase: object) -> None:
        new = str(getattr(phase, "value", phase) or "Pending")
        if memory.phase == new:
            return
        if memory.phase is not None:
            JOBS_BY_PHASE.labels(phase=memory.phase).dec()
        JOBS_BY_PHASE.labels(phase=new).inc()
        memory.phase = new


def export_goodput(key: tuple[str, str], goodput: GoodputStatus | None) -> None:
    """rljob_job_goodput_ratio, its productive, lost and suspended seconds, from status."""
    if goodput is None:
        return
    total = goodput.total
    if goodput.ratio is not None:
        JOB_SERIES.set(key, GOODPUT_RATIO, goodput.ratio)
    JOB_SERIES.set(key, PRODUCTIVE_SECONDS, total.productive_seconds)
    for cause, seconds in total.lost_seconds.model_dump().items():
        JOB_SERIES.set(key, LOST_SECONDS, seconds, cause)
    for by, seconds in total.suspended_seconds.model_dump().items():
        JOB_SERIES.set(key, SUSPENDED_SECONDS, seconds, by)


def _count_restarts(body: dict[str, Any], status: RLJobStatus) -> None:
    """rljob_restarts_total for the restarts this write recorded (the ledger's new entries)."""
    before = ((body.get("status") or {}).get("restarts") or {}).get("total", 0)
    ledger = status.restarts
    if ledger is None or ledger.total <= before:
        return
    meta = body["metadata"]
    for record in ledger.recent[-(ledger.total - before) :]:
        RESTARTS.labels(meta["namespace"], meta["name"], record.reason.value, record.role.value,
                        record.action.value).inc()  # fmt: skip


def _observe_settled(body: dict[str, Any], status: RLJobStatus, now: dt.datetime) -> None:
    """rljob_action_latency_seconds for the journaled action this write completed."""
    before = (body.get("status") or {}).get("inFlight") or {}
    if not before or (status.in_flight is not None and status.in_flight.id == before.get("id")):
        return
    with contextlib.suppress(KeyError, ValueError):
        started = dt.datetime.fromisoformat(before["startedAt"].replace("Z", "+00:00"))
        ACTION_LATENCY.labels(before["kind"]).observe(max((now - started).total_seconds(), 0.0))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)  # status times in whole seconds


def _guidance_event_name(job: RLJob) -> str:
    """One name per generation: a pass retried after a failed write posts it once."""
    return f"{job.metadata.name}.guidance.{job.metadata.uid}.{job.metadata.generation}"
