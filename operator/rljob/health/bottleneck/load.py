"""How loaded the rollout engines and the verifiers were over the window.

Engines: their samples (rljob.health.samples.EngineSample, in time order per pod) become
intervals through `EngineSeries`, which drops garbage, duplicates and late samples and reads a
token counter that went down as restarted. Sleeping, paused, frozen and gap intervals say
nothing about load and are left out; the rest give mean requests running and queued, mean KV
usage, tokens per second and the share of time saturated (requests queued while others run).
The batch that fills an engine's KV cache is read from the engine itself: running / kv_usage.

Verifiers: `rljob_verifier_queue_depth` per pod, its mean and its trend (least squares) over the
window; latency quantiles come from the VerifierSlow detector's reading, passed in.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

from rljob.health.line import least_squares
from rljob.health.samples import EngineSample, EngineSeries

# KV usage below this says too little about what fills the cache to divide by it.
MIN_KV_FOR_CAPACITY = 0.01
MAX_PLAUSIBLE_DEPTH = 1e9
NAN = math.nan


STEADY_FACTOR = 2.0
STEADY_SLACK = 2.0


@dataclass(frozen=True, slots=True)
class LoadInterval:
    """What one engine did between two accepted samples (means of the two ends' gauges)."""

    start: float
    end: float
    tokens: float
    running: float
    waiting: float
    kv_usage: float | None
    saturated: bool
    judged: bool  # serving throughout, no gap: counts toward load and the curve
    peak_in_flight: float = 0.0  # the larger end's requests in flight
    # The ends' requests in flight agree: their mean is the interval's, so it may teach the
    # curve (a synchronous batch's decaying tail does not; it still counts for load).
    steady: bool = True

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def in_flight(self) -> float:
        return self.running + self.waiting

    @property
    def throughput(self) -> float:
        return self.tokens / self.duration


# A LoadRing row: an interval's bounds, then running totals over the judged intervals up to
# and including it (judged seconds; requests running and queued, saturated seconds, KV usage
# and the KV-full batch weighted by seconds; tokens).
START, END, SECONDS, RUNNING, WAITING, TOKENS, SATURATED = range(7)
KV_SECONDS, KV_SUM, CAPACITY_SECONDS, CAPACITY_SUM = range(7, 11)
LOAD_WIDTH = 11


class LoadRing:
    """One engine's latest `capacity` intervals in a float array, a row each after a first row
    that holds only the totals before them. A window is the difference of two rows' totals
    plus the intervals straddling its bounds: every round once summed every interval of every
    engine's 30-minute window. (A ring of LoadInterval objects took about 280 bytes an
    interval, a row takes 88.)"""

    __slots__ = ("_capacity", "rows")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.rows = array("d", [-math.inf, -math.inf] + [0.0] * (LOAD_WIDTH - 2))

    def append(self, load: LoadInterval) -> None:
        totals = self.rows[-LOAD_WIDTH:]
        if load.judged:
            totals = array("d", [a + b for a, b in zip(totals, _judged_totals(load), strict=True)])
        totals[START], totals[END] = load.start, load.end
        self.rows.extend(totals)
        if len(self) > self._capacity:
            del self.rows[:LOAD_WIDTH]  # the oldest interval's totals become the base

    def __len__(self) -> int:
        """The intervals held (the base row is none)."""
        return len(self.rows) // LOAD_WIDTH - 1

    def window(self, start: float, end: float) -> list[float]:
        """The totals of the judged time inside [start, end] (START and END left 0)."""
        rows, count = self.rows, len(self)
        first = bisect_left(range(1, count + 1), start, key=lambda i: rows[i * LOAD_WIDTH]) + 1
        last = bisect_right(range(1, count + 1), end, key=lambda i: rows[i * LOAD_WIDTH + END])
        sums = self._between(first - 1, last) if first <= last else [0.0] * LOAD_WIDTH
        for index in {first - 1, last + 1}:  # the intervals straddling a bound, if any
            if 1 <= index <= count:
                self._add_share(sums, index, start, end)
        return sums

    def _between(self, older: int, newer: int) -> list[float]:
        rows, low, high = self.rows, older * LOAD_WIDTH, newer * LOAD_WIDTH
        return [0.0, 0.0, *(rows[high + k] - rows[low + k] for k in range(SECONDS, LOAD_WIDTH))]

    def _add_share(self, sums: list[float], index: int, start: float, end: float) -> None:
        """Adds the interval at `index` by the share of it inside [start, end]; every total
        of one interval is its seconds times a mean, or its tokens, so all scale alike."""
        first, last = self.rows[index * LOAD_WIDTH], self.rows[index * LOAD_WIDTH + END]
        own = self._between(index - 1, index)
        inside = min(last, end) - max(first, start)
        if inside <= 0 or own[SECONDS] <= 0:
            return
        share = inside / (last - first)
        for column in range(SECONDS, LOAD_WIDTH):
            sums[column] += own[column] * share


def _judged_totals(load: LoadInterval) -> list[float]:
    """What a judged interval adds to the running totals."""
    seconds = load.duration
    kv = load.kv_usage
    kv_seconds = seconds if kv is not None else 0.0
    fills = kv is not None and kv >= MIN_KV_FOR_CAPACITY and load.running >= 1
    capacity_seconds = seconds if fills else 0.0
    return [
        0.0,
        0.0,
        seconds,
        load.running * seconds,
        load.waiting * seconds,
        load.tokens,
        seconds if load.saturated else 0.0,
        kv_seconds,
        (kv or 0.0) * kv_seconds,
        capacity_seconds,
        load.running / kv * capacity_seconds if fills and kv else 0.0,
    ]


@dataclass(frozen=True, slots=True)
class EngineWindow:
    """One engine over the window (judged time only)."""

    pod: str
    judged_seconds: float
    running: float
    waiting: float
    kv_usage: float | None
    tokens_per_second: float
    saturated: float  # share of judged time with requests queued
    capacity: float | None  # requests running when the KV cache would be full

    @property
    def in_flight(self) -> float:
        return self.running + self.waiting


class EngineLedger:
    """Every engine's recent intervals, `capacity` per pod."""

    def __init__(self, interval: float, capacity: int) -> None:
        self._interval = interval
        self._capacity = max(2, capacity)
        self._series: dict[str, EngineSeries] = {}
        self._intervals: dict[str, LoadRing] = {}

    def observe(self, pod: str, sample: EngineSample) -> LoadInterval | None:
        """Accepts one sample; returns the interval it closes (None if dropped or first)."""
        series = self._series.setdefault(pod, EngineSeries(self._interval))
        previous = series.last
        interval = series.add(sample)
        current = series.last
        if interval is None or previous is None or current is None:
            return None
        load = LoadInterval(
            start=interval.start,
            end=interval.end,
            tokens=interval.tokens,
            running=(previous.running + current.running) / 2,
            waiting=(previous.waiting + current.waiting) / 2,
            kv_usage=_mean_kv(previous.kv_usage, current.kv_usage),
            saturated=interval.saturated,
            judged=not interval.excluded and not interval.gap and interval.duration > 0,
            peak_in_flight=max(s.running + s.waiting for s in (previous, current)),
            steady=steady_in_flight(
                previous.running + previous.waiting, current.running + current.waiting
            ),
        )
        self._intervals.setdefault(pod, LoadRing(self._capacity)).append(load)
        return load

    def retain(self, pods: Collection[str]) -> None:
        for gone in [pod for pod in self._series if pod not in pods]:
            self._series.pop(gone, None)
            self._intervals.pop(gone, None)

    def pods(self) -> list[str]:
        return sorted(self._series)

    def windows(self, now: float, window: float) -> list[EngineWindow]:
        """Engines with judged time in the window, the busiest (most in flight) first."""
        found = [
            w
            for pod, ring in self._intervals.items()
            if (w := engine_window(pod, ring, now - window, now)) is not None
        ]
        return sorted(found, key=lambda w: (-w.in_flight, -w.tokens_per_second, w.pod))


def steady_in_flight(first: float, second: float) -> bool:
    """Whether two readings of requests in flight are close enough that their mean stands for
    the time between them (a count falling steeply within it makes the mean say little)."""
    low, high = sorted((first, second))
    return high - low <= STEADY_SLACK or high <= STEADY_FACTOR * low


def _mean_kv(a: float | None, b: float | None) -> float | None:
    # The exporters give 0..1; a value past 1 is garbage, not a share.
    values = [v for v in (a, b) if v is not None and 0 <= v <= 1]
    return sum(values) / len(values) if values else None


def engine_window(pod: str, ring: LoadRing, start: float, end: float) -> EngineWindow | None:
    """The engine's judged time inside [start, end], from the ring's running totals."""
    sums = ring.window(start, end)
    judged = sums[SECONDS]
    if judged <= 0:
        return None
    return EngineWindow(
        pod=pod,
        judged_seconds=judged,
        running=sums[RUNNING] / judged,
        waiting=sums[WAITING] / judged,
        kv_usage=sums[KV_SUM] / sums[KV_SECONDS] if sums[KV_SECONDS] > 0 else None,
        tokens_per_second=sums[TOKENS] / judged,
        saturated=sums[SATURATED] / judged,
        capacity=(
            sums[CAPACITY_SUM] / sums[CAPACITY_SECONDS] if sums[CAPACITY_SECONDS] > 0 else None
        ),
    )


@dataclass(frozen=True, slots=True)
class VerifierWindow:
    """The verifiers over the window: queue depth summed over pods."""

    pods: int
    queue_depth: float | None  # mean, summed over the pods with samples
    growth: float | None  # the fitted change over the window, summed over pods
    p50: float | None
    p99: float | None
    slow: bool  # the VerifierSlow detector's p99 is over its bound

    @property
    def depth_per_pod(self) -> float | None:
        return self.queue_depth / self.pods if self.queue_depth is not None and self.pods else None


class VerifierLedger:
    """Every verifier pod's queue depth samples, `capacity` per pod, and the latest latency."""

    def __init__(self, capacity: int, min_spacing: float) -> None:
        self._capacity = max(2, capacity)
        self._min_spacing = max(min_spacing, 1e-9)
        self._depths: dict[str, deque[tuple[float, float]]] = {}
        self._latency: tuple[float | None, float | None, bool] = (None, None, False)

    def observe(self, pod: str, t: float, depth: float) -> bool:
        if not all(math.isfinite(v) for v in (t, depth)):
            return False
        if not 0 <= depth <= MAX_PLAUSIBLE_DEPTH:
            return False
        ring = self._depths.setdefault(pod, deque(maxlen=self._capacity))
        if ring and t < ring[-1][0] + self._min_spacing:
            return False
        ring.append((t, depth))
        return True

    def note_latency(self, p50: float | None, p99: float | None, slow: bool) -> None:
        self._latency = (_seconds(p50), _seconds(p99), slow is True)

    def retain(self, pods: Collection[str]) -> None:
        for gone in [pod for pod in self._depths if pod not in pods]:
            del self._depths[gone]

    def window(self, now: float, window: float) -> VerifierWindow | None:
        """None when no verifier says anything: no depth samples and no latency."""
        p50, p99, slow = self._latency
        means, growths = [], []
        for ring in self._depths.values():
            points = [(t, d) for t, d in ring if now - window <= t <= now]
            if not points:
                continue
            means.append(sum(d for _, d in points) / len(points))
            line = least_squares(points)
            growths.append(line[1] * window if line is not None else 0.0)
        if not means and p50 is None and p99 is None:
            return None
        return VerifierWindow(
            pods=len(means),
            queue_depth=sum(means) if means else None,
            growth=sum(growths) if growths else None,
            p50=p50,
            p99=p99,
            slow=slow,
        )


def _seconds(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value >= 0 else None
