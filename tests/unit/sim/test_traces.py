"""The synthetic trace generator: seeded and reproducible, with the modes detectors rely on."""

from __future__ import annotations

import math

import pytest

from rljob.dev.traces import (
    Cycle,
    EngineProfile,
    LoadSwings,
    Mode,
    SimulatedEngine,
    SimulatedTrainer,
    SimulatedVerifier,
    TrainerProfile,
    VerifierProfile,
    engine_trace,
    fleet_trace,
)
from rljob.health import EngineSample, counter_delta


def test_the_same_seed_gives_the_same_trace() -> None:
    profile = EngineProfile(cycle=Cycle(), load_swings=LoadSwings())

    first = engine_trace(profile, 3600, seed=7, jitter=3)
    again = engine_trace(profile, 3600, seed=7, jitter=3)
    other = engine_trace(profile, 3600, seed=8, jitter=3)

    assert first == again
    assert first != other


def test_fleet_engines_get_their_own_noise() -> None:
    rounds = list(fleet_trace({"a": EngineProfile(), "b": EngineProfile()}, 600, seed=1))
    tokens = {name: sample.generated_tokens_total for name, sample in rounds}

    assert tokens["a"] != tokens["b"]


MODE_CASES = [
    (100.0, Mode.SATURATED, (True, False, False)),
    (570.0, Mode.DRAINING, (False, False, False)),
    (700.0, Mode.ASLEEP, (False, True, False)),
    (910.0, Mode.SYNCING, (False, False, True)),
]


@pytest.mark.parametrize(("t", "mode", "flags"), MODE_CASES, ids=str)
def test_cycle_modes_show_in_the_gauges(
    t: float, mode: Mode, flags: tuple[bool, bool, bool]
) -> None:
    profile = EngineProfile(cycle=Cycle())
    sample = SimulatedEngine(profile).sample(t)

    assert profile.mode(t) == mode
    assert (sample.saturated, sample.sleeping, sample.paused) == flags


def test_load_swings_are_unsaturated_and_slower() -> None:
    profile = EngineProfile(load_swings=LoadSwings(period=3600, low_for=1800), noise=0)
    samples = engine_trace(profile, 3600, interval=60)
    low = counter_delta(samples[10].generated_tokens_total, samples[11].generated_tokens_total)
    high = counter_delta(samples[40].generated_tokens_total, samples[41].generated_tokens_total)

    assert not samples[10].saturated
    assert samples[40].saturated
    assert low == pytest.approx(0.4 * high)


def test_a_drop_lowers_throughput_and_the_prefix_hit_rate() -> None:
    profile = EngineProfile(drop=0.3, drop_at=600, noise=0)
    engine = SimulatedEngine(profile)
    before = [engine.sample(t) for t in (0.0, 300.0)]
    after = [engine.sample(t) for t in (900.0, 1200.0)]

    def rates(pair: list[EngineSample]) -> tuple[float, float]:
        a, b = pair
        assert a.prefix_hits_total is not None and b.prefix_hits_total is not None
        assert a.prefix_queries_total is not None and b.prefix_queries_total is not None
        tokens = (b.generated_tokens_total - a.generated_tokens_total) / (b.t - a.t)
        hits = (b.prefix_hits_total - a.prefix_hits_total) / (
            b.prefix_queries_total - a.prefix_queries_total
        )
        return tokens, hits

    assert rates(before) == pytest.approx((800, 0.7))
    assert rates(after) == pytest.approx((560, 0.7 * 0.7**1.5))


def test_counter_resets_start_every_counter_over() -> None:
    samples = engine_trace(EngineProfile(counter_resets_at=(610.0,)), 1200, interval=30)

    tokens = [s.generated_tokens_total for s in samples]
    assert tokens[21] < tokens[20]
    assert tokens[21] > 0


def test_a_sampled_engine_does_not_go_back_in_time() -> None:
    engine = SimulatedEngine(EngineProfile())
    later = engine.sample(600.0)

    assert engine.sample(300.0).generated_tokens_total == later.generated_tokens_total


def test_verifier_histograms_are_cumulative_and_slow_down() -> None:
    verifier = SimulatedVerifier(VerifierProfile(slow_factor=10, slow_at=600))
    early, late = verifier.sample(600.0), verifier.sample(1200.0)

    counts_early = [count for _, count in early.buckets]
    assert counts_early == sorted(counts_early)
    assert early.buckets[-1][0] == math.inf
    fast_share = dict(early.buckets)[2.5] / early.buckets[-1][1]
    slow_share = (dict(late.buckets)[2.5] - dict(early.buckets)[2.5]) / (
        late.buckets[-1][1] - early.buckets[-1][1]
    )
    assert fast_share > 0.9
    assert slow_share < 0.1


TRAINER_CASES = [
    (0.0, "waiting_for_rollouts", 0, 0.0),
    (150.0, "train", 0, 120.0),
    (200.0, "waiting_for_rollouts", 1, 180.0),
    (1850.0, "checkpointing", 10, 1800.0),
    (1950.0, "waiting_for_rollouts", 10, 1920.0),
]


@pytest.mark.parametrize(("age", "phase", "step", "heartbeat"), TRAINER_CASES, ids=str)
def test_trainer_phases(age: float, phase: str, step: int, heartbeat: float) -> None:
    state = SimulatedTrainer(TrainerProfile(), start=100.0).state(100.0 + age)

    assert (state.phase, state.step, state.heartbeat_at) == (phase, step, 100.0 + heartbeat)


def test_a_hung_trainer_stops_changing() -> None:
    trainer = SimulatedTrainer(TrainerProfile(hang_at=1000.0))

    assert trainer.state(5000.0) == trainer.state(1000.0)
