"""One job's health monitor (docs/architecture.md section 5): the detectors a job has, the pods of
each role it watches, the signals it asks its metrics source for, when it is next due and whether
its detectors still need a backfill. Pure: the health loop (rljob.runtime.health_loop) asks the
source and hands the answers to rljob.health.monitor_answers, which feeds and evaluates.

State is kept per job uid and bounded: detectors keep fixed-size rings per pod and pods that
left are dropped on every `update`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from rljob.api import RLJob
from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.api.status import EngineHealth
from rljob.health import (
    DriftConfig,
    TrainerStallConfig,
    TrainerStallDetector,
    VerifierLatencyConfig,
    VerifierLatencyDetector,
)
from rljob.health.engine_group import GANG_ENGINES, ROLLOUT_ENGINES, EngineGroup
from rljob.health.job_diagnosis import (
    DIAGNOSIS_ROLE,
    JobDiagnosis,
    diagnosis_queries,
    diagnosis_span,
)
from rljob.health.monitor_engines import EngineGauges
from rljob.health.profiles import (
    OPTIONAL_ENGINE_SIGNALS,
    TRAINER,
    VERIFIER,
    Signal,
    TrainerReading,
)
from rljob.health.samples import MIN_SPACING_INTERVALS
from rljob.vocabulary.enums import RoleName, WeightSync

# Added to every instant query's range: a scrape taken just before a query can be ingested
# just after it; the detectors drop samples they already have.
LOOKBACK_SLACK = 5.0
MAX_LOOKBACK = 900.0
MAX_BACKFILL = 24 * 3600.0
BACKFILL_ATTEMPTS = 3
# Secondary metrics are matched to the token counter's timestamps within this many seconds
# (at least; a job's interval if longer).
MIN_STALENESS = 15.0

ROLLOUT = ROLLOUT_ENGINES
TRAINER_ROLE = "trainer"
VERIFIER_ROLE = "verifier"
TRAINER_TARGET = "trainer"

JobKey = tuple[str, str]  # (namespace, name)
# Signal -> namespace -> pod names: what one query (or range query) asks a source for.
SignalQueries = dict[Signal, dict[str, set[str]]]


class PodLike(Protocol):
    """What the monitor reads of an observed pod (rljob.reconcile.observed.ObservedPod fits;
    `attempt`, `created_at` and `deleting` are read when present)."""

    @property
    def name(self) -> str: ...

    @property
    def phase(self) -> str: ...

    @property
    def ready(self) -> bool: ...


class SourceName(Protocol):
    """What the monitor reads of a metrics source's key (rljob.adapters.metrics.SourceKey fits);
    the loop groups jobs by it, so it must be hashable."""

    def describe(self) -> str: ...


S = TypeVar("S", bound=SourceName)


def role_name(role: object) -> str:
    """A role as a plain string (RoleName values and strings alike)."""
    return str(getattr(role, "value", role))


def _active(pod: PodLike) -> bool:
    return pod.phase == "Running" and not getattr(pod, "deleting", False)


def _created(pods: Iterable[PodLike]) -> dict[str, float | None]:
    """The active pods with their creation times (None: unknown)."""
    return {
        pod.name: created.timestamp() if (created := getattr(pod, "created_at", None)) else None
        for pod in pods
        if _active(pod)
    }


def _colocated(job: RLJob) -> bool:
    """No rollout role: the engines diagnosed are the trainer gang's own."""
    return job.spec.roles.rollout is None


def next_slot(now: float, interval: float) -> float:
    """The next multiple of `interval` after `now`."""
    return (math.floor(now / interval) + 1) * interval


def pods_by_role(pods: Iterable[PodLike]) -> dict[str, list[PodLike]]:
    """Groups observed pods (with a `role` attribute, as ObservedPod has) by role."""
    grouped: dict[str, list[PodLike]] = {}
    for pod in pods:
        grouped.setdefault(str(getattr(pod, "role", "")), []).append(pod)
    return grouped


@dataclass(frozen=True, slots=True)
class Targets:
    """The pods one round of one job asks for, taken before the queries go out."""

    rollout: tuple[str, ...]
    trainer: tuple[str, ...]
    verifier: tuple[str, ...]
    # Trainer pods whose colocated engines are watched (spec.roles.trainer.engines).
    gang_engines: tuple[str, ...] = ()

    def engines(self, group: str) -> tuple[str, ...]:
        """The pods of an engine group (ROLLOUT_ENGINES or GANG_ENGINES)."""
        return self.rollout if group == ROLLOUT_ENGINES else self.gang_engines


class JobMonitor(Generic[S]):
    """Everything kept for one job (one uid): detectors, watched pods, source, schedule."""

    def __init__(self, uid: str, key: JobKey, job: RLJob, now: float) -> None:
        self.uid = uid
        self.key = key
        self.next_due = now
        self.last_polled: float | None = None
        self.backfill_pending = True
        self.backfill_attempts = 0
        self.source: S | None = None
        self.source_error: str | None = None
        self.judging: tuple[str, ...] | None = None  # detectors that have had data so far
        self.verifier_pods: tuple[str, ...] = ()
        self.trainer_pods: tuple[str, ...] = ()
        self.trainer_running = False
        self.attempt: int | None = None
        self.attempt_started_at = now
        self.trainer_readings: dict[str, TrainerReading] = {}
        self.has_verifier = False
        self.colocated = False
        self.health: Health | None = None
        # Rollout pod -> its latest running and generation (drains and the gate read them).
        self.engine_gauges: dict[str, EngineGauges] = {}
        # generationFrom engine: each pod's last weight version read over HTTP, and when; a read
        # that fails keeps it (the version only moves when the driver pushes).
        self.engine_versions: dict[str, tuple[float, int]] = {}
        self.weight_gated = False  # spec.roles.rollout.weightSync is Gated
        self._configure(job.spec.health, job.spec.roles.verifier is not None, _colocated(job))
        self.restore(job, now)

    def restore(self, job: RLJob, now: float) -> None:
        """Detector state a previous operator saved in status: a restart or failover does not
        re-take drift baselines on throughput that may already be degraded."""
        saved = job.status.health.engines if job.status.health is not None else []
        if saved:
            for group in self.engine_groups:
                group.restore(saved, now)

    def _configure(self, health: Health, has_verifier: bool, colocated: bool) -> None:
        self.health = health
        self.has_verifier = has_verifier
        self.colocated = colocated
        # The bottleneck reads the rollout role's engines, else the trainer gang's own.
        self.diagnosed_engines = GANG_ENGINES if colocated else ROLLOUT
        self.interval = max(1.0, parse_duration(health.interval))
        self.drift_config = DriftConfig.from_health(health)
        self.verifier_config = VerifierLatencyConfig.from_health(health)
        self.trainer_config = TrainerStallConfig.from_health(health)
        self.rollout = EngineGroup(ROLLOUT_ENGINES, RoleName.ROLLOUT, health, self.drift_config)
        self.gang = EngineGroup(GANG_ENGINES, RoleName.TRAINER, health, self.drift_config)
        self.trainer = TrainerStallDetector(self.trainer_config, TRAINER_TARGET)
        self.verifier = VerifierLatencyDetector(self.verifier_config) if has_verifier else None
        self.diagnosis = JobDiagnosis(health, colocated=colocated)
        self.seen_verifier: set[str] = set()
        # (role, pod) -> time of the newest sample fed to its detectors.
        self.fed: dict[tuple[str, str], float] = {}
        # The detectors drop samples closer together than this; so do we, before building them.
        self.min_spacing = self.interval * MIN_SPACING_INTERVALS
        self.trainer_readings = {}
        self.backfill_pending = True
        self.backfill_attempts = 0
        self._plan: tuple[tuple[object, ...], QueryPlan] | None = None

    @property
    def staleness(self) -> float:
        return max(self.interval, MIN_STALENESS)

    def backfill_spans(self) -> dict[str, float]:
        """Per role, how far back its detectors need history: the drift window plus warm-up,
        the verifier window, the trainer's stall timeout (for its last heartbeat)."""
        drift = self.drift_config.window + self.drift_config.warmup
        spans = {
            ROLLOUT_ENGINES: drift,
            GANG_ENGINES: drift,
            VERIFIER_ROLE: self.verifier_config.window,
            TRAINER_ROLE: self.trainer_config.timeout,
            DIAGNOSIS_ROLE: diagnosis_span(self.health or Health(), self.interval),
        }
        return {role: min(MAX_BACKFILL, span + 2 * self.interval) for role, span in spans.items()}

    def note_backfill(self, *, answered: bool, asked: bool) -> None:
        """One backfill attempt ended; it is tried again (up to BACKFILL_ATTEMPTS in all) only
        when something was asked and no signal answered."""
        self.backfill_attempts += 1
        if answered or not asked or self.backfill_attempts >= BACKFILL_ATTEMPTS:
            self.backfill_pending = False

    def schedule_next(self, now: float) -> None:
        """Due again at the next slot of its interval's grid (equal intervals fall due together)."""
        self.next_due = next_slot(now, self.interval)

    def update(
        self, job: RLJob, pods: Mapping[str, Sequence[PodLike]], now: float, source: S | None
    ) -> None:
        """Takes the job's current spec, observed pods by role and metrics source; a changed
        health spec (or verifier role) starts the detectors over."""
        has_verifier, colocated = job.spec.roles.verifier is not None, _colocated(job)
        if (job.spec.health, has_verifier, colocated) != (
            self.health,
            self.has_verifier,
            self.colocated,
        ):
            self._configure(job.spec.health, has_verifier, colocated)
            self.restore(job, now)
        self.source = source
        self.rollout.track(job.spec.roles.rollout, _created(pods.get(ROLLOUT, ())))
        kept = set(self.rollout.pods)
        self.engine_gauges = {p: g for p, g in self.engine_gauges.items() if p in kept}
        self.engine_versions = {p: v for p, v in self.engine_versions.items() if p in kept}
        spec = job.spec.roles.rollout
        self.weight_gated = spec is not None and spec.weight_sync == WeightSync.GATED
        self.verifier_pods = (
            tuple(sorted(p.name for p in pods.get(VERIFIER_ROLE, ()) if _active(p)))
            if has_verifier
            else ()
        )
        self._update_trainer(job, list(pods.get(TRAINER_ROLE, ())), now)
        trainer = _created(pods.get(TRAINER_ROLE, ()))
        gang = {pod: trainer.get(pod) for pod in self.trainer_pods}
        self.gang.track(job.spec.roles.trainer.engines, gang)
        if self.verifier is not None:
            self.verifier.retain(self.verifier_pods)
        self.seen_verifier &= set(self.verifier_pods)
        current = {(group.key, pod) for group in self.engine_groups for pod in group.pods}
        current |= {(VERIFIER_ROLE, pod) for pod in self.verifier_pods}
        current |= {(DIAGNOSIS_ROLE, pod) for pod in (*self.trainer_pods, *self.verifier_pods)}
        self.fed = {key: t for key, t in self.fed.items() if key in current}
        self.diagnosis.retain({pod for _, pod in current})

    def _update_trainer(self, job: RLJob, pods: list[PodLike], now: float) -> None:
        attempts = [a for p in pods if isinstance(a := getattr(p, "attempt", None), int)]
        attempt = job.status.attempt or (max(attempts) if attempts else None)
        current = [p for p in pods if getattr(p, "attempt", None) in (None, attempt)]
        if attempt != self.attempt:
            if self.attempt is not None:
                self.trainer.note_restart(now)
                self.diagnosis.note_restart(now)
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

    def note_restart(self, role: str, pod: str | None, at: float) -> None:
        """The operator restarted `pod` of `role` (for the trainer: the gang) at `at`: the
        detectors start over for it (new baseline after warm-up, drift cooldown, samples from
        before `at` ignored)."""
        if role == ROLLOUT and pod is not None:
            self.rollout.note_restart(pod, at)
            self.fed.pop((ROLLOUT, pod), None)
        elif role == VERIFIER_ROLE and pod is not None and self.verifier is not None:
            self.verifier.note_restart(pod, at)
            self.fed.pop((VERIFIER_ROLE, pod), None)
        elif role == TRAINER_ROLE:
            self.trainer.note_restart(at)
            self.diagnosis.note_restart(at)
            self.trainer_readings = {}

    @property
    def engine_groups(self) -> tuple[EngineGroup, EngineGroup]:
        return self.rollout, self.gang

    @property
    def rollout_pods(self) -> tuple[str, ...]:
        return self.rollout.pods

    def engine_summaries(self, now: float) -> list[EngineHealth]:
        """Every engine group's drift summaries for status.health.engines[]."""
        return [s for group in self.engine_groups for s in group.summaries(now)]

    def targets(self) -> Targets:
        return Targets(self.rollout.pods, self.trainer_pods, self.verifier_pods, self.gang.pods)

    def has_targets(self) -> bool:
        return bool(self.rollout.pods or self.trainer_pods or self.verifier_pods)

    def query_plan(self, targets: Targets) -> QueryPlan:
        """What this job asks for `targets`: built again only when the targets, the engine
        profiles or the verifier change, not every round."""
        key = (targets, self.rollout.metrics, self.gang.metrics, self.verifier is not None)
        if self._plan is None or self._plan[0] != key:
            self._plan = (key, QueryPlan.of(self.role_queries(targets)))
        return self._plan[1]

    def role_queries(self, targets: Targets) -> dict[str, dict[Signal, frozenset[str]]]:
        """Per role, the signals it needs and, for each, the pod names."""
        wanted: dict[str, dict[Signal, frozenset[str]]] = {}
        for group in self.engine_groups:
            pods = targets.engines(group.key)
            if pods and group.metrics is not None:
                wanted[group.key] = dict.fromkeys(group.metrics.signals().values(), frozenset(pods))
        if targets.trainer:
            trainer = frozenset(targets.trainer)
            wanted[TRAINER_ROLE] = dict.fromkeys(TRAINER.signals().values(), trainer)
        if targets.verifier and self.verifier is not None:
            verifier = frozenset(targets.verifier)
            wanted[VERIFIER_ROLE] = dict.fromkeys(VERIFIER.signals().values(), verifier)
        diagnosis = diagnosis_queries(targets.trainer, targets.verifier if self.verifier else ())
        if diagnosis:
            wanted[DIAGNOSIS_ROLE] = {s: frozenset(pods) for s, pods in diagnosis.items()}
        return wanted

    def queries(self, targets: Targets) -> dict[Signal, set[str]]:
        """The signals this job needs and, for each, the pod names."""
        merged: dict[Signal, set[str]] = {}
        for pods, signals in self.query_plan(targets).asked:
            for signal in signals:
                merged.setdefault(signal, set()).update(pods)
        return merged


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """One job's queries for one set of targets, kept small (500 jobs keep one each): `asked`
    pairs a set of pods with the signals asked of them; `required` are the signals whose
    failure is the job's source error; `optional` those that are one only when the source
    says they failed (the diagnosis's, nobody need export them, and OPTIONAL_ENGINE_SIGNALS)."""

    asked: tuple[tuple[frozenset[str], tuple[Signal, ...]], ...]
    required: tuple[Signal, ...]
    optional: tuple[Signal, ...]

    @classmethod
    def of(cls, roles: Mapping[str, Mapping[Signal, frozenset[str]]]) -> QueryPlan:
        by_pods: dict[frozenset[str], dict[Signal, None]] = {}
        for signals in roles.values():
            for signal, pods in signals.items():
                by_pods.setdefault(pods, {})[signal] = None
        diagnosis = list(roles.get(DIAGNOSIS_ROLE, {}))
        needed = {s for role, signals in roles.items() if role != DIAGNOSIS_ROLE for s in signals}
        optional = diagnosis + [s for s in needed if s.name in OPTIONAL_ENGINE_SIGNALS]
        asked = tuple((pods, tuple(signals)) for pods, signals in by_pods.items())
        return cls(asked, tuple(needed - set(optional)), tuple(optional))


def due_by_source(
    monitors: Iterable[JobMonitor[S]], now: float
) -> dict[S | None, list[JobMonitor[S]]]:
    """The due jobs that have pods to ask about, by source; a due job without any is moved
    on to its next slot."""
    groups: dict[S | None, list[JobMonitor[S]]] = {}
    for monitor in monitors:
        if monitor.next_due <= now:
            if monitor.has_targets():
                groups.setdefault(monitor.source, []).append(monitor)
            else:
                monitor.schedule_next(now)
    return groups


def round_queries(
    monitors: Sequence[JobMonitor[S]], targets: Mapping[str, Targets]
) -> SignalQueries:
    """One query per signal for all pods of all the jobs (targets by uid)."""
    queries: SignalQueries = {}
    for monitor in monitors:
        namespace = monitor.key[0]
        for pods, signals in monitor.query_plan(targets[monitor.uid]).asked:
            for signal in signals:
                queries.setdefault(signal, {}).setdefault(namespace, set()).update(pods)
    return queries


def lookback(monitors: Sequence[JobMonitor[S]], now: float) -> float:
    """Since each job's previous round (two intervals for a job's first), at least one
    interval, at most MAX_LOOKBACK, plus LOOKBACK_SLACK."""
    longest = 0.0
    for monitor in monitors:
        last = monitor.last_polled
        since = now - last if last is not None else 2 * monitor.interval
        longest = max(longest, min(max(since, monitor.interval), MAX_LOOKBACK))
    return longest + LOOKBACK_SLACK


def backfill_queries(
    monitors: Sequence[JobMonitor[S]], targets: Mapping[str, Targets]
) -> dict[str, tuple[float, SignalQueries]]:
    """Per role, the longest history any of the jobs needs for it and one range query per
    signal of that role for all their pods (targets by uid)."""
    by_role: dict[str, tuple[float, SignalQueries]] = {}
    for monitor in monitors:
        spans = monitor.backfill_spans()
        for role, signals in monitor.role_queries(targets[monitor.uid]).items():
            span, queries = by_role.get(role, (0.0, {}))
            for signal, pods in signals.items():
                queries.setdefault(signal, {}).setdefault(monitor.key[0], set()).update(pods)
            by_role[role] = (max(span, spans[role]), queries)
    return by_role
