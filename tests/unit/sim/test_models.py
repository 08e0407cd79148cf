"""The workload models produce the profile's rates and the intended fault semantics; counters
never go down; pages parse as Prometheus text with vLLM's and the SDK's names."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim import models
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models import EngineModel, Mode, ReferenceModel, TrainerModel, VerifierModel
from rljob.dev.sim.profiles import (
    EngineProfile,
    ReferenceProfile,
    TrainerProfile,
    VerifierProfile,
)
from rljob.dev.traces import Cycle, LoadSwings
from rljob.health.verifier import histogram_quantile
from rljob.sdk import metrics as rl_metrics
from rljob.sdk import phase_time
from rljob.sdk import progress as sdk_progress
from rljob.sdk.progress import PHASES as SDK_PHASES
from rljob.vocabulary.phases import CHECKPOINTING, PHASES, WAITING_FOR_ROLLOUTS

T0 = 1_800_000_000.0


def run(model: EngineModel, seconds: float, faults: Active = NO_FAULTS, step: float = 1.0) -> None:
    start = model.t
    for index in range(1, int(seconds / step) + 1):
        model.advance(start + index * step, faults)


def rate_over(model: EngineModel, seconds: float, faults: Active = NO_FAULTS) -> float:
    before, start = model.tokens, model.t
    run(model, seconds, faults)
    return (model.tokens - before) / (model.t - start)


def samples(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} from a text page."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def value(page: str, name: str, **labels: str) -> float:
    found = [
        v
        for (n, ls), v in samples(page).items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_phase_names_are_the_sdks_and_the_detectors() -> None:
    assert models.SDK_PHASES == SDK_PHASES
    assert models.PHASE_WAITING_FOR_ROLLOUTS == WAITING_FOR_ROLLOUTS
    assert models.PHASE_CHECKPOINTING == CHECKPOINTING
    assert models.PHASE_TRAINING in SDK_PHASES
    assert models.PHASE_EVALUATING == sdk_progress.EVALUATING
    assert models.PHASE_SECONDS == phase_time.PHASE_SECONDS
    assert models.STEP_PHASES == phase_time.STEP_PHASES
    assert models.COUNTED_PHASES == phase_time.COUNTED_PHASES
    assert phase_time.COUNTED_PHASES == PHASES  # the SDK's own spelling is the vocabulary's
    assert set(phase_time.PHASE_SECONDS_OF.values()) <= set(models.COUNTED_PHASES)


def test_rl_canary_names_are_the_sdks() -> None:
    assert models.RL_PREFIX == rl_metrics.PREFIX
    assert models.RL_STEP == rl_metrics.STEP
    assert models.RL_GENERATED_TOKENS == rl_metrics.GENERATED_TOKENS
    assert models.RL_CANARIES == rl_metrics.CANARIES  # keywords and help texts
    exposed = {models.RL_STEP, *(models.RL_PREFIX + k for k in models.RL_CANARIES)}
    assert exposed == set(rl_metrics.GAUGES)


@pytest.mark.parametrize("throughput", [400.0, 800.0, 2000.0])
def test_saturated_engine_generates_its_throughput(throughput: float) -> None:
    engine = EngineModel(EngineProfile(throughput=throughput), "seed", T0)
    rate = rate_over(engine, 600)
    assert rate == pytest.approx(throughput, rel=0.02)
    assert engine.mode == Mode.SATURATED
    assert engine.running == 64 and engine.waiting > 0
    assert engine.queries == pytest.approx(engine.tokens * 1024 / 2048)
    assert engine.hits / engine.queries == pytest.approx(0.7)


def test_noise_is_per_step_and_seeded() -> None:
    a, b, c = (EngineModel(EngineProfile(noise=0.1), seed, T0) for seed in ("x", "x", "y"))
    for model in (a, b, c):
        run(model, 30)
    assert a.tokens == b.tokens != c.tokens
    per_second = []
    engine = EngineModel(EngineProfile(noise=0.1), "z", T0)
    for _ in range(200):
        before = engine.tokens
        engine.advance(engine.t + 1)
        per_second.append(engine.tokens - before)
    spread = (max(per_second) - min(per_second)) / 800
    assert 0.2 < spread < 1.0


def test_a_long_gap_is_integrated_in_bounded_steps() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    engine.advance(T0 + 86_400)
    assert engine.tokens == pytest.approx(800 * 86_400)


def test_drift_lowers_throughput_and_shows_cache_symptoms() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    run(engine, 60)
    hits, queries, preemptions = engine.hits, engine.queries, engine.preemptions
    drift = Active(drifts=((engine.t, 0.3, 0.0),))
    assert rate_over(engine, 60, drift) == pytest.approx(560)
    hit_rate = (engine.hits - hits) / (engine.queries - queries)
    assert hit_rate == pytest.approx(0.7 * 0.7**1.5)
    assert (engine.preemptions - preemptions) / 60 * 60 == pytest.approx(0.1 + 0.3 * 20)
    assert engine.state()["expected_tokens_per_second"] == pytest.approx(560)


def test_gradual_drift_reaches_its_drop_over_its_time() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    drift = Active(drifts=((T0, 0.3, 100.0),))
    assert engine.expected_rate(T0 + 50, drift) == pytest.approx(800 * 0.85)
    assert engine.expected_rate(T0 + 100, drift) == pytest.approx(560)
    assert engine.expected_rate(T0 + 1000, drift) == pytest.approx(560)
    assert engine.expected_rate(T0 - 1, drift) == pytest.approx(800)


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_is_flat_counters_and_the_sleep_state_gauge(level: int) -> None:
    engine = EngineModel(EngineProfile(), "s", T0)
    run(engine, 10)
    before = engine.render()
    asleep = Active(sleep=(engine.t, level))
    run(engine, 30, asleep)
    page = engine.render()
    for name in (
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
    ):
        assert value(page, name) == value(before, name)
    assert value(page, "vllm:num_requests_running") == 0
    assert value(page, "vllm:num_requests_waiting") == 0
    assert value(page, "vllm:engine_sleep_state", sleep_state="awake") == 0
    assert value(page, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == (level == 1)
    assert value(page, "vllm:engine_sleep_state", sleep_state="discard_all") == (level == 2)
    awake = Active(sleep=(engine.t, 0))
    assert rate_over(engine, 30, awake) == pytest.approx(800, rel=0.05)
    assert value(engine.render(), "vllm:engine_sleep_state", sleep_state="awake") == 1


def test_stall_keeps_requests_pending_with_a_flat_counter() -> None:
    engine = EngineModel(EngineProfile(), "s", T0)
    run(engine, 10)
    tokens = engine.tokens
    run(engine, 30, Active(stall_since=engine.t))
    assert engine.tokens == tokens
    assert engine.mode == Mode.STALLED
    assert engine.running > 0 and engine.waiting > 0 and engine.sleep_level == 0


def test_load_swing_unsaturates_and_lowers_throughput() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    low = Active(load=(T0, 0, None))
    assert rate_over(engine, 30, low) == pytest.approx(320)
    assert engine.waiting == 0 and engine.running == round(64 * 0.4)
    lower = Active(load=(T0, 0, 0.25))
    assert rate_over(engine, 30, lower) == pytest.approx(200)
    queued = Active(load=(T0, 7, None))
    assert rate_over(engine, 30, queued) == pytest.approx(800)
    assert engine.waiting == 7 and engine.running == 64


def test_cycle_and_load_swings_from_the_traces_profiles() -> None:
    profile = EngineProfile(
        noise=0.0,
        cycle=Cycle(generate=20, drain=5, train=10, weight_sync=5),
        load_swings=LoadSwings(period=100, low_for=0, low_load=0.5),
    )
    engine = EngineModel(profile, "s", T0)
    seen = []
    for second in range(40):
        engine.advance(T0 + second + 0.5)
        seen.append((engine.mode, engine.running, engine.waiting, engine.sleep_level))
    modes = [mode for mode, *_ in seen]
    assert modes[:15] == [Mode.SATURATED] * 15
    assert modes[15:20] == [Mode.DRAINING] * 5
    assert modes[20:30] == [Mode.ASLEEP] * 10
    assert modes[30:35] == [Mode.PAUSED] * 5
    assert modes[35:] == [Mode.SATURATED] * 5
    assert all(waiting == 0 for _, _, waiting, _ in seen[15:35])
    assert all(running == 0 and level == 1 for _, running, _, level in seen[20:30])
    assert all(running == 0 and level == 0 for _, running, _, level in seen[30:35])
    assert engine.expected_rate(T0 + 25) == engine.expected_rate(T0 + 32) == 0


def test_counters_never_decrease_under_random_faults() -> None:
    rng = random.Random(7)
    engine = EngineModel(EngineProfile(), "s", T0)
    names = [
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
    ]
    last = dict.fromkeys(names, 0.0)
    for _ in range(120):
        t = engine.t + rng.uniform(0.01, 5)
        choice = rng.choice(["none", "drift", "sleep", "stall", "load"])
        faults = {
            "none": Active(),
            "drift": Active(drifts=((engine.t, rng.uniform(0, 0.9), rng.uniform(0, 60)),)),
            "sleep": Active(sleep=(engine.t, 1)),
            "stall": Active(stall_since=engine.t),
            "load": Active(load=(engine.t, 0, None)),
        }[choice]
        engine.advance(t, faults)
        page = engine.render()
        for name in names:
            current = value(page, name)
            assert current >= last[name]
            last[name] = current


def test_engine_page_has_vllm_names_types_and_labels() -> None:
    engine = EngineModel(EngineProfile(model_name="qwen", engine="3"), "s", T0)
    run(engine, 5)
    families = {f.name: f for f in text_string_to_metric_families(engine.render())}
    expected = {
        "vllm:generation_tokens": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:prefix_cache_queries": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:request_success": "counter",
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:engine_sleep_state": "gauge",
    }
    for name, kind in expected.items():
        assert families[name].type == kind, name
        for sample in families[name].samples:
            assert sample.labels["model_name"] == "qwen"
            assert sample.labels["engine"] == "3"
    states = {s.labels["sleep_state"] for s in families["vllm:engine_sleep_state"].samples}
    assert states == {"awake", "weights_offloaded", "discard_all"}
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert reasons == {"stop", "length"}
    assert 0 <= value(engine.render(), "vllm:kv_cache_usage_perc") <= 1
    assert value(engine.render(), "process_start_time_seconds") == T0


PROFILE = TrainerProfile(
    wait_for_rollouts=2, step_seconds=3, checkpoint_every=5, checkpoint_seconds=2
)


def trainer_page(trainer: TrainerModel) -> dict[str, float]:
    page = trainer.render()
    result = {
        name: value(page, name)
        for name in (
            "rljob_trainer_step",
            "rljob_trainer_heartbeat_timestamp_seconds",
            "rljob_policy_generation",
            "rljob_checkpoint_step",
        )
    }
    phases = [
        s
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if f.name == "rljob_trainer_phase"
    ]
    assert sorted(s.labels["phase"] for s in phases) == sorted(models.SDK_PHASES)
    assert sum(s.value for s in phases) == 1
    result["phase"] = next(models.SDK_PHASES.index(s.labels["phase"]) for s in phases if s.value)
    return result


def test_trainer_steps_phases_and_checkpoints_follow_the_profile() -> None:
    trainer = TrainerModel(PROFILE, T0)
    seen = []
    for tenth in range(1, 10 * 60):
        t = T0 + tenth / 10
        trainer.advance(t)
        seen.append((round(t - T0, 1), trainer.phase.name, trainer.step))
        page = trainer_page(trainer)
        assert (
            t - page["rljob_trainer_heartbeat_timestamp_seconds"]
            <= PROFILE.heartbeat_interval + 1e-6
        )
    assert dict(((s, p) for s, p, _ in seen))[1.0] == WAITING_FOR_ROLLOUTS
    assert dict(((s, p) for s, p, _ in seen))[2.5] == models.PHASE_TRAINING
    # 5 steps of 5 s, then a 2 s checkpoint: step 5 at 25 s, checkpoint done at 27 s.
    assert dict(((s, st) for s, _, st in seen))[24.9] == 4
    assert dict(((s, p) for s, p, _ in seen))[26.0] == CHECKPOINTING
    assert trainer.step == 11 and trainer.generation == 11
    assert trainer.checkpoint_step == 10
    assert list(trainer.checkpoints_due) == [5, 10]


def test_a_hung_trainer_stops_its_heartbeat_and_resumes_when_cleared() -> None:
    trainer = TrainerModel(PROFILE, T0)
    trainer.advance(T0 + 7)
    hang = Active(hang_since=T0 + 7)
    frozen = trainer_page(trainer)
    for second in range(8, 40):
        trainer.advance(T0 + second, hang)
        assert trainer_page(trainer) == frozen
    assert trainer.hung and trainer.state()["hung"]
    trainer.advance(T0 + 41)
    assert not trainer.hung
    assert trainer_page(trainer)["rljob_trainer_heartbeat_timestamp_seconds"] >= T0 + 40
    assert trainer.step == 1  # 7 s of progress before the hang plus 1 s after
    trainer.advance(T0 + 45)
    assert trainer.step == 2


def test_stall_on_a_trainer_is_a_hang() -> None:
    trainer = TrainerModel(PROFILE, T0)
    trainer.advance(T0 + 1)
    trainer.advance(T0 + 100, Active(stall_since=T0 + 1))
    assert trainer.hung and trainer.step == 0
    assert trainer.heartbeat == pytest.approx(T0 + 1)


def test_trainer_resumes_from_a_checkpoint_step() -> None:
    trainer = TrainerModel(PROFILE, T0, step=1200, external_checkpoints=True)
    trainer.advance(T0 + 30)
    assert trainer.step == 1205
    assert trainer.checkpoint_step == 1200  # a writer commits it, not the model
    trainer.committed(1205)
    assert trainer_page(trainer)["rljob_checkpoint_step"] == 1205


def verifier_p99(model: VerifierModel, start: list[float]) -> float | None:
    bounds = list(model.bounds)
    increase = [now - before for now, before in zip(model.counts, start, strict=True)]
    return histogram_quantile(0.99, bounds, increase)


def test_verifier_latency_histogram_and_injected_p99() -> None:
    profile = VerifierProfile(requests_per_second=50, median_latency=0.2, sigma=0.5)
    verifier = VerifierModel(profile, "s", T0)
    verifier.advance(T0 + 300)
    p99 = verifier_p99(verifier, [0.0] * len(verifier.counts))
    # True p99 0.64 s; linear interpolation inside its bucket, as Prometheus does.
    assert 0.2 * math.exp(2.326 * 0.5) == pytest.approx(0.64, abs=0.01)
    assert p99 is not None and 0.5 < p99 < 1.0
    assert verifier.counts[-1] == pytest.approx(50 * 300, rel=0.05)
    start = list(verifier.counts)
    slow = Active(p99_seconds=8.0, error_rate=0.1)
    errors = verifier.errors
    verifier.advance(T0 + 600, slow)
    slow_p99 = verifier_p99(verifier, start)
    assert slow_p99 is not None and 5.0 < slow_p99 < 10.0
    served = verifier.counts[-1] - start[-1]
    assert (verifier.errors - errors) / served == pytest.approx(0.1)
    page = verifier.render()
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert families["rljob_verifier_request_duration_seconds"].type == "histogram"
    assert families["rljob_verifier_request_errors"].type == "counter"
    buckets = [
        s.value
        for s in families["rljob_verifier_request_duration_seconds"].samples
        if s.name.endswith("_bucket")
    ]
    assert buckets == sorted(buckets) and len(buckets) == len(profile.bounds) + 1


def test_reference_throughput_and_stall() -> None:
    reference = ReferenceModel(ReferenceProfile(noise=0.0), "s", T0)
    reference.advance(T0 + 100)
    assert reference.tokens == pytest.approx(200_000)
    reference.advance(T0 + 200, Active(stall_since=T0 + 100))
    assert reference.tokens == pytest.approx(200_000)
    assert value(reference.render(), "rljob_reference_tokens_total") == 200_000


def test_a_new_profile_applies_from_then_on() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    engine.advance(T0 + 10)
    engine.set_profile(replace(engine.profile, throughput=1000, model_name="m2"))
    engine.advance(T0 + 20)
    assert engine.tokens == pytest.approx(18_000)
    assert 'model_name="m2"' in engine.render()


def test_without_periodic_beats_the_heartbeat_moves_at_phase_changes_only() -> None:
    trainer = TrainerModel(replace(PROFILE, heartbeat_interval=0), T0)
    trainer.advance(T0 + 1.5)
    assert trainer.heartbeat == T0
    trainer.advance(T0 + 4.5)
    assert trainer.heartbeat == T0 + 2  # waiting_for_rollouts -> training


def test_a_paused_vllm_reads_idle_and_a_paused_sglang_freezes_its_page() -> None:
    vllm = EngineModel(EngineProfile(), "s", T0)
    sglang = EngineModel(EngineProfile(exporter="sglang"), "s", T0)
    pages = []
    for engine in (vllm, sglang):
        run(engine, 5)
        tokens = engine.tokens
        run(engine, 5, Active(pause=(engine.t, True)))
        pages.append(engine.render())
        run(engine, 5, Active(pause=(engine.t - 5, True)))
        assert engine.tokens == tokens and engine.mode == Mode.PAUSED
    assert value(vllm.render(), "vllm:num_requests_running") == 0
    assert value(vllm.render(), "vllm:engine_sleep_state", sleep_state="awake") == 1
    # scheduler_metrics_mixin.py: gauges change only at a stats log, and num_paused_reqs is
    # zeroed after each; a paused scheduler logs nothing, so its page stands still.
    assert sglang.render() == pages[1]
    assert value(sglang.render(), "sglang:num_paused_reqs") == 0
    assert value(sglang.render(), "sglang:num_running_reqs") == 64


def test_sglang_page_has_sglangs_names_and_labels() -> None:
    engine = EngineModel(EngineProfile(exporter="sglang", model_name="qwen"), "s", T0)
    run(engine, 10)
    families = {f.name: f for f in text_string_to_metric_families(engine.render())}
    expected = {
        "sglang:generation_tokens": "counter",
        "sglang:prompt_tokens": "counter",
        "sglang:cached_tokens": "counter",
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
        "sglang:num_paused_reqs": "gauge",
        "sglang:gen_throughput": "gauge",
    }
    for name, kind in expected.items():
        assert families[name].type == kind, name
        (sample, *_) = families[name].samples
        assert sample.labels == {
            "model_name": "qwen", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
            "moe_ep_rank": "0",
        }  # fmt: skip
    assert not any(name.startswith("vllm:") for name in families)
    page = engine.render()
    # collector.py: the tokenizer counts a request's tokens once, when it finishes.
    assert value(page, "sglang:generation_tokens_total") == engine.finished_generation
    assert engine.finished_generation == engine.finished * 2048 <= engine.tokens
    assert value(page, "sglang:cached_tokens_total") / value(
        page, "sglang:prompt_tokens_total"
    ) == pytest.approx(0.7, abs=0.01)
