"""What an engine's saturated intervals add up to: the baseline taken over its warm-up, and the
running totals a window's throughput, KV-cache symptoms and coverage are read from."""

from __future__ import annotations

import itertools
import statistics
from array import array
from dataclasses import dataclass

from rljob.health.samples import CumulativeRing, Interval

MIN_COVERAGE = 0.6
MIN_SATURATED_SHARE_OF_WINDOW = 0.25


@dataclass(frozen=True, slots=True)
class Baseline:
    """An engine's own saturated behaviour over its first `warmup` of saturated time."""

    throughput: float
    prefix_hit_rate: float | None
    preemptions_per_second: float | None


def judgeable(interval: Interval) -> bool:
    return (
        interval.saturated
        and not interval.excluded
        and not interval.gap
        and not interval.counter_reset
        and interval.duration > 0
    )


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


class Warmup:
    """Saturated intervals collected until the baseline can be taken; bounded by `capacity`."""

    __slots__ = (
        "capacity",
        "hits",
        "preemption_seconds",
        "preemptions",
        "queries",
        "rates",
        "saturated_seconds",
    )

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rates = array("d")
        self.saturated_seconds = 0.0
        self.hits = 0.0
        self.queries = 0.0
        self.preemptions = 0.0
        self.preemption_seconds = 0.0

    def add(self, interval: Interval) -> None:
        if not judgeable(interval):
            return
        if len(self.rates) < self.capacity:
            self.rates.append(interval.throughput)
        self.saturated_seconds += interval.duration
        if interval.prefix_hits is not None and interval.prefix_queries is not None:
            self.hits += interval.prefix_hits
            self.queries += interval.prefix_queries
        if interval.preemptions is not None:
            self.preemptions += interval.preemptions
            self.preemption_seconds += interval.duration

    def done(self, warmup: float) -> bool:
        return len(self.rates) > 0 and self.saturated_seconds >= warmup

    def baseline(self) -> Baseline:
        return Baseline(
            throughput=statistics.median(self.rates),
            prefix_hit_rate=ratio(self.hits, self.queries),
            preemptions_per_second=ratio(self.preemptions, self.preemption_seconds),
        )


# Running totals kept per engine, in CumulativeRing column order.
_SATURATED_SECONDS, _TOKENS, _EXCLUDED_SECONDS, _HITS, _QUERIES = range(5)
_PREEMPTIONS, _PREEMPTION_SECONDS = 5, 6
TOTALS_WIDTH = 7
_SLICE_WIDTH = 2


def amounts(interval: Interval) -> tuple[float, ...]:
    duration = interval.duration
    if interval.excluded:
        return (0.0, 0.0, duration, 0.0, 0.0, 0.0, 0.0)
    if not judgeable(interval):
        return (0.0,) * TOTALS_WIDTH
    hits, queries = interval.prefix_hits, interval.prefix_queries
    prefix = (hits, queries) if hits is not None and queries is not None else (0.0, 0.0)
    preemptions = interval.preemptions
    preempted = (preemptions, duration) if preemptions is not None else (0.0, 0.0)
    return (duration, interval.tokens, 0.0, *prefix, *preempted)


def _difference(later: tuple[float, ...], earlier: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(max(0.0, b - a) for a, b in zip(earlier, later, strict=True))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Saturated throughput and KV-cache symptoms of one engine over one window, with the
    saturated seconds and tokens of each slice of it."""

    start: float
    end: float
    totals: tuple[float, ...]
    slices: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, ring: CumulativeRing, start: float, end: float, slice_count: int) -> WindowStats:
        step = (end - start) / slice_count
        first, last = ring.at(start), ring.at(end)
        inner = [ring.at(start + index * step, _SLICE_WIDTH) for index in range(1, slice_count)]
        edges = [first[:_SLICE_WIDTH], *inner, last[:_SLICE_WIDTH]]
        return cls(
            start=start,
            end=end,
            totals=_difference(last, first),
            slices=tuple(
                (b[_SATURATED_SECONDS] - a[_SATURATED_SECONDS], b[_TOKENS] - a[_TOKENS])
                for a, b in itertools.pairwise(edges)
            ),
        )

    @property
    def length(self) -> float:
        return self.end - self.start

    @property
    def saturated_seconds(self) -> float:
        return self.totals[_SATURATED_SECONDS]

    @property
    def serving_seconds(self) -> float:
        return self.length - self.totals[_EXCLUDED_SECONDS]

    @property
    def throughput(self) -> float | None:
        return ratio(self.totals[_TOKENS], self.saturated_seconds)

    @property
    def prefix_hit_rate(self) -> float | None:
        return ratio(self.totals[_HITS], self.totals[_QUERIES])

    @property
    def preemptions_per_second(self) -> float | None:
        return ratio(self.totals[_PREEMPTIONS], self.totals[_PREEMPTION_SECONDS])

    def covered(self) -> bool:
        return (
            self.saturated_seconds >= MIN_SATURATED_SHARE_OF_WINDOW * self.length
            and self.saturated_seconds >= MIN_COVERAGE * self.serving_seconds
        )

    def coverage(self) -> float:
        return ratio(self.saturated_seconds, self.serving_seconds) or 0.0

    def slice_rates(self, min_seconds: float) -> list[float]:
        return [
            tokens / seconds
            for seconds, tokens in self.slices
            if seconds >= min_seconds and seconds > 0
        ]
