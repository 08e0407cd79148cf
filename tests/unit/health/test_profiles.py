"""Engine, trainer and verifier metric names, and one pod's raw series -> detector samples."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rljob.api.spec import RolloutRole
from rljob.dev.traces import Cycle, EngineProfile, SimulatedEngine, SimulatedVerifier
from rljob.dev.traces import VerifierProfile as TraceVerifierProfile
from rljob.health import EngineSample
from rljob.health.profiles import (
    ENGINE_POLICY_GENERATION,
    GENERATION_RATE,
    GENERATION_TOKENS,
    GENERATION_TOKENS_AT_FINISH,
    KV_CACHE_USAGE,
    MEMORY_WORKING_SET,
    PAUSED_REQUESTS,
    PREEMPTIONS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    SGLANG,
    SLEEP_STATE,
    TRAINER,
    TRAINER_HEARTBEAT,
    TRAINER_PHASE,
    TRAINER_STEP,
    VERIFIER,
    VERIFIER_BUCKETS,
    VERIFIER_ERRORS,
    VLLM,
    MissingMetricNamesError,
    Series,
    Signal,
    SleepGauge,
    engine_metrics,
    engine_samples,
    trainer_reading,
    verifier_samples,
)
from rljob.vocabulary.enums import Engine

STALE = 15.0


def role(**fields: Any) -> RolloutRole:
    return RolloutRole.model_validate(fields)


def series(points: list[tuple[float, float]], **labels: str) -> Series:
    return Series(tuple(sorted(labels.items())), tuple(points))


def test_vllm_names_are_the_designs() -> None:
    assert {signal.metric for signal in VLLM.signals().values()} == {
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
        "vllm:engine_sleep_state",
        # Before 0.9 (vllm/v1/metrics/loggers.py @a6f0308c), read where the above are missing.
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total",
        # The operating point: request length histograms observed at finish, decode latency.
        "vllm:request_generation_tokens_count",
        "vllm:request_prompt_tokens_sum",
        "vllm:request_generation_tokens_sum",
        "vllm:inter_token_latency_seconds_sum",
        "vllm:inter_token_latency_seconds_count",
        # Before 0.11 (PR #24110), read where inter_token_latency_seconds is missing.
        "vllm:time_per_output_token_seconds_sum",
        "vllm:time_per_output_token_seconds_count",
        # The rljob SDK's engine-side gauge: drains and the policy-current gate read it.
        "rljob_engine_policy_generation",
        # Host memory for the memory-growth detector: the pod cgroup's working set (cAdvisor,
        # through Prometheus; the SDK plugin's process-tree RSS is the gang engines' only).
        "container_memory_working_set_bytes",
    }
    sleep = VLLM.signals()[SLEEP_STATE]
    assert sleep.matchers == (("sleep_state", "awake"),)
    assert engine_metrics(role()) == VLLM


def test_sglang_names_follow_its_collector() -> None:
    signals = engine_metrics(role(engine="sglang")).signals()
    assert signals[GENERATION_TOKENS].metric == "sglang:realtime_tokens_total"
    assert signals[GENERATION_TOKENS].matchers == (("mode", "decode"),)
    assert signals[GENERATION_TOKENS_AT_FINISH].metric == "sglang:generation_tokens_total"
    assert signals[GENERATION_RATE].metric == "sglang:gen_throughput"
    assert signals[REQUESTS_RUNNING].metric == "sglang:num_running_reqs"
    assert signals[REQUESTS_WAITING].metric == "sglang:num_queue_reqs"
    assert signals[KV_CACHE_USAGE].metric == "sglang:token_usage"
    assert signals[PREFIX_CACHE_HITS].metric == "sglang:cached_tokens_total"
    assert signals[PREFIX_CACHE_QUERIES].metric == "sglang:prompt_tokens_total"
    assert signals[PREEMPTIONS].metric == "sglang:num_retracted_requests_total"
    # num_paused_reqs is zeroed after every stats log: pause is read from frozen gauges.
    assert PAUSED_REQUESTS not in signals
    assert SLEEP_STATE not in signals
    assert SGLANG.engine_label == "dp_rank"
    assert SGLANG.gauges_freeze


def test_custom_engine_uses_metric_names_and_overrides_apply_to_builtins() -> None:
    custom = engine_metrics(
        role(
            engine="custom",
            metricNames={
                "generationTokensTotal": "my_tokens_total",
                "requestsRunning": "my_running",
                "requestsWaiting": "my_waiting",
                "sleepState": "my_sleeping",
            },
        )
    )
    assert custom.generation_tokens_total == "my_tokens_total"
    assert custom.kv_cache_usage is None
    assert custom.sleep == SleepGauge("my_sleeping")
    assert custom.engine_label is None
    assert set(custom.signals()) == {
        GENERATION_TOKENS,
        REQUESTS_RUNNING,
        REQUESTS_WAITING,
        SLEEP_STATE,
        ENGINE_POLICY_GENERATION,
        MEMORY_WORKING_SET,
    }
    overridden = engine_metrics(role(metricNames={"requestsWaiting": "vllm:waiting_by_me"}))
    assert overridden.requests_waiting == "vllm:waiting_by_me"
    assert overridden.generation_tokens_total == VLLM.generation_tokens_total
    assert overridden.sleep == VLLM.sleep


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param({}, "rljob_engine_policy_generation", id="default-sdk-gauge"),
        pytest.param(
            {"policyGeneration": "engine_weight_version"}, "engine_weight_version", id="named"
        ),
    ],
)
def test_metric_names_may_name_the_policy_generation_gauge(
    names: dict[str, str], expected: str
) -> None:
    profile = engine_metrics(role(metricNames={"requestsWaiting": "vllm:waiting", **names}))
    assert profile.signals()[ENGINE_POLICY_GENERATION].metric == expected


def test_custom_engine_without_required_names_is_an_error() -> None:
    bad = RolloutRole.model_construct(engine=Engine.CUSTOM, metric_names=None)
    with pytest.raises(MissingMetricNamesError):
        engine_metrics(bad)


def test_trainer_and_verifier_names_match_the_simulator() -> None:
    from rljob.dev.sim import models

    assert TRAINER.heartbeat == models.TRAINER_HEARTBEAT
    assert TRAINER.step == models.TRAINER_STEP
    assert TRAINER.phase == models.TRAINER_PHASE
    assert TRAINER.policy_generation == models.POLICY_GENERATION
    assert VERIFIER.duration_buckets == models.VERIFIER_DURATION + "_bucket"
    assert VERIFIER.errors_total == models.VERIFIER_ERRORS
    assert VLLM.generation_tokens_total == models.VLLM_GENERATION_TOKENS
    assert VLLM.sleep is not None
    assert VLLM.sleep.metric == models.VLLM_SLEEP_STATE


def _engine_series(samples: list[EngineSample]) -> dict[str, list[Series]]:
    """What a source returns for one vLLM engine pod with these samples."""
    labels = {"engine": "0", "model_name": "m"}

    def one(value: Any) -> list[Series]:
        return [series([(s.t, float(value(s))) for s in samples], **labels)]

    return {
        GENERATION_TOKENS: one(lambda s: s.generated_tokens_total),
        REQUESTS_RUNNING: one(lambda s: s.running),
        REQUESTS_WAITING: one(lambda s: s.waiting),
        KV_CACHE_USAGE: one(lambda s: s.kv_usage),
        PREFIX_CACHE_HITS: one(lambda s: s.prefix_hits_total),
        PREFIX_CACHE_QUERIES: one(lambda s: s.prefix_queries_total),
        PREEMPTIONS: one(lambda s: s.preemptions_total),
        SLEEP_STATE: one(lambda s: 0.0 if s.sleeping else 1.0),
    }


def test_engine_samples_round_trip_a_simulated_engine() -> None:
    engine = SimulatedEngine(EngineProfile(cycle=Cycle(generate=60, drain=10, train=30)))
    expected = [engine.sample(float(t)) for t in range(0, 300, 5)]
    samples = engine_samples(VLLM, _engine_series(expected), STALE)
    assert len(samples) == len(expected)
    for got, want in zip(samples, expected, strict=True):
        assert got.t == want.t
        assert got.generated_tokens_total == pytest.approx(want.generated_tokens_total)
        assert (got.running, got.waiting) == (want.running, want.waiting)
        assert got.sleeping == want.sleeping
        assert got.paused is None  # vLLM has no paused gauge
        assert got.prefix_hits_total == pytest.approx(want.prefix_hits_total)
    assert any(s.sleeping for s in samples)
    assert any(s.saturated for s in samples)


def test_engines_in_one_pod_are_summed_and_duplicate_scrapes_are_not() -> None:
    points = [(10.0, 100.0), (20.0, 200.0)]
    data = {
        # Two data-parallel engines, the first scraped twice (two scrape jobs).
        GENERATION_TOKENS: [
            series(points, engine="0", job="a"),
            series(points, engine="0", job="b"),
            series([(10.0, 50.0), (20.0, 70.0)], engine="1", job="a"),
        ],
        REQUESTS_RUNNING: [
            series([(10.0, 4), (20.0, 4)], engine="0"),
            series([(10.0, 1)], engine="1"),
        ],
        REQUESTS_WAITING: [series([(10.0, 2), (20.0, 2)], engine="0")],
        KV_CACHE_USAGE: [series([(10.0, 0.8)], engine="0"), series([(10.0, 0.4)], engine="1")],
        SLEEP_STATE: [
            series([(10.0, 1.0), (20.0, 1.0)], engine="0"),
            series([(20.0, 0.0)], engine="1"),
        ],
    }
    first, second = engine_samples(VLLM, data, STALE)
    assert first.generated_tokens_total == 150.0
    assert second.generated_tokens_total == 270.0
    assert first.running == 5.0
    assert second.running == 5.0  # engine 1's gauge from t=10 is still fresh at t=20
    assert first.kv_usage == pytest.approx(0.6)
    assert first.sleeping is False
    assert second.sleeping is True  # one engine of the pod sleeps
    assert first.prefix_hits_total is None


def test_missing_required_values_give_no_sample_and_stale_values_expire() -> None:
    data = {
        GENERATION_TOKENS: [series([(0.0, 1.0), (10.0, 2.0), (100.0, 3.0)])],
        REQUESTS_RUNNING: [series([(0.0, 1.0), (100.0, 1.0)])],
        REQUESTS_WAITING: [series([(0.0, 1.0), (10.0, 1.0), (100.0, 1.0)])],
        KV_CACHE_USAGE: [series([(0.0, 0.5)])],
    }
    samples = engine_samples(VLLM, data, STALE)
    assert [s.t for s in samples] == [0.0, 10.0, 100.0]  # running at 0 still fresh at 10
    assert samples[0].kv_usage == 0.5
    assert samples[2].kv_usage is None  # 100 s old: stale
    assert engine_samples(VLLM, {GENERATION_TOKENS: data[GENERATION_TOKENS]}, STALE) == []
    only_late = {**data, REQUESTS_RUNNING: [series([(100.0, 1.0)])]}
    assert [s.t for s in engine_samples(VLLM, only_late, STALE)] == [100.0]


def test_custom_sleep_gauge_is_nonzero_while_asleep() -> None:
    custom = engine_metrics(
        role(
            engine="custom",
            metricNames={
                "generationTokensTotal": "t",
                "requestsRunning": "r",
                "requestsWaiting": "w",
                "sleepState": "s",
            },
        )
    )
    base = {
        GENERATION_TOKENS: [series([(1.0, 1.0), (2.0, 2.0)])],
        REQUESTS_RUNNING: [series([(1.0, 1.0), (2.0, 1.0)])],
        REQUESTS_WAITING: [series([(1.0, 1.0), (2.0, 1.0)])],
        SLEEP_STATE: [series([(1.0, 0.0), (2.0, 2.0)])],
    }
    awake, asleep = engine_samples(custom, base, STALE)
    assert awake.sleeping is False
    assert asleep.sleeping is True


def test_sglang_paused_requests_pause_the_engine() -> None:
    data = {
        GENERATION_TOKENS: [series([(1.0, 1.0), (2.0, 1.0)], dp_rank="0")],
        REQUESTS_RUNNING: [series([(1.0, 0.0), (2.0, 0.0)], dp_rank="0")],
        REQUESTS_WAITING: [series([(1.0, 3.0), (2.0, 3.0)], dp_rank="0")],
        PAUSED_REQUESTS: [series([(1.0, 0.0), (2.0, 3.0)], dp_rank="0")],
    }
    first, second = engine_samples(SGLANG, data, STALE)
    assert (first.paused, second.paused) == (False, True)
    assert first.sleeping is None


def test_verifier_samples_from_bucket_series() -> None:
    verifier = SimulatedVerifier(TraceVerifierProfile())
    expected = [verifier.sample(float(t)) for t in range(0, 60, 10)]
    bounds = [bound for bound, _ in expected[0].buckets]
    data = {
        VERIFIER_BUCKETS: [
            series(
                [(s.t, dict(s.buckets)[bound]) for s in expected],
                le="+Inf" if math.isinf(bound) else repr(bound),
            )
            for bound in bounds
        ]
        + [series([(0.0, 1.0)], le="garbage")],
        VERIFIER_ERRORS: [series([(s.t, s.errors_total or 0.0) for s in expected])],
    }
    samples = verifier_samples(VERIFIER, data, STALE)
    assert [s.t for s in samples] == [s.t for s in expected]
    assert samples[-1].buckets == tuple(sorted(expected[-1].buckets))
    assert samples[-1].errors_total == expected[-1].errors_total
    without_inf = {VERIFIER_BUCKETS: [series([(0.0, 1.0)], le="1.0")]}
    assert verifier_samples(VERIFIER, without_inf, STALE) == []


def test_trainer_reading_takes_the_newest_values_and_current_phase() -> None:
    data = {
        TRAINER_HEARTBEAT: [series([(10.0, 1000.0), (20.0, 1010.0)])],
        TRAINER_STEP: [series([(20.0, 7.0)])],
        TRAINER_PHASE: [
            series([(10.0, 1.0), (20.0, 0.0)], phase="train"),
            series([(10.0, 0.0), (20.0, 1.0)], phase="checkpointing"),
            # A phase series that stopped earlier is over, whatever its last value.
            series([(5.0, 1.0)], phase="waiting_for_rollouts"),
        ],
    }
    reading = trainer_reading(TRAINER, data)
    assert reading is not None
    assert reading.heartbeat_at == 1010.0
    assert reading.step == 7.0
    assert reading.phase == "checkpointing"
    assert reading.t == 20.0
    assert reading.policy_generation is None
    assert trainer_reading(TRAINER, {}) is None


def test_signal_matchers() -> None:
    signal = Signal("x", "m", (("sleep_state", "awake"),))
    assert signal.matches({"sleep_state": "awake", "engine": "0"})
    assert not signal.matches({"sleep_state": "discard_all"})
