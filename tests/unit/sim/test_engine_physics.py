"""The physical engine simulator: the physics it claims, its drivers and its disturbances."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from rljob.dev.engine_physics import (
    DEFAULT_HARDWARE,
    DEFAULT_MIX,
    Driver,
    Fragmentation,
    PhysicalEngine,
    PhysicalProfile,
    RequestMix,
    Shifts,
    loss_for_drop,
    operating_point,
    physical_fleet,
)
from rljob.health import EngineSample

HOUR = 3600.0
ASYNC = PhysicalProfile()
SYNC = PhysicalProfile(driver=Driver(kind="sync"))
SHORT_MIX = RequestMix(
    prompt_tokens=128, generation_tokens=256, generation_cv=0.6, shared_prefix=0.5
)
# Fragmentation from 1 h, at its plateau from 2 h: the windows compared start at 3 h.
FRAGMENTED = PhysicalProfile(fragmentation=Fragmentation(start=HOUR, ramp=HOUR, loss=0.5))
CUMULATIVE = (
    "generated_tokens_total",
    "prefix_hits_total",
    "prefix_queries_total",
    "preemptions_total",
    "finished_requests_total",
    "finished_prompt_tokens_total",
    "finished_generation_tokens_total",
    "token_latency_seconds_total",
    "token_latency_count_total",
)


def _run(engine: PhysicalEngine, hours: float) -> list[EngineSample]:
    samples = (engine.sample(index * 30.0) for index in range(int(hours * HOUR / 30) + 1))
    return [sample for sample in samples if sample is not None]


def _trace(profile: PhysicalProfile, hours: float, seed: int | str = 0) -> list[EngineSample]:
    return _run(PhysicalEngine(profile, seed), hours)


def _window(samples: Sequence[EngineSample], hours: tuple[float, float]) -> list[EngineSample]:
    return [s for s in samples if hours[0] * HOUR <= s.t <= hours[1] * HOUR]


def _delta(samples: Sequence[EngineSample], name: str) -> float:
    first, last = getattr(samples[0], name), getattr(samples[-1], name)
    assert isinstance(first, float) and isinstance(last, float)
    return last - first


Measure = Callable[[Sequence[EngineSample]], float]


def _mean(name: str) -> Measure:
    return lambda samples: sum(getattr(s, name) or 0.0 for s in samples) / len(samples)


def _per(numerator: str, denominator: str) -> Measure:
    return lambda samples: _delta(samples, numerator) / _delta(samples, denominator)


_hit_rate = _per("prefix_hits_total", "prefix_queries_total")
_token_rate = _per("generated_tokens_total", "t")


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [
        pytest.param((64, 1000.0), (128, 1000.0), id="more-sequences"),
        pytest.param((64, 1000.0), (64, 4000.0), id="longer-context"),
        pytest.param((1, 100.0), (256, 8000.0), id="both"),
    ],
)
def test_a_decode_step_grows_with_batch_and_context(
    smaller: tuple[int, float], larger: tuple[int, float]
) -> None:
    assert DEFAULT_HARDWARE.step_seconds(*smaller) < DEFAULT_HARDWARE.step_seconds(*larger)


def test_a_slower_node_multiplies_every_step_but_keeps_its_kv_cache() -> None:
    slow = DEFAULT_HARDWARE.slower(1.5)

    assert slow.step_seconds(100, 2000) == pytest.approx(
        1.5 * DEFAULT_HARDWARE.step_seconds(100, 2000)
    )
    assert slow.prefill_seconds_per_token == pytest.approx(
        1.5 * DEFAULT_HARDWARE.prefill_seconds_per_token
    )
    assert slow.kv_capacity_tokens == DEFAULT_HARDWARE.kv_capacity_tokens


@pytest.mark.parametrize(
    ("mix", "bound", "kv_bound"),
    [
        # 27,500 blocks / (2,417 / 16 + 0.5) blocks a sequence.
        pytest.param(DEFAULT_MIX, 181, True, id="kv-cache-bound"),
        pytest.param(SHORT_MIX, DEFAULT_HARDWARE.max_num_seqs, False, id="max-num-seqs-bound"),
    ],
)
def test_throughput_rises_with_concurrency_then_flattens_at_the_bound(
    mix: RequestMix, bound: int, kv_bound: bool
) -> None:
    loads = (1, 8, 32, 64, 128, 180, 256, 384, 512)
    points = [operating_point(DEFAULT_HARDWARE, mix, load, 0.0, admitting=True) for load in loads]
    rates = [point.decode_rate for point in points]
    below = [rate for load, rate in zip(loads, rates, strict=True) if load <= bound]
    above = [rate for load, rate in zip(loads, rates, strict=True) if load >= bound]

    assert below == sorted(set(below))
    assert len(set(above)) == 1
    assert points[-1].running == bound
    assert points[-1].kv_bound is kv_bound


@pytest.mark.parametrize(
    "profile", [pytest.param(ASYNC, id="async"), pytest.param(SYNC, id="sync")]
)
def test_a_healthy_default_engine_runs_kv_bound_with_a_queue(profile: PhysicalProfile) -> None:
    serving = [s for s in _trace(profile, 2) if s.serving and s.pending]
    queued = [s for s in serving if s.waiting > 0]

    assert len(queued) / len(serving) > 0.6
    assert _mean("kv_usage")(queued) > 0.9


@pytest.mark.parametrize(
    ("measure", "low", "high"),
    [
        pytest.param(_mean("running"), 0.0, 0.6, id="running-shrinks"),
        pytest.param(_mean("waiting"), 1.5, 10.0, id="queue-grows"),
        pytest.param(_mean("kv_usage"), 0.97, 1.03, id="kv-usage-stays-high"),
        pytest.param(_per("preemptions_total", "t"), 4.0, 100.0, id="preemptions-rise"),
        pytest.param(_hit_rate, 0.0, 0.5, id="prefix-hits-fall"),
        pytest.param(_token_rate, 0.8, 0.9, id="throughput-falls"),
    ],
)
def test_fragmentation_symptoms(measure: Measure, low: float, high: float) -> None:
    healthy = _window(_trace(ASYNC, 6, seed=3), (3, 6))
    faulty = _window(_trace(FRAGMENTED, 6, seed=3), (3, 6))

    assert low <= measure(faulty) / measure(healthy) <= high


@pytest.mark.parametrize("drop", [0.1, 0.3, 0.5])
@pytest.mark.parametrize(
    "base",
    [
        pytest.param(ASYNC, id="async"),
        pytest.param(SYNC, id="sync"),
        pytest.param(PhysicalProfile(hardware=DEFAULT_HARDWARE.slower(1.4)), id="slower-node"),
    ],
)
def test_loss_for_drop_reaches_the_drop_on_the_plateau(base: PhysicalProfile, drop: float) -> None:
    fault = Fragmentation(start=HOUR, ramp=HOUR, loss=loss_for_drop(base, drop))
    engine = PhysicalEngine(
        PhysicalProfile(base.hardware, base.mix, base.driver, fragmentation=fault)
    )

    assert engine.throughput_ratio(0.5 * HOUR) == 1.0
    assert 1 - drop < engine.throughput_ratio(1.5 * HOUR) < 1.0
    for hours in (2, 3, 10, 40):
        assert engine.throughput_ratio(hours * HOUR) == pytest.approx(1 - drop, abs=0.02)


def test_the_measured_drop_matches_the_ground_truth() -> None:
    fault = Fragmentation(start=HOUR, ramp=HOUR, loss=loss_for_drop(ASYNC, 0.3))
    faulty = PhysicalEngine(PhysicalProfile(fragmentation=fault), seed=5)
    healthy, plateau = _trace(ASYNC, 5, seed=6), (2.5, 5)
    measured = _token_rate(_window(_trace(faulty.profile, 5, seed=5), plateau))

    assert measured / _token_rate(_window(healthy, plateau)) == pytest.approx(
        faulty.throughput_ratio(3 * HOUR), abs=0.02
    )


LONG_MIX = RequestMix(
    prompt_tokens=3072, generation_tokens=2048, generation_cv=0.6, shared_prefix=0.2
)


@pytest.mark.parametrize(
    ("profile", "baseline", "hours", "baseline_hours"),
    [
        pytest.param(
            PhysicalProfile(shifts=Shifts(response_growth_per_day=1.0)),
            None,
            (23, 24),
            (0, 1),
            id="responses-double-over-a-day",
        ),
        pytest.param(
            PhysicalProfile(shifts=Shifts(long_prompts_at=2 * HOUR, long_prompts_for=2 * HOUR)),
            None,
            (2.5, 3.5),
            (0, 1),
            id="long-prompt-phase",
        ),
        pytest.param(
            PhysicalProfile(shifts=Shifts(mix_change_at=2 * HOUR, mix_after=LONG_MIX)),
            None,
            (3, 4),
            (0, 1),
            id="prompt-mix-change",
        ),
        pytest.param(
            PhysicalProfile(hardware=DEFAULT_HARDWARE.slower(1.3)),
            ASYNC,
            (0, 1),
            (0, 1),
            id="slower-node",
        ),
    ],
)
def test_workload_shifts_slow_the_engine_without_a_fault(
    profile: PhysicalProfile,
    baseline: PhysicalProfile | None,
    hours: tuple[float, float],
    baseline_hours: tuple[float, float],
) -> None:
    engine = PhysicalEngine(profile, seed=1)
    shifted = _window(_run(engine, hours[1]), hours)
    reference = _window(_trace(baseline or profile, baseline_hours[1], seed=1), baseline_hours)

    assert _token_rate(shifted) < 0.85 * _token_rate(reference)
    assert all(s.waiting > 0 for s in shifted)
    for t in (s.t for s in shifted):
        assert engine.throughput_ratio(t) == 1.0
        assert engine.usable_kv_tokens(t) == DEFAULT_HARDWARE.kv_capacity_tokens


@pytest.mark.parametrize(
    ("profile", "hours"),
    [
        pytest.param(
            PhysicalProfile(shifts=Shifts(long_prompts_at=2 * HOUR, long_prompts_for=2 * HOUR)),
            (2.5, 3.5),
            id="long-prompt-phase",
        ),
        pytest.param(
            PhysicalProfile(shifts=Shifts(mix_change_at=2 * HOUR, mix_after=LONG_MIX)),
            (3, 4),
            id="prompt-mix-change",
        ),
    ],
)
def test_a_less_shared_prompt_mix_lowers_the_prefix_hit_rate(
    profile: PhysicalProfile, hours: tuple[float, float]
) -> None:
    samples = _trace(profile, hours[1])

    assert _hit_rate(_window(samples, hours)) < 0.5 * _hit_rate(_window(samples, (0, 1)))


def test_the_long_prompt_phase_passes() -> None:
    profile = PhysicalProfile(shifts=Shifts(long_prompts_at=HOUR, long_prompts_for=HOUR))
    samples = _trace(profile, 4)

    after, before = _token_rate(_window(samples, (3, 4))), _token_rate(_window(samples, (0, 1)))
    assert after == pytest.approx(before, rel=0.03)


@pytest.mark.parametrize("name", CUMULATIVE)
def test_a_counter_reset_zeroes_every_counter(name: str) -> None:
    samples = _trace(PhysicalProfile(counter_resets_at=(HOUR,)), 1.5)
    before, at, later = (
        next(s for s in samples if s.t == t) for t in (HOUR - 30, HOUR, 1.5 * HOUR)
    )

    assert getattr(at, name) == 0.0 < getattr(before, name)
    assert getattr(later, name) > 0.0


def test_scrape_gaps_give_no_samples_while_the_engine_runs_on() -> None:
    gapped = PhysicalProfile(gaps=((600.0, 900.0),))
    engine = PhysicalEngine(gapped)
    samples = {t: engine.sample(t) for t in (570.0, 600.0, 750.0, 870.0, 900.0)}
    rounds = list(physical_fleet({"gapped": gapped, "plain": ASYNC}, 1200))
    names = {index * 30.0: [name for name, _ in scrape] for index, scrape in enumerate(rounds)}

    assert [t for t, sample in samples.items() if sample is None] == [600.0, 750.0, 870.0]
    first, last = samples[570.0], samples[900.0]
    assert first is not None and last is not None
    assert last.generated_tokens_total - first.generated_tokens_total > 300 * 3000
    assert names[750.0] == ["plain"]
    assert names[900.0] == ["gapped", "plain"]


@pytest.mark.parametrize(
    "profile", [pytest.param(ASYNC, id="async"), pytest.param(SYNC, id="sync")]
)
def test_the_same_seed_gives_the_same_samples(profile: PhysicalProfile) -> None:
    first = _trace(profile, 1, seed=7)

    assert first == _trace(profile, 1, seed=7)
    assert first != _trace(profile, 1, seed=8)


def test_fleet_engines_get_their_own_noise_in_order() -> None:
    rounds = list(physical_fleet({"b": ASYNC, "a": ASYNC}, 600, seed=1))
    last = dict(rounds[-1])

    assert len(rounds) == 21
    assert [name for name, _ in rounds[0]] == ["b", "a"]
    assert last["a"].generated_tokens_total != last["b"].generated_tokens_total


def _mode(sample: EngineSample) -> str:
    if sample.sleeping:
        return "asleep"
    if sample.paused:
        return "paused"
    if sample.waiting > 0:
        return "saturated"
    return "draining" if sample.running > 0 else "idle"


def _modes(samples: Sequence[EngineSample]) -> list[str]:
    modes = [_mode(sample) for sample in samples]
    return [mode for index, mode in enumerate(modes) if index == 0 or mode != modes[index - 1]]


def test_the_sync_driver_generates_drains_sleeps_and_pauses() -> None:
    samples = _trace(SYNC, 1)

    assert _modes(samples)[:5] == ["saturated", "draining", "asleep", "paused", "saturated"]
    assert sum(s.sleeping is True for s in samples[:40]) == pytest.approx(300 / 30, abs=1)


def test_a_sync_generate_phase_lasts_until_its_batch_is_done() -> None:
    slow = PhysicalProfile(hardware=DEFAULT_HARDWARE.slower(1.5), driver=Driver(kind="sync"))
    half_batch = PhysicalProfile(driver=Driver(kind="sync", batch=512))

    def first_sleep(profile: PhysicalProfile) -> float:
        return next(s.t for s in _trace(profile, 1) if s.sleeping)

    assert first_sleep(slow) > 1.3 * first_sleep(SYNC)
    assert first_sleep(half_batch) < 0.7 * first_sleep(SYNC)


def test_the_driver_offset_delays_the_first_requests() -> None:
    samples = _trace(PhysicalProfile(driver=Driver(kind="sync", offset=90.0)), 0.05)

    assert [_mode(s) for s in samples[:5]] == ["idle"] * 3 + ["saturated"] * 2
    assert samples[0].serving


_POINT = operating_point(DEFAULT_HARDWARE, DEFAULT_MIX, 256, 0.0, admitting=True)


@pytest.mark.parametrize(
    ("measure", "expected"),
    [
        pytest.param(
            _per("finished_prompt_tokens_total", "finished_requests_total"),
            DEFAULT_MIX.prompt_tokens,
            id="prompt-mean",
        ),
        pytest.param(
            _per("finished_generation_tokens_total", "finished_requests_total"),
            DEFAULT_MIX.generation_tokens,
            id="generation-mean",
        ),
        # A token's latency is the step plus the prefill chunks sharing it.
        pytest.param(
            _per("token_latency_seconds_total", "token_latency_count_total"),
            _POINT.running / _POINT.decode_rate,
            id="token-latency",
        ),
    ],
)
def test_the_operating_point_counters_give_back_the_mix_and_step(
    measure: Measure, expected: float
) -> None:
    samples = _window(_trace(ASYNC, 2), (1, 2))

    assert measure(samples) == pytest.approx(expected, rel=0.03)
