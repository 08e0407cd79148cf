"""One peer group of rollout engines watched by a job's monitor: the rollout Deployment's pods,
or the trainer gang's pods whose colocated engines (spec.roles.trainer.engines) export engine
metrics. Each group has its own detectors, so a gang pod is never judged against a rollout
engine, and its findings carry its pods' role."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rljob.api.roles import GangEngines, RolloutRole
from rljob.api.spec import Health
from rljob.api.status import EngineHealth
from rljob.health.causes import (
    KVLeakConfig,
    KVLeakDetector,
    MemoryGrowthConfig,
    MemoryGrowthDetector,
    PrefixCollapseConfig,
    PrefixCollapseDetector,
)
from rljob.health.causes.role_wide import role_wide
from rljob.health.drift import DriftConfig, KVDriftDetector
from rljob.health.drift.point_detector import FragmentationDetector
from rljob.health.evaluation import (
    ENGINE_STALL,
    KV_DRIFT,
    KV_FRAGMENTATION,
    KV_LEAK,
    MEMORY_GROWTH,
    PREFIX_COLLAPSE,
    Evaluation,
)
from rljob.health.profiles import EngineMetrics, MissingMetricNamesError, engine_metrics
from rljob.health.samples import EngineSample
from rljob.health.stall import EngineStallConfig, EngineStallDetector
from rljob.vocabulary.enums import EngineExporter, RoleName

# The detectors every engine group runs (evaluation.py's names).
DETECTORS = (KV_DRIFT, KV_FRAGMENTATION, ENGINE_STALL, KV_LEAK, PREFIX_COLLAPSE, MEMORY_GROWTH)
# Group keys: what the monitor's queries, feeds and failures are keyed by.
ROLLOUT_ENGINES = "rollout"
GANG_ENGINES = "trainer-engines"


class EngineGroup:
    """The engines of one group: their metric names (or why there are none), the pods watched
    now, which of them have given samples, and the drift, stall and cause detectors."""

    def __init__(self, key: str, role: RoleName, health: Health, drift: DriftConfig) -> None:
        self.key = key
        self.role = role
        self.drift = KVDriftDetector(drift, role)
        self.fragmentation = FragmentationDetector(drift, role)
        self.stall = EngineStallDetector(EngineStallConfig.from_health(health))
        self.leak = KVLeakDetector(KVLeakConfig.from_health(health))
        self.prefix = PrefixCollapseDetector(PrefixCollapseConfig.from_health(health))
        self.memory = MemoryGrowthDetector(MemoryGrowthConfig.from_health(health))
        self.metrics: EngineMetrics | None = None
        self.error = ""
        self.pods: tuple[str, ...] = ()
        self.turn_order: tuple[str, ...] = ()
        self.seen: set[str] = set()

    def track(
        self, spec: RolloutRole | GangEngines | None, pods: Mapping[str, float | None]
    ) -> None:
        """The group's spec now (None: the job has no such engines) and its active pods with
        their creation times (None: unknown)."""
        self.metrics, self.error = _profile(spec)
        self.pods = tuple(sorted(pods)) if spec is not None else ()
        self.turn_order = longest_running_first(pods) if spec is not None else ()
        self.drift.retain(self.pods)
        self.fragmentation.retain(self.turn_order)
        self.stall.retain(self.pods)
        self.leak.retain(self.pods)
        self.prefix.retain(self.pods)
        self.memory.retain(self.pods)
        self.seen &= set(self.pods)

    def observe(self, pod: str, sample: EngineSample) -> None:
        """One sample of one engine, to every detector of the group."""
        self.drift.observe(pod, sample)
        self.fragmentation.observe(pod, sample)
        self.stall.observe(pod, sample)
        self.leak.observe(pod, sample)
        self.prefix.observe(pod, sample)
        self.memory.observe(pod, sample)

    def evaluate(self, now: float) -> list[Evaluation]:
        """Every detector's evaluations of the group's engines, in DETECTORS order."""
        return (
            self.drift.evaluate(now)
            + self.fragmentation.evaluate(now)
            + self.stall.evaluate(now)
            + role_wide(self.leak.evaluate(now), self.turn_order)
            + role_wide(self.prefix.evaluate(now), self.turn_order)
            + role_wide(self.memory.evaluate(now), self.turn_order)
        )

    def summaries(self, now: float) -> list[EngineHealth]:
        return self.drift.summaries(now) + self.fragmentation.summaries(now)

    def restore(self, saved: list[EngineHealth], now: float) -> None:
        self.drift.restore(saved, now)
        self.fragmentation.restore(saved, now)

    def note_restart(self, pod: str, at: float) -> None:
        self.drift.note_restart(pod, at)
        self.fragmentation.note_restart(pod, at)
        self.stall.note_restart(pod, at)
        self.leak.note_restart(pod, at)
        self.prefix.note_restart(pod, at)
        self.memory.note_restart(pod, at)


def longest_running_first(created: Mapping[str, float | None]) -> tuple[str, ...]:
    """The order the in-turn restart takes engines in (reconcile/in_turn.py oldest_first): by
    creation time, then name; an engine whose creation time is unknown goes last. A finding that
    names engines in turn names them so, so what it says is what the operator does."""
    return tuple(sorted(created, key=lambda pod: (_or_last(created[pod]), pod)))


def _or_last(at: float | None) -> float:
    return math.inf if at is None else at


def _profile(spec: RolloutRole | GangEngines | None) -> tuple[EngineMetrics | None, str]:
    if spec is None:
        return None, ""
    try:
        profile = engine_metrics(spec, through_ray=_through_ray(spec))
    except MissingMetricNamesError as error:
        return None, str(error)
    return profile, ""


def _through_ray(spec: RolloutRole | GangEngines) -> bool:
    return isinstance(spec, GangEngines) and spec.exporter == EngineExporter.RAY
