"""The simulated workloads' state as a function of time and faults (pure, seeded).

Each model is advanced to a time with the faults in force over the elapsed span (the simulator
advances every affected model before it changes a rule, so each span has one set of faults),
integrating counters in steps of at most `MAX_STEP` seconds with per-step noise. Counters only
grow; a restarted process is a new model whose counters start at zero, as a real one's do.
`render()` is the metrics page a scrape sees.

Metric names and semantics follow vLLM's PrometheusStatLogger (labels model_name and engine;
`vllm:engine_sleep_state{sleep_state=awake|weights_offloaded|discard_all}`, awake = 0 while
asleep) and the rljob SDK's trainer exporter (see shared/reference/workload-signals.md).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from rljob.dev.sim.exposition import Page, labels_text
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.profiles import (
    EngineProfile,
    ReferenceProfile,
    TrainerProfile,
    VerifierProfile,
)

# The SDK progress exporter's phases (rljob.sdk.progress.PHASES, which exports all of them, one
# at 1); the detectors know waiting_for_rollouts and checkpointing (rljob.health.stall). Copied,
# not imported, to keep boto3 and pydantic out of the simulator process; a unit test compares.
PHASE_WAITING_FOR_ROLLOUTS = "waiting_for_rollouts"
PHASE_TRAINING = "training"
PHASE_CHECKPOINTING = "checkpointing"
SDK_PHASES = (
    "starting",
    "generating",
    PHASE_WAITING_FOR_ROLLOUTS,
    PHASE_TRAINING,
    "syncing_weights",
    PHASE_CHECKPOINTING,
)
MAX_STEP = 1.0
MAX_STEPS = 3600
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")

# Metric names (exposed series names; counters carry `_total`).
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV_USAGE = "vllm:kv_cache_usage_perc"
VLLM_PREFIX_HITS = "vllm:prefix_cache_hits_total"
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
VLLM_SLEEP_STATE = "vllm:engine_sleep_state"
TRAINER_STEP = "rljob_trainer_step"
TRAINER_HEARTBEAT = "rljob_trainer_heartbeat_timestamp_seconds"
TRAINER_PHASE = "rljob_trainer_phase"
POLICY_GENERATION = "rljob_policy_generation"
CHECKPOINT_STEP = "rljob_checkpoint_step"
VERIFIER_DURATION = "rljob_verifier_request_duration_seconds"
VERIFIER_ERRORS = "rljob_verifier_request_errors_total"
REFERENCE_TOKENS = "rljob_reference_tokens_total"
REFERENCE_REQUESTS = "rljob_reference_requests_total"
PROCESS_START = "process_start_time_seconds"

_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Mode(Enum):
    SATURATED = "saturated"
    UNSATURATED = "unsaturated"
    DRAINING = "draining"
    ASLEEP = "asleep"
    IDLE = "idle"  # awake without requests
    PAUSED = "paused"  # requests paused by a weight sync
    STALLED = "stalled"


# rljob.dev.traces.Mode values -> our modes.
_FROM_TRACE = {
    "saturated": Mode.SATURATED,
    "unsaturated": Mode.UNSATURATED,
    "draining": Mode.DRAINING,
    "asleep": Mode.ASLEEP,
    # A weight sync pauses requests. vLLM exposes no paused-request gauge (its page then reads
    # idle, as when the driver holds requests back); SGLang's num_paused_reqs shows them.
    "syncing": Mode.PAUSED,
}


class Model(Protocol):
    role: str
    start: float
    t: float
    profile: Any

    def set_profile(self, profile: Any) -> None: ...

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None: ...

    def render(self) -> str: ...

    def state(self) -> dict[str, Any]: ...


def _sglang_labels(profile: EngineProfile) -> str:
    return labels_text(
        (
            ("model_name", profile.model_name),
            ("engine_type", "unified"),
            ("tp_rank", "0"),
            ("pp_rank", "0"),
        )
    )


def _noisy(rng: random.Random, noise: float) -> float:
    return max(0.0, 1.0 + rng.gauss(0.0, noise)) if noise > 0 else 1.0


def _steps(span: float) -> tuple[int, float]:
    count = min(MAX_STEPS, max(1, math.ceil(span / MAX_STEP - 1e-9)))
    return count, span / count


class EngineModel:
    """A vLLM engine."""

    role = "rollout"

    def __init__(self, profile: EngineProfile, seed: str, start: float) -> None:
        self.profile = profile
        self.start = self.t = start
        self._rng = random.Random(f"{seed}:engine")
        self.tokens = self.prompt_tokens = self.hits = self.queries = self.preemptions = 0.0
        self.requests_stop = self.requests_length = 0.0
        self.mode = Mode.SATURATED
        self.sleep_level = 0
        self.health = 1.0
        self.running = 0.0
        self.waiting = 0.0
        self.paused = 0.0
        self.kv_usage = 0.0
        self.last_rate = 0.0
        self.expected = 0.0
        self._labels = labels_text((("model_name", profile.model_name), ("engine", profile.engine)))
        self._sglang_labels = _sglang_labels(profile)
        self._gauges(start, NO_FAULTS)

    def set_profile(self, profile: EngineProfile) -> None:
        """A new base behaviour from now on (advance to now first)."""
        self.profile = profile
        self._labels = labels_text((("model_name", profile.model_name), ("engine", profile.engine)))
        self._sglang_labels = _sglang_labels(profile)

    def _render_sglang(self) -> str:
        """SGLang's scheduler gauges and tokenizer counters (python/sglang/srt/metrics/
        collector.py); it has no sleep gauge and no preemption counter."""
        page, labels, created = Page(), self._sglang_labels, self.start
        gauges = (
            ("sglang:num_running_reqs", "The number of running requests.", self.running),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", self.waiting),
            ("sglang:token_usage", "The token usage.", self.kv_usage),
            (
                "sglang:num_paused_reqs",
                "The number of paused requests by async weight sync.",
                self.paused,
            ),
            ("sglang:gen_throughput", "The generation throughput (token/s).", self.last_rate),
        )
        for name, help_text, value in gauges:
            page.gauge(name, help_text, [(labels, value)])
        counters = (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
            ("sglang:generation_tokens", "Number of generation tokens processed.", self.tokens),
            ("sglang:cached_tokens", "Number of cached prompt tokens.", self.hits),
        )
        for name, help_text, value in counters:
            page.counter(name, help_text, [(labels, math.floor(value))], created)
        page.gauge(PROCESS_START, "Start time of the process since unix epoch in seconds.", created)
        return page.text()

    def mode_at(self, t: float, faults: Active) -> Mode:
        if faults.sleep_level(t) > 0:
            return Mode.ASLEEP
        if faults.paused(t):
            return Mode.PAUSED
        if faults.stalled(t):
            return Mode.STALLED
        load = faults.load_at(t)
        if load is not None:
            return Mode.SATURATED if load[0] > 0 else Mode.UNSATURATED
        age, profile = t - self.start, self.profile
        mode = Mode.SATURATED
        if profile.cycle is not None:
            mode = _FROM_TRACE[profile.cycle.mode(age).value]
        swings = profile.load_swings
        if mode == Mode.SATURATED and swings is not None and swings.low(age):
            return Mode.UNSATURATED
        return mode

    def load_share(self, t: float, faults: Active) -> float:
        """Share of the saturated throughput while unsaturated."""
        load = faults.load_at(t)
        if load is not None and load[1] is not None:
            return load[1]
        if self.profile.load_swings is not None:
            return self.profile.load_swings.low_load
        return self.profile.unsaturated_load

    def expected_rate(self, t: float, faults: Active = NO_FAULTS) -> float:
        """Tokens/s without noise at time t."""
        share = {
            Mode.SATURATED: 1.0,
            Mode.UNSATURATED: self.load_share(t, faults),
            Mode.DRAINING: 0.5,
        }.get(self.mode_at(t, faults), 0.0)
        return self.profile.throughput * faults.health(t) * share

    def hit_rate(self, health: float) -> float:
        base = self.profile.prefix_hit_rate
        return base * health**1.5 if self.profile.cache_symptoms else base

    def preemption_rate(self, health: float) -> float:
        """Preemptions per minute while saturated."""
        base = self.profile.preemptions_per_minute
        return base + (1 - health) * 20 if self.profile.cache_symptoms else base

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        count, step = _steps(now - self.t)
        profile = self.profile
        for index in range(count):
            t = self.t + index * step
            rate = self.expected_rate(t, faults) * _noisy(self._rng, profile.noise)
            tokens = rate * step
            self.tokens += tokens
            prompt = tokens * profile.prompt_ratio
            self.prompt_tokens += prompt
            self.queries += prompt
            health = faults.health(t)
            self.hits += prompt * self.hit_rate(health)
            if self.mode_at(t, faults) == Mode.SATURATED:
                self.preemptions += self.preemption_rate(health) * step / 60
            finished = tokens / profile.tokens_per_request
            self.requests_stop += 0.9 * finished
            self.requests_length += 0.1 * finished
            self.last_rate = rate
        self.t = now
        self._gauges(now, faults)

    def _gauges(self, t: float, faults: Active) -> None:
        profile, rng = self.profile, self._rng
        self.mode = self.mode_at(t, faults)
        # An injected sleep has its level; the profile's own cycle sleeps at level 1.
        self.sleep_level = faults.sleep_level(t) or (1 if self.mode == Mode.ASLEEP else 0)
        self.health = faults.health(t)
        self.expected = self.expected_rate(t, faults)
        full = float(profile.max_running)
        self.paused = 0.0
        match self.mode:
            case Mode.SATURATED:
                load = faults.load_at(t)
                self.running = full
                self.waiting = (
                    float(load[0])
                    if load is not None
                    else float(max(1, round(rng.uniform(0.5, 1.5) * profile.waiting)))
                )
                self.kv_usage = min(1.0, max(0.0, profile.kv_usage + rng.uniform(-0.02, 0.02)))
            case Mode.UNSATURATED:
                share = self.load_share(t, faults)
                self.running, self.waiting = float(max(1, round(full * share))), 0.0
                self.kv_usage = profile.kv_usage * share
            case Mode.DRAINING:
                self.running, self.waiting = float(max(1, round(full * rng.uniform(0.1, 0.6)))), 0.0
                self.kv_usage = profile.kv_usage * 0.5
            case Mode.STALLED:
                # vllm #39863: a wedged engine keeps its queue, generates nothing, reads 0 % KV.
                self.running, self.waiting, self.kv_usage = full, max(1.0, profile.waiting), 0.0
            case Mode.PAUSED:
                self.running = self.waiting = 0.0
                self.paused, self.kv_usage = full, profile.kv_usage
            case _:
                self.running = self.waiting = self.kv_usage = 0.0

    def state(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "sleep_level": self.sleep_level,
            "health": round(self.health, 4),
            "expected_tokens_per_second": round(self.expected, 3),
            "generation_tokens_total": math.floor(self.tokens),
            "running": self.running,
            "waiting": self.waiting,
            "paused": self.paused,
            "kv_cache_usage_perc": round(self.kv_usage, 4),
        }

    def render(self) -> str:
        if self.profile.exporter == "sglang":
            return self._render_sglang()
        page, labels, created = Page(), self._labels, self.start
        page.gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            [(labels, self.running)],
        )
        page.gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            [(labels, self.waiting)],
        )
        states = [
            (labels[:-1] + f',sleep_state="{state}"}}', float(value))
            for state, value in zip(
                SLEEP_STATES,
                (self.sleep_level == 0, self.sleep_level == 1, self.sleep_level == 2),
                strict=True,
            )
        ]
        page.gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            states,
        )
        page.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            [(labels, self.kv_usage)],
        )
        page.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(labels, math.floor(self.queries))],
            created,
        )
        page.counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(labels, math.floor(self.hits))],
            created,
        )
        page.counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            [(labels, math.floor(self.preemptions))],
            created,
        )
        page.counter(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            [(labels, math.floor(self.prompt_tokens))],
            created,
        )
        page.counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            [(labels, math.floor(self.tokens))],
            created,
        )
        page.counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [
                (labels[:-1] + f',finished_reason="{reason}"}}', math.floor(value))
                for reason, value in (
                    ("stop", self.requests_stop),
                    ("length", self.requests_length),
                )
            ],
            created,
        )
        page.gauge(PROCESS_START, "Start time of the process since unix epoch in seconds.", created)
        return page.text()


@dataclass(slots=True)
class _Phase:
    name: str
    work_start: float  # progress clock when the phase began


class TrainerModel:
    """One trainer rank's SDK exporter. Progress runs on its own clock, which stops while hung:
    a cleared hang resumes where it stopped."""

    role = "trainer"

    def __init__(
        self,
        profile: TrainerProfile,
        start: float,
        *,
        step: int = 0,
        external_checkpoints: bool = False,
    ) -> None:
        self.profile = profile
        self.start = self.t = start
        self.work = 0.0
        self.phase = _Phase(PHASE_WAITING_FOR_ROLLOUTS, 0.0)
        self.step = step
        self.generation = step
        self.checkpoint_step = step
        self.heartbeat = start
        self.hung = False
        self.external_checkpoints = external_checkpoints
        # Steps whose checkpoint phase began, for a writer to pick up (bounded).
        self.checkpoints_due: deque[int] = deque(maxlen=4)

    def set_profile(self, profile: TrainerProfile) -> None:
        self.profile = profile

    def _duration(self, phase: str) -> float:
        profile = self.profile
        return {
            PHASE_WAITING_FOR_ROLLOUTS: profile.wait_for_rollouts,
            PHASE_TRAINING: profile.step_seconds,
        }.get(phase, profile.checkpoint_seconds)

    def _next(self) -> str:
        match self.phase.name:
            case "waiting_for_rollouts":
                return PHASE_TRAINING
            case "training":
                self.step += 1
                self.generation += 1
                if self.step % self.profile.checkpoint_every == 0:
                    self.checkpoints_due.append(self.step)
                    return PHASE_CHECKPOINTING
                return PHASE_WAITING_FOR_ROLLOUTS
            case _:
                if not self.external_checkpoints:
                    self.checkpoint_step = self.step
                return PHASE_WAITING_FOR_ROLLOUTS

    def committed(self, step: int) -> None:
        """A checkpoint of `step` was committed by a writer."""
        self.checkpoint_step = max(self.checkpoint_step, step)

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        since = faults.hang_since if faults.hang_since is not None else faults.stall_since
        if since is not None and since < now:
            self._progress(max(self.t, since))
            self.t = now
            self.hung = True
            return
        self.hung = False
        self._progress(now)

    def _progress(self, now: float) -> None:
        remaining = now - self.t
        if remaining <= 0:
            return
        self.t = now
        span_start = self.work
        transitions = 0
        while remaining > 0 and transitions < 100_000:
            end = self.phase.work_start + self._duration(self.phase.name)
            if self.work + remaining < end:
                self.work += remaining
                break
            remaining -= end - self.work
            self.work = end
            self.phase = _Phase(self._next(), end)
            self.heartbeat = now - remaining
            transitions += 1
        interval = self.profile.heartbeat_interval
        if interval <= 0:  # beats at phase changes only
            return
        in_phase = self.work - self.phase.work_start
        last_beat = self.phase.work_start + math.floor(in_phase / interval) * interval
        if last_beat >= span_start:  # a periodic beat within the span just run
            self.heartbeat = max(self.heartbeat, now - (self.work - last_beat))

    def state(self) -> dict[str, Any]:
        return {
            "phase": self.phase.name,
            "step": self.step,
            "policy_generation": self.generation,
            "checkpoint_step": self.checkpoint_step,
            "heartbeat": self.heartbeat,
            "hung": self.hung,
        }

    def render(self) -> str:
        page = Page()
        page.gauge(TRAINER_STEP, "Training steps completed.", float(self.step))
        page.gauge(
            TRAINER_HEARTBEAT, "Unix time of the training loop's last heartbeat.", self.heartbeat
        )
        page.gauge(
            TRAINER_PHASE,
            "1 for the phase the trainer is in.",
            [
                (labels_text((("phase", phase),)), float(phase == self.phase.name))
                for phase in SDK_PHASES
            ],
        )
        page.gauge(
            POLICY_GENERATION, "Generation of the policy weights last published.", self.generation
        )
        page.gauge(
            CHECKPOINT_STEP, "Step of the newest committed checkpoint.", self.checkpoint_step
        )
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()


def lognormal_cdf(x: float, median: float, sigma: float) -> float:
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    return 0.5 * (1 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2))))


class VerifierModel:
    """A verifier service: request latency histogram and an error counter."""

    role = "verifier"

    def __init__(self, profile: VerifierProfile, seed: str, start: float) -> None:
        self.profile = profile
        self.start = self.t = start
        self._rng = random.Random(f"{seed}:verifier")
        self.bounds = (*profile.bounds, math.inf)
        self.counts = [0.0] * len(self.bounds)
        self.total_seconds = 0.0
        self.errors = 0.0
        self.median = profile.median_latency

    def set_profile(self, profile: VerifierProfile) -> None:
        if profile.bounds != self.profile.bounds:
            raise ValueError("bucket bounds cannot change while the process runs")
        self.profile = profile

    def median_at(self, faults: Active) -> float:
        if faults.p99_seconds is not None:
            return faults.p99_seconds / math.exp(_Z99 * self.profile.sigma)
        return self.profile.median_latency

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        profile = self.profile
        median = self.median_at(faults)
        error_rate = faults.error_rate if faults.error_rate is not None else profile.error_rate
        mean = median * math.exp(profile.sigma**2 / 2)
        shares = [lognormal_cdf(bound, median, profile.sigma) for bound in self.bounds]
        count, step = _steps(now - self.t)
        for _ in range(count):
            requests = profile.requests_per_second * step * self._rng.uniform(0.8, 1.2)
            for index, share in enumerate(shares):
                self.counts[index] += requests * share
            self.total_seconds += requests * mean
            self.errors += requests * error_rate
        self.t = now
        self.median = median

    def p99(self) -> float:
        return self.median * math.exp(_Z99 * self.profile.sigma)

    def state(self) -> dict[str, Any]:
        return {
            "requests_total": math.floor(self.counts[-1]),
            "errors_total": math.floor(self.errors),
            "p99_seconds": round(self.p99(), 4),
        }

    def render(self) -> str:
        page = Page()
        # Floors of cumulative counts stay cumulative and monotonic.
        buckets = [
            (bound, float(math.floor(count)))
            for bound, count in zip(self.bounds, self.counts, strict=True)
        ]
        page.histogram(
            VERIFIER_DURATION,
            "Time to verify one request.",
            labels="",
            buckets=buckets,
            total=self.total_seconds,
            created=self.start,
        )
        page.counter(
            VERIFIER_ERRORS.removesuffix("_total"),
            "Requests that failed verification with an error.",
            math.floor(self.errors),
            self.start,
        )
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()


class ReferenceModel:
    """A reference-model server: scored tokens and requests."""

    role = "reference"

    def __init__(self, profile: ReferenceProfile, seed: str, start: float) -> None:
        self.profile = profile
        self.start = self.t = start
        self._rng = random.Random(f"{seed}:reference")
        self.tokens = 0.0
        self.requests = 0.0

    def set_profile(self, profile: ReferenceProfile) -> None:
        self.profile = profile

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        count, step = _steps(now - self.t)
        for index in range(count):
            t = self.t + index * step
            if faults.stalled(t):
                continue
            tokens = (
                self.profile.throughput
                * faults.health(t)
                * _noisy(self._rng, self.profile.noise)
                * step
            )
            self.tokens += tokens
            self.requests += tokens / self.profile.tokens_per_request
        self.t = now

    def state(self) -> dict[str, Any]:
        return {"tokens_total": math.floor(self.tokens)}

    def render(self) -> str:
        page = Page()
        page.counter(
            REFERENCE_TOKENS.removesuffix("_total"),
            "Tokens scored.",
            math.floor(self.tokens),
            self.start,
        )
        page.counter(
            REFERENCE_REQUESTS.removesuffix("_total"),
            "Requests served.",
            math.floor(self.requests),
            self.start,
        )
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()
