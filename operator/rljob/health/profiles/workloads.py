"""Which metrics each workload exports: rollout engines (vLLM, SGLang, or a custom engine's
`metricNames`), the trainer (the rljob SDK's progress exporter) and the verifiers."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rljob.api.spec import GangEngines, RolloutRole
from rljob.health.profiles.signals import (
    CHECKPOINT_STEP,
    ENGINE_POLICY_GENERATION,
    FINISHED_GENERATION_TOKENS,
    FINISHED_PROMPT_TOKENS,
    FINISHED_REQUESTS,
    GENERATION_RATE,
    GENERATION_TOKENS,
    GENERATION_TOKENS_AT_FINISH,
    KV_CACHE_USAGE,
    KV_CACHE_USAGE_LEGACY,
    MEMORY_WORKING_SET,
    PAUSED_REQUESTS,
    POLICY_GENERATION,
    PREEMPTIONS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_HITS_LEGACY,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_QUERIES_LEGACY,
    PROCESS_TREE_RSS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    SLEEP_STATE,
    TOKEN_LATENCY_COUNT,
    TOKEN_LATENCY_COUNT_LEGACY,
    TOKEN_LATENCY_SUM,
    TOKEN_LATENCY_SUM_LEGACY,
    TRAINER_HEARTBEAT,
    TRAINER_PHASE,
    TRAINER_STEP,
    VERIFIER_BUCKETS,
    VERIFIER_ERRORS,
    Signal,
)
from rljob.vocabulary.enums import Engine, EngineExporter

# The rljob SDK's engine-side gauge, exported on the engine's own metrics page.
ENGINE_POLICY_GENERATION_METRIC = "rljob_engine_policy_generation"
# Host memory (rljob.health.causes.memory). cAdvisor's gauge as the kubelet serves it at
# /metrics/cadvisor (google/cadvisor metrics/prometheus.go: the cgroup's usage less its inactive
# file pages, container/libcontainer/handler.go setMemoryStats) with kubelet's labels
# (pkg/kubelet/server/server.go containerPrometheusLabelsFunc: `container` is the container's
# name, blank for the pod's own cgroup, which it maps to the pod by its cgroup path). The pod
# cgroup holds every container of the pod; Prometheus drops the blank label, and `container=""`
# matches a series without it.
MEMORY_WORKING_SET_METRIC = "container_memory_working_set_bytes"
POD_CGROUP_MATCHERS = (("container", ""),)
# rljob.sdk.engine_page's gauge on a plugin page: the engine process's tree's summed RSS.
PROCESS_TREE_RSS_METRIC = "rljob_engine_process_tree_resident_bytes"


@dataclass(frozen=True, slots=True)
class SleepGauge:
    """How an engine says it sleeps: `metric` (restricted to `matcher`, if set) is zero while it
    sleeps (`sleeping_when_zero`, vLLM's `awake` series) or non-zero while it sleeps."""

    metric: str
    matcher: tuple[str, str] | None = None
    sleeping_when_zero: bool = False


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """A rollout engine's metric names; None: not exported. `versions` says which upstream
    versions the names and their semantics were checked against (docs/engine-fidelity.md)."""

    engine: str
    generation_tokens_total: str
    requests_running: str
    requests_waiting: str
    kv_cache_usage: str | None = None
    prefix_cache_hits_total: str | None = None
    prefix_cache_queries_total: str | None = None
    preemptions_total: str | None = None
    sleep: SleepGauge | None = None
    paused_requests: str | None = None
    # The label telling engines in one pod apart (data-parallel ranks); None: one engine a pod.
    engine_label: str | None = None
    # Exact label matches of the token counter (SGLang's realtime counter: mode="decode").
    generation_matchers: tuple[tuple[str, str], ...] = ()
    # Where the token counter is missing: a counter that grows only as requests finish, and a
    # gauge of the recent decode rate that stands in for it (SGLang before realtime_tokens).
    generation_tokens_at_finish: str | None = None
    generation_rate: str | None = None
    # The operating point (EngineSample's fields of the same names): counters of finished
    # requests and of their prompt and generated tokens, and the decode latency histogram's
    # _sum (seconds) and _count (tokens).
    finished_requests_total: str | None = None
    finished_prompt_tokens_total: str | None = None
    finished_generation_tokens_total: str | None = None
    token_latency_seconds_total: str | None = None
    token_latency_count_total: str | None = None
    # Older names read where the current ones are missing: signal name -> metric.
    legacy: tuple[tuple[str, str], ...] = ()
    # Gauges are written only when the scheduler logs stats, so unchanged gauges mean it logged
    # nothing (SGLang: paused, idle or wedged) rather than a steady state.
    gauges_freeze: bool = False
    versions: str = ""
    # The weight generation a rollout engine serves (optional; drains and the gate read it).
    policy_generation: str | None = ENGINE_POLICY_GENERATION_METRIC
    # Host memory (optional; only the memory-growth detector reads it): the pod cgroup's working
    # set through Prometheus, and the SDK plugin page's process-tree RSS (set for the trainer's
    # colocated engines with exporter plugin: the SDK serves a page for no other engine).
    memory_working_set: str | None = MEMORY_WORKING_SET_METRIC
    process_tree_rss: str | None = None

    def signals(self) -> dict[str, Signal]:
        """Signal name -> signal, for the metrics this engine exports (the same every round:
        built once per profile)."""
        return dict(_engine_signals(self))

    def build_signals(self) -> dict[str, Signal]:
        """signals(), built anew."""
        names = {
            REQUESTS_RUNNING: self.requests_running,
            REQUESTS_WAITING: self.requests_waiting,
            KV_CACHE_USAGE: self.kv_cache_usage,
            PREFIX_CACHE_HITS: self.prefix_cache_hits_total,
            PREFIX_CACHE_QUERIES: self.prefix_cache_queries_total,
            PREEMPTIONS: self.preemptions_total,
            PAUSED_REQUESTS: self.paused_requests,
            GENERATION_TOKENS_AT_FINISH: self.generation_tokens_at_finish,
            GENERATION_RATE: self.generation_rate,
            ENGINE_POLICY_GENERATION: self.policy_generation,
            PROCESS_TREE_RSS: self.process_tree_rss,
            **dict(self.legacy),
        }
        shared = self.shared_series()
        names.update(
            (name, metric) for name, metric in self._operating_point() if name not in shared
        )
        signals = {name: Signal(name, metric) for name, metric in names.items() if metric}
        signals[GENERATION_TOKENS] = Signal(
            GENERATION_TOKENS, self.generation_tokens_total, self.generation_matchers
        )
        if self.sleep is not None:
            matchers = (self.sleep.matcher,) if self.sleep.matcher is not None else ()
            signals[SLEEP_STATE] = Signal(SLEEP_STATE, self.sleep.metric, matchers)
        if self.memory_working_set:
            signals[MEMORY_WORKING_SET] = Signal(
                MEMORY_WORKING_SET, self.memory_working_set, POD_CGROUP_MATCHERS
            )
        return signals

    def shared_series(self) -> dict[str, str]:
        """Operating-point signal -> the signal already queried for the same metric (SGLang's
        finish-time counters are also its prefix-cache queries and completion counter), so
        one query serves both."""
        queried = {
            self.prefix_cache_queries_total: PREFIX_CACHE_QUERIES,
            self.generation_tokens_at_finish: GENERATION_TOKENS_AT_FINISH,
        }
        return {
            name: queried[metric]
            for name, metric in self._operating_point()
            if metric is not None and metric in queried
        }

    def _operating_point(self) -> tuple[tuple[str, str | None], ...]:
        return (
            (FINISHED_REQUESTS, self.finished_requests_total),
            (FINISHED_PROMPT_TOKENS, self.finished_prompt_tokens_total),
            (FINISHED_GENERATION_TOKENS, self.finished_generation_tokens_total),
            (TOKEN_LATENCY_SUM, self.token_latency_seconds_total),
            (TOKEN_LATENCY_COUNT, self.token_latency_count_total),
        )


# vllm/v1/metrics/loggers.py: @a6f0308c (early 2025, V1 before 0.9) has only the gpu_ names;
# @005a810b (0.10) has both, the gpu_ ones "Deprecated in 0.9"; hidden in 0.11 (PR #24245),
# removed by PR #29330. vllm:engine_sleep_state came with PR #24176 behind VLLM_SERVER_DEV_MODE
# and outside it with PR #27867 (2025-10-31): optional, an engine without it reads as awake.
# The operating point: loggers.py @a6f0308c and @005a810b observe the request_prompt_tokens and
# request_generation_tokens histograms once per finished request (record(), finished_requests),
# so their _sum and _count are finished-request sums and count; the decode latency histogram is
# observed per request and engine step (time since its last token; with speculative decoding a
# step may carry several tokens). It was time_per_output_token_seconds (@a6f0308c, @005a810b);
# PR #24110 (opened 2025-09-02) added inter_token_latency_seconds, the old name "Deprecated in
# 0.11" and observed alike, hidden in 0.12 and removed by PR #32661 (opened 2026-01-20).
VLLM = EngineMetrics(
    engine=Engine.VLLM.value,
    generation_tokens_total="vllm:generation_tokens_total",
    requests_running="vllm:num_requests_running",
    requests_waiting="vllm:num_requests_waiting",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    prefix_cache_hits_total="vllm:prefix_cache_hits_total",
    prefix_cache_queries_total="vllm:prefix_cache_queries_total",
    preemptions_total="vllm:num_preemptions_total",
    sleep=SleepGauge("vllm:engine_sleep_state", ("sleep_state", "awake"), sleeping_when_zero=True),
    engine_label="engine",
    finished_requests_total="vllm:request_generation_tokens_count",
    finished_prompt_tokens_total="vllm:request_prompt_tokens_sum",
    finished_generation_tokens_total="vllm:request_generation_tokens_sum",
    token_latency_seconds_total="vllm:inter_token_latency_seconds_sum",
    token_latency_count_total="vllm:inter_token_latency_seconds_count",
    legacy=(
        (KV_CACHE_USAGE_LEGACY, "vllm:gpu_cache_usage_perc"),
        (PREFIX_CACHE_HITS_LEGACY, "vllm:gpu_prefix_cache_hits_total"),
        (PREFIX_CACHE_QUERIES_LEGACY, "vllm:gpu_prefix_cache_queries_total"),
        (TOKEN_LATENCY_SUM_LEGACY, "vllm:time_per_output_token_seconds_sum"),
        (TOKEN_LATENCY_COUNT_LEGACY, "vllm:time_per_output_token_seconds_count"),
    ),
    versions=(
        "vLLM V1 engine, 0.8 to 0.11 and later (gpu_ names before 0.9, sleep gauge from 0.11.1)"
    ),
)

# python/sglang/srt/metrics/collector.py @00ae9c15: sglang:realtime_tokens_total{mode} grows
# as the scheduler logs stats (PR #15198, unified by PR #15747, 2025-12); generation_tokens_total
# grows only in observe_one_finished_request. scheduler_metrics_mixin.py @01bb3c80 writes every
# gauge only in log_prefill_stats/log_decode_stats and zeroes num_paused_reqs after each log, so
# paused is read from unchanged gauges. num_retracted_requests_total is the preemption counter.
# The operating point: TokenizerMetricsCollector.observe_one_finished_request (collector.py
# @00ae9c15, observability/metrics_collector.py @44cedc2b) adds a finished request's prompt and
# generated tokens to prompt_tokens_total and generation_tokens_total and 1 to num_requests_total;
# observe_inter_token_latency adds each output's interval to inter_token_latency_seconds' _sum and
# its new tokens to the buckets, whose total prometheus_client exposes as _count.
SGLANG = EngineMetrics(
    engine=Engine.SGLANG.value,
    generation_tokens_total="sglang:realtime_tokens_total",
    generation_matchers=(("mode", "decode"),),
    generation_tokens_at_finish="sglang:generation_tokens_total",
    generation_rate="sglang:gen_throughput",
    requests_running="sglang:num_running_reqs",
    requests_waiting="sglang:num_queue_reqs",
    kv_cache_usage="sglang:token_usage",
    prefix_cache_hits_total="sglang:cached_tokens_total",
    prefix_cache_queries_total="sglang:prompt_tokens_total",
    preemptions_total="sglang:num_retracted_requests_total",
    finished_requests_total="sglang:num_requests_total",
    finished_prompt_tokens_total="sglang:prompt_tokens_total",
    finished_generation_tokens_total="sglang:generation_tokens_total",
    token_latency_seconds_total="sglang:inter_token_latency_seconds_sum",
    token_latency_count_total="sglang:inter_token_latency_seconds_count",
    engine_label="dp_rank",
    gauges_freeze=True,
    versions=(
        "SGLang with --enable-metrics, collector.py @93d04878 to @00ae9c15 (realtime_tokens_total "
        "where exported, else the completion counter and gen_throughput)"
    ),
)

ENGINE_PROFILES: Mapping[str, EngineMetrics] = {
    Engine.VLLM.value: VLLM,
    Engine.SGLANG.value: SGLANG,
}


# vllm/v1/metrics/ray_wrappers.py @02579a5 (RayPrometheusStatLogger) turns every name into
# [a-zA-Z0-9_] and keys series by Ray's WorkerId; Ray 2.60.0's metrics agent then prefixes ray_
# (checked by tests/upstream/test_ray_engine_metrics.py against real Ray). A histogram keeps its
# _sum and _count after the sanitized name (docs.ray.io, "Adding Application-Level Metrics"), so
# renaming the exposed name gives the same series; not measured against real Ray.
RAY_METRIC_PREFIX = "ray_"
RAY_WORKER_LABEL = "WorkerId"


def ray_metric_name(name: str) -> str:
    return RAY_METRIC_PREFIX + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def ray_exported(profile: EngineMetrics) -> EngineMetrics:
    """`profile` as Ray's metrics agent exports it: names sanitized and prefixed, engines of a
    pod told apart by the actor's worker process."""

    def renamed(name: str | None) -> str | None:
        return ray_metric_name(name) if name else None

    sleep = profile.sleep
    return replace(
        profile,
        generation_tokens_total=ray_metric_name(profile.generation_tokens_total),
        requests_running=ray_metric_name(profile.requests_running),
        requests_waiting=ray_metric_name(profile.requests_waiting),
        kv_cache_usage=renamed(profile.kv_cache_usage),
        prefix_cache_hits_total=renamed(profile.prefix_cache_hits_total),
        prefix_cache_queries_total=renamed(profile.prefix_cache_queries_total),
        preemptions_total=renamed(profile.preemptions_total),
        sleep=replace(sleep, metric=ray_metric_name(sleep.metric)) if sleep else None,
        paused_requests=renamed(profile.paused_requests),
        generation_tokens_at_finish=renamed(profile.generation_tokens_at_finish),
        generation_rate=renamed(profile.generation_rate),
        finished_requests_total=renamed(profile.finished_requests_total),
        finished_prompt_tokens_total=renamed(profile.finished_prompt_tokens_total),
        finished_generation_tokens_total=renamed(profile.finished_generation_tokens_total),
        token_latency_seconds_total=renamed(profile.token_latency_seconds_total),
        token_latency_count_total=renamed(profile.token_latency_count_total),
        legacy=tuple((signal, ray_metric_name(name)) for signal, name in profile.legacy),
        engine_label=RAY_WORKER_LABEL,
        policy_generation=None,  # only the trainer's colocated engines go through Ray
        # Ray exports no SDK gauge, and the pod's working set is the trainer's too.
        memory_working_set=None,
        process_tree_rss=None,
        versions=f"{profile.versions}; through Ray's metrics agent (Ray 2.60.0)",
    )


# rljob.sdk.engine_page's PAGE_LABEL: the page an engine process's samples came from.
ENGINE_PAGE_LABEL = "rljob_engine_page"


@functools.lru_cache(maxsize=1024)
def _engine_signals(metrics: EngineMetrics) -> dict[str, Signal]:
    return metrics.build_signals()


class MissingMetricNamesError(ValueError):
    """A custom engine without the metric names every engine detector needs."""


def engine_metrics(role: RolloutRole | GangEngines, *, through_ray: bool = False) -> EngineMetrics:
    """The engines' metric names: their engine's (as Ray's metrics agent exports them, with
    `through_ray`), with `metricNames` overriding them (custom engines have only those)."""
    profile = _named(role, through_ray)
    if not isinstance(role, GangEngines):
        return profile
    # Only rollout engines drain and rejoin behind the gate: the gang's are not asked. The pod's
    # working set holds the trainer's memory too, so it says nothing of the engines'; only the
    # SDK plugin's pages carry the engine processes' own.
    profile = replace(profile, policy_generation=None, memory_working_set=None)
    if role.exporter == EngineExporter.PLUGIN:
        # Every engine process's page says engine="0": the page tells them apart.
        return replace(
            profile, engine_label=ENGINE_PAGE_LABEL, process_tree_rss=PROCESS_TREE_RSS_METRIC
        )
    return profile


def _named(role: RolloutRole | GangEngines, through_ray: bool) -> EngineMetrics:
    engine = str(getattr(role.engine, "value", role.engine))
    names = role.metric_names
    base = ENGINE_PROFILES.get(engine)
    if base is not None and through_ray:
        base = ray_exported(base)
    if names is None:
        if base is None:
            raise MissingMetricNamesError(_CUSTOM_NEEDS)
        return base

    def pick(field: str) -> str | None:
        override: str | None = getattr(names, field)
        if override:
            return override
        return getattr(base, field) if base is not None else None

    tokens = pick("generation_tokens_total")
    running = pick("requests_running")
    waiting = pick("requests_waiting")
    if not (tokens and running and waiting):
        raise MissingMetricNamesError(_CUSTOM_NEEDS)
    sleep = SleepGauge(names.sleep_state) if names.sleep_state else None
    return EngineMetrics(
        engine=engine,
        generation_tokens_total=tokens,
        requests_running=running,
        requests_waiting=waiting,
        kv_cache_usage=pick("kv_cache_usage"),
        prefix_cache_hits_total=pick("prefix_cache_hits_total"),
        prefix_cache_queries_total=pick("prefix_cache_queries_total"),
        preemptions_total=pick("preemptions_total"),
        policy_generation=pick("policy_generation") or ENGINE_POLICY_GENERATION_METRIC,
        sleep=sleep or (base.sleep if base is not None else None),
        **_inherited(base, names.generation_tokens_total),
    )


def _inherited(base: EngineMetrics | None, tokens_override: str | None) -> dict[str, Any]:
    """What a role with metricNames keeps of its engine's profile: engine semantics, and the
    token counter's matchers and fallbacks unless metricNames names another counter."""
    if base is None:
        return {}
    kept: dict[str, Any] = {
        "paused_requests": base.paused_requests,
        "engine_label": base.engine_label,
        "legacy": base.legacy,
        "gauges_freeze": base.gauges_freeze,
        "generation_rate": base.generation_rate,
        "versions": base.versions,
        # metricNames has no keys for the operating point: it stays the engine's.
        "finished_requests_total": base.finished_requests_total,
        "finished_prompt_tokens_total": base.finished_prompt_tokens_total,
        "finished_generation_tokens_total": base.finished_generation_tokens_total,
        "token_latency_seconds_total": base.token_latency_seconds_total,
        "token_latency_count_total": base.token_latency_count_total,
    }
    if not tokens_override:
        kept["generation_matchers"] = base.generation_matchers
        kept["generation_tokens_at_finish"] = base.generation_tokens_at_finish
    return kept


_CUSTOM_NEEDS = (
    "engine custom needs metricNames.generationTokensTotal, requestsRunning and requestsWaiting"
)


@dataclass(frozen=True, slots=True)
class TrainerMetrics:
    heartbeat: str = "rljob_trainer_heartbeat_timestamp_seconds"
    step: str = "rljob_trainer_step"
    phase: str = "rljob_trainer_phase"
    phase_label: str = "phase"
    policy_generation: str = "rljob_policy_generation"
    checkpoint_step: str = "rljob_checkpoint_step"

    def signals(self) -> dict[str, Signal]:
        return {
            TRAINER_HEARTBEAT: Signal(TRAINER_HEARTBEAT, self.heartbeat),
            TRAINER_STEP: Signal(TRAINER_STEP, self.step),
            TRAINER_PHASE: Signal(TRAINER_PHASE, self.phase),
            POLICY_GENERATION: Signal(POLICY_GENERATION, self.policy_generation),
            CHECKPOINT_STEP: Signal(CHECKPOINT_STEP, self.checkpoint_step),
        }


@dataclass(frozen=True, slots=True)
class VerifierMetrics:
    duration_buckets: str = "rljob_verifier_request_duration_seconds_bucket"
    bound_label: str = "le"
    errors_total: str | None = "rljob_verifier_request_errors_total"

    def signals(self) -> dict[str, Signal]:
        signals = {VERIFIER_BUCKETS: Signal(VERIFIER_BUCKETS, self.duration_buckets)}
        if self.errors_total:
            signals[VERIFIER_ERRORS] = Signal(VERIFIER_ERRORS, self.errors_total)
        return signals


TRAINER = TrainerMetrics()
VERIFIER = VerifierMetrics()
