"""One pod's raw series as detector samples: engine samples for the drift and stall detectors,
histogram snapshots for the verifier latency detector."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from rljob.health.profiles.lookup import SeriesLookup
from rljob.health.profiles.signals import (
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
    TOKEN_LATENCY_COUNT,
    TOKEN_LATENCY_COUNT_LEGACY,
    TOKEN_LATENCY_SUM,
    TOKEN_LATENCY_SUM_LEGACY,
    VERIFIER_BUCKETS,
    VERIFIER_ERRORS,
    Series,
)
from rljob.health.profiles.workloads import EngineMetrics, SleepGauge, VerifierMetrics
from rljob.health.samples import PROCESS_TREE_MEMORY, WORKING_SET_MEMORY, EngineSample
from rljob.health.verifier import VerifierSample


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sample_times(
    series: Iterable[Series], *, after: float = -math.inf, min_spacing: float = 0.0
) -> list[float]:
    """The distinct timestamps of the series after `after`, ascending, thinned so that each
    is at least `min_spacing` after the one before (the detectors' own rule: they would drop
    the others after building them)."""
    times: set[float] = set()
    for one in series:
        times.update(t for t, _ in one.points if t > after)
    kept: list[float] = []
    for t in sorted(times):
        if not kept or t >= kept[-1] + min_spacing:
            kept.append(t)
    return kept


def engine_samples(
    profile: EngineMetrics,
    series: Mapping[str, Sequence[Series]],
    staleness: float,
    *,
    after: float = -math.inf,
    min_spacing: float = 0.0,
) -> list[EngineSample]:
    """One pod's engine samples, one per timestamp of its token counter (after `after`,
    thinned to `min_spacing`), from its series by signal name. A timestamp without the token
    counter, running or waiting values gives no sample; optional metrics missing at a
    timestamp are None. Where the pod lacks a metric under its current name, the older name
    (vLLM before 0.9, or before 0.11 for the decode latency) or the fallback counter (SGLang
    before realtime_tokens) is read. A signal the profile shares with another (SGLang's
    finish-time counters) is read from that one's series. Host memory is the pod's working set
    where Prometheus has it, else the SDK page's process-tree RSS (each summed over the pod's
    engines, as a pod's engines share its memory)."""
    label, shared = profile.engine_label, profile.shared_series()

    def lookup(name: str, older: str | None = None) -> SeriesLookup:
        found = SeriesLookup(series.get(shared.get(name, name), ()), label, staleness)
        if found or older is None:
            return found
        return SeriesLookup(series.get(older, ()), label, staleness)

    at_finish = not any(one.points for one in series.get(GENERATION_TOKENS, ()))
    token_signal = GENERATION_TOKENS_AT_FINISH if at_finish else GENERATION_TOKENS
    tokens, running, waiting = (
        lookup(token_signal),
        lookup(REQUESTS_RUNNING),
        lookup(REQUESTS_WAITING),
    )
    if not (tokens and running and waiting):
        return []
    hits = lookup(PREFIX_CACHE_HITS)
    prefix = (hits, lookup(PREFIX_CACHE_QUERIES))
    if not hits:
        prefix = (lookup(PREFIX_CACHE_HITS_LEGACY), lookup(PREFIX_CACHE_QUERIES_LEGACY))
    kv, rate = lookup(KV_CACHE_USAGE, KV_CACHE_USAGE_LEGACY), lookup(GENERATION_RATE)
    preemptions, sleep, paused = lookup(PREEMPTIONS), lookup(SLEEP_STATE), lookup(PAUSED_REQUESTS)
    finished = (
        lookup(FINISHED_REQUESTS),
        lookup(FINISHED_PROMPT_TOKENS),
        lookup(FINISHED_GENERATION_TOKENS),
    )
    latency = _latency_lookups(lookup)
    memory = (
        (lookup(MEMORY_WORKING_SET), WORKING_SET_MEMORY),
        (lookup(PROCESS_TREE_RSS), PROCESS_TREE_MEMORY),
    )
    samples = []
    times = sample_times(series.get(token_signal, ()), after=after, min_spacing=min_spacing)
    for t in times:
        required = (tokens.reduce(t, sum), running.reduce(t, sum), waiting.reduce(t, sum))
        if required[0] is None or required[1] is None or required[2] is None:
            continue
        kv_usage, decode_rate = kv.reduce(t, _mean), rate.reduce(t, sum)
        memory_bytes, memory_signal = _memory(memory, t)
        samples.append(
            EngineSample(
                t=t,
                generated_tokens_total=required[0],
                running=required[1],
                waiting=required[2],
                kv_usage=kv_usage,
                prefix_hits_total=prefix[0].reduce(t, sum),
                prefix_queries_total=prefix[1].reduce(t, sum),
                preemptions_total=preemptions.reduce(t, sum),
                sleeping=_sleeping(profile.sleep, sleep.values_at(t)),
                paused=_paused(paused.values_at(t)),
                tokens_at_finish=at_finish,
                generation_rate=decode_rate if at_finish else None,
                gauges=(required[1], required[2], kv_usage, decode_rate)
                if profile.gauges_freeze
                else None,
                finished_requests_total=finished[0].reduce(t, sum),
                finished_prompt_tokens_total=finished[1].reduce(t, sum),
                finished_generation_tokens_total=finished[2].reduce(t, sum),
                token_latency_seconds_total=latency[0].reduce(t, sum),
                token_latency_count_total=latency[1].reduce(t, sum),
                memory_bytes=memory_bytes,
                memory_signal=memory_signal,
            )
        )
    return samples


def _memory(
    lookups: tuple[tuple[SeriesLookup, str], ...], t: float
) -> tuple[float | None, str | None]:
    """The first of the memory signals with a value at t, and its name."""
    for found, name in lookups:
        if found:
            value = found.reduce(t, sum)
            if value is not None:
                return value, name
    return None, None


def _latency_lookups(
    lookup: Callable[[str], SeriesLookup],
) -> tuple[SeriesLookup, SeriesLookup]:
    """The decode latency histogram's _sum and _count, both under the current name or both
    under the older one (vLLM before 0.11), never one of each."""
    current = (lookup(TOKEN_LATENCY_SUM), lookup(TOKEN_LATENCY_COUNT))
    if current[0] or current[1]:
        return current
    return lookup(TOKEN_LATENCY_SUM_LEGACY), lookup(TOKEN_LATENCY_COUNT_LEGACY)


def _sleeping(gauge: SleepGauge | None, values: list[float]) -> bool | None:
    if gauge is None or not values:
        return None
    if gauge.sleeping_when_zero:
        return any(value == 0 for value in values)
    return any(value != 0 for value in values)


def _paused(values: list[float]) -> bool | None:
    return sum(values) > 0 if values else None


def _bound(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        bound = float(text)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def verifier_samples(
    profile: VerifierMetrics,
    series: Mapping[str, Sequence[Series]],
    staleness: float,
    *,
    after: float = -math.inf,
    min_spacing: float = 0.0,
) -> list[VerifierSample]:
    """One pod's histogram snapshots, one per timestamp of its bucket series (after `after`,
    thinned to `min_spacing`); a snapshot needs the +Inf bucket and at least one finite one."""
    by_bound: dict[float, list[Series]] = {}
    for one in series.get(VERIFIER_BUCKETS, ()):
        bound = _bound(one.label(profile.bound_label))
        if bound is not None:
            by_bound.setdefault(bound, []).append(one)
    if math.inf not in by_bound or len(by_bound) < 2:
        return []
    # Buckets from the same scrape only: a bucket that stopped arriving must not lend its old
    # count to a newer snapshot (the difference would read as slow requests).
    lookups = {
        bound: SeriesLookup(members, None, TIME_EPSILON) for bound, members in by_bound.items()
    }
    errors = SeriesLookup(series.get(VERIFIER_ERRORS, ()), None, staleness)
    samples = []
    times = sample_times(series.get(VERIFIER_BUCKETS, ()), after=after, min_spacing=min_spacing)
    for t in times:
        buckets = tuple(
            (bound, count)
            for bound, lookup in sorted(lookups.items())
            if (count := lookup.reduce(t, max)) is not None
        )
        if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
            continue
        samples.append(VerifierSample(t=t, buckets=buckets, errors_total=errors.reduce(t, max)))
    return samples
