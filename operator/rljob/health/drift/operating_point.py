"""Where an engine works between two samples: the load it is offered (requests running plus
waiting), the batch it actually runs, its KV usage, and the lengths of the
requests it serves, read from what vLLM and SGLang export (docs/architecture.md section 7).

Request lengths come from counters observed when a request finishes (vLLM's request length
histograms, SGLang's tokenizer counters), so they describe the recent mix, not what is in flight;
`RequestMix` keeps them as decayed sums, so one interval with few finished requests does not
swing the estimate. The context a running sequence holds is estimated as its prompt plus half its
response: long requests stay in flight longer, so the true mean is larger by a factor set by the
length spread: (1 + cv^2) on the response half. RESPONSE_SPREAD assumes cv near 0.7; its error
moves the estimate by a few percent when the prompt/response balance changes, and cancels in
every comparison of an engine against itself at a steady mix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rljob.health.drift.measures import ratio
from rljob.health.samples import EngineSample, optional_delta

# Finished requests older than this (seconds) weigh 1/e as much: a few minutes of requests.
MIX_MEMORY = 600.0
# A mix estimate needs this many finished requests behind it.
MIN_FINISHED = 8.0
# 1 + cv^2 of response lengths: in-flight sequences are length-biased (long ones stay longer).
RESPONSE_SPREAD = 1.5


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """One interval of a serving, saturated engine: what it was offered and what it did."""

    start: float
    end: float
    tokens: float
    offered: float
    running: float
    kv_usage: float | None
    context: float | None  # estimated tokens one running sequence holds
    prompt: float | None  # mean prompt length of the recent mix
    preemptions: float | None
    finished: float | None
    prefix_hits: float | None
    prefix_queries: float | None

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def throughput(self) -> float:
        return self.tokens / self.duration if self.duration > 0 else 0.0

    @property
    def capacity(self) -> float | None:
        """Tokens the whole KV cache holds, as this interval shows it: the running sequences'
        need over the share of the cache in use. Lost (unusable) blocks count as used, so this
        falls as the cache fragments and stays put when requests grow."""
        if self.context is None or self.kv_usage is None or self.kv_usage < MIN_KV_FOR_CAPACITY:
            return None
        return self.running * self.context / self.kv_usage


def cache_rates(points: Iterable[OperatingPoint]) -> tuple[float | None, float | None]:
    """(prefix hit rate, preemptions per finished request) over intervals that export each."""
    hits = queries = preemptions = finished = 0.0
    for point in points:
        if point.prefix_hits is not None and point.prefix_queries is not None:
            hits, queries = hits + point.prefix_hits, queries + point.prefix_queries
        if point.preemptions is not None and point.finished is not None:
            preemptions, finished = preemptions + point.preemptions, finished + point.finished
    return ratio(hits, queries), ratio(preemptions, finished)


# Below this KV usage the capacity estimate divides by too little to mean anything.
MIN_KV_FOR_CAPACITY = 0.5


class RequestMix:
    """Decayed sums of finished requests and their prompt and generated tokens."""

    __slots__ = ("_at", "_count", "_generation", "_prompt")

    def __init__(self) -> None:
        self._count = self._prompt = self._generation = 0.0
        self._at = -math.inf

    def add(self, previous: EngineSample, current: EngineSample) -> None:
        count = optional_delta(previous.finished_requests_total, current.finished_requests_total)
        prompt = optional_delta(
            previous.finished_prompt_tokens_total, current.finished_prompt_tokens_total
        )
        generation = optional_delta(
            previous.finished_generation_tokens_total, current.finished_generation_tokens_total
        )
        if count is None or generation is None:
            return
        keep = math.exp(-(current.t - self._at) / MIX_MEMORY) if math.isfinite(self._at) else 0.0
        self._count = self._count * keep + count
        self._prompt = self._prompt * keep + (prompt or 0.0)
        self._generation = self._generation * keep + generation
        self._at = current.t

    @property
    def prompt(self) -> float | None:
        return self._prompt / self._count if self._count >= MIN_FINISHED else None

    @property
    def generation(self) -> float | None:
        return self._generation / self._count if self._count >= MIN_FINISHED else None

    @property
    def context(self) -> float | None:
        prompt, generation = self.prompt, self.generation
        if generation is None:
            return None
        return (prompt or 0.0) + generation * RESPONSE_SPREAD / 2


def _mean(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (a + b) / 2


def operating_point(
    previous: EngineSample, current: EngineSample, tokens: float, mix: RequestMix
) -> OperatingPoint:
    """The interval between two samples (the mix already holds `current`)."""
    return OperatingPoint(
        start=previous.t,
        end=current.t,
        tokens=tokens,
        offered=(previous.running + previous.waiting + current.running + current.waiting) / 2,
        running=(previous.running + current.running) / 2,
        kv_usage=_mean(previous.kv_usage, current.kv_usage),
        context=mix.context,
        prompt=mix.prompt,
        preemptions=optional_delta(previous.preemptions_total, current.preemptions_total),
        finished=optional_delta(previous.finished_requests_total, current.finished_requests_total),
        prefix_hits=optional_delta(previous.prefix_hits_total, current.prefix_hits_total),
        prefix_queries=optional_delta(previous.prefix_queries_total, current.prefix_queries_total),
    )
