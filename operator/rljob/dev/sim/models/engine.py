"""A simulated rollout engine: vLLM's metrics page (or SGLang's) with throughput, queue, KV cache,
prefix cache and sleep state driven by its profile's load cycle and the faults in force."""

from __future__ import annotations

import math
import random
from enum import Enum
from typing import Any

from rljob.dev.sim.exposition import Page, labels_text
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models.base import PROCESS_START, noisy, steps
from rljob.dev.sim.profiles import EngineProfile

# Exposed series names; counters carry `_total`.
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
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


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


def _sglang_labels(profile: EngineProfile) -> str:
    return labels_text(
        (
            ("model_name", profile.model_name),
            ("engine_type", "unified"),
            ("tp_rank", "0"),
            ("pp_rank", "0"),
        )
    )


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
        count, step = steps(now - self.t)
        profile = self.profile
        for index in range(count):
            t = self.t + index * step
            rate = self.expected_rate(t, faults) * noisy(self._rng, profile.noise)
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
