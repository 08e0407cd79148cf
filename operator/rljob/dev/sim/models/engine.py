"""A simulated rollout engine: throughput, queue, KV cache, prefix cache and sleep state driven by
its profile's load cycle and the faults in force; the page each engine version serves of them
is rljob.dev.sim.engines'."""

from __future__ import annotations

import dataclasses
import math
import random
from enum import Enum
from typing import Any

from rljob.dev.host_memory import (
    GIB,
    MIB,
    PROCESS_TREE_HELP,
    PROCESS_TREE_METRIC,
    HostMemory,
)
from rljob.dev.sim.engines import (
    Gauges,
    Operating,
    SGLangLog,
    Totals,
    sglang_labels,
    sglang_page,
    version_of,
    vllm_page,
)
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models.base import PROCESS_START, noisy, steps
from rljob.dev.sim.models.concurrency import Driver, Load
from rljob.dev.sim.profiles import EngineProfile
from rljob.dev.sim.weights import (
    ENGINE_POLICY_GENERATION,
    ENGINE_POLICY_GENERATION_HELP,
    EngineWeights,
)

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
# The modes a rollout driver (the concurrency model) puts an engine in.
_DRIVEN = (Mode.SATURATED, Mode.UNSATURATED, Mode.IDLE)
# SGLang's idle scheduler logs its gauges (no request running or queued, no throughput) this
# long after its last log (scheduler_runtime_checker_mixin.py @008e7b87, _maybe_log_idle_metrics).
SGLANG_IDLE_LOG_SECONDS = 30.0


class EngineModel:
    """A vLLM engine. With a profile's `concurrency` its load follows a rollout driver
    (rljob.dev.sim.models.concurrency) unless a fault overrides it."""

    role = "rollout"

    def __init__(self, profile: EngineProfile, seed: str, start: float) -> None:
        self.profile = profile
        self.start = self.t = start
        self._seed = seed
        self.driver = Driver(profile, seed) if profile.concurrency > 0 else None
        self._rng = random.Random(f"{seed}:engine")
        # Its own draws: memory readings leave the other series' noise as it was.
        self._memory_rng = random.Random(f"{seed}:memory")
        self.memory = 0.0  # host memory of the engine's processes (bytes)
        self.tokens = self.prompt_tokens = self.hits = self.queries = self.preemptions = 0.0
        self.requests_stop = self.requests_length = 0.0
        # Whole requests finished and their tokens; `_finishing` is the one under way.
        self.finished = self.finished_prompt = self.finished_generation = 0.0
        self.finished_cached = self._finishing = 0.0
        self.operating = Operating()
        self.mode = Mode.SATURATED
        self.sleep_level = 0
        self.health = 1.0
        self.running = 0.0
        self.waiting = 0.0
        self.paused = 0.0
        self.kv_usage = 0.0
        self.last_rate = 0.0
        self.expected = 0.0
        self._log: SGLangLog | None = None
        self._last_log = self._last_finish = start
        self._logged_tokens = 0.0
        # The weights on its command line: generation 0, or its --weight-version's.
        self.weights = EngineWeights.started(profile.start_weight_version)
        self._gauges(start, NO_FAULTS)

    def set_profile(self, profile: EngineProfile) -> None:
        """A new base behaviour from now on (advance to now first)."""
        self.profile = profile
        self.driver = Driver(profile, self._seed) if profile.concurrency > 0 else None

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
        if self.driver is not None:
            driven = self.driver.load(age)
            if driven.waiting > 0:
                return Mode.SATURATED
            return Mode.UNSATURATED if driven.running > 0 else Mode.IDLE
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

    def driven(self, t: float, faults: Active) -> Load | None:
        """The rollout driver's load at t, unless there is none or a fault overrides it."""
        if self.driver is None or faults.load_at(t) is not None:
            return None
        if self.mode_at(t, faults) not in _DRIVEN:
            return None
        return self.driver.load(t - self.start)

    def expected_rate(self, t: float, faults: Active = NO_FAULTS) -> float:
        """Tokens/s without noise at time t."""
        driven = self.driven(t, faults)
        if driven is not None:
            return driven.tokens_per_second * faults.health(t)
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
            rate = self._mean_rate(t, step, faults) * noisy(self._rng, profile.noise)
            tokens = rate * step
            self.tokens += tokens
            prompt = tokens * profile.prompt_length / profile.generation_length
            self.prompt_tokens += prompt
            self.queries += prompt
            health = faults.health(t)
            hit_rate = self.hit_rate(health)
            self.hits += prompt * hit_rate
            mode = self.mode_at(t, faults)
            if mode == Mode.SATURATED:
                self.preemptions += self.preemption_rate(health) * step / 60
            self._finish(tokens / profile.generation_length, hit_rate)
            if tokens > 0:
                # Each of `batch` sequences gets a token every batch / rate seconds.
                self.operating.latency.observe(self._batch(mode, t, faults) / rate, tokens)
            self.last_rate = rate
            if profile.exporter == "sglang":
                self._stats_log(t + step, faults)
        self.t = now
        self.weights.requests.settle(now)
        self._gauges(now, faults)

    def _mean_rate(self, t: float, step: float, faults: Active) -> float:
        """Tokens/s over [t, t + step] without noise: a driver's exact integral (its load
        changes within a step), else the rate at t."""
        if self.driver is None or self.driven(t, faults) is None:
            return self.expected_rate(t, faults)
        age = t - self.start
        return self.driver.tokens(age, age + step) / step * faults.health(t)

    def _finish(self, requests: float, hit_rate: float) -> None:
        """Requests finish whole, each with the profile's mean lengths, as upstream observes
        them: once, at the end."""
        self._finishing += requests
        whole = math.floor(self._finishing)
        if whole < 1:
            return
        self._finishing -= whole
        profile = self.profile
        self.finished += whole
        self.finished_prompt += whole * profile.prompt_length
        self.finished_generation += whole * profile.generation_length
        self.finished_cached += whole * profile.prompt_length * hit_rate
        self.requests_stop += 0.9 * whole
        self.requests_length += 0.1 * whole
        self.operating.prompt.observe(profile.prompt_length, whole)
        self.operating.generation.observe(profile.generation_length, whole)

    def _batch(self, mode: Mode, t: float, faults: Active) -> float:
        """Sequences decoding together: the running gauge's value in `mode` (a draining engine
        keeps its last draw)."""
        driven = self.driven(t, faults)
        if driven is not None:
            return max(1.0, driven.running)
        full = float(self.profile.max_running)
        if mode == Mode.UNSATURATED:
            return float(max(1, round(full * self.load_share(t, faults))))
        if mode == Mode.DRAINING and self.mode == Mode.DRAINING and self.running > 0:
            return self.running
        if mode == Mode.SATURATED:
            return self._saturated_batch(faults.health(t))
        return full

    def _saturated_batch(self, health: float) -> float:
        """A fragmenting KV cache holds fewer sequences: the batch shrinks with the engine's
        health while the blocks it lost still count as used (rljob.dev.engine_physics)."""
        full = float(self.profile.max_running)
        return float(max(1, round(full * health))) if self.profile.cache_symptoms else full

    def _gauges(self, t: float, faults: Active) -> None:
        self._load_gauges(t, faults)
        profile = self.profile
        memory = HostMemory(
            base_bytes=profile.host_memory_gib * GIB,
            offloaded_bytes=profile.offloaded_weights_gib * GIB,
            per_running_bytes=profile.memory_per_running_mib * MIB,
        )
        self.memory = memory.reading(
            self._memory_rng,
            sleep_level=self.sleep_level,
            running=self.running,
            grown=faults.memory_grown(t),
        )

    def _load_gauges(self, t: float, faults: Active) -> None:
        profile, rng = self.profile, self._rng
        self.mode = self.mode_at(t, faults)
        # An injected sleep has its level; the profile's own cycle sleeps at level 1.
        self.sleep_level = faults.sleep_level(t) or (1 if self.mode == Mode.ASLEEP else 0)
        self.health = faults.health(t)
        self.expected = self.expected_rate(t, faults)
        full = float(profile.max_running)
        self.paused = 0.0
        driven = self.driven(t, faults)
        if driven is not None and self.driver is not None:
            self.running, self.waiting = driven.running, driven.waiting
            self.kv_usage = driven.running / self.driver.curve.capacity * profile.kv_usage
            return
        match self.mode:
            case Mode.SATURATED:
                load = faults.load_at(t)
                self.running = self._saturated_batch(self.health)
                self.waiting = (
                    float(load[0])
                    if load is not None
                    else float(max(1, round(rng.uniform(0.5, 1.5) * profile.waiting)))
                ) + (full - self.running)
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
                # The driver holds its requests back and the last ones finished: vLLM counts
                # cached blocks nobody holds as free, so its page reads 0 % (block_pool.py).
                self.running = self.waiting = self.kv_usage = 0.0
                self.paused = full
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
            "host_memory_bytes": round(self.memory),
            **self.weights.state(),
        }

    def weight_version(self, path: str) -> dict[str, Any] | None:
        """The engine's own weight-version answer at `path`, None where it serves none: SGLang's
        GET /model_info (sglang http_server.py @44cedc2b; /get_weight_version is deprecated
        there, a 404), vLLM's GET /weight_info (0.33.0, dev mode). Its start version
        ("default" unless the profile's start_weight_version says otherwise) until a driver
        pushed weights; SGLang's model_path is the checkpoint its last update loaded."""
        paths = {"sglang": "/model_info", "vllm": "/weight_info"}
        if paths.get(self.profile.exporter) != path:
            return None
        version = self.weights.version
        if self.profile.exporter == "sglang":
            model_path = self.weights.model_path or self.profile.model_name
            return {"model_path": model_path, "weight_version": version}
        return {"weight_version": version}

    def update_weights_from_disk(self, body: object) -> tuple[int, dict[str, Any]] | None:
        """SGLang's POST /update_weights_from_disk (sglang python/sglang/srt/entrypoints/
        http_server.py @44cedc2b): loads the checkpoint at `model_path`, then serves the update's
        `weight_version` when it names one; 200 {"success": true, ...}, else 400 with success
        false. None: not an SGLang engine (no such route)."""
        if self.profile.exporter != "sglang":
            return None
        refused = _refused_update(body)
        if refused is not None:
            return 400, {"success": False, "message": refused, "num_paused_requests": 0}
        assert isinstance(body, dict)
        version = body.get("weight_version")
        self.weights.load(body["model_path"], None if version is None else int(version))
        message = "Succeeded to update model weights."
        if version is not None:
            message += f" Weight version updated to {version}."
        return 200, {"success": True, "message": message, "num_paused_requests": 0}

    def render(self, *, plugin: bool = False) -> str:
        """The engine's page; with `plugin`, as the SDK's vLLM plugin serves it in an engine
        process: with the process tree's host memory (rljob.sdk.process_memory), which no stock
        engine page carries."""
        profile = self.profile
        version = version_of(profile.exporter, profile.version)
        if profile.exporter == "sglang":
            log = self._log or SGLangLog(Gauges())
            labels = sglang_labels(profile.model_name, version)
            page = sglang_page(version, labels, log, self.operating.latency)
        else:
            labels = (("model_name", profile.model_name), ("engine", profile.engine))
            totals, gauges = self._totals(), self._now_gauges()
            page = vllm_page(version, labels, totals, gauges, self.start, operating=self.operating)
        if profile.generation_gauge:
            page.gauge(
                ENGINE_POLICY_GENERATION, ENGINE_POLICY_GENERATION_HELP, self.weights.generation
            )
        if plugin:
            page.gauge(PROCESS_TREE_METRIC, PROCESS_TREE_HELP, round(self.memory))
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()

    def _totals(self) -> Totals:
        return Totals(
            tokens=self.tokens,
            prompt_tokens=self.prompt_tokens,
            hits=self.hits,
            queries=self.queries,
            preemptions=self.preemptions,
            requests_stop=self.requests_stop,
            requests_length=self.requests_length,
            finished=self.finished,
            finished_prompt=self.finished_prompt,
            finished_generation=self.finished_generation,
            finished_cached=self.finished_cached,
        )

    def _now_gauges(self) -> Gauges:
        running, waiting = self.weights.served(self.running, self.waiting)
        # Only running requests hold blocks (vLLM's block_pool.py get_usage): a driver holding
        # back its requests leaves the engine's usage at the share its own requests fill.
        usage = self.kv_usage * running / self.running if self.running > running else self.kv_usage
        return Gauges(running, waiting, usage, self.last_rate, self.sleep_level)

    def _stats_log(self, t: float, faults: Active) -> None:
        """SGLang's scheduler logs stats (gauges, realtime counters) every `stats_interval`
        while it runs batches; without a request it logs its gauges every 30 s; paused or
        wedged it logs nothing, so a scrape keeps seeing the last log. Completion counters catch
        up every `finish_every` seconds."""
        profile = self.profile
        if t - self._last_log < profile.stats_interval:
            return
        self.weights.requests.settle(t)  # the driver's requests ended by this log
        self._gauges(t, faults)
        gauges = self._now_gauges()
        if self.mode in (Mode.PAUSED, Mode.STALLED):
            return
        if self.mode in (Mode.IDLE, Mode.ASLEEP) or gauges.running + gauges.waiting == 0:
            self._idle_log(t, gauges)
            return
        gauges.rate = (self.tokens - self._logged_tokens) / (t - self._last_log)
        finished = self._log.finished if self._log is not None else None
        if finished is None or t - self._last_finish >= profile.finish_every:
            finished, self._last_finish = self._totals(), t
        self._log = SGLangLog(
            gauges=gauges,
            realtime_decode=self.tokens,
            realtime_prefill_compute=self.prompt_tokens - self.hits,
            realtime_prefill_cache=self.hits,
            retracted=self.preemptions,
            finished=finished,
        )
        self._last_log, self._logged_tokens = t, self.tokens

    def _idle_log(self, t: float, gauges: Gauges) -> None:
        if t - self._last_log < SGLANG_IDLE_LOG_SECONDS:
            return
        gauges.rate = 0.0
        last = self._log if self._log is not None else SGLangLog(gauges=gauges)
        self._log = dataclasses.replace(last, gauges=gauges)
        self._last_log, self._logged_tokens = t, self.tokens


def _refused_update(body: object) -> str | None:
    """Why an update from disk is refused, None when it loads. Upstream answers a body missing
    model_path with its validation error (400); any version string loads there, but the
    simulator serves whole-number generations only, so it refuses other versions."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    model_path = body.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        return "model_path is required"
    version = body.get("weight_version")
    if version is None:
        return None
    if not isinstance(version, str) or not (version.isascii() and version.isdigit()):
        return f"weight_version must be a whole number as a string, not {version!r}"
    return None
