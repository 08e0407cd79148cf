"""Rollout-engine metric samples and the bounded per-engine series the engine detectors read.

Samples arrive from a Prometheus range or instant query or a direct scrape, so they can be late,
duplicated, out of order or garbage. `EngineSeries` accepts them in time order only and turns
them into intervals; `CumulativeRing` keeps a window of intervals as running totals in plain float
arrays, so thousands of engines with a 30-minute window cost a few MiB and a window's sum is two
binary searches rather than a pass over every sample.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

# Beyond this a counter or gauge is garbage: 1e15 tokens is millennia at 10k tokens/s, and
# bounding values keeps every sum the detectors form finite.
MAX_PLAUSIBLE_VALUE = 1e15
MAX_RING_CAPACITY = 4096
# An interval longer than this many evaluation intervals is a scrape gap: what the engine did in
# it (asleep? saturated?) is unknown, so it counts as uncovered time.
MAX_GAP_INTERVALS = 3.0
# Samples closer together than this share of the evaluation interval are thinned out, so a fast
# scrape cannot outgrow a ring sized for the window.
MIN_SPACING_INTERVALS = 0.8
# EngineSample.memory_signal: the pod cgroup's working set (cAdvisor, through Prometheus), or
# the engine process tree's resident memory (the rljob SDK's gauge on a plugin page).
WORKING_SET_MEMORY = "working_set"
PROCESS_TREE_MEMORY = "process_tree_rss"


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One scrape of one engine (pod). Counters are cumulative; `None` means not exported.

    `sleeping` None (an engine without a sleep-state metric) reads as awake and `paused` None
    as not paused: an engine that cannot say it sleeps has no requests while it does.
    """

    t: float
    generated_tokens_total: float
    running: float
    waiting: float
    kv_usage: float | None = None
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    preemptions_total: float | None = None
    sleeping: bool | None = None
    paused: bool | None = None
    # The token counter grows only as requests finish (SGLang without realtime_tokens_total):
    # progress is then read from `generation_rate`, the engine's own recent decode rate.
    tokens_at_finish: bool = False
    generation_rate: float | None = None
    # The stats-log gauges of an engine that writes them only when it logs (SGLang); equal
    # values in consecutive samples mean it logged nothing in between. None: not such an engine.
    gauges: tuple[float | None, ...] | None = None
    # The operating point (docs/architecture.md section 7): cumulative counts of finished requests
    # and of their prompt and generated tokens (vLLM's request length histograms' _count and _sums;
    # SGLang's finish-time counters), and the per-token decode latency histogram's _sum and _count.
    finished_requests_total: float | None = None
    finished_prompt_tokens_total: float | None = None
    finished_generation_tokens_total: float | None = None
    token_latency_seconds_total: float | None = None
    token_latency_count_total: float | None = None
    # Host memory of the engine's pod or processes (bytes) and which signal it came from
    # (WORKING_SET_MEMORY or PROCESS_TREE_MEMORY); None: neither is exported.
    memory_bytes: float | None = None
    memory_signal: str | None = None

    @property
    def serving(self) -> bool:
        """Awake and not paused for a weight sync: its throughput can be judged."""
        return self.sleeping is not True and self.paused is not True

    @property
    def saturated(self) -> bool:
        """Serving with requests both running and queued: throughput is at capacity."""
        return self.serving and self.waiting > 0 and self.running > 0

    @property
    def pending(self) -> bool:
        return self.waiting + self.running > 0


@dataclass(frozen=True, slots=True)
class Interval:
    """What happened between two consecutive accepted samples of one engine."""

    start: float
    end: float
    tokens: float
    saturated: bool
    # Asleep or paused at either end: the engine could not be judged, so the time is excluded.
    excluded: bool
    gap: bool
    prefix_hits: float | None
    prefix_queries: float | None
    preemptions: float | None
    counter_reset: bool = False
    # The engine logged no stats in the interval (its gauges did not change): SGLang paused,
    # idle or wedged. Included in `excluded`; its /health probe judges a wedge.
    frozen: bool = False

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def throughput(self) -> float:
        return self.tokens / self.duration


def _plausible(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and 0 <= value <= MAX_PLAUSIBLE_VALUE


def _optional(value: float | None) -> float | None:
    return value if _plausible(value) else None


def _clean(sample: EngineSample) -> bool:
    optional = (
        sample.kv_usage,
        sample.prefix_hits_total,
        sample.prefix_queries_total,
        sample.preemptions_total,
        sample.generation_rate,
        sample.finished_requests_total,
        sample.finished_prompt_tokens_total,
        sample.finished_generation_tokens_total,
        sample.token_latency_seconds_total,
        sample.token_latency_count_total,
        sample.memory_bytes,
    )
    flags = (sample.sleeping, sample.paused)
    return (
        all(value is None or _plausible(value) for value in optional)
        and all(flag is None or isinstance(flag, bool) for flag in flags)
        and isinstance(sample.tokens_at_finish, bool)
    )


def sanitize_sample(sample: EngineSample) -> EngineSample | None:
    """The sample with garbage optional values (NaN, inf, negative) set to None, or None when
    a value every detector needs (time, token counter, running, waiting) is garbage."""
    required = (sample.t, sample.generated_tokens_total, sample.running, sample.waiting)
    if not all(_plausible(value) for value in required):
        return None
    if _clean(sample):
        return sample  # the common case, and each detector sanitizes the same sample
    return EngineSample(
        t=sample.t,
        generated_tokens_total=sample.generated_tokens_total,
        running=sample.running,
        waiting=sample.waiting,
        kv_usage=_optional(sample.kv_usage),
        prefix_hits_total=_optional(sample.prefix_hits_total),
        prefix_queries_total=_optional(sample.prefix_queries_total),
        preemptions_total=_optional(sample.preemptions_total),
        sleeping=sample.sleeping if isinstance(sample.sleeping, bool) else None,
        paused=sample.paused if isinstance(sample.paused, bool) else None,
        tokens_at_finish=sample.tokens_at_finish is True,
        generation_rate=_optional(sample.generation_rate),
        gauges=sample.gauges,
        finished_requests_total=_optional(sample.finished_requests_total),
        finished_prompt_tokens_total=_optional(sample.finished_prompt_tokens_total),
        finished_generation_tokens_total=_optional(sample.finished_generation_tokens_total),
        token_latency_seconds_total=_optional(sample.token_latency_seconds_total),
        token_latency_count_total=_optional(sample.token_latency_count_total),
        memory_bytes=_optional(sample.memory_bytes),
        memory_signal=sample.memory_signal if _plausible(sample.memory_bytes) else None,
    )


def counter_delta(previous: float, current: float) -> float:
    """Increase of a counter; after a reset (a decrease) the new value is the increase, as
    Prometheus' rate() does."""
    return current - previous if current >= previous else current


def optional_delta(previous: float | None, current: float | None) -> float | None:
    if previous is None or current is None:
        return None
    return counter_delta(previous, current)


def _frozen(previous: EngineSample, current: EngineSample) -> bool:
    return previous.gauges is not None and previous.gauges == current.gauges


def _unknown_sleep_idle(previous: EngineSample, current: EngineSample) -> bool:
    """Idle at both ends with no sleep gauge (vLLM before 0.11.1): the engine may be asleep
    between generate phases, so the time says nothing about its throughput."""
    return (
        previous.sleeping is None
        and current.sleeping is None
        and not previous.pending
        and not current.pending
    )


def _tokens(previous: EngineSample, current: EngineSample) -> float | None:
    """Tokens generated in the interval; None when they cannot be told (the counter changed
    source, or a completion-only counter without a decode rate)."""
    if previous.tokens_at_finish != current.tokens_at_finish:
        return None
    if not current.tokens_at_finish:
        return counter_delta(previous.generated_tokens_total, current.generated_tokens_total)
    if previous.generation_rate is None or current.generation_rate is None:
        return None
    # A flat completion counter is no evidence: a long decode tail finishes nothing for minutes.
    mean_rate = (previous.generation_rate + current.generation_rate) / 2
    return mean_rate * (current.t - previous.t)


def interval_between(previous: EngineSample, current: EngineSample, max_gap: float) -> Interval:
    """The interval from `previous` to `current` (both sanitized, `current` later)."""
    frozen = _frozen(previous, current)
    tokens = _tokens(previous, current)
    excluded = (
        not (previous.serving and current.serving)
        or frozen
        or tokens is None
        or _unknown_sleep_idle(previous, current)
    )
    same_counter = previous.tokens_at_finish == current.tokens_at_finish
    return Interval(
        start=previous.t,
        end=current.t,
        tokens=tokens if tokens is not None else 0.0,
        saturated=previous.saturated and current.saturated,
        excluded=excluded,
        gap=current.t - previous.t > max_gap,
        prefix_hits=optional_delta(previous.prefix_hits_total, current.prefix_hits_total),
        prefix_queries=optional_delta(previous.prefix_queries_total, current.prefix_queries_total),
        preemptions=optional_delta(previous.preemptions_total, current.preemptions_total),
        counter_reset=same_counter
        and current.generated_tokens_total < previous.generated_tokens_total,
        frozen=frozen,
    )


def ring_capacity(window: float, interval: float) -> int:
    """Intervals a window can hold once samples are thinned to MIN_SPACING_INTERVALS apart:
    1.25 window/interval plus slack, within the brief's 2 window/interval."""
    spacing = interval * MIN_SPACING_INTERVALS
    if spacing <= 0 or not math.isfinite(window / spacing):
        return MAX_RING_CAPACITY
    return max(4, min(MAX_RING_CAPACITY, math.ceil(window / spacing) + 2))


class CumulativeRing:
    """The latest `capacity` intervals as running totals of `width` quantities, in float
    arrays (8 bytes per number). `at(t)` is each total up to time t, interpolated inside an
    interval, so a window's sum is two lookups whatever its length."""

    __slots__ = ("_base", "_capacity", "_cumulative", "_ends", "_head", "_size", "_starts")

    def __init__(self, capacity: int, width: int) -> None:
        self._capacity = max(1, capacity)
        self._starts = array("d", bytes(8 * self._capacity))
        self._ends = array("d", bytes(8 * self._capacity))
        self._cumulative = tuple(array("d", bytes(8 * self._capacity)) for _ in range(width))
        self._base = (0.0,) * width
        self._head = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._capacity

    def append(self, start: float, end: float, amounts: Sequence[float]) -> None:
        """Adds an interval later than every one held, with its amount of each quantity."""
        totals = self._latest()
        if self._size == self._capacity:
            self._base = self._row(self._head)
        for column, total, amount in zip(self._cumulative, totals, amounts, strict=True):
            column[self._head] = total + amount
        self._starts[self._head] = start
        self._ends[self._head] = end
        self._head = (self._head + 1) % self._capacity
        self._size = min(self._size + 1, self._capacity)

    def span(self) -> tuple[float, float] | None:
        """The start of the oldest interval held and the end of the latest; None when empty."""
        if not self._size:
            return None
        return self._starts[self._slot(0)], self._ends[self._slot(self._size - 1)]

    def clear(self) -> None:
        self._base = (0.0,) * len(self._cumulative)
        self._head = 0
        self._size = 0

    def at(self, t: float, width: int | None = None) -> tuple[float, ...]:
        """The running totals up to `t` of the first `width` quantities (default: all)."""
        width = len(self._cumulative) if width is None else width
        index = self._last_starting_by(t)
        if index is None:
            return self._base[:width]
        slot = self._slot(index)
        row = self._row(slot, width)
        start, end = self._starts[slot], self._ends[slot]
        if t >= end or end <= start:
            return row
        before = self._row(self._slot(index - 1), width) if index > 0 else self._base[:width]
        share = (t - start) / (end - start)
        return tuple(b + (r - b) * share for b, r in zip(before, row, strict=True))

    def _latest(self) -> tuple[float, ...]:
        return self._row(self._slot(self._size - 1)) if self._size else self._base

    def _slot(self, index: int) -> int:
        return (self._head - self._size + index) % self._capacity

    def _row(self, slot: int, width: int | None = None) -> tuple[float, ...]:
        return tuple(column[slot] for column in self._cumulative[:width])

    def _last_starting_by(self, t: float) -> int | None:
        low, high = 0, self._size
        while low < high:
            middle = (low + high) // 2
            if self._starts[self._slot(middle)] <= t:
                low = middle + 1
            else:
                high = middle
        return low - 1 if low > 0 else None


class EngineSeries:
    """Accepts one engine's samples in time order and turns them into intervals.

    Garbage samples are dropped, as are samples at or before the last accepted time (duplicates
    and out-of-order arrivals) and samples closer to it than MIN_SPACING_INTERVALS evaluation
    intervals, which bounds what a caller keeps per window whatever the scrape rate.
    """

    __slots__ = ("_max_gap", "_min_spacing", "last")

    def __init__(self, interval: float) -> None:
        self._min_spacing = max(interval * MIN_SPACING_INTERVALS, 1e-9)
        self._max_gap = interval * MAX_GAP_INTERVALS
        self.last: EngineSample | None = None

    def add(self, sample: EngineSample) -> Interval | None:
        """Accepts the sample; returns the interval it closes, or None when it was dropped or
        is the first."""
        clean = sanitize_sample(sample)
        if clean is None or not self._is_next(clean):
            return None
        previous, self.last = self.last, clean
        if previous is None:
            return None
        return interval_between(previous, clean, self._max_gap)

    def _is_next(self, sample: EngineSample) -> bool:
        return self.last is None or sample.t >= self.last.t + self._min_spacing
