"""A physical rollout engine sampled at increasing times, and a fleet of them scraped in rounds.

Between samples the engine integrates the mean-field model in chunks of at most MAX_CHUNK
seconds, each with its own throughput noise: an `async` engine's state is its offered load
alone, a `sync` engine's the requests left of its batch, which fall linearly while the batch is
KV-bound and exponentially in the drain tail (each running request finishes at the decode rate
over its length). Counter resets zero the counters only: the fault and the cycle go on, so the
ground truth stays a function of time.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from enum import Enum

from rljob.dev.host_memory import grown
from rljob.dev.physics.model import (
    OperatingPoint,
    operating_point,
    preemption_probability,
    prefix_hit_rate,
    throughput_ratio,
)
from rljob.dev.physics.workload import PhysicalProfile, RequestMix
from rljob.health.samples import WORKING_SET_MEMORY, EngineSample

# Rates change slowly (hours-long shifts and ramps), so one noise draw per half minute is enough.
MAX_CHUNK = 30.0
# The drain tail's time constant is ~15-70 s: shorter chunks keep its decay rate current.
MAX_DRAIN_CHUNK = 10.0
# A batch is done when less than half a request is left of it.
DONE = 0.5
# Beyond this mean a Poisson count is drawn from its normal approximation.
POISSON_EXACT_BELOW = 30.0


class Phase(Enum):
    IDLE = "idle"
    SERVING = "serving"
    ASLEEP = "asleep"
    SYNCING = "syncing"


@dataclass(slots=True)
class _Counters:
    tokens: float = 0.0
    prefix_hits: float = 0.0
    prefix_queries: float = 0.0
    preemptions: float = 0.0
    finished: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    latency_seconds: float = 0.0
    latency_count: float = 0.0

    def reset(self) -> None:
        for counter in fields(self):
            setattr(self, counter.name, 0.0)


def _poisson(rng: random.Random, mean: float) -> float:
    if mean <= 0:
        return 0.0
    if mean >= POISSON_EXACT_BELOW:
        return float(max(0, round(rng.gauss(mean, math.sqrt(mean)))))
    # Knuth: multiply uniforms until the product drops below e^-mean.
    limit, product, count = math.exp(-mean), rng.random(), 0
    while product > limit:
        product *= rng.random()
        count += 1
    return float(count)


class PhysicalEngine:
    """One engine whose metrics can be sampled at increasing times (absolute; the profile's
    times are since `start`)."""

    def __init__(self, profile: PhysicalProfile, seed: int | str = 0, start: float = 0.0) -> None:
        self.profile = profile
        self.start = start
        self._rng = random.Random(f"{seed}:physics")
        self._memory_rng = random.Random(f"{seed}:memory")  # the other draws stay as they were
        self._pinned = False  # a wake kept the pinned weight copies (memory_pinned_from)
        self._t = start
        self._counters = _Counters()
        self._resets = deque(sorted(start + at for at in profile.counter_resets_at))
        self._gaps = tuple((start + begin, start + end) for begin, end in profile.gaps)
        self._phase = Phase.IDLE
        self._phase_end = start + max(0.0, profile.driver.offset)
        self._remaining = 0.0
        self._settle()

    @property
    def phase(self) -> Phase:
        return self._phase

    def sample(self, t: float) -> EngineSample | None:
        """The scrape at `t`, or None inside a scrape gap (the engine runs on regardless)."""
        if t > self._t:
            self._advance(t)
        if any(begin <= t < end for begin, end in self._gaps):
            return None
        return self._sample()

    def throughput_ratio(self, t: float) -> float:
        """Ground truth, noise-free: decode throughput with the fault over that without it at the
        driver's full load and the mix of time `t` (1.0 with no fault or when not KV-bound)."""
        return throughput_ratio(self.profile, t - self.start)

    def usable_kv_tokens(self, t: float) -> float:
        """Ground truth: KV tokens the fault leaves usable at `t`."""
        capacity = self.profile.hardware.kv_capacity_tokens
        return capacity * (1 - self.profile.loss_at(t - self.start))

    def _advance(self, t: float) -> None:
        while self._t < t:
            end = min(t, self._phase_end, self._resets[0] if self._resets else math.inf)
            if self._phase is Phase.SERVING:
                self._t = self._serve(end)
            else:
                self._t = end
            self._settle()

    def _settle(self) -> None:
        """Applies the counter resets and phase changes due by now."""
        while self._resets and self._resets[0] <= self._t:
            self._resets.popleft()
            self._counters.reset()
        while self._phase_end <= self._t:
            self._next_phase()

    def _next_phase(self) -> None:
        driver, at = self.profile.driver, self._phase_end
        if self._phase in (Phase.IDLE, Phase.SYNCING):
            self._phase, self._phase_end = Phase.SERVING, math.inf
            self._remaining = float(driver.batch)
        elif self._phase is Phase.SERVING:
            self._phase, self._phase_end = Phase.ASLEEP, at + driver.train_seconds
        else:
            self._pinned |= at - self.start >= self.profile.memory_pinned_from
            self._phase, self._phase_end = Phase.SYNCING, at + driver.weight_sync_seconds

    def _conditions(self, t: float) -> tuple[RequestMix, float]:
        age = t - self.start
        return self.profile.mix_at(age), self.profile.loss_at(age)

    def _serve(self, end: float) -> float:
        """Integrates serving from now to `end` (or to when a batch drains); returns the time
        reached."""
        sync = self.profile.driver.kind == "sync"
        end = min(end, self._t + (MAX_DRAIN_CHUNK if sync else MAX_CHUNK))
        mix, loss = self._conditions((self._t + end) / 2)
        speed = max(0.0, 1 + self._rng.gauss(0, self.profile.noise))
        if not sync:
            point, seconds = self._point(mix, self._offered(), loss), end - self._t
            tokens = point.decode_rate * speed * seconds
            self._account(mix, loss, tokens, point.running * seconds, point.kv_bound)
            return end
        point = self._point(mix, self._remaining, loss)
        if point.running < self._remaining:
            return self._saturated(mix, loss, point, speed, end)
        return self._drain(mix, loss, speed, end)

    def _saturated(
        self, mix: RequestMix, loss: float, point: OperatingPoint, speed: float, end: float
    ) -> float:
        """A batch with a queue: requests finish (and queued ones start) at a steady rate."""
        rate = point.decode_rate * speed
        finishing = rate / mix.generation_tokens
        queued = self._remaining - point.running
        duration = end - self._t
        if finishing > 0 and queued / finishing <= duration:
            duration, self._remaining = queued / finishing, point.running
        else:
            self._remaining -= finishing * duration
        self._account(mix, loss, rate * duration, point.running * duration, point.kv_bound)
        return self._t + duration

    def _drain(self, mix: RequestMix, loss: float, speed: float, end: float) -> float:
        """The tail: nothing queued, each running request finishes at its own decode rate."""
        left = self._remaining
        point = operating_point(self.profile.hardware, mix, left, loss, admitting=False)
        per_request = point.decode_rate * speed / max(left, DONE) / mix.generation_tokens
        duration = end - self._t
        after = left * math.exp(-per_request * duration) if per_request > 0 else left
        # The running count decays as requests finish: its integral is what finished over the rate.
        running_seconds = (left - after) / per_request if per_request > 0 else left * duration
        if after < DONE:
            duration = math.log(left / DONE) / per_request if left > DONE else 0.0
            running_seconds = max(0.0, left - DONE) / per_request if per_request > 0 else 0.0
            after = 0.0
            self._phase_end = self._t + duration
        self._remaining = after
        tokens = (left - after) * mix.generation_tokens
        self._account(mix, loss, tokens, running_seconds, kv_bound=False)
        return self._t + duration

    def _account(
        self, mix: RequestMix, loss: float, tokens: float, running_seconds: float, kv_bound: bool
    ) -> None:
        counters = self._counters
        finished = tokens / mix.generation_tokens
        prompt = finished * mix.prompt_tokens * self._jitter()
        counters.tokens += tokens
        counters.finished += finished
        counters.prompt_tokens += prompt
        counters.generation_tokens += tokens * self._jitter()
        # Each running sequence waits out every step, so latency sums sequence-seconds per token.
        counters.latency_seconds += running_seconds
        counters.latency_count += tokens
        counters.prefix_queries += prompt
        counters.prefix_hits += prompt * prefix_hit_rate(mix, loss)
        if kv_bound:
            expected = finished * preemption_probability(mix, loss)
            counters.preemptions += _poisson(self._rng, expected)

    def _point(self, mix: RequestMix, offered: float, loss: float) -> OperatingPoint:
        return operating_point(self.profile.hardware, mix, offered, loss, admitting=True)

    def _offered(self) -> float:
        """Requests the async driver has in flight: its target, give or take a few resubmits."""
        return float(round(self.profile.driver.concurrency * self._jitter()))

    def _jitter(self) -> float:
        return max(0.0, 1 + self._rng.gauss(0, self.profile.noise))

    def _shrink(self) -> float:
        """Noise for a gauge held near its bound: it fluctuates below it, not above."""
        return max(0.0, 1 - abs(self._rng.gauss(0, self.profile.noise)))

    def _sample(self) -> EngineSample:
        mix, loss = self._conditions(self._t)
        running = waiting = 0.0
        kv_usage = 0.0 if self._phase is Phase.ASLEEP else loss
        if self._phase is Phase.SERVING:
            sync = self.profile.driver.kind == "sync"
            offered = self._remaining if sync else self._offered()
            point = self._point(mix, offered, loss)
            queued = point.running < offered
            running = round(point.running * self._shrink()) if queued else round(offered)
            waiting = max(0.0, round(offered) - running)
            kv_usage = min(1.0, point.kv_usage * (self._shrink() if queued else 1.0))
        counters = self._counters
        return EngineSample(
            t=self._t,
            memory_bytes=self._memory(running),
            memory_signal=WORKING_SET_MEMORY,
            generated_tokens_total=counters.tokens,
            running=float(running),
            waiting=float(waiting),
            kv_usage=kv_usage,
            prefix_hits_total=counters.prefix_hits,
            prefix_queries_total=counters.prefix_queries,
            preemptions_total=counters.preemptions,
            sleeping=self._phase is Phase.ASLEEP,
            paused=self._phase is Phase.SYNCING,
            finished_requests_total=counters.finished,
            finished_prompt_tokens_total=counters.prompt_tokens,
            finished_generation_tokens_total=counters.generation_tokens,
            token_latency_seconds_total=counters.latency_seconds,
            token_latency_count_total=counters.latency_count,
        )

    def _memory(self, running: float) -> float:
        profile = self.profile
        growth, kept = profile.memory_growth, 0.0
        if growth is not None:
            kept = grown(growth.gib_per_hour, self.start + growth.start, self._t)
        asleep = 1 if self._phase is Phase.ASLEEP else 0
        if self._pinned and not asleep:  # asleep, the cached copies hold the weights again
            kept += profile.memory.offloaded_bytes
        return profile.memory.reading(
            self._memory_rng, sleep_level=asleep, running=running, grown=kept
        )


def physical_fleet(
    profiles: Mapping[str, PhysicalProfile],
    duration: float,
    *,
    interval: float = 30.0,
    seed: int | str = 0,
) -> Iterator[list[tuple[str, EngineSample]]]:
    """One list per scrape round every `interval` seconds for `duration`: each engine's sample in
    the order given, those inside a scrape gap left out. Every engine gets its own noise."""
    engines = {name: PhysicalEngine(p, f"{seed}:{name}") for name, p in profiles.items()}
    for index in range(int(duration // interval) + 1):
        t = index * interval
        samples = ((name, engine.sample(t)) for name, engine in engines.items())
        yield [(name, sample) for name, sample in samples if sample is not None]
