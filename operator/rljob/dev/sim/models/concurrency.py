"""A rollout engine's throughput against the requests in flight (pure, seeded): the concurrency
model an EngineProfile opts into with `concurrency` > 0, and the ground truth tests compare the
operator's knee estimate with.

Continuous batching (rljob.dev.engine_physics): a decode step of m running sequences takes
a + b m seconds and yields m tokens, so the engine generates T(m) = m / (a + b m) tokens/s,
rising almost linearly while the fixed cost a dominates and flattening towards 1 / b. The KV
cache holds `knee` sequences: of c requests in flight m = min(c, knee) run and c - m wait, so
T stops growing at the knee. The profile gives T(knee) (`throughput`) and a / b
(`step_fixed_batch`), which fix a and b.

Drivers: a steady one keeps `concurrency` requests in flight; a synchronous RL rollout
(`sync_tail`) submits `concurrency` requests at once, whose lengths follow a log-normal with a
long tail, and waits for the last: the in-flight count falls from N to 0 within each batch (the
short requests finish first, each remaining sequence decoding faster as the batch shrinks), then
the engine idles `sync_idle` seconds while the trainer trains. The batch is the same every time
(its lengths are the distribution's quantiles, in a seeded order), so the engine is observed at
every concurrency of the tail within a few batches.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import random
from dataclasses import dataclass
from statistics import NormalDist

from rljob.dev.sim.profiles import EngineProfile

# The plateau: the lowest concurrency within this share of the throughput at the knee.
PLATEAU_SHARE = 0.95
# The headroom the operator advises running at, as a share of the plateau's start.
RECOMMENDED_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class Curve:
    """T(c) = m / (a + b m) with m = min(c, capacity)."""

    capacity: int
    fixed: float  # a: seconds a step takes whatever its batch
    per_sequence: float  # b: seconds each running sequence adds to a step

    def running(self, in_flight: float) -> float:
        return min(max(0.0, in_flight), float(self.capacity))

    def step_seconds(self, running: float) -> float:
        return self.fixed + self.per_sequence * running

    def throughput(self, in_flight: float) -> float:
        """Generated tokens/s with `in_flight` requests."""
        running = self.running(in_flight)
        return running / self.step_seconds(running) if running > 0 else 0.0


def curve_of(profile: EngineProfile) -> Curve:
    """The profile's curve: T(capacity) = throughput and a / b = step_fixed_batch."""
    capacity = profile.knee or profile.max_running
    ratio = profile.step_fixed_batch
    # capacity / (b (ratio + capacity)) = throughput
    per_sequence = capacity / (max(profile.throughput, 1e-9) * (ratio + capacity))
    return Curve(capacity, ratio * per_sequence, per_sequence)


@dataclass(frozen=True, slots=True)
class KneeTruth:
    """What the operator's passive knee estimate should find for a profile."""

    capacity: int  # the KV cache's sequences: no gain beyond
    throughput_at_capacity: float
    plateau_from: int  # the lowest concurrency within PLATEAU_SHARE of T(capacity)
    recommended: float  # RECOMMENDED_SHARE x plateau_from
    curve: tuple[tuple[int, float], ...]  # (c, T(c)) for c = 1 .. 2 x capacity

    def throughput(self, concurrency: int) -> float:
        return self.curve[min(concurrency, len(self.curve)) - 1][1] if concurrency > 0 else 0.0


def knee_truth(profile: EngineProfile) -> KneeTruth:
    """The steady curve T(c) of `profile` and the concurrency to recommend: 0.8 x the lowest
    whole c whose T is within 5% of T at capacity."""
    curve = curve_of(profile)
    at_capacity = curve.throughput(curve.capacity)
    points = tuple((c, curve.throughput(c)) for c in range(1, 2 * curve.capacity + 1))
    plateau = next(c for c, tokens in points if tokens >= PLATEAU_SHARE * at_capacity)
    return KneeTruth(curve.capacity, at_capacity, plateau, RECOMMENDED_SHARE * plateau, points)


@dataclass(frozen=True, slots=True)
class Load:
    """The engine at one instant: requests in flight, running and waiting, tokens/s."""

    in_flight: float
    running: float
    waiting: float
    tokens_per_second: float


@dataclass(frozen=True, slots=True)
class _Segment:
    start: float  # seconds into the batch
    in_flight: int
    running: int
    tokens_before: float  # generated in the batch before `start`
    tokens_per_second: float


class Driver:
    """The requests a rollout driver keeps in flight on one engine, as a function of the
    engine's age: `load(age)` and the tokens generated over an interval, exactly."""

    def __init__(self, profile: EngineProfile, seed: str) -> None:
        self.curve = curve_of(profile)
        self.concurrency = profile.concurrency
        self._segments: tuple[_Segment, ...] = ()
        self._period = self._batch_tokens = 0.0
        if profile.sync_tail and round(profile.concurrency) > 0:
            lengths = _lengths(round(profile.concurrency), profile.length_sigma, seed)
            scaled = tuple(length * profile.generation_length for length in lengths)
            self._segments = _batch(self.curve, scaled)
            end = self._segments[-1]  # in flight 0: the idle time until the next batch
            self._batch_tokens = end.tokens_before
            self._period = end.start + profile.sync_idle
        self._starts = tuple(segment.start for segment in self._segments)

    @property
    def synchronous(self) -> bool:
        return bool(self._segments)

    @property
    def period(self) -> float:
        """Seconds from one synchronous batch's start to the next's (0: a steady driver)."""
        return self._period

    def load(self, age: float) -> Load:
        if not self.synchronous:
            running = self.curve.running(self.concurrency)
            tokens = self.curve.throughput(self.concurrency)
            return Load(self.concurrency, running, self.concurrency - running, tokens)
        segment = self._segment(age % self._period)
        waiting = segment.in_flight - segment.running
        return Load(segment.in_flight, segment.running, waiting, segment.tokens_per_second)

    def tokens(self, start: float, end: float) -> float:
        """Tokens generated between two ages (start <= end)."""
        return max(0.0, self._cumulative(end) - self._cumulative(start))

    def mean_tokens_per_second(self) -> float:
        """Over a batch, idle time excluded (steady: T(concurrency))."""
        if not self.synchronous:
            return self.curve.throughput(self.concurrency)
        return self._batch_tokens / self._segments[-1].start

    def _cumulative(self, age: float) -> float:
        if not self.synchronous:
            return self.curve.throughput(self.concurrency) * age
        batches, into = divmod(age, self._period)
        segment = self._segment(into)
        within = segment.tokens_before + segment.tokens_per_second * (into - segment.start)
        return batches * self._batch_tokens + min(within, self._batch_tokens)

    def _segment(self, into: float) -> _Segment:
        index = bisect.bisect_right(self._starts, into) - 1
        return self._segments[max(0, index)]


@functools.lru_cache(maxsize=64)
def _lengths(count: int, sigma: float, seed: str) -> tuple[float, ...]:
    """`count` response lengths with mean 1: the log-normal's quantiles, in a seeded order (the
    order requests are admitted in when they exceed the KV cache)."""
    normal = NormalDist()
    quantiles = [
        math.exp(sigma * normal.inv_cdf((index + 0.5) / count) - sigma**2 / 2)
        for index in range(count)
    ]
    mean = sum(quantiles) / count
    lengths = [q / mean for q in quantiles]
    random.Random(f"{seed}:lengths").shuffle(lengths)
    return tuple(lengths)


@functools.lru_cache(maxsize=64)
def _batch(curve: Curve, lengths: tuple[float, ...]) -> tuple[_Segment, ...]:
    """One synchronous batch, event by event: every running sequence gains a token per step, a
    finished one frees its KV slot for the next waiting request. The last segment (nothing in
    flight) marks the batch's end."""
    waiting = list(reversed(lengths))  # pop() admits in order
    finishing: list[float] = []  # heap: the per-sequence progress at which each one finishes
    segments: list[_Segment] = []
    t = tokens = progress = 0.0
    while waiting or finishing:
        while waiting and len(finishing) < curve.capacity:
            heapq.heappush(finishing, progress + waiting.pop())
        batch = len(finishing)
        step = curve.step_seconds(batch)
        segments.append(_Segment(t, batch + len(waiting), batch, tokens, batch / step))
        gained = finishing[0] - progress
        t, tokens, progress = t + gained * step, tokens + gained * batch, finishing[0]
        while finishing and finishing[0] <= progress + 1e-9:
            heapq.heappop(finishing)
    segments.append(_Segment(t, 0, 0, tokens, 0.0))
    return tuple(segments)
