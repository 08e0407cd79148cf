"""The metrics page each simulated engine version serves, as upstream writes it.

Per engine and version (docs/engine-fidelity.md): which names, label sets and `_created` series
exist, and when counters and gauges change. The engine model (models/engine.py) integrates what
the engine did; this module decides what a scrape of that version sees.

- vLLM (vllm/v1/metrics/loggers.py): counters grow every engine step, gauges are set every
  step; single-process prometheus_client, so counters carry `_created`. "0.8": the `gpu_`
  names only (@a6f0308c); "0.10": both, the `gpu_` ones deprecated (@005a810b), no sleep gauge
  outside VLLM_SERVER_DEV_MODE; "0.11.1": current names and `vllm:engine_sleep_state`
  (PRs #24176, #27867).
- SGLang (python/sglang/srt/metrics/collector.py): metrics go through PROMETHEUS_MULTIPROC_DIR
  (the collector imports prometheus_client after setting it), whose collector emits no
  `_created` series. Gauges and `realtime_tokens_total` change only at a stats log, which a
  paused scheduler never reaches (scheduler_metrics_mixin.py @01bb3c80) and an idle one reaches
  every 30 s for its gauges (scheduler_runtime_checker_mixin.py @008e7b87); completion
  counters grow only when requests finish. "no-realtime": @01bb3c80 (no realtime counter);
  "realtime-prefill-decode": the older mode labels; "realtime": @00ae9c15 (modes
  prefill_compute, prefill_cache, decode; moe_ep_rank label).

The operating point: vLLM observes its request length histograms when a request finishes and its
decode latency histogram (time_per_output_token_seconds; inter_token_latency_seconds from 0.11,
both exported in 0.11) every engine step; SGLang's tokenizer adds a finished request to
num_requests_total, prompt_tokens_total and generation_tokens_total, and each output's interval
to inter_token_latency_seconds, its new tokens to the buckets (docs/engine-fidelity.md).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field

from rljob.dev.sim.exposition import Page, labels_text

VERSIONS = {
    "vllm": ("0.8", "0.10", "0.11.1"),
    "sglang": ("no-realtime", "realtime-prefill-decode", "realtime"),
}
DEFAULT_VERSION = {"vllm": "0.11.1", "sglang": "realtime"}
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
_REALTIME_MODES = {
    "realtime-prefill-decode": ("prefill", "decode"),
    "realtime": ("prefill_compute", "prefill_cache", "decode"),
}


# vllm/v1/metrics/loggers.py @005a810b: the decode latency buckets, and build_1_2_5_buckets up
# to max_model_len (32768 here) for request lengths; SGLang's collector.py @00ae9c15 defaults.
VLLM_LATENCY_BOUNDS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
LENGTH_BOUNDS = tuple(float(m * 10**e) for e in range(5) for m in (1, 2, 5) if m * 10**e <= 32768)
SGLANG_LATENCY_BOUNDS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
    0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
LATENCY_BOUNDS = tuple(sorted(set(VLLM_LATENCY_BOUNDS) | set(SGLANG_LATENCY_BOUNDS)))


@dataclass(slots=True)
class Histogram:
    """Observations as prometheus_client keeps them: a count per bucket (`bounds`, then +Inf)
    and the sum. Rendered at any subset of its bounds, so one histogram serves both engines."""

    bounds: tuple[float, ...]
    counts: list[float] = field(init=False)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: float = 1.0) -> None:
        """`times` observations of `value` (SGLang adds an output's tokens at its mean)."""
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times

    @property
    def count(self) -> float:
        return sum(self.counts)

    def cumulative(self, bounds: tuple[float, ...]) -> list[tuple[float, float]]:
        """(bound, whole observations at or below it) for each of `bounds` (a subset of its
        own), then +Inf."""
        found = [(b, math.floor(sum(self.counts[: self.bounds.index(b) + 1]))) for b in bounds]
        return [*found, (math.inf, math.floor(self.count))]


@dataclass(slots=True)
class Operating:
    """The engine's operating-point series: request lengths observed at finish, decode latency
    per generated token."""

    prompt: Histogram = field(default_factory=lambda: Histogram(LENGTH_BOUNDS))
    generation: Histogram = field(default_factory=lambda: Histogram(LENGTH_BOUNDS))
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BOUNDS))


def version_of(exporter: str, version: str) -> str:
    """The version a profile names, or the newest simulated one when it names none."""
    return version or DEFAULT_VERSION[exporter]


@dataclass(slots=True)
class Totals:
    """Cumulative counts an engine page shows."""

    tokens: float = 0.0
    prompt_tokens: float = 0.0
    hits: float = 0.0
    queries: float = 0.0
    preemptions: float = 0.0
    requests_stop: float = 0.0
    requests_length: float = 0.0
    # Requests finished and the prompt, generated and cached prompt tokens they held.
    finished: float = 0.0
    finished_prompt: float = 0.0
    finished_generation: float = 0.0
    finished_cached: float = 0.0


@dataclass(slots=True)
class Gauges:
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    rate: float = 0.0
    sleep_level: int = 0


def vllm_page(
    version: str,
    labels: tuple[tuple[str, str], ...],
    totals: Totals,
    gauges: Gauges,
    start: float,
    *,
    operating: Operating,
) -> Page:
    page, rendered = Page(), labels_text(labels)
    page.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        [(rendered, gauges.running)],
    )
    page.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        [(rendered, gauges.waiting)],
    )
    if version == "0.11.1":
        states = [
            (labels_text((*labels, ("sleep_state", state))), float(gauges.sleep_level == level))
            for level, state in enumerate(SLEEP_STATES)
        ]
        page.gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            states,
        )
    if version in ("0.8", "0.10"):
        page.gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            [(rendered, gauges.kv_usage)],
        )
        for name, value in (("queries", totals.queries), ("hits", totals.hits)):
            page.counter(
                f"vllm:gpu_prefix_cache_{name}",
                f"GPU prefix cache {name}.",
                [(rendered, math.floor(value))],
                start,
            )
    if version != "0.8":
        page.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            [(rendered, gauges.kv_usage)],
        )
        for name, value in (("queries", totals.queries), ("hits", totals.hits)):
            page.counter(
                f"vllm:prefix_cache_{name}",
                f"Prefix cache {name}, in terms of number of tokens.",
                [(rendered, math.floor(value))],
                start,
            )
    counters = (
        ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", "preemptions"),
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
        ("vllm:generation_tokens", "Number of generation tokens processed.", "tokens"),
    )
    for name, help_text, attribute in counters:
        value = math.floor(getattr(totals, attribute))
        page.counter(name, help_text, [(rendered, value)], start)
    page.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [
            (labels_text((*labels, ("finished_reason", reason))), math.floor(value))
            for reason, value in (
                ("stop", totals.requests_stop),
                ("length", totals.requests_length),
            )
        ],
        None,
    )
    _vllm_operating(page, version, rendered, operating, start)
    return page


def _vllm_operating(
    page: Page, version: str, rendered: str, operating: Operating, start: float
) -> None:
    latency_help = "Histogram of time per output token in seconds."
    if version == "0.11.1":  # PR #24110: deprecated from 0.11, still exported there
        latency_help += "DEPRECATED: Use vllm:inter_token_latency_seconds instead."
    series = [
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", operating.prompt),
        (
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            operating.generation,
        ),
        ("vllm:time_per_output_token_seconds", latency_help, operating.latency),
    ]
    if version == "0.11.1":
        latency = ("Histogram of inter-token latency in seconds.", operating.latency)
        series.append(("vllm:inter_token_latency_seconds", *latency))
    for name, help_text, histogram in series:
        bounds = VLLM_LATENCY_BOUNDS if histogram is operating.latency else LENGTH_BOUNDS
        page.histogram(
            name,
            help_text,
            labels=rendered,
            buckets=histogram.cumulative(bounds),
            total=histogram.total,
            created=start,
        )


@dataclass(slots=True)
class SGLangLog:
    """What SGLang's scheduler last logged (gauges, realtime counters) and what its tokenizer
    counted at request completion: the only values a scrape can see."""

    gauges: Gauges
    realtime_decode: float = 0.0
    realtime_prefill_compute: float = 0.0
    realtime_prefill_cache: float = 0.0
    retracted: float = 0.0
    finished: Totals | None = None


def sglang_labels(model_name: str, version: str) -> tuple[tuple[str, str], ...]:
    """scheduler_metrics_mixin.py: model_name, engine_type, tp_rank, pp_rank, plus moe_ep_rank
    in current versions (dp_rank only with data parallelism)."""
    base = (("model_name", model_name), ("engine_type", "unified"), ("tp_rank", "0"))
    extra = (("moe_ep_rank", "0"),) if version == "realtime" else ()
    return (*base, ("pp_rank", "0"), *extra)


def sglang_page(
    version: str, labels: tuple[tuple[str, str], ...], log: SGLangLog, latency: Histogram
) -> Page:
    page, rendered, gauges = Page(), labels_text(labels), log.gauges
    values = (
        ("sglang:num_running_reqs", "The number of running requests.", gauges.running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", gauges.waiting),
        ("sglang:token_usage", "The token usage.", gauges.kv_usage),
        ("sglang:gen_throughput", "The generation throughput (token/s).", gauges.rate),
        # Zeroed after every stats log (scheduler_metrics_mixin.py), so it reads 0 here.
        ("sglang:num_paused_reqs", "The number of paused requests by async weight sync.", 0.0),
    )
    for name, help_text, value in values:
        page.gauge(name, help_text, [(rendered, value)])
    finished = log.finished or Totals()
    counters = (
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", finished.finished_prompt),
        (
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            finished.finished_generation,
        ),
        ("sglang:cached_tokens", "Number of cached prompt tokens.", finished.finished_cached),
        ("sglang:num_requests", "Number of requests processed.", finished.finished),
        ("sglang:num_retracted_requests", "Total number of retracted requests.", log.retracted),
    )
    for name, help_text, value in counters:
        page.counter(name, help_text, [(rendered, math.floor(value))], None)
    # The tokenizer observes outputs as they arrive, not at a stats log.
    page.histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        labels=rendered,
        buckets=latency.cumulative(SGLANG_LATENCY_BOUNDS),
        total=latency.total,
        created=None,
    )
    modes = _REALTIME_MODES.get(version)
    if modes is not None:
        by_mode = {
            "prefill": log.realtime_prefill_compute + log.realtime_prefill_cache,
            "prefill_compute": log.realtime_prefill_compute,
            "prefill_cache": log.realtime_prefill_cache,
            "decode": log.realtime_decode,
        }
        page.counter(
            "sglang:realtime_tokens",
            "Total number of tokens processed (updated on each log interval).",
            [(labels_text((*labels, ("mode", mode))), math.floor(by_mode[mode])) for mode in modes],
            None,
        )
    return page
