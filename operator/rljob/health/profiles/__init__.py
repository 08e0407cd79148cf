"""Which metrics each workload exports, and how one pod's raw series become detector samples.

Pure: names and arithmetic, no I/O. The metrics sources (rljob.adapters.metrics) return, per
signal and pod, a list of `Series` (labels without the metric name, pod and namespace labels,
plus time-ordered points); `sampling` and `trainer` turn them into `EngineSample`,
`VerifierSample` and `TrainerReading` values.

Names (exposed series names: prometheus_client adds `_total` to counters, see
shared/reference/workload-signals.md section 0):

- vLLM (V1 `PrometheusStatLogger`): docs/architecture.md section 7. `vllm:engine_sleep_state`
  carries a `sleep_state` label; its `awake` series is 0 while the engine sleeps (level 1 or 2).
  vLLM has no paused-requests gauge: during a weight sync the driver sends nothing, so the engine
  reads as idle.
- vLLM before 0.9 exports `vllm:gpu_cache_usage_perc` and `vllm:gpu_prefix_cache_*` instead;
  those are read where the current names are missing. The sleep gauge is optional.
- SGLang (`metrics/collector.py`): tokens from `sglang:realtime_tokens_total{mode="decode"}`
  where exported, else the completion counter `sglang:generation_tokens_total` (grows only as
  requests finish, so never read as progress) with the `sglang:gen_throughput` gauge as the
  rate; `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage` (the KV pool
  fraction), `sglang:num_retracted_requests_total` (preemptions). Its gauges are written only
  when the scheduler logs stats, so unchanged gauges mean paused or idle
  (`sglang:num_paused_reqs` is zeroed after every log and is not read). Its prefix hit rate
  comes from `sglang:cached_tokens_total` / `sglang:prompt_tokens_total`, because the
  `sglang:cache_hit_rate` gauge is zeroed on every decode log. No sleep gauge.
  docs/engine-fidelity.md has the upstream files and versions.
- custom: the role's `metricNames`; a user's sleep gauge is non-zero while the engine sleeps
  (the spec's wording). `metricNames` also override single names of vllm and sglang.
- Every rollout engine profile (custom too): the optional gauge `rljob_engine_policy_generation`
  (the rljob SDK's engine-side helper, on the engine's own metrics page), the weight generation
  the engine serves; drains and the policy-current gate read it, no detector does. The
  trainer's colocated engines are not asked for it.
- Host memory, optional, read by the memory-growth detector only: cAdvisor's
  `container_memory_working_set_bytes{container=""}` (the pod cgroup, through Prometheus; a
  direct scrape has no such page) and the SDK plugin page's
  `rljob_engine_process_tree_resident_bytes`. The trainer's colocated engines are asked for the
  latter only, under `exporter: plugin` (their pod's working set is the trainer's too).
- Trainer (the rljob SDK's progress exporter): `rljob_trainer_step`,
  `rljob_trainer_heartbeat_timestamp_seconds`, `rljob_trainer_phase{phase}` (1 for the current
  phase), `rljob_policy_generation`, `rljob_checkpoint_step`.
- Verifier: the histogram `rljob_verifier_request_duration_seconds` (its `_bucket` series, label
  `le`) and the counter `rljob_verifier_request_errors_total`, as the test bed's simulated
  verifiers export them.

Several series of one metric in one pod (`lookup`): series that differ in the profile's engine label
(vLLM `engine`, the data-parallel rank; SGLang `dp_rank`) are separate engines in one pod and
are summed (KV usage is averaged; the pod sleeps if any engine sleeps). Series that differ in any
other label are the same engine seen twice (e.g. scraped by two jobs) and collapse to their
maximum, so a duplicated scrape never doubles a counter.
"""

from rljob.health.profiles.lookup import SeriesLookup
from rljob.health.profiles.sampling import engine_samples, sample_times, verifier_samples
from rljob.health.profiles.signals import (
    CHECKPOINT_STEP,
    ENGINE_POLICY_GENERATION,
    GENERATION_RATE,
    GENERATION_TOKENS,
    GENERATION_TOKENS_AT_FINISH,
    KV_CACHE_USAGE,
    KV_CACHE_USAGE_LEGACY,
    MEMORY_WORKING_SET,
    OPTIONAL_ENGINE_SIGNALS,
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
    TIME_EPSILON,
    TRAINER_HEARTBEAT,
    TRAINER_PHASE,
    TRAINER_STEP,
    VERIFIER_BUCKETS,
    VERIFIER_ERRORS,
    Labels,
    Point,
    Series,
    Signal,
)
from rljob.health.profiles.trainer import TrainerReading, trainer_reading, trainer_signals
from rljob.health.profiles.workloads import (
    ENGINE_PROFILES,
    SGLANG,
    TRAINER,
    VERIFIER,
    VLLM,
    EngineMetrics,
    MissingMetricNamesError,
    SleepGauge,
    TrainerMetrics,
    VerifierMetrics,
    engine_metrics,
)

__all__ = [
    "CHECKPOINT_STEP",
    "ENGINE_POLICY_GENERATION",
    "ENGINE_PROFILES",
    "GENERATION_RATE",
    "GENERATION_TOKENS",
    "GENERATION_TOKENS_AT_FINISH",
    "KV_CACHE_USAGE",
    "KV_CACHE_USAGE_LEGACY",
    "MEMORY_WORKING_SET",
    "OPTIONAL_ENGINE_SIGNALS",
    "PAUSED_REQUESTS",
    "POLICY_GENERATION",
    "PREEMPTIONS",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_HITS_LEGACY",
    "PREFIX_CACHE_QUERIES",
    "PREFIX_CACHE_QUERIES_LEGACY",
    "PROCESS_TREE_RSS",
    "REQUESTS_RUNNING",
    "REQUESTS_WAITING",
    "SGLANG",
    "SLEEP_STATE",
    "TIME_EPSILON",
    "TRAINER",
    "TRAINER_HEARTBEAT",
    "TRAINER_PHASE",
    "TRAINER_STEP",
    "VERIFIER",
    "VERIFIER_BUCKETS",
    "VERIFIER_ERRORS",
    "VLLM",
    "EngineMetrics",
    "Labels",
    "MissingMetricNamesError",
    "Point",
    "Series",
    "SeriesLookup",
    "Signal",
    "SleepGauge",
    "TrainerMetrics",
    "TrainerReading",
    "VerifierMetrics",
    "engine_metrics",
    "engine_samples",
    "sample_times",
    "trainer_reading",
    "trainer_signals",
    "verifier_samples",
]
