"""The operator-wide health scheduler (DESIGN section 4.5).

One task. Every tick (1 s) it takes the jobs that are due (each at its own spec.health.interval,
on a grid of that interval so jobs of equal interval fall due together), groups them by metrics
source (the same Prometheus URL, headers, token Secret and label names; or direct scraping),
and issues one query per signal for all pods of all of them. The answers become engine samples,
trainer readings and verifier histogram snapshots per pod, which feed each job's detectors
(KV-cache drift and engine stall for the rollout role, trainer stall, verifier latency); each
due job is then evaluated and its evaluations handed to `on_evaluations(job_key, evaluations)`.
Findings are the caller's to act on.

A source that fails a signal's query makes every evaluation of the roles that need the signal
"insufficient data" for that round (and none of that role's answers are fed: an engine whose
sleep state is unknown must not look awake), never a finding. A new job's first round backfills
its detectors with one range query per signal covering the longest window plus the warm-up, so
an operator restart neither resets nor loses a detection.

State is kept per job uid and bounded: detectors keep fixed-size rings per pod, pods that left
are dropped on every `register`, and at most `max_jobs` jobs are tracked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from rljob.adapters.metrics import (
    Collected,
    MetricsSource,
    PodKey,
    SignalData,
    SourceError,
    SourceKey,
    SourceUnavailable,
    describe_error,
    source_key,
)
from rljob.api import RLJob
from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health import (
    ENGINE_STALL,
    KV_DRIFT,
    TRAINER_STALL,
    VERIFIER_LATENCY,
    DriftConfig,
    EngineStallConfig,
    EngineStallDetector,
    Evaluation,
    KVDriftDetector,
    TrainerStallConfig,
    TrainerStallDetector,
    VerifierLatencyConfig,
    VerifierLatencyDetector,
)
from rljob.health.evaluation import (
    CHECKPOINT_STEP_EVIDENCE,
    POLICY_GENERATION_EVIDENCE,
    TRAINER_STEP_EVIDENCE,
    insufficient,
)
from rljob.health.profiles import (
    TRAINER,
    VERIFIER,
    EngineMetrics,
    MissingMetricNamesError,
    Series,
    Signal,
    TrainerReading,
    engine_metrics,
    engine_samples,
    trainer_reading,
    trainer_signals,
    verifier_samples,
)
from rljob.health.samples import MIN_SPACING_INTERVALS
from rljob.observability import DETECTOR_EVALUATIONS, DETECTOR_VALUE

log = structlog.get_logger("rljob.health")

TICK_SECONDS = 1.0
# Added to every instant query's range: a scrape taken just before a query can be ingested
# just after it; the detectors drop samples they already have.
LOOKBACK_SLACK = 5.0
MAX_LOOKBACK = 900.0
MAX_BACKFILL = 24 * 3600.0
MAX_JOBS = 10_000
BACKFILL_ATTEMPTS = 3
# Secondary metrics are matched to the token counter's timestamps within this many seconds
# (at least; a job's interval if longer).
MIN_STALENESS = 15.0

ROLLOUT = "rollout"
TRAINER_ROLE = "trainer"
VERIFIER_ROLE = "verifier"
TRAINER_TARGET = "trainer"

JobKey = tuple[str, str]  # (namespace, name)
EvaluationsCallback = Callable[[JobKey, list[Evaluation]], Awaitable[None]]
SourceFactory = Callable[[SourceKey], MetricsSource]
Clock = Callable[[], float]


class PodLike(Protocol):
    """What the scheduler reads of an observed pod (rljob.reconcile.observed.ObservedPod fits;
    `attempt`, `created_at` and `deleting` are read when present)."""

    @property
    def name(self) -> str: ...

    @property
    def phase(self) -> str: ...

    @property
    def ready(self) -> bool: ...


def _role_name(role: object) -> str:
    return str(getattr(role, "value", role))


def _active(pod: PodLike) -> bool:
    return pod.phase == "Running" and not getattr(pod, "deleting", False)


def next_slot(now: float, interval: float) -> float:
    """The next multiple of `interval` after `now`."""
    return (math.floor(now / interval) + 1) * interval


# Per detector: the evidence key of rljob_detector_value and how targets combine.
_VALUE_OF: Mapping[str, tuple[str, Callable[[Iterable[float]], float]]] = {
    KV_DRIFT: ("change", min),
    ENGINE_STALL: ("flat_seconds", max),
    TRAINER_STALL: ("stale_seconds", max),
    VERIFIER_LATENCY: ("p99_seconds", max),
}


@dataclass(frozen=True, slots=True)
class _Targets:
    """The pods one round of one job asks for, taken before the queries go out."""

    rollout: tuple[str, ...]
    trainer: tuple[str, ...]
    verifier: tuple[str, ...]


class _JobState:
    """Everything the scheduler keeps for one job (one uid)."""

    def __init__(self, uid: str, key: JobKey, job: RLJob, now: float) -> None:
        self.uid = uid
        self.key = key
        self.next_due = now
        self.last_polled: float | None = None
        self.backfill_pending = True
        self.backfill_attempts = 0
        self.source: SourceKey | None = None
        self.source_error: str | None = None
        self.rollout_pods: tuple[str, ...] = ()
        self.verifier_pods: tuple[str, ...] = ()
        self.trainer_pods: tuple[str, ...] = ()
        self.trainer_running = False
        self.attempt: int | None = None
        self.attempt_started_at = now
        self.trainer_readings: dict[str, TrainerReading] = {}
        self.engine: EngineMetrics | None = None
        self.engine_error = ""
        self.has_verifier = False
        self.health: Health | None = None
        self._configure(job.spec.health, job.spec.roles.verifier is not None)

    def _configure(self, health: Health, has_verifier: bool) -> None:
        self.health = health
        self.has_verifier = has_verifier
        self.interval = max(1.0, parse_duration(health.interval))
        self.drift_config = DriftConfig.from_health(health)
        self.verifier_config = VerifierLatencyConfig.from_health(health)
        self.trainer_config = TrainerStallConfig.from_health(health)
        self.drift = KVDriftDetector(self.drift_config)
        self.engine_stall = EngineStallDetector(EngineStallConfig.from_health(health))
        self.trainer = TrainerStallDetector(self.trainer_config, TRAINER_TARGET)
        self.verifier = VerifierLatencyDetector(self.verifier_config) if has_verifier else None
        self.seen_rollout: set[str] = set()
        self.seen_verifier: set[str] = set()
        # (role, pod) -> time of the newest sample fed to its detectors.
        self.fed: dict[tuple[str, str], float] = {}
        # The detectors drop samples closer together than this; so do we, before building them.
        self.min_spacing = self.interval * MIN_SPACING_INTERVALS
        self.trainer_readings = {}
        self.backfill_pending = True
        self.backfill_attempts = 0

    @property
    def staleness(self) -> float:
        return max(self.interval, MIN_STALENESS)

    def backfill_spans(self) -> dict[str, float]:
        """Per role, how far back its detectors need history: the drift window plus warm-up,
        the verifier window, the trainer's stall timeout (for its last heartbeat)."""
        drift = self.drift_config.window + self.drift_config.warmup
        spans = {
            ROLLOUT: drift,
            VERIFIER_ROLE: self.verifier_config.window,
            TRAINER_ROLE: self.trainer_config.timeout,
        }
        return {role: min(MAX_BACKFILL, span + 2 * self.interval) for role, span in spans.items()}

    def update(
        self,
        job: RLJob,
        pods: Mapping[str, Sequence[PodLike]],
        now: float,
        default_source: SourceKey | None,
    ) -> None:
        namespace = self.key[0]
        has_verifier = job.spec.roles.verifier is not None
        if job.spec.health != self.health or has_verifier != self.has_verifier:
            self._configure(job.spec.health, has_verifier)
        self.source = source_key(job.spec.health, namespace, default_source)
        try:
            self.engine, self.engine_error = engine_metrics(job.spec.roles.rollout), ""
        except MissingMetricNamesError as error:
            self.engine, self.engine_error = None, str(error)
        self.rollout_pods = tuple(sorted(p.name for p in pods.get(ROLLOUT, ()) if _active(p)))
        self.verifier_pods = (
            tuple(sorted(p.name for p in pods.get(VERIFIER_ROLE, ()) if _active(p)))
            if has_verifier
            else ()
        )
        self._update_trainer(job, list(pods.get(TRAINER_ROLE, ())), now)
        self.drift.retain(self.rollout_pods)
        self.engine_stall.retain(self.rollout_pods)
        self.seen_rollout &= set(self.rollout_pods)
        if self.verifier is not None:
            self.verifier.retain(self.verifier_pods)
        self.seen_verifier &= set(self.verifier_pods)
        current = {(ROLLOUT, pod) for pod in self.rollout_pods}
        current |= {(VERIFIER_ROLE, pod) for pod in self.verifier_pods}
        self.fed = {key: t for key, t in self.fed.items() if key in current}

    def _update_trainer(self, job: RLJob, pods: list[PodLike], now: float) -> None:
        attempts = [a for p in pods if isinstance(a := getattr(p, "attempt", None), int)]
        attempt = job.status.attempt or (max(attempts) if attempts else None)
        current = [p for p in pods if getattr(p, "attempt", None) in (None, attempt)]
        if attempt != self.attempt:
            if self.attempt is not None:
                self.trainer.note_restart(now)
            self.trainer_readings = {}
            self.attempt = attempt
            self.attempt_started_at = self._attempt_start(job, attempt, current, now)
        self.trainer_pods = tuple(sorted(p.name for p in current if _active(p)))
        self.trainer_readings = {
            pod: reading
            for pod, reading in self.trainer_readings.items()
            if pod in self.trainer_pods
        }
        nodes = job.spec.roles.trainer.nodes
        self.trainer_running = (
            len(self.trainer_pods) >= nodes
            and len(current) > 0
            and all(_active(pod) for pod in current)
        )

    @staticmethod
    def _attempt_start(
        job: RLJob, attempt: int | None, pods: Sequence[PodLike], now: float
    ) -> float:
        for record in job.status.attempts:
            if record.attempt == attempt:
                return record.started_at.timestamp()
        created = [c.timestamp() for p in pods if (c := getattr(p, "created_at", None))]
        return min(created) if created else now

    def targets(self) -> _Targets:
        return _Targets(self.rollout_pods, self.trainer_pods, self.verifier_pods)

    def has_targets(self) -> bool:
        return bool(self.rollout_pods or self.trainer_pods or self.verifier_pods)

    def role_queries(self, targets: _Targets) -> dict[str, dict[Signal, set[str]]]:
        """Per role, the signals it needs and, for each, the pod names."""
        wanted: dict[str, dict[Signal, set[str]]] = {}
        if targets.rollout and self.engine is not None:
            wanted[ROLLOUT] = {s: set(targets.rollout) for s in self.engine.signals().values()}
        if targets.trainer:
            wanted[TRAINER_ROLE] = {s: set(targets.trainer) for s in TRAINER.signals().values()}
        if targets.verifier and self.verifier is not None:
            wanted[VERIFIER_ROLE] = {s: set(targets.verifier) for s in VERIFIER.signals().values()}
        return wanted

    def queries(self, targets: _Targets) -> dict[Signal, set[str]]:
        """The signals this job needs and, for each, the pod names."""
        merged: dict[Signal, set[str]] = {}
        for signals in self.role_queries(targets).values():
            for signal, pods in signals.items():
                merged.setdefault(signal, set()).update(pods)
        return merged


def _failure(signals: Iterable[Signal], collected: Collected) -> SourceError | None:
    for signal in signals:
        answer = collected.get(signal)
        if isinstance(answer, SourceError):
            return answer
        if answer is None:
            return SourceUnavailable(f"no answer for {signal.metric}")
    return None


def _pod_series(
    signals: Mapping[str, Signal], collected: Collected, pod: PodKey
) -> dict[str, list[Series]]:
    series: dict[str, list[Series]] = {}
    for name, signal in signals.items():
        answer = collected.get(signal)
        if isinstance(answer, dict):
            series[name] = answer.get(pod, [])
    return series


class HealthScheduler:
    """See the module docstring. `source_factory(key)` makes a source the first time a key is
    used (sources of keys no job uses any more are closed); `clock` gives unix seconds."""

    def __init__(
        self,
        source_factory: SourceFactory,
        on_evaluations: EvaluationsCallback,
        clock: Clock = time.time,
        *,
        default_source: SourceKey | None = None,
        tick: float = TICK_SECONDS,
        max_jobs: int = MAX_JOBS,
    ) -> None:
        self._factory = source_factory
        self._on_evaluations = on_evaluations
        self._clock = clock
        self._default_source = default_source
        self._tick = tick
        self._max_jobs = max_jobs
        self._jobs: dict[str, _JobState] = {}
        self._uids: dict[JobKey, str] = {}
        self._sources: dict[SourceKey, MetricsSource] = {}
        self._inflight: dict[SourceKey | None, asyncio.Task[None]] = {}
        self._source_down: dict[SourceKey, str] = {}
        self._full_warned = False

    # ---------------------------------------------------------------- the caller's API

    def __len__(self) -> int:
        return len(self._jobs)

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
        state = self._jobs.get(uid)
        if state is None:
            if len(self._jobs) >= self._max_jobs:
                if not self._full_warned:
                    log.warning("health scheduler full; job not monitored", max_jobs=self._max_jobs)
                    self._full_warned = True
                return
            state = self._jobs[uid] = _JobState(uid, key, job, now)
            self._uids[key] = uid
        by_role = {_role_name(role): list(members) for role, members in pods.items()}
        state.update(job, by_role, now, self._default_source)

    def forget(self, key: JobKey) -> None:
        """The job is gone (deleted, or finished): drop its state."""
        uid = self._uids.get(key)
        if uid is not None:
            self._drop(uid)

    def note_restart(self, key: JobKey, role: object, pod: str | None, at: float) -> None:
        """The operator restarted `pod` of `role` (for the trainer: the gang) at `at`: the
        detectors start over for it (new baseline after warm-up, drift cooldown, samples from
        before `at` ignored)."""
        state = self._state(key)
        if state is None:
            return
        role = _role_name(role)
        if role == ROLLOUT and pod is not None:
            state.drift.note_restart(pod, at)
            state.engine_stall.note_restart(pod, at)
            state.fed.pop((ROLLOUT, pod), None)
        elif role == VERIFIER_ROLE and pod is not None and state.verifier is not None:
            state.verifier.note_restart(pod, at)
            state.fed.pop((VERIFIER_ROLE, pod), None)
        elif role == TRAINER_ROLE:
            state.trainer.note_restart(at)
            state.trainer_readings = {}

    def source_error(self, key: JobKey) -> str | None:
        """Why the job's metrics source failed its last round, or None when it answered."""
        state = self._state(key)
        return state.source_error if state is not None else None

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
        groups: dict[SourceKey, list[_JobState]] = {}
        for state in self._jobs.values():
            if state.backfill_pending and state.source is not None and state.has_targets():
                groups.setdefault(state.source, []).append(state)
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

    # ---------------------------------------------------------------- rounds

    def _state(self, key: JobKey) -> _JobState | None:
        uid = self._uids.get(key)
        return self._jobs.get(uid) if uid is not None else None

    def _drop(self, uid: str) -> None:
        state = self._jobs.pop(uid, None)
        if state is None:
            return
        if self._uids.get(state.key) == uid:
            del self._uids[state.key]
        for detector in _VALUE_OF:
            with contextlib.suppress(KeyError):
                DETECTOR_VALUE.remove(state.key[0], state.key[1], detector)

    def _start_due(self, now: float) -> None:
        groups: dict[SourceKey | None, list[_JobState]] = {}
        for state in self._jobs.values():
            if state.next_due <= now:
                if state.has_targets():
                    groups.setdefault(state.source, []).append(state)
                else:
                    state.next_due = next_slot(now, state.interval)
        for key, jobs in groups.items():
            if key in self._inflight:
                continue
            for state in jobs:
                state.next_due = next_slot(now, state.interval)
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
        used = {state.source for state in self._jobs.values()} | set(self._inflight)
        for key in [key for key in self._sources if key not in used]:
            source = self._sources.pop(key)
            self._source_down.pop(key, None)
            with contextlib.suppress(Exception):
                await source.close()

    async def _round(self, key: SourceKey | None, jobs: list[_JobState], now: float) -> None:
        """One round of one source: backfill its new jobs, one query per signal for all due
        jobs, then feed, evaluate and report each job."""
        targets = {state.uid: state.targets() for state in jobs}
        collected: Collected = {}
        if key is None:
            error: SourceError | None = SourceUnavailable(
                "no metrics source: set spec.health.source or the operator's default source"
            )
        else:
            error = None
            try:
                source = self._source(key)
                pending = [state for state in jobs if state.backfill_pending]
                if pending:
                    await self._backfill(source, pending, now)
                collected = await source.collect(
                    self._queries(jobs, targets), lookback=self._lookback(jobs, now), at=now
                )
            except Exception as failure:  # a source never raises, but a factory might
                log.exception("health source failed", source=key.describe())
                error = SourceUnavailable(describe_error(failure))
            self._note_source_state(key, collected, error)
        for state in jobs:
            if self._jobs.get(state.uid) is not state:
                continue  # forgotten or replaced while the queries ran
            state.last_polled = now
            evaluations = self._evaluate(state, targets[state.uid], collected, error, now)
            state.source_error = self._job_error(state, targets[state.uid], collected, error)
            self._count(state, evaluations)
            try:
                await self._on_evaluations(state.key, evaluations)
            except Exception:
                log.exception("on_evaluations failed", namespace=state.key[0], name=state.key[1])
            await asyncio.sleep(0)  # let other work run between jobs of a big round

    @staticmethod
    def _queries(
        jobs: Sequence[_JobState], targets: Mapping[str, _Targets]
    ) -> dict[Signal, dict[str, set[str]]]:
        queries: dict[Signal, dict[str, set[str]]] = {}
        for state in jobs:
            namespace = state.key[0]
            for signal, pods in state.queries(targets[state.uid]).items():
                queries.setdefault(signal, {}).setdefault(namespace, set()).update(pods)
        return queries

    @staticmethod
    def _lookback(jobs: Sequence[_JobState], now: float) -> float:
        """Since each job's previous round (two intervals for a job's first), at least one
        interval, at most MAX_LOOKBACK, plus LOOKBACK_SLACK."""
        longest = 0.0
        for state in jobs:
            last = state.last_polled
            since = now - last if last is not None else 2 * state.interval
            longest = max(longest, min(max(since, state.interval), MAX_LOOKBACK))
        return longest + LOOKBACK_SLACK

    async def _backfill(self, source: MetricsSource, jobs: list[_JobState], now: float) -> None:
        """One range query per signal for the new jobs of one source, each role's signals
        over the longest history any of those jobs needs for that role."""
        if not source.supports_history:
            for state in jobs:
                state.backfill_pending = False
            return
        targets = {state.uid: state.targets() for state in jobs}
        step = min(state.interval for state in jobs)
        by_role: dict[str, tuple[float, dict[Signal, dict[str, set[str]]]]] = {}
        for state in jobs:
            spans = state.backfill_spans()
            for role, signals in state.role_queries(targets[state.uid]).items():
                span, queries = by_role.get(role, (0.0, {}))
                for signal, pods in signals.items():
                    queries.setdefault(signal, {}).setdefault(state.key[0], set()).update(pods)
                by_role[role] = (max(span, spans[role]), queries)
        answers = await asyncio.gather(
            *(
                source.history(queries, start=now - span, end=now, step=step)
                for span, queries in by_role.values()
            ),
            return_exceptions=True,
        )
        collected: Collected = {}
        failed = False
        for answer in answers:
            if isinstance(answer, BaseException):
                log.error("health backfill failed", exc_info=answer)
                failed = True
            else:
                collected.update(answer)
        answered = any(isinstance(answer, dict) for answer in collected.values())
        for state in jobs:
            state.backfill_attempts += 1
            if (
                answered
                or not (failed or collected)
                or state.backfill_attempts >= BACKFILL_ATTEMPTS
            ):
                state.backfill_pending = False
            if answered and self._jobs.get(state.uid) is state:
                self._feed(state, targets[state.uid], collected)
                await asyncio.sleep(0)  # let other work run between jobs of a big backfill
        log.info(
            "health backfill",
            jobs=len(jobs),
            seconds={role: round(span) for role, (span, _) in by_role.items()},
            answered=answered,
            source=getattr(source, "kind", "?"),
        )

    def _note_source_state(
        self, key: SourceKey, collected: Collected, error: SourceError | None
    ) -> None:
        failures = [a for a in collected.values() if isinstance(a, SourceError)]
        problem = error or (failures[0] if failures else None)
        was = self._source_down.get(key)
        if problem is not None:
            message = describe_error(problem)
            if was is None:
                log.warning("health source failing", source=key.describe(), error=message)
            self._source_down[key] = message
        elif was is not None:
            log.info("health source answering again", source=key.describe())
            del self._source_down[key]

    # ---------------------------------------------------------------- per job

    def _feed(self, state: _JobState, targets: _Targets, collected: Collected) -> dict[str, str]:
        """Feeds a job's detectors from the answers; returns role -> error for the roles whose
        signals failed (those roles get nothing fed)."""
        failed: dict[str, str] = {}
        feeds: list[tuple[str, Mapping[str, Signal], Callable[[], None]]] = []
        engine = state.engine
        if targets.rollout and engine is not None:
            feeds.append(
                (ROLLOUT, engine.signals(), lambda: self._feed_rollout(state, targets, collected))
            )
        if targets.trainer:
            feeds.append(
                (
                    TRAINER_ROLE,
                    TRAINER.signals(),
                    lambda: self._feed_trainer(state, targets, collected),
                )
            )
        if targets.verifier and state.verifier is not None:
            feeds.append(
                (
                    VERIFIER_ROLE,
                    VERIFIER.signals(),
                    lambda: self._feed_verifier(state, targets, collected),
                )
            )
        for role, signals, feed in feeds:
            problem = _failure(signals.values(), collected)
            if problem is not None:
                failed[role] = describe_error(problem)
            else:
                feed()
        return failed

    @staticmethod
    def _feed_rollout(state: _JobState, targets: _Targets, collected: Collected) -> None:
        engine = state.engine
        if engine is None:
            return
        signals = engine.signals()
        for pod in targets.rollout:
            series = _pod_series(signals, collected, (state.key[0], pod))
            samples = engine_samples(
                engine,
                series,
                state.staleness,
                after=state.fed.get((ROLLOUT, pod), -math.inf),
                min_spacing=state.min_spacing,
            )
            for sample in samples:
                state.drift.observe(pod, sample)
                state.engine_stall.observe(pod, sample)
            if samples:
                state.seen_rollout.add(pod)
                state.fed[ROLLOUT, pod] = samples[-1].t

    @staticmethod
    def _feed_trainer(state: _JobState, targets: _Targets, collected: Collected) -> None:
        signals = TRAINER.signals()
        for pod in targets.trainer:
            reading = trainer_reading(TRAINER, _pod_series(signals, collected, (state.key[0], pod)))
            known = state.trainer_readings.get(pod)
            if reading is not None and (known is None or reading.t >= known.t):
                state.trainer_readings[pod] = reading

    @staticmethod
    def _feed_verifier(state: _JobState, targets: _Targets, collected: Collected) -> None:
        detector = state.verifier
        if detector is None:
            return
        signals = VERIFIER.signals()
        for pod in targets.verifier:
            series = _pod_series(signals, collected, (state.key[0], pod))
            histogram = verifier_samples(
                VERIFIER,
                series,
                state.staleness,
                after=state.fed.get((VERIFIER_ROLE, pod), -math.inf),
                min_spacing=state.min_spacing,
            )
            for snapshot in histogram:
                detector.observe(pod, snapshot)
            if histogram:
                state.seen_verifier.add(pod)
                state.fed[VERIFIER_ROLE, pod] = histogram[-1].t

    def _evaluate(
        self,
        state: _JobState,
        targets: _Targets,
        collected: Collected,
        error: SourceError | None,
        now: float,
    ) -> list[Evaluation]:
        if error is not None:
            failed = dict.fromkeys((ROLLOUT, TRAINER_ROLE, VERIFIER_ROLE), describe_error(error))
        else:
            failed = self._feed(state, targets, collected)
        source = state.source.describe() if state.source is not None else "none"
        evaluations: list[Evaluation] = []
        if targets.rollout:
            evaluations += self._rollout(state, targets.rollout, failed.get(ROLLOUT), source, now)
        if targets.trainer or state.trainer_pods or state.attempt is not None:
            evaluations.append(self._trainer(state, failed.get(TRAINER_ROLE), source, now))
        if targets.verifier and state.verifier is not None:
            evaluations += self._verifiers(
                state, targets.verifier, failed.get(VERIFIER_ROLE), source, now
            )
        return evaluations

    @staticmethod
    def _unavailable(detectors: Sequence[str], pods: Iterable[str], why: str) -> list[Evaluation]:
        return [
            insufficient(detector, pod, f"{pod}: {why}", {"source_error": why})
            for pod in pods
            for detector in detectors
        ]

    def _rollout(
        self, state: _JobState, pods: Sequence[str], problem: str | None, source: str, now: float
    ) -> list[Evaluation]:
        detectors = (KV_DRIFT, ENGINE_STALL)
        if state.engine is None:
            return self._unavailable(detectors, pods, state.engine_error)
        if problem is not None:
            return self._unavailable(detectors, pods, f"metrics source {source}: {problem}")
        current = set(pods)
        evaluations = [
            e
            for e in state.drift.evaluate(now) + state.engine_stall.evaluate(now)
            if e.target in current
        ]
        missing = [pod for pod in pods if pod not in state.seen_rollout]
        metric = state.engine.generation_tokens_total
        evaluations += [
            insufficient(detector, pod, f"{pod}: no {metric} samples from {source} yet")
            for pod in missing
            for detector in detectors
        ]
        return evaluations

    def _trainer(
        self, state: _JobState, problem: str | None, source: str, now: float
    ) -> Evaluation:
        if problem is not None:
            why = f"metrics source {source}: {problem}"
            return insufficient(TRAINER_STALL, TRAINER_TARGET, why, {"source_error": why})
        readings = list(state.trainer_readings.values())
        steps = [r.step for r in readings if r.step is not None]
        signals = trainer_signals(  # a rank whose metrics vanished is not read as a stall
            readings,
            pods_running=state.trainer_running,
            attempt_started_at=state.attempt_started_at,
        )
        evaluation = state.trainer.evaluate(signals, now)
        saved = [r.checkpoint_step for r in readings if r.checkpoint_step is not None]
        if saved:  # lets the operator list checkpoints only when the trainer saved a new one
            evaluation.evidence[CHECKPOINT_STEP_EVIDENCE] = max(saved)
        if steps:
            evaluation.evidence[TRAINER_STEP_EVIDENCE] = max(steps)
        generations = [r.policy_generation for r in readings if r.policy_generation is not None]
        if generations:
            evaluation.evidence[POLICY_GENERATION_EVIDENCE] = max(generations)
        return evaluation

    def _verifiers(
        self, state: _JobState, pods: Sequence[str], problem: str | None, source: str, now: float
    ) -> list[Evaluation]:
        detector = state.verifier
        if detector is None:
            return []
        if problem is not None:
            why = f"metrics source {source}: {problem}"
            return self._unavailable((VERIFIER_LATENCY,), pods, why)
        current = set(pods)
        evaluations = [e for e in detector.evaluate(now) if e.target in current]
        metric = VERIFIER.duration_buckets
        evaluations += [
            insufficient(VERIFIER_LATENCY, pod, f"{pod}: no {metric} samples from {source} yet")
            for pod in pods
            if pod not in state.seen_verifier
        ]
        return evaluations

    @staticmethod
    def _job_error(
        state: _JobState, targets: _Targets, collected: Collected, error: SourceError | None
    ) -> str | None:
        if error is not None:
            return describe_error(error)
        wanted = state.queries(targets)
        problem = _failure(wanted, collected)
        return describe_error(problem) if problem is not None else None

    @staticmethod
    def _count(state: _JobState, evaluations: Sequence[Evaluation]) -> None:
        values: dict[str, list[float]] = {}
        for evaluation in evaluations:
            DETECTOR_EVALUATIONS.labels(
                detector=evaluation.detector, outcome=evaluation.outcome
            ).inc()
            spec = _VALUE_OF.get(evaluation.detector)
            if spec is None:
                continue
            value = evaluation.evidence.get(spec[0])
            if isinstance(value, int | float) and math.isfinite(value):
                values.setdefault(evaluation.detector, []).append(float(value))
        namespace, name = state.key
        for detector, (_, combine) in _VALUE_OF.items():
            if detector in values:
                DETECTOR_VALUE.labels(namespace, name, detector).set(combine(values[detector]))
            else:
                with contextlib.suppress(KeyError):
                    DETECTOR_VALUE.remove(namespace, name, detector)


def pods_by_role(pods: Iterable[PodLike]) -> dict[str, list[PodLike]]:
    """Groups observed pods (with a `role` attribute, as ObservedPod has) by role."""
    grouped: dict[str, list[PodLike]] = {}
    for pod in pods:
        grouped.setdefault(str(getattr(pod, "role", "")), []).append(pod)
    return grouped


__all__ = [
    "EvaluationsCallback",
    "HealthScheduler",
    "JobKey",
    "PodLike",
    "SignalData",
    "SourceFactory",
    "next_slot",
    "pods_by_role",
]
