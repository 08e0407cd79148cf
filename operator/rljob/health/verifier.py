"""VerifierSlow: a verifier's p99 latency or error rate over its bound for the whole window.

The p99 comes from cumulative histogram buckets, as Prometheus' histogram_quantile over bucket
increases computes it. "For the whole window" means every judged slice of the window is over the
bound, not only the window as a whole, so one burst of slow requests does not count. A histogram
whose counts go down belongs to a restarted process: its series starts over.

Bucket bounds must extend above the latency bound: a quantile in the +Inf bucket reads as the
highest finite bound, as in Prometheus.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.evaluation import (
    AMONG_FAST_PEERS_EVIDENCE,
    HEALTHY,
    VERIFIER_LATENCY,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    healthy,
    insufficient,
)
from rljob.health.samples import MAX_PLAUSIBLE_VALUE, MIN_SPACING_INTERVALS, ring_capacity
from rljob.vocabulary.enums import FailureReason

QUANTILE = 0.99
# Not in the spec yet: a verifier failing one request in twenty is as bad as a slow one.
DEFAULT_MAX_ERROR_RATE = 0.05
MIN_REQUESTS_PER_SLICE = 10
MAX_SLICES = 3
MAX_BUCKETS = 64


def histogram_quantile(
    q: float, bounds: Sequence[float], cumulative: Sequence[float]
) -> float | None:
    """Prometheus' bucketQuantile: `bounds` ascending upper bounds ending with +Inf,
    `cumulative` their counts. None without observations or without a +Inf bucket."""
    if len(bounds) < 2 or len(bounds) != len(cumulative) or not math.isinf(bounds[-1]):
        return None
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    counts = _monotonic(cumulative)
    observations = counts[-1]
    if not 0 < observations < math.inf:  # an infinite count is garbage: no rank within it
        return None
    rank = q * observations
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(bounds) - 1:
        return bounds[-2]
    if index == 0 and bounds[0] <= 0:
        return bounds[0]
    lower = bounds[index - 1] if index > 0 else 0.0
    below = counts[index - 1] if index > 0 else 0.0
    in_bucket = counts[index] - below
    return lower + (bounds[index] - lower) * ((rank - below) / in_bucket)


def _monotonic(cumulative: Sequence[float]) -> list[float]:
    # Buckets scraped at slightly different moments can dip; Prometheus takes the running max.
    result: list[float] = []
    for count in cumulative:
        result.append(max(count, result[-1]) if result else count)
    return result


def bucket_increase(start: Sequence[float], end: Sequence[float]) -> list[float] | None:
    """Per-bucket increase between two snapshots, or None if any count went down (a reset)."""
    if len(start) != len(end) or any(b < a for a, b in zip(start, end, strict=True)):
        return None
    return [b - a for a, b in zip(start, end, strict=True)]


# The evidence key of the p99 (rljob_detector_value; the bottleneck reads it too).
P99_EVIDENCE = "p99_seconds"
# How many of a slow verifier's peers the same round judged within the bound.
PEERS_WITHIN_BOUND_EVIDENCE = "peers_within_bound"


@dataclass(frozen=True, slots=True)
class VerifierSample:
    """One scrape of a verifier's latency histogram: (upper bound, cumulative count) pairs in
    any order, +Inf included; `requests_total` defaults to the +Inf count."""

    t: float
    buckets: tuple[tuple[float, float], ...]
    errors_total: float | None = None
    requests_total: float | None = None


@dataclass(frozen=True, slots=True)
class VerifierLatencyConfig:
    p99: float = 10.0
    window: float = 600.0
    interval: float = 30.0
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE

    @classmethod
    def from_health(cls, health: Health) -> VerifierLatencyConfig:
        return cls(
            p99=parse_duration(health.verifier_latency.p99),
            window=parse_duration(health.verifier_latency.window),
            interval=parse_duration(health.interval),
        )

    @property
    def slices(self) -> int:
        if not self.interval > 0:
            return MAX_SLICES
        return max(1, min(MAX_SLICES, int(self.window // (4 * self.interval))))


@dataclass(frozen=True, slots=True)
class _Snapshot:
    t: float
    counts: tuple[float, ...]
    requests: float
    errors: float | None


def _plausible(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= MAX_PLAUSIBLE_VALUE


def _parse(sample: VerifierSample) -> tuple[tuple[float, ...], _Snapshot] | None:
    if not _plausible(sample.t) or not 2 <= len(sample.buckets) <= MAX_BUCKETS:
        return None
    ordered = sorted(sample.buckets, key=lambda bucket: bucket[0])
    bounds = tuple(bound for bound, _ in ordered)
    counts = tuple(count for _, count in ordered)
    if not math.isinf(bounds[-1]) or len(set(bounds)) != len(bounds):
        return None
    if any(math.isnan(bound) for bound in bounds) or not all(_plausible(c) for c in counts):
        return None
    requests = sample.requests_total if sample.requests_total is not None else counts[-1]
    errors = sample.errors_total
    if not _plausible(requests) or (errors is not None and not _plausible(errors)):
        return None
    return bounds, _Snapshot(sample.t, counts, requests, errors)


@dataclass(frozen=True, slots=True)
class _Slice:
    requests: float
    p99: float | None
    error_rate: float | None
    slow: bool  # a bucket at or above the bound proves more than 1 % of requests over it


def _slice_between(
    bounds: Sequence[float], start: _Snapshot, end: _Snapshot, bound: float
) -> _Slice | None:
    increase = bucket_increase(start.counts, end.counts)
    if increase is None:
        return None
    requests = end.requests - start.requests
    errors = None
    if start.errors is not None and end.errors is not None and requests > 0:
        errors = (end.errors - start.errors) / requests
    p99 = histogram_quantile(QUANTILE, bounds, increase)
    return _Slice(requests, p99, errors, proven_over(bounds, increase, bound))


def proven_over(bounds: Sequence[float], cumulative: Sequence[float], bound: float) -> bool:
    """Whether more than 1 - QUANTILE of the requests provably took longer than `bound`: the
    first bucket at or above it holds fewer than QUANTILE of them. Interpolating inside a
    coarse bucket (a histogram missing its low buckets) proves nothing."""
    total = cumulative[-1] if cumulative else 0.0
    at_or_above = next((i for i, b in enumerate(bounds) if b >= bound), None)
    if total <= 0 or at_or_above is None or math.isinf(bounds[at_or_above]):
        return False
    return cumulative[at_or_above] < QUANTILE * total


class _Series:
    __slots__ = ("bounds", "snapshots")

    def __init__(self, bounds: tuple[float, ...], capacity: int) -> None:
        self.bounds = bounds
        self.snapshots: deque[_Snapshot] = deque(maxlen=capacity)

    def add(self, bounds: tuple[float, ...], snapshot: _Snapshot, min_spacing: float) -> None:
        last = self.snapshots[-1] if self.snapshots else None
        if last is not None and snapshot.t < last.t + max(min_spacing, 1e-9):
            return
        if bounds != self.bounds or (last is not None and _went_down(last, snapshot)):
            self.bounds = bounds
            self.snapshots.clear()
        self.snapshots.append(snapshot)

    def at_or_before(self, t: float) -> _Snapshot | None:
        found = None
        for snapshot in self.snapshots:
            if snapshot.t > t:
                break
            found = snapshot
        return found


def _went_down(before: _Snapshot, after: _Snapshot) -> bool:
    if after.requests < before.requests:
        return True
    if before.errors is not None and after.errors is not None and after.errors < before.errors:
        return True
    return bucket_increase(before.counts, after.counts) is None


class VerifierLatencyDetector:
    """Latency and error-rate detection for the verifier pods of one job."""

    def __init__(self, config: VerifierLatencyConfig) -> None:
        self.config = config
        self._series: dict[str, _Series] = {}
        self._capacity = ring_capacity(config.window, config.interval)

    def observe(self, target: str, sample: VerifierSample) -> None:
        parsed = _parse(sample)
        if parsed is None:
            return
        bounds, snapshot = parsed
        series = self._series.get(target)
        if series is None:
            series = self._series[target] = _Series(bounds, self._capacity)
        series.add(bounds, snapshot, self.config.interval * MIN_SPACING_INTERVALS)

    def note_restart(self, target: str, at: float) -> None:
        self._series.pop(target, None)

    def forget(self, target: str) -> None:
        self._series.pop(target, None)

    def retain(self, targets: Collection[str]) -> None:
        for target in [name for name in self._series if name not in targets]:
            del self._series[target]

    def retained_values(self) -> int:
        return sum(len(series.snapshots) for series in self._series.values())

    def evaluate(self, now: float) -> list[Evaluation]:
        evaluations = [
            self._evaluate(target, self._series[target], now) for target in sorted(self._series)
        ]
        return among_peers(evaluations)

    def _evaluate(self, target: str, series: _Series, now: float) -> Evaluation:
        edges = self._edges(series, now)
        if edges is None:
            return insufficient(
                VERIFIER_LATENCY,
                target,
                f"{target}: less than {format_duration(self.config.window)} of latency history",
            )
        bound = self.config.p99
        slices = [_slice_between(series.bounds, a, b, bound) for a, b in itertools.pairwise(edges)]
        whole = _slice_between(series.bounds, edges[0], edges[-1], bound)
        judged = [s for s in slices if s is not None and s.requests >= MIN_REQUESTS_PER_SLICE]
        if whole is None or 2 * len(judged) < len(slices) or not judged:
            return insufficient(
                VERIFIER_LATENCY,
                target,
                f"{target}: too few requests in the last {format_duration(self.config.window)}",
            )
        return self._judge(target, whole, judged)

    def _edges(self, series: _Series, now: float) -> list[_Snapshot] | None:
        count = self.config.slices
        step = self.config.window / count
        edges = [series.at_or_before(now - self.config.window + i * step) for i in range(count + 1)]
        if any(edge is None for edge in edges):
            return None
        present = [edge for edge in edges if edge is not None]
        if present[0].t < now - self.config.window - 2 * self.config.interval:
            return None
        return present

    def _judge(self, target: str, whole: _Slice, judged: list[_Slice]) -> Evaluation:
        config = self.config
        window = format_duration(config.window)
        evidence: Evidence = {"requests": whole.requests, "window_seconds": config.window}
        if whole.p99 is not None:
            evidence[P99_EVIDENCE] = whole.p99
        if whole.error_rate is not None:
            evidence["error_rate"] = whole.error_rate
        slow = all(s.slow for s in judged)
        failing = _all_over(judged, lambda s: s.error_rate, config.max_error_rate)
        problems = []
        if slow and whole.p99 is not None:
            problems.append(f"p99 {whole.p99:.2f}s > {config.p99:g}s")
        if failing and whole.error_rate is not None:
            problems.append(f"error rate {whole.error_rate:.1%} > {config.max_error_rate:.0%}")
        summary = f"over {window} ({whole.requests:.0f} requests)"
        if problems:
            message = f"{target} {' and '.join(problems)} {summary}"
            return finding(VERIFIER_LATENCY, target, FailureReason.VERIFIER_SLOW, message, evidence)
        p99 = f"p99 {whole.p99:.2f}s" if whole.p99 is not None else "p99 unknown"
        return healthy(VERIFIER_LATENCY, target, f"{target} {p99} {summary}", evidence)


def _all_over(
    slices: Iterable[_Slice], value: Callable[[_Slice], float | None], bound: float
) -> bool:
    values = [value(s) for s in slices]
    return bool(values) and all(v is not None and v > bound for v in values)


def _why_not_one_pod(judged: int) -> str:
    """What a slow verifier without fast peers says: a lone one cannot be told apart from its
    load; when most are slow it is the load or the reward code."""
    if judged <= 1:
        return ": no peer judged to compare with"
    return ": most or all slow, so the load or the reward code, not one pod"


def among_peers(evaluations: Sequence[Evaluation]) -> list[Evaluation]:
    """Each slow verifier's finding with its peers in evidence: how many the round judged within
    the bound, and whether the slow ones are at most half of the verifiers judged (1.0) or not
    (0.0: every one slow, most of them, or none to compare with)."""
    slow = [e for e in evaluations if e.is_finding]
    fast = [e for e in evaluations if e.outcome == HEALTHY]
    among_fast = bool(fast) and len(slow) <= len(fast)
    peers = f"{len(fast)} of {len(evaluations) - 1} peers within the bound"
    said = "" if among_fast else _why_not_one_pod(judged=len(slow) + len(fast))
    return [
        replace(
            e,
            message=f"{e.message}; {peers}{said}",
            evidence={
                **e.evidence,
                PEERS_WITHIN_BOUND_EVIDENCE: float(len(fast)),
                AMONG_FAST_PEERS_EVIDENCE: float(among_fast),
            },
        )
        if e.is_finding
        else e
        for e in evaluations
    ]
