"""Synthetic workload signals: seeded, pure, reproducible. Unit tests, benchmarks and the
simulated workloads of the test bed share them, so a detector is tested on the same traces the
bed serves.

An engine's behaviour is a function of time: a mode (saturated, draining, unsaturated, asleep,
paused for a weight sync) from its generate/train cycle and load swings, and a health factor
from slow drift and step drops that scales its capacity and, when `cache_symptoms` is set,
lowers its prefix-cache hit rate and raises its preemptions as a fragmenting KV cache does.
Counters integrate the rate of the mode at the start of each step, with per-step noise.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

from rljob.dev.sim.lognormal import lognormal_cdf
from rljob.health.samples import EngineSample
from rljob.health.verifier import VerifierSample
from rljob.vocabulary.phases import CHECKPOINTING, WAITING_FOR_ROLLOUTS

PHASE_TRAIN = "train"


class Mode(Enum):
    SATURATED = "saturated"
    DRAINING = "draining"
    UNSATURATED = "unsaturated"
    ASLEEP = "asleep"
    SYNCING = "syncing"


@dataclass(frozen=True, slots=True)
class Cycle:
    """Bursty RL: generate (ending in a drain tail with an empty queue), sleep while the trainer
    trains, then a paused weight sync."""

    generate: float = 600.0
    drain: float = 60.0
    train: float = 300.0
    weight_sync: float = 30.0
    offset: float = 0.0

    @property
    def period(self) -> float:
        return self.generate + self.train + self.weight_sync

    def mode(self, t: float) -> Mode:
        phase = (t + self.offset) % self.period
        if phase < self.generate - self.drain:
            return Mode.SATURATED
        if phase < self.generate:
            return Mode.DRAINING
        if phase < self.generate + self.train:
            return Mode.ASLEEP
        return Mode.SYNCING


@dataclass(frozen=True, slots=True)
class LoadSwings:
    """Periods of low load: awake, queue empty, throughput follows the load."""

    period: float = 3600.0
    low_for: float = 900.0
    low_load: float = 0.4
    offset: float = 0.0

    def low(self, t: float) -> bool:
        return (t + self.offset) % self.period < self.low_for


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """One engine's behaviour. Times are seconds since the engine's start."""

    throughput: float = 800.0
    noise: float = 0.05
    drift_per_hour: float = 0.0
    drop: float = 0.0
    drop_at: float = math.inf
    prefix_hit_rate: float | None = 0.7
    preemptions_per_minute: float | None = 0.1
    cache_symptoms: bool = True
    sleep_metric: bool = True
    cycle: Cycle | None = None
    load_swings: LoadSwings | None = None
    counter_resets_at: tuple[float, ...] = ()
    max_running: float = 64.0

    def health(self, t: float) -> float:
        drifted = max(0.05, 1 - self.drift_per_hour * t / 3600)
        return drifted * (1 - self.drop if t >= self.drop_at else 1.0)

    def mode(self, t: float) -> Mode:
        mode = self.cycle.mode(t) if self.cycle is not None else Mode.SATURATED
        if mode == Mode.SATURATED and self.load_swings is not None and self.load_swings.low(t):
            return Mode.UNSATURATED
        return mode


def _rng(seed: int | str, name: str) -> random.Random:
    return random.Random(f"{seed}:{name}")


class SimulatedEngine:
    """An engine whose metrics can be sampled at increasing times."""

    def __init__(self, profile: EngineProfile, seed: int | str = 0, start: float = 0.0) -> None:
        self.profile = profile
        self.start = start
        self._rng = _rng(seed, "engine")
        self._t = start
        self._tokens = 0.0
        self._hits = 0.0
        self._queries = 0.0
        self._preemptions = 0.0
        self._resets = sorted(start + r for r in profile.counter_resets_at)

    def sample(self, t: float) -> EngineSample:
        if t > self._t:
            self._advance(t)
        return self._gauges(self._t)

    def _advance(self, t: float) -> None:
        while self._resets and self._resets[0] <= t:
            self._integrate(self._resets.pop(0))
            self._tokens = self._hits = self._queries = self._preemptions = 0.0
        self._integrate(t)

    def _integrate(self, t: float) -> None:
        elapsed = t - self._t
        if elapsed <= 0:
            return
        age = self._t - self.start
        profile = self.profile
        rate = self._token_rate(profile.mode(age), profile.health(age))
        self._tokens += rate * elapsed
        if profile.prefix_hit_rate is not None:
            queries = 2 * rate * elapsed
            self._queries += queries
            self._hits += queries * self._hit_rate(age)
        if profile.preemptions_per_minute is not None and profile.mode(age) == Mode.SATURATED:
            self._preemptions += self._preemption_rate(age) * elapsed / 60
        self._t = t

    def _token_rate(self, mode: Mode, health: float) -> float:
        profile = self.profile
        noisy = max(0.0, 1 + self._rng.gauss(0, profile.noise))
        share = {
            Mode.SATURATED: 1.0,
            Mode.DRAINING: 0.5,
            Mode.UNSATURATED: profile.load_swings.low_load if profile.load_swings else 0.4,
        }.get(mode, 0.0)
        return profile.throughput * health * share * noisy

    def _hit_rate(self, age: float) -> float:
        base = self.profile.prefix_hit_rate or 0.0
        return base * self.profile.health(age) ** 1.5 if self.profile.cache_symptoms else base

    def _preemption_rate(self, age: float) -> float:
        base = self.profile.preemptions_per_minute or 0.0
        if not self.profile.cache_symptoms:
            return base
        return base + (1 - self.profile.health(age)) * 20

    def _gauges(self, t: float) -> EngineSample:
        profile = self.profile
        mode = profile.mode(t - self.start)
        running, waiting = self._load(mode)
        return EngineSample(
            t=t,
            generated_tokens_total=self._tokens,
            running=running,
            waiting=waiting,
            kv_usage=0.95 if mode == Mode.SATURATED else 0.5 if running else 0.0,
            prefix_hits_total=self._hits if profile.prefix_hit_rate is not None else None,
            prefix_queries_total=self._queries if profile.prefix_hit_rate is not None else None,
            preemptions_total=(
                self._preemptions if profile.preemptions_per_minute is not None else None
            ),
            sleeping=(mode == Mode.ASLEEP) if profile.sleep_metric else None,
            paused=(mode == Mode.SYNCING) if profile.sleep_metric else None,
        )

    def _load(self, mode: Mode) -> tuple[float, float]:
        full = self.profile.max_running
        match mode:
            case Mode.SATURATED:
                return full, float(self._rng.randint(1, 30))
            case Mode.DRAINING:
                return round(full * self._rng.uniform(0.1, 0.6)), 0.0
            case Mode.UNSATURATED:
                low = self.profile.load_swings.low_load if self.profile.load_swings else 0.4
                return round(full * low), 0.0
            case Mode.SYNCING:
                return 0.0, float(self._rng.randint(1, 30))
            case _:
                return 0.0, 0.0


def engine_trace(
    profile: EngineProfile,
    duration: float,
    *,
    interval: float = 30.0,
    seed: int | str = 0,
    start: float = 0.0,
    jitter: float = 0.0,
) -> list[EngineSample]:
    """Samples every `interval` seconds (plus up to `jitter` seconds) for `duration`."""
    engine = SimulatedEngine(profile, seed, start)
    times = _times(duration, interval, start, jitter, _rng(seed, "times"))
    return [engine.sample(t) for t in times]


def _times(
    duration: float, interval: float, start: float, jitter: float, rng: random.Random
) -> Iterator[float]:
    for index in range(int(duration // interval) + 1):
        yield start + index * interval + (rng.uniform(0, jitter) if jitter else 0.0)


def fleet_trace(
    profiles: Mapping[str, EngineProfile],
    duration: float,
    *,
    interval: float = 30.0,
    seed: int | str = 0,
    start: float = 0.0,
) -> Iterator[tuple[str, EngineSample]]:
    """Every engine's samples, interleaved in time order (one scrape round per interval)."""
    engines = {
        name: SimulatedEngine(profile, f"{seed}:{name}", start)
        for name, profile in profiles.items()
    }
    for t in _times(duration, interval, start, 0.0, _rng(seed, "times")):
        for name, engine in engines.items():
            yield name, engine.sample(t)


@dataclass(frozen=True, slots=True)
class VerifierProfile:
    """Log-normal latencies; `slow_factor` multiplies them from `slow_at` on."""

    median_latency: float = 1.0
    sigma: float = 0.5
    requests_per_second: float = 5.0
    slow_factor: float = 1.0
    slow_at: float = math.inf
    error_rate: float = 0.0
    bounds: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)


class SimulatedVerifier:
    """A verifier's cumulative latency histogram and error counter."""

    def __init__(self, profile: VerifierProfile, seed: int | str = 0, start: float = 0.0) -> None:
        self.profile = profile
        self.start = start
        self._rng = _rng(seed, "verifier")
        self._t = start
        self._counts = [0.0] * (len(profile.bounds) + 1)
        self._errors = 0.0

    def sample(self, t: float) -> VerifierSample:
        if t > self._t:
            self._advance(t)
        bounds = (*self.profile.bounds, math.inf)
        return VerifierSample(
            t=self._t,
            buckets=tuple(zip(bounds, self._counts, strict=True)),
            errors_total=self._errors,
        )

    def _advance(self, t: float) -> None:
        profile = self.profile
        age = self._t - self.start
        median = profile.median_latency * (profile.slow_factor if age >= profile.slow_at else 1)
        requests = round(profile.requests_per_second * (t - self._t) * self._rng.uniform(0.8, 1.2))
        for index, bound in enumerate(profile.bounds):
            self._counts[index] += round(requests * lognormal_cdf(bound, median, profile.sigma))
        self._counts[-1] += requests
        self._errors += round(requests * profile.error_rate)
        self._t = t


@dataclass(frozen=True, slots=True)
class TrainerProfile:
    """Steps of (wait for rollouts, train); a checkpoint after every `checkpoint_every` steps.
    The SDK heartbeats at every phase change; from `hang_at` on nothing changes any more."""

    wait_for_rollouts: float = 120.0
    step_seconds: float = 60.0
    checkpoint_every: int = 10
    checkpoint_seconds: float = 120.0
    hang_at: float = math.inf


@dataclass(frozen=True, slots=True)
class TrainerState:
    heartbeat_at: float
    phase: str
    step: int


class SimulatedTrainer:
    """The trainer's SDK signals as a function of time since its attempt started."""

    def __init__(self, profile: TrainerProfile, start: float = 0.0) -> None:
        self.profile = profile
        self.start = start

    def state(self, t: float) -> TrainerState:
        age = min(t, self.start + self.profile.hang_at) - self.start
        profile = self.profile
        step_length = profile.wait_for_rollouts + profile.step_seconds
        block = profile.checkpoint_every * step_length + profile.checkpoint_seconds
        blocks, offset = divmod(max(0.0, age), block)
        done_before = int(blocks) * profile.checkpoint_every
        block_start = self.start + blocks * block
        if offset >= profile.checkpoint_every * step_length:
            started = block_start + profile.checkpoint_every * step_length
            return TrainerState(started, CHECKPOINTING, done_before + profile.checkpoint_every)
        steps, in_step = divmod(offset, step_length)
        step_start = block_start + steps * step_length
        if in_step < profile.wait_for_rollouts:
            return TrainerState(step_start, WAITING_FOR_ROLLOUTS, done_before + int(steps))
        return TrainerState(
            step_start + profile.wait_for_rollouts, PHASE_TRAIN, done_before + int(steps)
        )
