"""The operating point's series (finished requests and their token sums, the decode latency
histogram's _sum and _count): the names each engine profile reads, as upstream exports them and as
Ray's metrics agent renames them, and how one pod's series fill EngineSample's fields."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rljob.api.spec import RolloutRole
from rljob.health.profiles import (
    GENERATION_TOKENS,
    GENERATION_TOKENS_AT_FINISH,
    PREFIX_CACHE_QUERIES,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    SGLANG,
    VLLM,
    EngineMetrics,
    Series,
    engine_metrics,
    engine_samples,
)
from rljob.health.profiles.signals import (
    FINISHED_GENERATION_TOKENS,
    FINISHED_PROMPT_TOKENS,
    FINISHED_REQUESTS,
    TOKEN_LATENCY_COUNT,
    TOKEN_LATENCY_COUNT_LEGACY,
    TOKEN_LATENCY_SUM,
    TOKEN_LATENCY_SUM_LEGACY,
)
from rljob.health.profiles.workloads import ray_exported
from rljob.health.samples import EngineSample, sanitize_sample

T = 1000.0
STALE = 15.0
FIELDS = (
    "finished_requests_total",
    "finished_prompt_tokens_total",
    "finished_generation_tokens_total",
    "token_latency_seconds_total",
    "token_latency_count_total",
)
THROUGH_RAY = ray_exported(VLLM)


def one(value: float, **labels: str) -> list[Series]:
    return [Series(tuple(sorted(labels.items())), ((T, value),))]


def base(tokens: str = GENERATION_TOKENS) -> dict[str, list[Series]]:
    """The series every sample needs: the token counter, running and waiting."""
    return {tokens: one(5000.0), REQUESTS_RUNNING: one(8.0), REQUESTS_WAITING: one(2.0)}


def sample(profile: EngineMetrics, series: dict[str, list[Series]]) -> EngineSample:
    (found,) = engine_samples(profile, series, STALE)
    return found


def role(**fields: Any) -> RolloutRole:
    return RolloutRole.model_validate(fields)


@pytest.mark.parametrize(
    ("profile", "names"),
    [
        pytest.param(
            VLLM,
            (
                "vllm:request_generation_tokens_count",
                "vllm:request_prompt_tokens_sum",
                "vllm:request_generation_tokens_sum",
                "vllm:inter_token_latency_seconds_sum",
                "vllm:inter_token_latency_seconds_count",
            ),
            id="vllm-request-length-histograms-and-inter-token-latency",
        ),
        pytest.param(
            SGLANG,
            (
                "sglang:num_requests_total",
                "sglang:prompt_tokens_total",
                "sglang:generation_tokens_total",
                "sglang:inter_token_latency_seconds_sum",
                "sglang:inter_token_latency_seconds_count",
            ),
            id="sglang-finish-time-tokenizer-counters",
        ),
        pytest.param(
            THROUGH_RAY,
            (
                "ray_vllm_request_generation_tokens_count",
                "ray_vllm_request_prompt_tokens_sum",
                "ray_vllm_request_generation_tokens_sum",
                "ray_vllm_inter_token_latency_seconds_sum",
                "ray_vllm_inter_token_latency_seconds_count",
            ),
            id="vllm-through-ray-keeps-histogram-suffixes",
        ),
    ],
)
def test_operating_point_names(profile: EngineMetrics, names: tuple[str, ...]) -> None:
    assert tuple(getattr(profile, field) for field in FIELDS) == names


@pytest.mark.parametrize(
    ("profile", "older"),
    [
        pytest.param(
            VLLM,
            ("vllm:time_per_output_token_seconds_sum", "vllm:time_per_output_token_seconds_count"),
            id="vllm",
        ),
        pytest.param(
            THROUGH_RAY,
            (
                "ray_vllm_time_per_output_token_seconds_sum",
                "ray_vllm_time_per_output_token_seconds_count",
            ),
            id="vllm-through-ray",
        ),
    ],
)
def test_the_older_latency_name_is_queried_too(
    profile: EngineMetrics, older: tuple[str, str]
) -> None:
    signals = profile.signals()
    assert (
        signals[TOKEN_LATENCY_SUM_LEGACY].metric,
        signals[TOKEN_LATENCY_COUNT_LEGACY].metric,
    ) == (older)


def test_sglang_reads_one_series_for_two_signals_and_queries_each_metric_once() -> None:
    assert SGLANG.shared_series() == {
        FINISHED_PROMPT_TOKENS: PREFIX_CACHE_QUERIES,
        FINISHED_GENERATION_TOKENS: GENERATION_TOKENS_AT_FINISH,
    }
    signals = SGLANG.signals()
    assert FINISHED_PROMPT_TOKENS not in signals and FINISHED_GENERATION_TOKENS not in signals
    metrics = [(s.metric, s.matchers) for s in signals.values()]
    assert len(metrics) == len(set(metrics))
    # Per engine and round: 9 series before the operating point, 12 with it (18 for vLLM), a
    # rollout engine's generation gauge and its pod's working set (none asked of the trainer's
    # engines through Ray).
    assert (len(SGLANG.signals()), len(VLLM.signals()), len(THROUGH_RAY.signals())) == (14, 20, 18)
    assert VLLM.shared_series() == {}


@pytest.mark.parametrize(
    ("spec", "shared"),
    [
        pytest.param({"engine": "sglang"}, True, id="sglang-as-shipped"),
        pytest.param(
            {"engine": "sglang", "metricNames": {"prefixCacheQueriesTotal": "my_queries_total"}},
            False,
            id="sglang-with-other-prefix-queries-queries-prompt-tokens-itself",
        ),
    ],
)
def test_an_override_ends_the_sharing(spec: dict[str, Any], shared: bool) -> None:
    profile = engine_metrics(role(**spec))
    signals = profile.signals()
    assert (FINISHED_PROMPT_TOKENS in profile.shared_series()) is shared
    assert (FINISHED_PROMPT_TOKENS in signals) is not shared
    if not shared:
        assert signals[FINISHED_PROMPT_TOKENS].metric == "sglang:prompt_tokens_total"
        assert signals[PREFIX_CACHE_QUERIES].metric == "my_queries_total"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"metricNames": {"kvCacheUsage": "my_kv"}}, VLLM, id="vllm-override-keeps"),
        pytest.param(
            {"engine": "sglang", "metricNames": {"requestsRunning": "my_running"}},
            SGLANG,
            id="sglang-override-keeps",
        ),
        pytest.param(
            {
                "engine": "custom",
                "metricNames": {
                    "generationTokensTotal": "t_total",
                    "requestsRunning": "r",
                    "requestsWaiting": "w",
                },
            },
            None,
            id="custom-has-none",
        ),
    ],
)
def test_metric_names_keep_the_engines_operating_point(
    spec: dict[str, Any], expected: EngineMetrics | None
) -> None:
    profile = engine_metrics(role(**spec))
    names = tuple(getattr(profile, field) for field in FIELDS)
    assert names == tuple(getattr(expected, field) if expected else None for field in FIELDS)


VLLM_SERIES = {
    FINISHED_REQUESTS: one(10.0),
    FINISHED_PROMPT_TOKENS: one(10_240.0),
    FINISHED_GENERATION_TOKENS: one(20_480.0),
}


def latency(total: float, count: float, *, older: bool = False) -> dict[str, list[Series]]:
    """The latency histogram's _sum and _count, under vLLM's current or older name."""
    if older:
        return {TOKEN_LATENCY_SUM_LEGACY: one(total), TOKEN_LATENCY_COUNT_LEGACY: one(count)}
    return {TOKEN_LATENCY_SUM: one(total), TOKEN_LATENCY_COUNT: one(count)}


@pytest.mark.parametrize(
    ("profile", "series", "expected"),
    [
        pytest.param(
            VLLM,
            {**VLLM_SERIES, **latency(40.0, 500.0)},
            (10.0, 10_240.0, 20_480.0, 40.0, 500.0),
            id="vllm-0.11-inter-token-latency",
        ),
        pytest.param(
            VLLM,
            {**VLLM_SERIES, **latency(30.0, 400.0, older=True)},
            (10.0, 10_240.0, 20_480.0, 30.0, 400.0),
            id="vllm-before-0.11-time-per-output-token",
        ),
        pytest.param(
            VLLM,
            {**VLLM_SERIES, **latency(40.0, 500.0), **latency(40.0, 500.0, older=True)},
            (10.0, 10_240.0, 20_480.0, 40.0, 500.0),
            id="vllm-0.11-exports-both-names-alike",
        ),
        pytest.param(
            VLLM,
            {TOKEN_LATENCY_SUM: one(40.0), TOKEN_LATENCY_COUNT_LEGACY: one(400.0)},
            (None, None, None, 40.0, None),
            id="latency-never-mixes-the-two-names",
        ),
        pytest.param(
            VLLM,
            {
                FINISHED_REQUESTS: [*one(3.0, engine="0"), *one(4.0, engine="1")],
                TOKEN_LATENCY_SUM: [*one(10.0, engine="0"), *one(20.0, engine="1")],
                TOKEN_LATENCY_COUNT: [*one(100.0, engine="0"), *one(300.0, engine="1")],
            },
            (7.0, None, None, 30.0, 400.0),
            id="data-parallel-engines-of-a-pod-are-summed",
        ),
        pytest.param(
            SGLANG,
            {
                FINISHED_REQUESTS: one(10.0),
                PREFIX_CACHE_QUERIES: one(10_240.0),
                GENERATION_TOKENS_AT_FINISH: one(20_480.0),
                **latency(40.0, 500.0),
            },
            (10.0, 10_240.0, 20_480.0, 40.0, 500.0),
            id="sglang-prompt-and-generation-from-shared-series",
        ),
        pytest.param(VLLM, {}, (None,) * 5, id="missing-series-are-none"),
    ],
)
def test_samples_fill_the_operating_point(
    profile: EngineMetrics,
    series: dict[str, list[Series]],
    expected: tuple[float | None, ...],
) -> None:
    found = sample(profile, {**base(), **series})
    assert tuple(getattr(found, field) for field in FIELDS) == expected


def test_through_ray_the_same_series_fill_the_same_fields() -> None:
    """Sampling goes by signal name, so a Ray-renamed page fills the fields as a direct one."""
    series = {**base(), **VLLM_SERIES, TOKEN_LATENCY_SUM: one(40.0)}
    assert sample(THROUGH_RAY, series) == sample(VLLM, series)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(-1.0, id="negative"),
        pytest.param(1e16, id="implausibly-large"),
    ],
)
def test_garbage_values_become_none(garbage: float) -> None:
    series = {
        name: one(garbage)
        for name in (
            FINISHED_REQUESTS,
            FINISHED_PROMPT_TOKENS,
            FINISHED_GENERATION_TOKENS,
            TOKEN_LATENCY_SUM,
            TOKEN_LATENCY_COUNT,
        )
    }
    clean = sanitize_sample(sample(VLLM, {**base(), **series}))
    assert clean is not None  # the sample itself stays: only the garbage goes
    assert tuple(getattr(clean, field) for field in FIELDS) == (None,) * 5
