"""The operator-wide health loop (docs/architecture.md section 5).

One task. Every tick (1 s) it takes the jobs that are due (each at its own spec.health.interval,
on a grid of that interval so jobs of equal interval fall due together), groups them by metrics
source (the same Prometheus URL, headers, token Secret and label names; or direct scraping),
and issues one query per signal for all pods of all of them. The answers feed each job's
detectors (rljob.health.monitor, rljob.health.monitor_answers); each due job is then evaluated
and its evaluations handed to `on_evaluations(job_key, evaluations)`. Findings are the caller's
to act on.

A source that fails a signal's query makes every evaluation of the roles that need the signal
"insufficient data" for that round, never a finding. A new job's first round backfills its
detectors with one range query per signal covering the longest window plus the warm-up (for at
most BACKFILL_BATCH_JOBS jobs at a time), so an operator restart neither resets nor loses a
detection. At most `max_jobs` jobs are tracked.

A job whose rollout role has generationFrom engine also has each rollout engine's own weight
version read over HTTP every round, after the source answered (rljob.runtime.engine_generations),
and merged into the engine's reading before its evaluations are handed on; other jobs cost
nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import structlog

from rljob.adapters.metrics import (
    Collected,
    MetricsSource,
    PodAddresses,
    SourceError,
    SourceKey,
    describe_error,
    source_key,
)
from rljob.adapters.weight_versions import WeightVersions
from rljob.api import RLJob
from rljob.api.diagnosis import Bottleneck
from rljob.api.status import EngineHealth
from rljob.health import Evaluation
from rljob.health.evaluation import judging
from rljob.health.monitor import (
    ROLLOUT,
    JobKey,
    JobMonitor,
    PodLike,
    backfill_queries,
    due_by_source,
    lookback,
    role_name,
    round_queries,
)
from rljob.health.monitor_answers import (
    Answers,
    evaluate,
    feed,
    job_error,
)
from rljob.health.monitor_engines import EngineGauges, with_generation
from rljob.runtime.engine_generations import EngineGenerations, WeightVersionReader
from rljob.runtime.garbage_collection import collection_paused
from rljob.runtime.health_series import HealthSeries

log = structlog.get_logger("rljob.health")

TICK_SECONDS = 1.0
MAX_JOBS = 10_000
# A backfill reads up to two hours of every signal: after an operator restart, all jobs at once
# would be one answer of about a hundred megabytes decoded at 500 jobs. In batches, the peak (and
# the heap it leaves resident) is a batch's.
BACKFILL_BATCH_JOBS = 25
# The weight-version reads of a round (generationFrom engine), at most this long.
GENERATION_DEADLINE = 10.0
NO_SOURCE = "no metrics source: set spec.health.source or the operator's default source"

EvaluationsCallback = Callable[[JobKey, list[Evaluation]], Awaitable[None]]
SourceFactory = Callable[[SourceKey], MetricsSource]
Clock = Callable[[], float]
Monitor = JobMonitor[SourceKey]


def answers_of(collected: Collected) -> Answers:
    """A source's answers in the monitor's terms: data, or each failed signal's error text."""
    data = {s: a for s, a in collected.items() if not isinstance(a, SourceError)}
    failed = {s: describe_error(a) for s, a in collected.items() if isinstance(a, SourceError)}
    return Answers(data, failed)


class HealthScheduler:
    """See the module docstring. `source_factory(key)` makes a source the first time a key is
    used (sources of keys no job uses any more are closed); `clock` gives unix seconds;
    `weight_versions` reads an engine's own weight version (default: over HTTP)."""

    def __init__(
        self,
        source_factory: SourceFactory,
        on_evaluations: EvaluationsCallback,
        clock: Clock = time.time,
        *,
        default_source: SourceKey | None = None,
        addresses: PodAddresses | None = None,
        tick: float = TICK_SECONDS,
        max_jobs: int = MAX_JOBS,
        weight_versions: WeightVersionReader | None = None,
    ) -> None:
        self._factory = source_factory
        self._on_evaluations = on_evaluations
        self._clock = clock
        self._default_source = default_source
        self._addresses = addresses  # the direct source's resolver, fed from observed pods
        self._tick = tick
        self._max_jobs = max_jobs
        self._jobs: dict[str, Monitor] = {}
        self._uids: dict[JobKey, str] = {}
        self._sources: dict[SourceKey, MetricsSource] = {}
        self._inflight: dict[SourceKey | None, asyncio.Task[None]] = {}
        self._source_down: dict[SourceKey, str] = {}
        # A source can fall out of use only when a job goes or changes source: the check
        # for unused sources runs then, not every tick over every job.
        self._sources_may_be_unused = False
        self._full_warned = False
        self._series = HealthSeries()
        self._generations = EngineGenerations(weight_versions or WeightVersions())

    # ---------------------------------------------------------------- the caller's API

    def __len__(self) -> int:
        return len(self._jobs)

    def job_keys(self) -> set[JobKey]:
        """Every job any per-job structure still holds (so a deleted job can be checked gone)."""
        return {monitor.key for monitor in self._jobs.values()} | set(self._uids)

    def register(self, job: RLJob, pods: Mapping[Any, Iterable[PodLike]]) -> None:
        """Adds or refreshes a job with its observed pods by role (rollout, trainer, verifier;
        keys may be RoleName values). Call it on every reconcile pass; cheap when nothing
        changed. A new uid for a known (namespace, name) replaces the old job's state."""
        namespace = job.metadata.namespace or "default"
        key = (namespace, job.metadata.name)
        uid = job.metadata.uid or f"{namespace}/{job.metadata.name}"
        previous = self._uids.get(key)
        if previous is not None and previous != uid:
            self._drop(previous)
        now = self._clock()
        monitor = self._jobs.get(uid)
        if monitor is None:
            if len(self._jobs) >= self._max_jobs:
                if not self._full_warned:
                    log.warning("health scheduler full; job not monitored", max_jobs=self._max_jobs)
                    self._full_warned = True
                return
            monitor = self._jobs[uid] = JobMonitor(uid, key, job, now)
            self._uids[key] = uid
        by_role = {role_name(role): list(members) for role, members in pods.items()}
        source = source_key(job.spec.health, namespace, self._default_source)
        if monitor.source != source:
            self._sources_may_be_unused = True
        monitor.update(job, by_role, now, source)
        if self._addresses is not None:
            self._addresses.update(job, by_role)
        self._generations.update(uid, job, by_role.get(ROLLOUT, ()))

    def engine_summaries(self, key: JobKey) -> list[EngineHealth] | None:
        """The job's detector summaries to keep in status; None while it is not watched."""
        uid = self._uids.get(key)
        monitor = self._jobs.get(uid) if uid is not None else None
        return None if monitor is None else monitor.engine_summaries(self._clock())

    def bottleneck(self, key: JobKey) -> Bottleneck | None:
        """The job's latest diagnosis for status.bottleneck; None while there is none."""
        monitor = self._monitor(key)
        return monitor.diagnosis.bottleneck if monitor is not None else None

    def engine_gauges(self, key: JobKey) -> Mapping[str, EngineGauges]:
        """The job's rollout engines' latest running and generation readings, by pod."""
        monitor = self._monitor(key)
        return dict(monitor.engine_gauges) if monitor is not None else {}

    def weight_gated(self, key: JobKey) -> bool:
        """Whether the job's rollout engines drain and rejoin behind the policy-current gate."""
        monitor = self._monitor(key)
        return monitor is not None and monitor.weight_gated

    def forget(self, key: JobKey) -> None:
        """The job is gone (deleted, or finished): drop its state (detectors, source error,
        schedule, backfill) and its detector value series."""
        uid = self._uids.get(key)
        if uid is not None:
            self._drop(uid)

    def note_restart(self, key: JobKey, role: object, pod: str | None, at: float) -> None:
        """The operator restarted `pod` of `role` (for the trainer: the gang) at `at`: the
        detectors start over for it (see JobMonitor.note_restart)."""
        monitor = self._monitor(key)
        if monitor is not None:
            monitor.note_restart(role_name(role), pod, at)

    def source_for(self, job: RLJob) -> SourceKey | None:
        """The source the job's signals come from: its own spec.health.source, else the
        operator's default; None: none is configured and detection is off."""
        return source_key(
            job.spec.health, job.metadata.namespace or "default", self._default_source
        )

    def judging(self, key: JobKey) -> tuple[str, ...] | None:
        """The detectors that have had data since the job was registered; None before its
        first round."""
        monitor = self._monitor(key)
        return monitor.judging if monitor is not None else None

    def source_error(self, key: JobKey) -> str | None:
        """Why the job's metrics source failed its last round, or None when it answered."""
        monitor = self._monitor(key)
        return monitor.source_error if monitor is not None else None

    async def run(self) -> None:
        """Runs until cancelled: a round for each source with due jobs every tick (a source
        still busy with its previous round is skipped until it answers)."""
        try:
            while True:
                self._start_due(self._clock())
                await self._close_unused()
                await asyncio.sleep(self._tick)
        finally:
            await self.close()

    async def tick(self) -> None:
        """One tick, waiting for the rounds it started (tests; `run` does not wait)."""
        self._start_due(self._clock())
        await self._wait_inflight()
        await self._close_unused()

    async def backfill(self) -> None:
        """Backfills every job that still needs it now, one range query per signal and
        source (rounds also backfill their new jobs first, so calling this is optional)."""
        now = self._clock()
        groups: dict[SourceKey, list[Monitor]] = {}
        for monitor in self._jobs.values():
            if monitor.backfill_pending and monitor.source is not None and monitor.has_targets():
                groups.setdefault(monitor.source, []).append(monitor)
        await asyncio.gather(
            *(self._backfill(self._source(key), jobs, now) for key, jobs in groups.items())
        )

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._inflight.clear()
        sources, self._sources = list(self._sources.values()), {}
        for source in sources:
            with contextlib.suppress(Exception):
                await source.close()
        with contextlib.suppress(Exception):
            await self._generations.close()

    # ---------------------------------------------------------------- rounds

    def _monitor(self, key: JobKey) -> Monitor | None:
        uid = self._uids.get(key)
        return self._jobs.get(uid) if uid is not None else None

    def _drop(self, uid: str) -> None:
        monitor = self._jobs.pop(uid, None)
        if monitor is None:
            return
        self._sources_may_be_unused = True
        self._generations.forget(uid)
        if self._uids.get(monitor.key) == uid:
            del self._uids[monitor.key]
            if self._addresses is not None:
                self._addresses.forget(monitor.key)
        self._series.forget(monitor.key)

    def _current(self, monitor: Monitor) -> bool:
        """False once the job was forgotten or replaced (while a round's queries ran)."""
        return self._jobs.get(monitor.uid) is monitor

    def _start_due(self, now: float) -> None:
        for key, jobs in due_by_source(self._jobs.values(), now).items():
            if key in self._inflight:
                continue
            for monitor in jobs:
                monitor.schedule_next(now)
            task = asyncio.create_task(self._round(key, jobs, now), name=f"health:{key}")
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._finished, key))

    def _finished(self, key: SourceKey | None, task: asyncio.Task[None]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("health round failed", source=str(key), exc_info=task.exception())

    async def _wait_inflight(self) -> None:
        while self._inflight:
            await asyncio.gather(*list(self._inflight.values()), return_exceptions=True)

    def _source(self, key: SourceKey) -> MetricsSource:
        source = self._sources.get(key)
        if source is None:
            source = self._sources[key] = self._factory(key)
        return source

    async def _close_unused(self) -> None:
        if not self._sources_may_be_unused:
            return
        used = {monitor.source for monitor in self._jobs.values()}
        unused = [key for key in self._sources if key not in used]
        # A source whose round is still running is closed on a later tick.
        self._sources_may_be_unused = any(key in self._inflight for key in unused)
        for key in [key for key in unused if key not in self._inflight]:
            source = self._sources.pop(key)
            self._source_down.pop(key, None)
            with contextlib.suppress(Exception):
                await source.close()

    async def _round(self, key: SourceKey | None, jobs: list[Monitor], now: float) -> None:
        """One round of one source: backfill its new jobs, one query per signal for all due
        jobs, then feed, evaluate and report each job; the collector waits for its end."""
        with collection_paused():
            await self._poll(key, jobs, now)

    async def _poll(self, key: SourceKey | None, jobs: list[Monitor], now: float) -> None:
        targets = {monitor.uid: monitor.targets() for monitor in jobs}
        # The opted-in engines' weight versions are read while the source answers, within a
        # deadline: a job with hung engines never holds up the others' round.
        reads = asyncio.ensure_future(self._read_generations(jobs))
        answers = Answers({}, {})
        error: str | None = NO_SOURCE if key is None else None
        if key is not None:
            try:
                source = self._source(key)
                pending = [monitor for monitor in jobs if monitor.backfill_pending]
                for first in range(0, len(pending), BACKFILL_BATCH_JOBS):
                    await self._backfill(source, pending[first : first + BACKFILL_BATCH_JOBS], now)
                collected = await source.collect(
                    round_queries(jobs, targets), lookback=lookback(jobs, now), at=now
                )
                answers = answers_of(collected)
            except Exception as failure:  # a source never raises, but a factory might
                log.exception("health source failed", source=key.describe())
                error = describe_error(failure)
            self._note_source_state(key, answers, error)
        read_at = self._clock()
        generations = await reads
        for monitor in jobs:
            if not self._current(monitor):
                continue
            monitor.last_polled = now
            try:
                evaluations = evaluate(monitor, targets[monitor.uid], answers, error, now)
            except Exception:  # a detector's defect costs its job this round, not the others
                log.exception(
                    "health evaluation failed", namespace=monitor.key[0], name=monitor.key[1]
                )
                continue
            _note_generations(monitor, generations.get(monitor.uid, {}), read_at)
            monitor.source_error = job_error(monitor, targets[monitor.uid], answers, error)
            # Cumulative: a detector that judges only now and then (a full window, a weight sync
            # in it) would otherwise change the condition, and write status, round after round.
            monitor.judging = tuple(sorted({*(monitor.judging or ()), *judging(evaluations)}))
            self._series.count(monitor.key, evaluations)
            diagnosis = monitor.diagnosis
            self._series.diagnosis(monitor.key, diagnosis.role, diagnosis.step_phase_seconds())
            try:
                await self._on_evaluations(monitor.key, evaluations)
            except Exception:
                log.exception(
                    "on_evaluations failed", namespace=monitor.key[0], name=monitor.key[1]
                )
            await asyncio.sleep(0)  # let other work run between jobs of a big round

    async def _read_generations(self, jobs: list[Monitor]) -> dict[str, dict[str, int]]:
        wanted = {m.uid: m.rollout_pods for m in jobs if self._generations.opted_in(m.uid)}
        if not wanted:
            return {}
        try:
            return await asyncio.wait_for(self._generations.read(wanted), GENERATION_DEADLINE)
        except TimeoutError:
            log.warning("engine weight versions unread within the deadline", jobs=len(wanted))
            return {}

    async def _backfill(self, source: MetricsSource, jobs: list[Monitor], now: float) -> None:
        """One range query per signal for the new jobs of one source, each role's signals
        over the longest history any of those jobs needs for that role."""
        if not source.supports_history:
            for monitor in jobs:
                monitor.backfill_pending = False
            return
        targets = {monitor.uid: monitor.targets() for monitor in jobs}
        step = min(monitor.interval for monitor in jobs)
        by_role = backfill_queries(jobs, targets)
        results = await asyncio.gather(
            *(
                source.history(queries, start=now - span, end=now, step=step)
                for span, queries in by_role.values()
            ),
            return_exceptions=True,
        )
        collected: Collected = {}
        failed = False
        for result in results:
            if isinstance(result, BaseException):
                log.error("health backfill failed", exc_info=result)
                failed = True
            else:
                collected.update(result)
        answers = answers_of(collected)
        for monitor in jobs:
            monitor.note_backfill(answered=answers.answered, asked=failed or bool(collected))
            if answers.answered and self._current(monitor):
                feed(monitor, targets[monitor.uid], answers)
                await asyncio.sleep(0)  # let other work run between jobs of a big backfill
        log.info(
            "health backfill",
            jobs=len(jobs),
            seconds={role: round(span) for role, (span, _) in by_role.items()},
            answered=answers.answered,
            source=getattr(source, "kind", "?"),
        )

    def _note_source_state(self, key: SourceKey, answers: Answers, error: str | None) -> None:
        problem = error or next(iter(answers.failed.values()), None)
        was = self._source_down.get(key)
        if problem is not None:
            if was is None:
                log.warning("health source failing", source=key.describe(), error=problem)
            self._source_down[key] = problem
        elif was is not None:
            log.info("health source answering again", source=key.describe())
            del self._source_down[key]


def _note_generations(monitor: Monitor, generations: Mapping[str, int], at: float) -> None:
    """Each engine's own weight version, read at `at`, into its reading (generationFrom engine);
    an engine whose read failed this round keeps its last one (the round's metrics reading has
    no generation, and dropping it would lower what the serving engines are seen to report)."""
    if not generations and not monitor.engine_versions:
        return  # a job that does not opt in (or has read nothing yet): no work in its round
    live = set(monitor.rollout_pods)  # a pod gone while the round ran stays gone
    monitor.engine_versions.update(
        {pod: (at, generation) for pod, generation in generations.items() if pod in live}
    )
    for pod, (read_at, generation) in monitor.engine_versions.items():
        if pod in live:
            known = monitor.engine_gauges.get(pod)
            monitor.engine_gauges[pod] = with_generation(known, read_at, generation)


__all__ = [
    "MAX_JOBS",
    "TICK_SECONDS",
    "Clock",
    "EvaluationsCallback",
    "HealthScheduler",
    "SourceFactory",
    "answers_of",
]
