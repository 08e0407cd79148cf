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
  paused or idle scheduler never reaches (scheduler_metrics_mixin.py @01bb3c80); completion
  counters grow only when requests finish. "no-realtime": @01bb3c80 (no realtime counter);
  "realtime-prefill-decode": the older mode labels; "realtime": @00ae9c15 (modes
  prefill_compute, prefill_cache, decode; moe_ep_rank label).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


@dataclass(slots=True)
class Gauges:
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    rate: float = 0.0
    sleep_level: int = 0


def vllm_page(
    version: str, labels: tuple[tuple[str, str], ...], totals: Totals, gauges: Gauges, start: float
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
    for name, help_text, field in counters:
        value = math.floor(getattr(totals, field))
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
    return page


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


def sglang_page(version: str, labels: tuple[tuple[str, str], ...], log: SGLangLog) -> Page:
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
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", finished.prompt_tokens),
        ("sglang:generation_tokens", "Number of generation tokens processed.", finished.tokens),
        ("sglang:cached_tokens", "Number of cached prompt tokens.", finished.hits),
        ("sglang:num_retracted_requests", "Total number of retracted requests.", log.retracted),
    )
    for name, help_text, value in counters:
        page.counter(name, help_text, [(rendered, math.floor(value))], None)
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
