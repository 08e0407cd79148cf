"""An engine's expected generation throughput at an operating point, learned from the engine
itself: the batch the load it is offered would get from its KV cache as warm-up measured it,
times how fast one sequence advances at that batch and those lengths.

The batch is predicted from the offered load, never read from the engine: fragmentation shrinks
the batch the engine runs, and a model conditioned on it would explain the fault away. Per-token
time is linear in the KV the batch reads (batch x context) and the prefill the batch's turnover
costs (batch x prompt / response), fitted by decayed ridge regression over healthy intervals;
where warm-up never varied them (a KV-bound engine keeps batch x context near its capacity) the
fit stays at the mean, which is right at that point. The capacity itself is learned once per
engine process and never refreshed: it is what fragmentation takes away.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from rljob.health.drift.operating_point import OperatingPoint

# Healthy intervals older than this (seconds) weigh 1/e as much in the per-token time fit.
STEP_MEMORY = 3 * 3600.0
# Ridge penalty, as a share of each feature's variance: little data keeps the fit at the mean.
RIDGE = 0.1
# A feature whose variance is below this share of its squared mean was not varied: what spread
# the sums show is rounding (they hold squares of 1e5-token features), and a slope fitted to it
# is noise that can reach 1e14.
FLAT_FEATURE = 1e-6
# A batch bound by max_num_seqs rather than the KV cache reads below this usage.
BATCH_BOUND_KV_USAGE = 0.8


@dataclass(frozen=True, slots=True)
class PointModel:
    """What warm-up learned, frozen for the window's judgement and for status."""

    capacity: float  # tokens the KV cache holds (estimate units)
    max_batch: float  # largest batch seen while not KV-bound; inf when never seen
    intercept: float  # seconds per token of one sequence at the mean features
    per_kv_token: float  # extra seconds per token per token of KV the batch reads
    per_prefill_token: float  # extra seconds per token per prompt token of turnover
    mean_kv: float
    mean_prefill: float
    # The share of the cache a KV-bound engine fills (schedulers keep a watermark free).
    usable_share: float = 1.0

    def batch(self, offered: float, context: float) -> float:
        fits = self.capacity * self.usable_share / max(context, 1.0)
        return max(1.0, min(offered, self.max_batch, fits))

    def token_latency(self, batch: float, context: float, prompt: float, response: float) -> float:
        kv = batch * context
        prefill = batch * prompt / max(response, 1.0)
        latency = (
            self.intercept
            + self.per_kv_token * (kv - self.mean_kv)
            + self.per_prefill_token * (prefill - self.mean_prefill)
        )
        return max(latency, self.intercept * 0.1)

    def expected(self, point: OperatingPoint, response: float | None) -> float | None:
        """Tokens per second the engine should generate at `point`'s offered load and lengths."""
        if point.context is None:
            return None
        batch = self.batch(point.offered, point.context)
        prompt = point.prompt or 0.0
        latency = self.token_latency(batch, point.context, prompt, response or point.context)
        return batch / latency


def features(point: OperatingPoint, response: float | None) -> tuple[float, float, float] | None:
    """(KV the batch reads, prefill per token, seconds per token per sequence) of an interval."""
    if point.context is None or point.running <= 0 or point.throughput <= 0:
        return None
    latency = point.running / point.throughput
    prefill = point.running * (point.prompt or 0.0) / max(response or point.context, 1.0)
    return point.running * point.context, prefill, latency


class StepFit:
    """Decayed sums for a two-feature ridge regression of per-token time."""

    __slots__ = ("_at", "_sums")

    def __init__(self) -> None:
        # n, x1, x2, y, x1x1, x2x2, x1x2, x1y, x2y
        self._sums = [0.0] * 9
        self._at = -math.inf

    @property
    def weight(self) -> float:
        return self._sums[0]

    def add(self, x1: float, x2: float, y: float, weight: float, at: float) -> None:
        keep = math.exp(-(at - self._at) / STEP_MEMORY) if math.isfinite(self._at) else 0.0
        values = (1.0, x1, x2, y, x1 * x1, x2 * x2, x1 * x2, x1 * y, x2 * y)
        self._sums = [s * keep + weight * v for s, v in zip(self._sums, values, strict=True)]
        self._at = at

    def solve(self) -> tuple[float, float, float, float, float]:
        """(intercept at the means, slope 1, slope 2, mean x1, mean x2); slopes kept >= 0."""
        n, x1, x2, y, x11, x22, x12, x1y, x2y = self._sums
        m1, m2, my = x1 / n, x2 / n, y / n
        v11, v22, v12 = x11 / n - m1 * m1, x22 / n - m2 * m2, x12 / n - m1 * m2
        c1, c2 = x1y / n - m1 * my, x2y / n - m2 * my
        a11 = max(v11, 0.0) * (1 + RIDGE) + FLAT_FEATURE * m1 * m1 + 1e-30
        a22 = max(v22, 0.0) * (1 + RIDGE) + FLAT_FEATURE * m2 * m2 + 1e-30
        determinant = a11 * a22 - v12 * v12
        b1 = (c1 * a22 - c2 * v12) / determinant if determinant > 0 else 0.0
        b2 = (c2 * a11 - c1 * v12) / determinant if determinant > 0 else 0.0
        if b1 < 0 or b2 < 0:
            # A negative slope is noise, not physics: refit the other feature alone.
            b1, b2 = (0.0, max(0.0, c2 / a22)) if b1 < 0 else (max(0.0, c1 / a11), 0.0)
        return my, b1, b2, m1, m2


def learn(points: list[tuple[OperatingPoint, float | None]], fit: StepFit) -> PointModel | None:
    """The model of a warm-up's saturated intervals (each with the mix's mean response), or
    None when they give no capacity (KV usage never high enough) or no per-token time."""
    capacities = [c for point, _ in points if (c := point.capacity) is not None]
    if not capacities or fit.weight <= 0:
        return None
    usages = [point.kv_usage for point, _ in points if point.kv_usage is not None]
    batch_bound = [
        point.running
        for point, _ in points
        if point.kv_usage is not None and point.kv_usage < BATCH_BOUND_KV_USAGE
    ]
    kv_bound = [usage for usage in usages if usage >= BATCH_BOUND_KV_USAGE]
    share = statistics.median(kv_bound) if kv_bound else 1.0
    capacity = statistics.median(capacities)
    return with_fit(capacity, max(batch_bound, default=math.inf), fit, share)


def with_fit(capacity: float, max_batch: float, fit: StepFit, share: float = 1.0) -> PointModel:
    intercept, per_kv, per_prefill, mean_kv, mean_prefill = fit.solve()
    return PointModel(
        capacity, max_batch, intercept, per_kv, per_prefill, mean_kv, mean_prefill, share
    )
