"""One engine's operating-point state: its request mix, the warm-up that learns its throughput
model, the model refreshed while its KV capacity is intact, and the window of intervals it is
judged on, each with the throughput the model expected of it then."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from rljob.health.drift.config import DriftConfig
from rljob.health.drift.measures import judgeable
from rljob.health.drift.operating_point import (
    OperatingPoint,
    RequestMix,
    cache_rates,
    operating_point,
)
from rljob.health.drift.throughput_model import PointModel, StepFit, features, learn, with_fit
from rljob.health.samples import EngineSample, EngineSeries, ring_capacity

# The step fit replaces the warm-up model only with this many healthy intervals behind it.
MIN_REFRESH_WEIGHT = 10.0


@dataclass(frozen=True, slots=True)
class PointBaseline:
    """The engine's own fragmentation-sensitive rates over warm-up, for the indicators."""

    prefix_hit_rate: float | None
    preemptions_per_request: float | None
    prompt: float | None


@dataclass(frozen=True, slots=True)
class Judged:
    """One interval in the window: judged (saturated, serving) or only counted as serving."""

    point: OperatingPoint | None
    expected: float | None
    start: float
    end: float
    serving: bool


def _baseline(points: list[OperatingPoint]) -> PointBaseline:
    prefix_hit_rate, preemptions_per_request = cache_rates(points)
    prompts = [p.prompt for p in points if p.prompt is not None]
    return PointBaseline(
        prefix_hit_rate=prefix_hit_rate,
        preemptions_per_request=preemptions_per_request,
        prompt=sum(prompts) / len(prompts) if prompts else None,
    )


class PointState:
    """What the operating-point detector keeps of one engine process."""

    __slots__ = (
        "baseline",
        "cooldown_until",
        "first_seen",
        "fit",
        "mix",
        "model",
        "not_before",
        "series",
        "warm",
        "warm_seconds",
        "warmed_up_at",
        "window",
    )

    def __init__(self, config: DriftConfig) -> None:
        self.series = EngineSeries(config.interval)
        self.mix = RequestMix()
        self.fit = StepFit()
        self.warm: deque[tuple[OperatingPoint, float | None]] = deque(
            maxlen=ring_capacity(config.warmup, config.interval)
        )
        self.warm_seconds = 0.0
        self.model: PointModel | None = None
        self.baseline: PointBaseline | None = None
        self.warmed_up_at: float | None = None
        self.window: deque[Judged] = deque(maxlen=ring_capacity(config.window, config.interval))
        self.cooldown_until = -math.inf
        self.not_before = -math.inf
        self.first_seen: float | None = None

    def add(self, sample: EngineSample, config: DriftConfig) -> None:
        if not sample.t >= self.not_before:
            return
        previous = self.series.last
        interval = self.series.add(sample)
        current = self.series.last
        if self.first_seen is None and current is not None:
            self.first_seen = current.t
        if interval is None or previous is None or current is None:
            return
        if interval.counter_reset:
            self.restart(config, interval.end)
            return
        self.mix.add(previous, current)
        if not judgeable(interval):
            serving = not interval.excluded and not interval.gap
            self.window.append(Judged(None, None, interval.start, interval.end, serving))
            return
        point = operating_point(previous, current, interval.tokens, self.mix)
        self._learn(point, config)

    def _learn(self, point: OperatingPoint, config: DriftConfig) -> None:
        response = self.mix.generation
        model = self.model
        if model is None:
            self._warm_up(point, response, config)
            return
        self.window.append(
            Judged(point, model.expected(point, response), point.start, point.end, True)
        )
        capacity = point.capacity
        if capacity is not None and capacity >= model.capacity * (1 - config.threshold / 2):
            self._refresh(point, response, model)

    def _warm_up(self, point: OperatingPoint, response: float | None, config: DriftConfig) -> None:
        row = features(point, response)
        if row is None:
            return
        self.warm.append((point, response))
        self.fit.add(*row, weight=point.duration, at=point.end)
        self.warm_seconds += point.duration
        if self.warm_seconds < config.warmup:
            return
        model = learn(list(self.warm), self.fit)
        if model is None or not model.intercept > 0:
            self.restart(config, point.end)  # a warm-up without KV usage or progress: again
            return
        self.model, self.warmed_up_at = model, point.end
        self.baseline = _baseline([p for p, _ in self.warm])
        self.warm.clear()

    def _refresh(self, point: OperatingPoint, response: float | None, model: PointModel) -> None:
        row = features(point, response)
        if row is None:
            return
        self.fit.add(*row, weight=point.duration, at=point.end)
        max_batch = model.max_batch
        if point.kv_usage is not None and point.kv_usage < 0.8:
            max_batch = point.running if math.isinf(max_batch) else max(max_batch, point.running)
        if self.fit.weight >= MIN_REFRESH_WEIGHT * point.duration:
            self.model = with_fit(model.capacity, max_batch, self.fit, model.usable_share)

    def restart(self, config: DriftConfig, at: float) -> None:
        """A new engine process (or a warm-up that learned nothing): everything starts over."""
        first_seen, cooldown_until = self.first_seen, self.cooldown_until
        self.__init__(config)  # type: ignore[misc]
        self.not_before = at
        self.first_seen, self.cooldown_until = first_seen, cooldown_until

    def seed(self, model: PointModel, baseline: PointBaseline, warmed_up_at: float) -> None:
        self.model, self.baseline, self.warmed_up_at = model, baseline, warmed_up_at
        self.warm.clear()

    def judged(self, start: float, end: float) -> list[Judged]:
        return [j for j in self.window if j.end > start and j.start < end]
