"""What the metrics sources query and return: a signal (one metric, bounded by name for the
`signal` label) and, per signal and pod, series of labels and time-ordered points."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Point = tuple[float, float]
Labels = tuple[tuple[str, str], ...]

# Timestamps of one scrape are equal; this absorbs float rounding of millisecond timestamps.
TIME_EPSILON = 1e-3


@dataclass(frozen=True, slots=True)
class Series:
    """One time series of one pod: its labels (sorted; without the metric name, pod and
    namespace labels) and its points (time, value), ascending in time, all finite."""

    labels: Labels
    points: tuple[Point, ...]

    def label(self, name: str) -> str | None:
        for key, value in self.labels:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Signal:
    """One metric queried for a set of pods. `name` says which quantity it is (bounded: the
    `signal` label of rljob_health_queries_total); `metric` is the exposed series name and
    `matchers` are exact label matches every returned series must have; as in PromQL, a
    matcher of "" also matches a series without that label (Prometheus drops empty labels, so
    cAdvisor's pod-level series, `container=""`, arrive without a `container` label)."""

    name: str
    metric: str
    matchers: Labels = ()
    # Every round looks signals up in dicts thousands of times: the hash is taken once.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.name, self.metric, self.matchers)))

    def __hash__(self) -> int:
        return self._hash

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key, "") == value for key, value in self.matchers)

    def matches_series(self, labels: Labels) -> bool:
        """`matches` for a series' sorted label pairs."""
        return not self.matchers or self.matches(dict(labels))


# Signal names, the bounded `signal` label values.
GENERATION_TOKENS = "generation_tokens"
REQUESTS_RUNNING = "requests_running"
REQUESTS_WAITING = "requests_waiting"
KV_CACHE_USAGE = "kv_cache_usage"
PREFIX_CACHE_HITS = "prefix_cache_hits"
PREFIX_CACHE_QUERIES = "prefix_cache_queries"
PREEMPTIONS = "preemptions"
SLEEP_STATE = "sleep_state"
PAUSED_REQUESTS = "paused_requests"
# SGLang without `sglang:realtime_tokens_total`: the completion counter and the decode rate gauge.
GENERATION_TOKENS_AT_FINISH = "generation_tokens_at_finish"
GENERATION_RATE = "generation_rate"
# vLLM before the 0.9 renames (`gpu_` names), read where the new names are missing.
KV_CACHE_USAGE_LEGACY = "kv_cache_usage_legacy"
PREFIX_CACHE_HITS_LEGACY = "prefix_cache_hits_legacy"
PREFIX_CACHE_QUERIES_LEGACY = "prefix_cache_queries_legacy"
# The operating point, from series observed as requests finish (their count and the prompt and
# generated tokens they held) and the per-token decode latency histogram's _sum and _count.
FINISHED_REQUESTS = "finished_requests"
FINISHED_PROMPT_TOKENS = "finished_prompt_tokens"
FINISHED_GENERATION_TOKENS = "finished_generation_tokens"
TOKEN_LATENCY_SUM = "token_latency_sum"
TOKEN_LATENCY_COUNT = "token_latency_count"
# vLLM before 0.11 (time_per_output_token_seconds), read where the above two are missing.
TOKEN_LATENCY_SUM_LEGACY = "token_latency_sum_legacy"
TOKEN_LATENCY_COUNT_LEGACY = "token_latency_count_legacy"
TRAINER_HEARTBEAT = "trainer_heartbeat"
TRAINER_STEP = "trainer_step"
TRAINER_PHASE = "trainer_phase"
POLICY_GENERATION = "policy_generation"
CHECKPOINT_STEP = "checkpoint_step"
VERIFIER_BUCKETS = "verifier_buckets"
VERIFIER_ERRORS = "verifier_errors"
# A rollout engine's weight generation (rljob_engine_policy_generation): what drains and the
# policy-current gate read beside its running requests; no detector needs it.
ENGINE_POLICY_GENERATION = "engine_policy_generation"
# Host memory of a rollout engine's pod or processes, read by the memory-growth detector only
# (rljob.health.causes.memory): cAdvisor's working set of the pod's cgroup through Prometheus,
# or the rljob SDK's gauge of the engine process tree's resident memory on a plugin page.
MEMORY_WORKING_SET = "memory_working_set"
PROCESS_TREE_RSS = "process_tree_rss"
# Engine signals whose absence or failure never makes an engine detector "insufficient data".
OPTIONAL_ENGINE_SIGNALS = frozenset(
    {ENGINE_POLICY_GENERATION, MEMORY_WORKING_SET, PROCESS_TREE_RSS}
)
