"""One engine at its operating point: what the detector keeps of the engine process (its request
mix, the warm-up that learns its throughput model, the model refreshed while its KV capacity is
intact, and the window of intervals it is judged on, each with the throughput the model expected
of it then), and the verdict on it: its generated tokens against what its own throughput model
expected at the load it was offered and the lengths it served, in every slice of the window, and
the fragmentation indicator that agrees (KV capacity lost, preemptions per request up, prefix hit
rate down at a steady prompt mix). A slowdown the model explains (the offered load or the
lengths moved) is no finding; nor is one that no indicator confirms."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

from rljob.health.drift.config import DriftConfig
from rljob.health.drift.measures import (
    MIN_COVERAGE,
    MIN_SATURATED_SHARE_OF_WINDOW,
    judgeable,
    ratio,
)
from rljob.health.drift.operating_point import (
    OperatingPoint,
    RequestMix,
    cache_rates,
    operating_point,
)
from rljob.health.drift.throughput_model import PointModel, StepFit, features, learn, with_fit
from rljob.health.evaluation import (
    KV_FRAGMENTATION,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    format_percent_change,
    healthy,
    insufficient,
)
from rljob.health.samples import EngineSample, EngineSeries, ring_capacity
from rljob.vocabulary.enums import FailureReason

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

    def add(self, sample: EngineSample, config: DriftConfig) -> None:
        if not sample.t >= self.not_before:
            return
        previous = self.series.last
        interval = self.series.add(sample)
        current = self.series.last
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
        cooldown_until = self.cooldown_until
        self.__init__(config)  # type: ignore[misc]
        self.not_before = at
        self.cooldown_until = cooldown_until

    def seed(self, model: PointModel, baseline: PointBaseline, warmed_up_at: float) -> None:
        self.model, self.baseline, self.warmed_up_at = model, baseline, warmed_up_at
        self.warm.clear()

    def judged(self, start: float, end: float) -> list[Judged]:
        return [j for j in self.window if j.end > start and j.start < end]


MIN_SLICE_SATURATED_SHARE = 0.25
# Preemptions confirm only when they add at least this many per request finished.
MIN_PREEMPTION_RISE = 0.01
# The prompt mix counts as steady within this relative change of the mean prompt length.
STEADY_PROMPT = 0.15


@dataclass(frozen=True, slots=True)
class Window:
    """A window's judged intervals, summed."""

    points: list[Judged]
    length: float
    saturated: float
    serving: float
    tokens: float
    expected: float

    @classmethod
    def of(cls, state: PointState, config: DriftConfig, now: float) -> Window:
        judged = state.judged(now - config.window, now)
        points = [j for j in judged if j.point is not None and j.expected is not None]
        return cls(
            points=points,
            length=config.window,
            saturated=sum(j.end - j.start for j in points),
            serving=sum(j.end - j.start for j in judged if j.serving),
            tokens=sum(j.point.tokens for j in points if j.point is not None),
            expected=sum((j.expected or 0.0) * (j.end - j.start) for j in points),
        )

    def covered(self) -> bool:
        return (
            self.saturated >= MIN_SATURATED_SHARE_OF_WINDOW * self.length
            and self.saturated >= MIN_COVERAGE * self.serving
        )

    @property
    def ratio(self) -> float:
        return ratio(self.tokens, self.expected) or 0.0

    def slice_ratios(self, slices: int, start: float) -> list[float]:
        step = self.length / slices
        ratios = []
        for index in range(slices):
            low, high = start + index * step, start + (index + 1) * step
            inside = [j for j in self.points if low <= (j.start + j.end) / 2 < high]
            seconds = sum(j.end - j.start for j in inside)
            if seconds < MIN_SLICE_SATURATED_SHARE * step:
                continue
            tokens = sum(j.point.tokens for j in inside if j.point is not None)
            expected = sum((j.expected or 0.0) * (j.end - j.start) for j in inside)
            if (value := ratio(tokens, expected)) is not None:
                ratios.append(value)
        return ratios

    def median(self, attribute: str) -> float | None:
        values = [
            value
            for j in self.points
            if j.point is not None and (value := getattr(j.point, attribute)) is not None
        ]
        return statistics.median(values) if values else None


def judge_point(target: str, state: PointState, config: DriftConfig, now: float) -> Evaluation:
    """The verdict on one engine's window, before cooldown or the fleet view change it."""
    model, baseline = state.model, state.baseline
    if model is None or baseline is None:
        return insufficient(
            KV_FRAGMENTATION,
            target,
            f"{target} learning its throughput model: {format_duration(state.warm_seconds)} of "
            f"{format_duration(config.warmup)} saturated with request lengths known",
            {"warmup_seconds": state.warm_seconds},
        )
    window = Window.of(state, config, now)
    if not window.covered():
        return insufficient(
            KV_FRAGMENTATION,
            target,
            f"{target} saturated {format_duration(window.saturated)} of "
            f"{format_duration(window.serving)} serving in the last "
            f"{format_duration(window.length)}",
            {"saturated_seconds": window.saturated},
        )
    summary = _summary(target, window, model)
    evidence = _evidence(window, model)
    bound = 1 - config.threshold
    slices = window.slice_ratios(config.slices, now - config.window)
    if not (window.ratio <= bound and slices and all(r <= bound for r in slices)):
        return healthy(KV_FRAGMENTATION, target, summary, evidence)
    confirmed = _indicators(window, model, baseline, config)
    if not confirmed:
        message = f"{summary}; no fragmentation indicator agrees, so the load or lengths explain it"
        return healthy(KV_FRAGMENTATION, target, message, evidence)
    evidence["confirmed_by"] = " and ".join(confirmed)
    message = f"{summary}; confirmed by {' and '.join(confirmed)}"
    return finding(
        KV_FRAGMENTATION, target, FailureReason.KV_CACHE_FRAGMENTATION, message, evidence
    )


def _summary(target: str, window: Window, model: PointModel) -> str:
    actual = window.tokens / window.saturated
    expected = window.expected / window.saturated
    offered = window.median("offered") or 0.0
    context = window.median("context") or 0.0
    return (
        f"{target} generates {actual:.0f} tok/s where its model expects {expected:.0f} at the "
        f"load it is offered ({offered:.0f} requests, about {context:.0f} tokens each: a batch of "
        f"{model.batch(offered, context):.0f}) ({format_percent_change(window.ratio)}) over "
        f"{format_duration(window.length)} while saturated"
    )


def _evidence(window: Window, model: PointModel) -> Evidence:
    evidence: Evidence = {
        "throughput": window.tokens / window.saturated,
        "expected": window.expected / window.saturated,
        "change": window.ratio - 1,
        "capacity_tokens": model.capacity,
        "window_seconds": window.length,
    }
    for name in ("offered", "running", "context", "kv_usage"):
        if (value := window.median(name)) is not None:
            evidence[name] = value
    return evidence


def _indicators(
    window: Window, model: PointModel, baseline: PointBaseline, config: DriftConfig
) -> list[str]:
    found = []
    capacity = window.median("capacity")
    if capacity is not None and capacity <= model.capacity * (1 - config.threshold):
        running, usage = window.median("running") or 0.0, window.median("kv_usage") or 0.0
        found.append(
            f"KV capacity {model.capacity / 1000:.0f}k -> {capacity / 1000:.0f}k tokens "
            f"(usage {usage:.2f} with {running:.0f} running)"
        )
    hit_rate, preemptions = cache_rates(j.point for j in window.points if j.point is not None)
    if (preempted := _preemptions(preemptions, baseline, config)) is not None:
        found.append(preempted)
    if (prefix := _prefix(hit_rate, window, baseline, config)) is not None:
        found.append(prefix)
    return found


def _preemptions(now: float | None, baseline: PointBaseline, config: DriftConfig) -> str | None:
    before = baseline.preemptions_per_request
    if before is None or now is None:
        return None
    if now >= before * (1 + config.threshold) and now - before >= MIN_PREEMPTION_RISE:
        return f"preemptions per request {before:.3f} -> {now:.3f}"
    return None


def _prefix(
    now: float | None, window: Window, baseline: PointBaseline, config: DriftConfig
) -> str | None:
    before, prompt_before = baseline.prefix_hit_rate, baseline.prompt
    prompt = window.median("prompt")
    if before is None or not before > 0 or prompt is None or prompt_before is None:
        return None
    if abs(prompt / prompt_before - 1) > STEADY_PROMPT:
        return None  # another prompt mix hits the cache differently: no evidence either way
    if now is not None and now <= before * (1 - config.threshold / 2):
        return f"prefix hit rate {before:.2f} -> {now:.2f} at a steady prompt mix"
    return None
