"""vLLM's own engine core, driven the way vllm/v1/engine/core.py drives it, without a GPU.

Everything here is the installed vLLM (0.33.0, commit 4ba787ec9) except the model runner: the
real Scheduler (vllm/v1/core/sched/scheduler.py) with its KVCacheManager and BlockPool
(vllm/v1/core/kv_cache_manager.py, block_pool.py) admits, preempts, caches prefixes and frees;
the real OutputProcessor (vllm/v1/engine/output_processor.py) turns its outputs into
IterationStats as AsyncLLM's output handler does; the real StatLoggerManager and
PrometheusStatLogger (vllm/v1/metrics/loggers.py) record every step into prometheus_client's
registry, whose exposition is the page. A step's ModelRunnerOutput is fabricated: one sampled
token per scheduled request that is not mid-prefill (what the GPU runner returns for a
non-speculative step), and the simulated clock advances by the cost model between schedule()
and update_from_output().
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.interface import PauseState
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.metrics.loggers import StatLoggerManager
from vllm.v1.metrics.stats import IterationStats, SchedulerStats
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from bench.vllm_core.workload import VOCAB, EngineShape

# The page values the operator reads (rljob/health/profiles/workloads.py VLLM), as sampled.
AWAKE = 'vllm:engine_sleep_state{sleep_state="awake"}'
PAGE = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    AWAKE,
    "vllm:request_generation_tokens_count",
    "vllm:request_generation_tokens_sum",
    "vllm:request_prompt_tokens_sum",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
)


class SimClock:
    """The simulated time vLLM's timestamps read (request events, iteration stats)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def use_sim_clock(clock: SimClock) -> None:
    """vLLM's modules on the stats path read `time` at module level; this process's copies read
    the simulated clock instead, so latencies on the page are in simulated seconds."""
    import vllm.v1.core.sched.scheduler as scheduler_module
    import vllm.v1.engine as engine_module
    import vllm.v1.metrics.stats as stats_module
    import vllm.v1.request as request_module

    for module in (scheduler_module, engine_module, stats_module, request_module):
        module.time = clock


@dataclass(frozen=True)
class Scheduled:
    """One step's schedule(), before its (simulated) execution."""

    output: Any  # SchedulerOutput
    context_tokens: int
    scheduled_tokens: int


@dataclass(frozen=True)
class Stepped:
    finished: list[str]
    stats: SchedulerStats | None


@dataclass(frozen=True)
class Blocks:
    """The block pool's accounting: free (on the free queue, cached or not), held by a live
    request, held by a request the scheduler no longer knows (leaked), and the null block."""

    total: int
    free: int
    live: int
    leaked: int

    @property
    def conserved(self) -> bool:
        return self.free + self.live + self.leaked + 1 == self.total


def _vllm_config(model_dir: str, shape: EngineShape) -> VllmConfig:
    # As vLLM's tests/v1/core/utils.py create_scheduler (@9535694) builds it, from a local
    # config.json (HF_HUB_OFFLINE=1, no tokenizer).
    model = ModelConfig(
        model=model_dir, skip_tokenizer_init=True, max_model_len=shape.max_model_len
    )
    scheduler = SchedulerConfig(
        max_num_seqs=shape.max_num_seqs,
        max_num_batched_tokens=shape.max_num_batched_tokens,
        max_model_len=shape.max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    cache = CacheConfig(block_size=shape.block_size, enable_prefix_caching=True)
    config = VllmConfig(model_config=model, scheduler_config=scheduler, cache_config=cache)
    config.cache_config.num_gpu_blocks = shape.num_gpu_blocks
    return config


def _kv_cache_config(shape: EngineShape) -> KVCacheConfig:
    # One full-attention group, as create_scheduler's: the scheduler counts blocks, not bytes.
    spec = FullAttentionSpec(
        block_size=shape.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    return KVCacheConfig(
        num_blocks=shape.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )


class Core:
    def __init__(self, model_dir: str, shape: EngineShape, clock: SimClock) -> None:
        self.clock = clock
        self.config = _vllm_config(model_dir, shape)
        self.scheduler = Scheduler(
            vllm_config=self.config,
            kv_cache_config=_kv_cache_config(shape),
            block_size=shape.block_size,
            log_stats=True,
            structured_output_manager=StructuredOutputManager(self.config),
        )
        # EngineCore.__init__ (vllm/v1/engine/core.py): the block hasher of prefix caching.
        hash_fn = get_hash_fn_by_name(self.config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(shape.block_size, hash_fn)
        self.frontend = OutputProcessor(None, log_stats=True)
        # AsyncLLM with log stats on and no plugins: PrometheusStatLogger alone.
        self.loggers = StatLoggerManager(self.config, engine_idxs=[0], enable_default_loggers=False)
        self.seeds: dict[str, int] = {}

    def add(self, request_id: str, prompt: list[int], max_tokens: int, seed: int) -> None:
        params = SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, output_kind=RequestOutputKind.FINAL_ONLY
        )
        request = EngineCoreRequest(
            request_id=request_id,
            prompt_token_ids=prompt,
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=self.clock.now,
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            external_req_id=request_id,
        )
        self.seeds[request_id] = seed
        self.frontend.add_request(request, None)
        self.scheduler.add_request(Request.from_engine_core_request(request, self.hasher))

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def schedule(self) -> Scheduled:
        output = self.scheduler.schedule()
        context = sum(
            self.scheduler.requests[rid].num_computed_tokens for rid in output.num_scheduled_tokens
        )
        return Scheduled(output, context, output.total_num_scheduled_tokens)

    def finish(self, scheduled: Scheduled) -> Stepped:
        """The model ran: update the scheduler, the frontend and the page (EngineCore.step, then
        AsyncLLM's output handler)."""
        outputs = self.scheduler.update_from_output(scheduled.output, self._ran(scheduled))
        finished: list[str] = []
        stats: SchedulerStats | None = None
        for engine_outputs in outputs.values():
            finished += [
                o.request_id for o in engine_outputs.outputs if o.finish_reason is not None
            ]
            stats = engine_outputs.scheduler_stats or stats
            self._publish(engine_outputs.outputs, engine_outputs.scheduler_stats)
        return Stepped(finished, stats)

    def _ran(self, scheduled: Scheduled) -> ModelRunnerOutput:
        ids = list(scheduled.output.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            request = self.scheduler.requests[rid]
            # A partial prefill chunk samples nothing (the GPU runner discards its token).
            sampled.append([] if request.is_prefill_chunk else [self._token(request)])
        return ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )

    def _token(self, request: Request) -> int:
        # Samples of one prompt differ (temperature 1), so their responses share no blocks.
        position = request.num_output_tokens
        seed = self.seeds[request.request_id]
        return int(seed * 1_000_003 + position * 2_654_435_761) % VOCAB

    def _publish(self, outputs: list[Any], stats: SchedulerStats | None) -> None:
        # AsyncLLM.output_handler: IterationStats only when there were outputs.
        iteration = IterationStats() if outputs else None
        self.frontend.process_outputs(outputs, self.clock.now, iteration)
        self.frontend.update_scheduler_stats(stats)
        self.loggers.record(scheduler_stats=stats, iteration_stats=iteration)

    def pause(self, mode: str, clear_cache: bool) -> bool:
        """EngineCore.pause_scheduler: "abort" finishes every request, "keep" freezes them; with
        clear_cache, _reset_caches() resets the prefix cache preempting whatever runs. It raises
        when the reset fails (the pause caller sees the error); here that is False."""
        if mode == "abort":
            aborted = self.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
            self._abort_outputs([r.request_id for r in aborted])
        state = PauseState.PAUSED_ALL if mode == "keep" else PauseState.PAUSED_NEW
        self.scheduler.set_pause_state(state)
        if not clear_cache:
            return True
        try:
            return bool(
                self.scheduler.reset_prefix_cache(reset_running_requests=True, reset_connector=True)
            )
        except RuntimeError:
            return False

    def _abort_outputs(self, request_ids: list[str]) -> None:
        # EngineCoreProc._send_abort_outputs: one ABORT output per request, no scheduler stats.
        if request_ids:
            outputs = [
                EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT) for rid in request_ids
            ]
            self._publish(outputs, None)

    def resume(self) -> None:
        self.scheduler.set_pause_state(PauseState.UNPAUSED)

    def sleep(self, level: int) -> bool:
        """AsyncLLM.sleep -> EngineCore.sleep: pause (abort) clearing the caches, then the page's
        sleep gauge."""
        reset = self.pause("abort", clear_cache=level >= 1)
        self.loggers.record_sleep_state(1, level)
        return reset

    def wake_up(self) -> None:
        self.resume()
        self.loggers.record_sleep_state(0, 0)

    def blocks(self) -> Blocks:
        manager = self.scheduler.kv_cache_manager
        pool = manager.block_pool
        live: set[int] = set()
        held: set[int] = set()
        for single in manager.coordinator.single_type_managers:
            for rid, blocks in single.req_to_blocks.items():
                ids = {b.block_id for b in blocks if not b.is_null}
                (live if rid in self.scheduler.requests else held).update(ids)
        return Blocks(pool.num_gpu_blocks, pool.get_num_free_blocks(), len(live), len(held - live))

    def usage(self) -> float:
        return float(self.scheduler.get_kv_cache_usage())


def page() -> dict[str, float]:
    """The page as a scrape reads it: prometheus_client's exposition of the registry, parsed."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for sample in family.samples:
            key = sample.name
            if key == "vllm:engine_sleep_state":
                key = f'{key}{{sleep_state="{sample.labels.get("sleep_state")}"}}'
            if key in PAGE:
                values[key] = float(sample.value)
    return values


def page_names() -> list[str]:
    """Every sample name vLLM's registry has (histogram buckets folded into their family)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        if family.name.startswith("vllm:"):
            names.update(s.name for s in family.samples if not s.name.endswith("_bucket"))
    return sorted(names)
