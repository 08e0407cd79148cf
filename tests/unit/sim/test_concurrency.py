"""The engine's concurrency model: throughput against requests in flight with a knee at the KV
cache's capacity, a synchronous rollout's decaying tail, and the truth helper the operator's
knee estimate is judged against."""

from __future__ import annotations

import pytest

from rljob.dev.physics.hardware import DEFAULT_HARDWARE
from rljob.dev.physics.workload import DEFAULT_MIX
from rljob.dev.sim.faults import Active
from rljob.dev.sim.models import EngineModel, Mode
from rljob.dev.sim.models.concurrency import Driver, curve_of, knee_truth
from rljob.dev.sim.profiles import STEP_FIXED_BATCH, EngineProfile, ProfileError, override
from rljob.dev.traces import Cycle

T0 = 1_800_000_000.0


def test_the_step_shape_is_the_physics_models() -> None:
    hardware = DEFAULT_HARDWARE
    per_sequence = (
        hardware.step_per_seq_seconds
        + DEFAULT_MIX.context_tokens * hardware.step_per_context_token_seconds
    )
    assert hardware.step_fixed_seconds / per_sequence == pytest.approx(STEP_FIXED_BATCH, rel=0.01)


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param(EngineProfile(concurrency=8), id="default-knee-is-max-running"),
        pytest.param(EngineProfile(concurrency=8, knee=16, throughput=400), id="small-knee"),
        pytest.param(
            EngineProfile(concurrency=8, knee=180, throughput=4800), id="h100-8b-kv-bound"
        ),
        pytest.param(EngineProfile(concurrency=8, knee=32, step_fixed_batch=2), id="early-plateau"),
    ],
)
def test_throughput_rises_to_the_knee_then_stays_flat(profile: EngineProfile) -> None:
    curve = curve_of(profile)
    capacity = profile.knee or profile.max_running
    assert curve.capacity == capacity
    assert curve.throughput(capacity) == pytest.approx(profile.throughput)
    assert curve.throughput(2 * capacity) == curve.throughput(capacity)
    gains = [curve.throughput(c + 1) - curve.throughput(c) for c in range(capacity)]
    assert all(g > 0 for g in gains) and gains == sorted(gains, reverse=True)  # concave
    # A step of m sequences takes a + b m and yields m tokens.
    assert curve.fixed / curve.per_sequence == pytest.approx(profile.step_fixed_batch)


@pytest.mark.parametrize(
    ("profile", "plateau"),
    [
        # T(c) / T(K) = c (r + K) / (K (r + c)) >= 0.95 with r = a / b
        pytest.param(EngineProfile(knee=64, concurrency=1), 57, id="knee-64"),
        pytest.param(EngineProfile(knee=16, concurrency=1), 15, id="knee-16-still-steep"),
        pytest.param(EngineProfile(knee=64, concurrency=1, step_fixed_batch=4), 34, id="flat"),
    ],
)
def test_knee_truth_recommends_80_percent_of_the_plateaus_start(
    profile: EngineProfile, plateau: int
) -> None:
    truth = knee_truth(profile)
    at_capacity = truth.throughput(truth.capacity)
    assert truth.plateau_from == plateau
    assert truth.throughput(plateau) >= 0.95 * at_capacity > truth.throughput(plateau - 1)
    assert truth.recommended == pytest.approx(0.8 * plateau)
    assert [c for c, _ in truth.curve] == list(range(1, 2 * truth.capacity + 1))


@pytest.mark.parametrize(
    ("concurrency", "running", "waiting", "mode"),
    [
        pytest.param(8, 8, 0, Mode.UNSATURATED, id="under-driven"),
        pytest.param(64, 64, 0, Mode.UNSATURATED, id="at-the-knee"),
        pytest.param(100, 64, 36, Mode.SATURATED, id="over-driven-queues"),
    ],
)
def test_a_steady_driver_holds_its_concurrency(
    concurrency: float, running: float, waiting: float, mode: Mode
) -> None:
    profile = EngineProfile(concurrency=concurrency, knee=64, noise=0.0, kv_usage=0.9)
    engine = EngineModel(profile, "s", T0)
    for second in range(1, 61):
        engine.advance(T0 + second)
    expected = curve_of(profile).throughput(concurrency)
    assert engine.tokens / 60 == pytest.approx(expected)
    assert (engine.running, engine.waiting, engine.mode) == (running, waiting, mode)
    assert engine.kv_usage == pytest.approx(running / 64 * 0.9)
    assert engine.state()["expected_tokens_per_second"] == pytest.approx(expected, abs=1e-3)


SYNC = EngineProfile(
    concurrency=96, knee=64, generation_length=100, sync_tail=True, sync_idle=3, noise=0.0
)


def test_a_synchronous_rollout_decays_from_its_batch_to_nothing() -> None:
    driver = Driver(SYNC, "s")
    loads = [driver.load(tenth / 10) for tenth in range(0, 600)]
    in_flight = [load.in_flight for load in loads]
    assert in_flight[0] == 96 and min(in_flight) == 0
    first_batch = in_flight[: in_flight.index(0)]
    assert first_batch == sorted(first_batch, reverse=True)  # only ever finishing
    # Observed at many concurrencies below N, each on the steady curve.
    assert len(set(in_flight)) > 40
    curve = driver.curve
    assert all(load.tokens_per_second == curve.throughput(load.in_flight) for load in loads)
    assert all(load.running == min(load.in_flight, 64) for load in loads)
    # The batch's tokens: N requests of mean generation_length, however the tail falls.
    period = driver.period
    assert driver.tokens(0, period) == pytest.approx(96 * 100)
    assert driver.tokens(0, 3 * period) == pytest.approx(3 * 96 * 100)
    assert driver.tokens(period - 3, period) == 0  # idle while the trainer trains


def test_a_synchronous_engines_pages_follow_its_tail_and_are_seeded() -> None:
    def run(seed: str) -> list[tuple[float, float, float]]:
        engine = EngineModel(SYNC, seed, T0)
        seen = []
        for second in range(1, 90):
            engine.advance(T0 + second)
            seen.append((engine.running, engine.waiting, engine.tokens))
        return seen

    first = run("a")
    assert first == run("a")
    running = {r for r, _, _ in first}
    assert 0 in running and 64 in running and len(running) > 10
    assert any(w > 0 for _, w, _ in first)
    tokens = [t for _, _, t in first]
    assert tokens == sorted(tokens)


def test_faults_override_the_driver() -> None:
    engine = EngineModel(EngineProfile(concurrency=8, noise=0.0), "s", T0)
    modes = []
    for until, faults in [
        (10, Active(sleep=(T0, 1))),
        (20, Active(load=(T0 + 10, 5, None))),
        (30, Active()),
    ]:
        engine.advance(T0 + until, faults)
        modes.append((engine.mode, engine.running, engine.waiting))
        if until == 10:
            assert engine.tokens == 0
    assert modes == [
        (Mode.ASLEEP, 0, 0),
        (Mode.SATURATED, 64, 5),  # the injected load: its queue over a full batch
        (Mode.UNSATURATED, 8, 0),
    ]


def test_unset_the_engine_keeps_its_old_saturated_model() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    engine.advance(T0 + 10)
    assert engine.driver is None and engine.tokens == pytest.approx(8000)
    assert engine.mode == Mode.SATURATED and engine.running == 64


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"concurrency": 5000}, "at most", id="concurrency-bound"),
        pytest.param({"step_fixed_batch": 0}, "> 0", id="flat-step"),
    ],
)
def test_bad_concurrency_profiles_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        override(EngineProfile(), changes)


def test_concurrency_replaces_the_cycle() -> None:
    with pytest.raises(ProfileError, match="replaces cycle"):
        override(EngineProfile(cycle=Cycle(generate=5, drain=1, train=2)), {"concurrency": 8})
