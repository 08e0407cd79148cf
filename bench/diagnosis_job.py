"""The simulated RL job bench.diagnosis diagnoses: rollout engines, a verifier pool and a trainer
coupled through the rollouts they hand on, advanced in one-second steps of simulated time and
scraped the way the health loop scrapes it (one round per health interval), optionally with
jittered scrape times, missed scrapes and counter resets.

Two rollout drivers. Asynchronous (`Pipeline`): the driver keeps `in_flight(t)` requests in the
pipeline (at the engines or at the verifiers, as slime's and verl's async drivers count a
sample until it is rewarded) and pauses while the trainer's buffer holds `max_buffer_steps`
steps of rollouts (the off-policy bound); the engines generate T(c) tokens/s at c requests in
flight each and a rollout finishes every `rollout_tokens` tokens (Little's law, as a fluid);
the verifiers serve `pods x workers` rollouts at a time; the trainer waits for a batch, trains,
syncs weights. Synchronous (`SyncRollout`): rljob.dev.sim.models.concurrency.Driver's batch of
log-normal responses per engine, the in-flight count decaying from the driver's concurrency to
zero; the trainer waits for the batch, then trains and syncs while the engines idle.

The engine curve is the test bed's truth model (concurrency.Curve: a decode step of m sequences
takes a + b m seconds, m capped by the KV cache), or any function of c (the published sweep).
Compared with tests/unit/health/bottleneck/sim.py (which drives the monitor from fixed
schedules), the roles here are coupled, so a slow verifier starves the engines by itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rljob.dev.sim.models.concurrency import Driver
from rljob.dev.sim.profiles import EngineProfile
from rljob.health.bottleneck import BottleneckMonitor
from rljob.health.samples import EngineSample

Schedule = Callable[[float], float]
# The spec's defaults: spec.health.interval and spec.health.bottleneck.window.
INTERVAL, WINDOW = 30.0, 900.0
WAITING, TRAINING, SYNCING = "waiting_for_rollouts", "training", "syncing_weights"
# VerifierSlow's defaults (spec.health.verifierLatency): p99 over 10 s for 10 min.
VERIFIER_P99_BOUND = 10.0
VERIFIER_SLOW_FOR = 600.0
# A log-normal service time with sigma 0.5: p99 / mean.
SERVICE_P99_FACTOR = math.exp(0.5 * 2.326 - 0.125)
SERVICE_P50_FACTOR = math.exp(-0.125)


@dataclass(frozen=True)
class Engines:
    count: int
    throughput: Callable[[float], float]  # one engine's tokens/s at c requests in flight
    capacity: float | None  # sequences the KV cache holds; None: no cap, no kv_usage exported
    rollout_tokens: float = 2048.0
    noise: float = 0.05  # per-second multiplicative throughput noise (EngineProfile.noise)


@dataclass(frozen=True)
class Trainer:
    batch: float  # rollouts per step
    train: float  # seconds per step training
    sync: float  # seconds per step syncing weights
    pods: int = 2
    phases: bool = True  # exports rljob_trainer_phase_seconds_total (the rljob SDK)
    jitter: float = 0.1  # the relative spread of each step's training and sync times
    max_buffer_steps: float = 2.0


@dataclass(frozen=True)
class Verifiers:
    pods: int
    workers: int  # rollouts one pod verifies at a time
    seconds: Schedule  # mean service time at t


@dataclass(frozen=True)
class Garbage:
    """What goes wrong with the scrapes (all off by default)."""

    jitter: float = 0.0  # each pod is scraped up to this many seconds before its round
    missed: float = 0.0  # share of pod scrapes lost at random
    outage: tuple[float, float] | None = None  # (start, seconds) with no scrape at all
    engine_restart: float | None = None  # engine-0's counters start over at this time
    trainer_restart: float | None = None  # trainer-0's process restarts (phase counters at 0)


@dataclass
class TrainerState:
    """The trainer's loop and its phase counters (every data-parallel rank alike)."""

    spec: Trainer
    rng: random.Random
    phase: str = WAITING
    left: float = 0.0  # seconds left in the current training or sync phase
    step: float = 0.0
    buffer: float = 0.0  # verified rollouts not trained on yet
    seconds: dict[str, float] = field(default_factory=dict)

    def tick(self) -> None:
        """One second of the trainer's loop."""
        self.seconds[self.phase] = self.seconds.get(self.phase, 0.0) + 1.0
        if self.phase == WAITING:
            if self.buffer >= self.spec.batch:
                self.buffer -= self.spec.batch
                self._enter(TRAINING, self.spec.train)
            return
        self.left -= 1.0
        if self.left > 0:
            return
        if self.phase == TRAINING and self.spec.sync > 0:
            self._enter(SYNCING, self.spec.sync)
        else:
            self.step += 1
            self.phase = WAITING

    def _enter(self, phase: str, seconds: float) -> None:
        self.phase = phase
        self.left = max(1.0, seconds * (1 + self.rng.gauss(0, self.spec.jitter)))

    @property
    def full(self) -> bool:
        return self.buffer >= self.spec.max_buffer_steps * self.spec.batch


@dataclass
class Reading:
    """One pod's state at a scrape."""

    tokens: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float | None = None


class Pipeline:
    """The asynchronous job: engines, verifiers and trainer advanced a second at a time."""

    def __init__(
        self,
        engines: Engines,
        trainer: Trainer,
        in_flight: Schedule,
        verifiers: Verifiers | None,
        seed: str,
    ) -> None:
        self.engines, self.verifiers, self.in_flight = engines, verifiers, in_flight
        self.rng = random.Random(f"{seed}:pipeline")
        self.trainer = TrainerState(trainer, random.Random(f"{seed}:trainer"))
        self.at_engines = 0.0  # requests generating, over all engines
        self.queue = 0.0  # requests at the verifiers (in service or queued), over all pods
        self.tokens = [0.0] * engines.count
        self._over_bound_since: float | None = None
        self.t = 0.0

    def tick(self) -> None:
        engines, count = self.engines, self.engines.count
        per_engine = self.at_engines / count
        finished = 0.0
        for index in range(count):
            tokens = engines.throughput(per_engine) * max(0.0, self.rng.gauss(1, engines.noise))
            self.tokens[index] += tokens
            finished += tokens / engines.rollout_tokens
        finished = min(finished, self.at_engines)
        self.at_engines -= finished
        if self.verifiers is None:
            self.trainer.buffer += finished
        else:
            self.queue += finished
            verified = min(self.queue, self._verifier_rate(self.t))
            self.queue -= verified
            self.trainer.buffer += verified
        if not self.trainer.full:
            self.at_engines += max(0.0, self.in_flight(self.t) - self.at_engines - self.queue)
        self.trainer.tick()
        self._note_latency()
        self.t += 1.0

    def _verifier_rate(self, t: float) -> float:
        assert self.verifiers is not None
        return self.verifiers.pods * self.verifiers.workers / self.verifiers.seconds(t)

    def engine(self, index: int) -> Reading:
        c = self.at_engines / self.engines.count
        capacity = self.engines.capacity
        running = min(c, capacity) if capacity is not None else c
        kv = round(running) / capacity if capacity else None
        return Reading(self.tokens[index], round(running), round(c - running), kv)

    def verifier_depth(self) -> float:
        """Requests queued (not in service) at one pod."""
        assert self.verifiers is not None
        slots = self.verifiers.pods * self.verifiers.workers
        return max(0.0, self.queue - slots) / self.verifiers.pods

    def verifier_latency(self) -> tuple[float, float, bool]:
        """p50 and p99 (queue wait plus service) and whether VerifierSlow would have fired."""
        p50, p99 = self._quantiles()
        slow = self._over_bound_since is not None
        return p50, p99, slow and self.t - (self._over_bound_since or 0.0) >= VERIFIER_SLOW_FOR

    def _quantiles(self) -> tuple[float, float]:
        assert self.verifiers is not None
        mean = self.verifiers.seconds(self.t)
        wait = self.queue / self._verifier_rate(self.t)
        return wait + mean * SERVICE_P50_FACTOR, wait + mean * SERVICE_P99_FACTOR

    def _note_latency(self) -> None:
        if self.verifiers is None:
            return
        over = self._quantiles()[1] > VERIFIER_P99_BOUND
        if not over:
            self._over_bound_since = None
        elif self._over_bound_since is None:
            self._over_bound_since = self.t


class SyncRollout:
    """The synchronous job: each engine runs the test bed's batch of `concurrency` requests,
    then idles while the trainer trains and syncs; the trainer waits for the slowest engine."""

    verifiers = None

    def __init__(self, profile: EngineProfile, count: int, trainer: Trainer, seed: str) -> None:
        self.profile, self.rng = profile, random.Random(f"{seed}:sync")
        self.drivers = [Driver(profile, f"{seed}:engine-{i}") for i in range(count)]
        self.batch = max(batch_seconds(d) for d in self.drivers)
        self.period = self.batch + profile.sync_idle
        self.trainer = TrainerState(trainer, random.Random(f"{seed}:trainer"))
        self.sync_seconds = trainer.sync
        self.tokens = [0.0] * count
        self.t = 0.0

    def tick(self) -> None:
        for index, driver in enumerate(self.drivers):
            tokens = driver.tokens(self.t, self.t + 1.0)
            self.tokens[index] += tokens * max(0.0, self.rng.gauss(1, self.profile.noise))
        into = self.t % self.period
        phase = WAITING if into < self.batch else TRAINING
        if into >= self.period - self.sync_seconds:
            phase = SYNCING
        state = self.trainer
        state.seconds[phase] = state.seconds.get(phase, 0.0) + 1.0
        if phase != state.phase and phase == WAITING:
            state.step += 1
        state.phase = phase
        self.t += 1.0

    def engine(self, index: int) -> Reading:
        load = self.drivers[index].load(self.t)
        knee = self.profile.knee or self.profile.max_running
        return Reading(self.tokens[index], load.running, load.waiting, load.running / knee)


def batch_seconds(driver: Driver, resolution: float = 0.5) -> float:
    """How long the driver's batch takes: the first age with nothing in flight (the driver
    must idle at least `resolution` seconds between batches)."""
    age = resolution
    while driver.load(age).in_flight > 0:
        age += resolution
    low, high = age - resolution, age
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if driver.load(middle).in_flight > 0 else (low, middle)
    return high


Job = Pipeline | SyncRollout


@dataclass
class _Counters:
    """What a restarted process's counters read: they start over at the restart."""

    at: float | None
    tokens: float | None = None
    seconds: dict[str, float] | None = None
    step: float = 0.0

    def engine(self, t: float, tokens: float) -> float:
        if self.at is None or t < self.at:
            return tokens
        if self.tokens is None:
            self.tokens = tokens
        return tokens - self.tokens

    def trainer(
        self, t: float, seconds: dict[str, float], step: float
    ) -> tuple[dict[str, float], float]:
        if self.at is None or t < self.at:
            return seconds, step
        if self.seconds is None:
            self.seconds, self.step = dict(seconds), step
        since = {phase: value - self.seconds.get(phase, 0.0) for phase, value in seconds.items()}
        return since, max(0.0, step - 2)  # resumed from a checkpoint two steps back


class Scrapes:
    """Feeds `monitor` one round per health interval from `job`, through `garbage`."""

    def __init__(self, job: Job, garbage: Garbage, seed: int, interval: float = INTERVAL) -> None:
        self.job, self.garbage, self.interval = job, garbage, interval
        self.rng = random.Random(f"{seed}:scrapes")
        self.engines = [f"rollout-{i}" for i in range(len(job.tokens))]
        trainer = job.trainer.spec
        self.trainers = [f"trainer-{i}" for i in range(trainer.pods)] if trainer.phases else []
        verifiers = job.verifiers
        self.verifiers = [f"verifier-{i}" for i in range(verifiers.pods)] if verifiers else []
        self.engine_counters = _Counters(garbage.engine_restart)
        self.trainer_counters = _Counters(garbage.trainer_restart)

    def rounds(self, monitor: BottleneckMonitor, duration: float) -> Iterator[float]:
        """Advances the job round by round; yields each round's end once it was fed."""
        end = float(self.rng.randint(1, int(self.interval)))
        while end <= duration:
            planned = self._plan(end)
            while self.job.t < end:
                self.job.tick()
                for pod in planned.get(self.job.t, []):
                    self._scrape(monitor, pod)
            yield end
            end += self.interval

    def _plan(self, end: float) -> dict[float, list[str]]:
        garbage, planned = self.garbage, dict[float, list[str]]()
        for pod in self.engines + self.trainers + self.verifiers:
            at = end - math.floor(self.rng.uniform(0, garbage.jitter))
            lost = self.rng.random() < garbage.missed
            if lost or _in_outage(at, garbage.outage):
                continue
            planned.setdefault(at, []).append(pod)
        return planned

    def _scrape(self, monitor: BottleneckMonitor, pod: str) -> None:
        job, t = self.job, self.job.t
        kind, index = pod.rsplit("-", 1)
        if kind == "rollout":
            reading: Reading = job.engine(int(index))
            tokens = reading.tokens
            if index == "0":
                tokens = self.engine_counters.engine(t, tokens)
            sample = EngineSample(
                t=t,
                generated_tokens_total=tokens,
                running=reading.running,
                waiting=reading.waiting,
                kv_usage=reading.kv_usage,
                sleeping=False,
            )
            monitor.observe_engine(pod, sample)
        elif kind == "trainer":
            seconds, step = dict(job.trainer.seconds), job.trainer.step
            if index == "0":
                seconds, step = self.trainer_counters.trainer(t, seconds, step)
            monitor.observe_trainer(pod, t, seconds, step)
        elif isinstance(job, Pipeline):
            monitor.observe_verifier(pod, t, job.verifier_depth())
            if index == "0":
                monitor.note_verifier_latency(*job.verifier_latency())


def _in_outage(t: float, outage: tuple[float, float] | None) -> bool:
    return outage is not None and outage[0] <= t < outage[0] + outage[1]
