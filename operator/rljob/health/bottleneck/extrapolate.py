"""The recommended rollout concurrency, also when the job never ran near its knee.

When the observed curve bends (rljob.health.knee found a knee) its verdict stands. When it still
climbs at the top (`Knee.beyond`: the rollout driver never put enough requests in flight, as a
synchronous rollout whose in-flight count decays from its concurrency to zero each step), the
curve is extrapolated from how a decoding engine's step time grows with its batch.

A continuously batching engine (vLLM, SGLang) decodes one token for every running sequence per
step, and a step costs a fixed part plus a part per sequence, so with c requests in flight each
request advances one token every a + b*c seconds: c/T = a + b*c for throughput T. The batch is
capped by the KV cache: past the `capacity` that fills it, requests queue and T stays at its
value there. So T(c) = m/(a + b*m) with m = min(c, capacity); a and b come from a least-squares
line through the observed bins (at least three over at least one doubling), the capacity from
the engines' own running / kv_usage. The peak is the lowest c within the knee rule's
peak_tolerance of T at capacity, and the recommendation its headroom share, as for a knee.
Without a capacity estimate (or a usable fit) the knee lies beyond what ran: double it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rljob.health.knee import KneeRule
from rljob.health.line import least_squares

# The knee's own number formats, so both messages read alike.
from rljob.vocabulary.knee import Knee, format_amount, format_count

Point = tuple[float, float]

MIN_FIT_POINTS = 3
MIN_FIT_OCTAVES = 1.0


@dataclass(frozen=True, slots=True)
class StepTimeFit:
    """c/T = a + b*c over `points` bins; `error` is the fit's relative RMS residual."""

    a: float
    b: float
    points: int
    error: float

    def throughput(self, concurrency: float, capacity: float) -> float:
        batch = min(concurrency, capacity)
        return batch / (self.a + self.b * batch)

    def peak(self, capacity: float, tolerance: float) -> float:
        """The lowest concurrency within `tolerance` of the throughput at capacity."""
        target = (1 - tolerance) * self.throughput(capacity, capacity)
        return min(capacity, target * self.a / (1 - target * self.b))

    def describe(self) -> str:
        return (
            f"decode step time c/T = {self.a:.3g} + {self.b:.3g}*c s over "
            f"{self.points} bins (residual {self.error:.0%})"
        )


@dataclass(frozen=True, slots=True)
class CurveVerdict:
    """The recommendation and how it was reached."""

    knee: Knee
    recommended: float | None
    peak: float | None
    extrapolated: bool
    message: str
    summary: str  # the recommendation's ground in a clause, for advice
    fit: StepTimeFit | None = None
    capacity: float | None = None


def fit_step_time(points: Sequence[Point]) -> StepTimeFit | None:
    """The least-squares line through (c, c/T); None with too few bins, less than an octave, or
    a line that is not a fixed plus a per-sequence cost (a <= 0 or b <= 0)."""
    usable = [(c, c / t) for c, t in points if c > 0 and t > 0 and _finite(c, t)]
    if len(usable) < MIN_FIT_POINTS:
        return None
    low, high = min(c for c, _ in usable), max(c for c, _ in usable)
    if math.log2(high / low) < MIN_FIT_OCTAVES:
        return None
    if (line := least_squares(usable)) is None:
        return None
    a, b = line
    if not (a > 0 and b > 0 and _finite(a, b)):
        return None
    residual = math.sqrt(sum(((a + b * x) / y - 1) ** 2 for x, y in usable) / len(usable))
    return StepTimeFit(a, b, len(usable), residual)


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def judge_curve(
    knee: Knee,
    points: Sequence[Point],
    capacity: float | None,
    current: float | None,
    *,
    rule: KneeRule,
    unit: str = "tokens/s",
) -> CurveVerdict:
    """The knee's verdict when it found one (or too little to say anything); the extrapolated
    one when the curve still climbs at the top."""
    if not knee.beyond:
        peak = knee.peak_concurrency
        summary = (
            f"{rule.headroom:.0%} of the peak's {format_count(peak)} in flight"
            if knee.recommended is not None and peak is not None
            else knee.message
        )
        return CurveVerdict(knee, knee.recommended, peak, False, knee.message, summary)
    top = knee.confidence.highest
    fit = fit_step_time(points)
    if fit is None:
        reason = "the bins do not fit a fixed plus a per-sequence step cost"
        return _double(knee, current or top, reason, None, capacity)
    if capacity is None or not capacity > 0:
        reason = f"no KV capacity estimate (no engine reports its KV usage); {fit.describe()}"
        return _double(knee, current or top, reason, fit, None)
    peak = fit.peak(capacity, rule.peak_tolerance)
    if peak <= top:
        reason = (
            f"the fit ({fit.describe()}) with the KV capacity of about {format_count(capacity)} in "
            f"flight peaks at {format_count(peak)}, within what was observed"
        )
        return _double(knee, current or top, reason, fit, capacity)
    recommended = rule.headroom * peak
    message = (
        f"{knee.message}; extrapolated from the engines' step time: {fit.describe()}, the KV "
        f"cache fills at about {format_count(capacity)} in flight, so throughput peaks near "
        f"{format_count(peak)} in flight at "
        f"{format_amount(fit.throughput(peak, capacity))} {unit}: run at "
        f"{format_count(recommended)} ({rule.headroom:.0%} of it)"
    )
    summary = (
        f"{rule.headroom:.0%} of the peak extrapolated near {format_count(peak)} in flight "
        f"from the engines' step time, the KV cache filling at about {format_count(capacity)}"
    )
    return CurveVerdict(knee, recommended, peak, True, message, summary, fit, capacity)


def _double(
    knee: Knee,
    current: float,
    reason: str,
    fit: StepTimeFit | None,
    capacity: float | None,
) -> CurveVerdict:
    doubled = 2 * current if current > 0 else None
    advice = f"double it to {format_count(doubled)} and look again" if doubled else "raise it"
    message = (
        f"{knee.message}; {reason}: the knee lies beyond {format_count(current)} in flight, "
        f"{advice}"
    )
    summary = f"the knee lies beyond {format_count(current)} in flight"
    return CurveVerdict(knee, doubled, None, True, message, summary, fit, capacity)
