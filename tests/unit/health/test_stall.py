"""EngineStalled and TrainerStalled: pending work without progress, gated by sleep, weight sync,
startup grace and the trainer's phase."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from rljob.api.spec import Health
from rljob.dev.traces import Cycle, EngineProfile, SimulatedTrainer, TrainerProfile, fleet_trace
from rljob.health import (
    EngineSample,
    EngineStallConfig,
    EngineStallDetector,
    TrainerSignals,
    TrainerStallConfig,
    TrainerStallDetector,
    current_phase,
    freshest_heartbeat,
)
from rljob.vocabulary.enums import FailureReason

ENGINE = EngineStallConfig(timeout=300, interval=30)
POD = "rollout-1"


def sample(
    t: float,
    tokens: float,
    *,
    running: float = 8,
    waiting: float = 4,
    sleeping: bool | None = False,
    paused: bool | None = False,
) -> EngineSample:
    return EngineSample(t, tokens, running, waiting, sleeping=sleeping, paused=paused)


Trace = Callable[[float], EngineSample]

ENGINE_CASES = [
    pytest.param(lambda t: sample(t, 1000.0), "finding", id="flat-with-requests-pending"),
    pytest.param(lambda t: sample(t, 1000.0, running=0), "finding", id="flat-with-queue-only"),
    pytest.param(lambda t: sample(t, 10 * t), "healthy", id="generating"),
    pytest.param(lambda t: sample(t, 1000.0, sleeping=True), "healthy", id="asleep"),
    pytest.param(lambda t: sample(t, 1000.0, paused=True), "healthy", id="paused-weight-sync"),
    pytest.param(lambda t: sample(t, 1000.0, running=0, waiting=0), "healthy", id="idle"),
    pytest.param(lambda t: sample(t, 1000.0, sleeping=t < 400), "healthy", id="woke-up-recently"),
    pytest.param(
        lambda t: sample(t, 1000.0, sleeping=None, paused=None),
        "finding",
        id="no-sleep-metric-reads-awake",
    ),
    pytest.param(
        lambda t: sample(t, 1000.0 if t < 400 else 5.0), "healthy", id="counter-reset-is-progress"
    ),
    pytest.param(
        lambda t: sample(t, math.nan if t > 100 else 1.0), "insufficient_data", id="garbage"
    ),
]


@pytest.mark.parametrize(("trace", "outcome"), ENGINE_CASES)
def test_engine_stall(trace: Trace, outcome: str) -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 601, 30):
        detector.observe(POD, trace(float(t)))

    (evaluation,) = detector.evaluate(600.0)

    assert evaluation.outcome == outcome, evaluation.message
    if outcome == "finding":
        assert evaluation.reason == FailureReason.ENGINE_STALLED
        assert evaluation.message.startswith(f"{POD} generated no tokens for 10m")


def test_an_engine_stall_needs_the_whole_timeout() -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 301, 30):
        detector.observe(POD, sample(float(t), 100.0 if t < 60 else 200.0))

    assert detector.evaluate(300.0)[0].outcome == "healthy"
    detector.observe(POD, sample(330.0, 200.0))
    detector.observe(POD, sample(360.0, 200.0))
    assert detector.evaluate(360.0)[0].outcome == "finding"


def test_an_engine_without_recent_metrics_is_insufficient_data() -> None:
    detector = EngineStallDetector(ENGINE)
    detector.observe(POD, sample(0.0, 1.0))

    assert detector.evaluate(3600.0)[0].outcome == "insufficient_data"


def test_an_engine_restart_clears_the_stall() -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 601, 30):
        detector.observe(POD, sample(float(t), 1.0))
    detector.note_restart(POD, 600.0)
    detector.observe(POD, sample(630.0, 1.0))

    assert detector.evaluate(630.0)[0].outcome == "healthy"


def test_generate_train_cycles_never_look_stalled() -> None:
    detector = EngineStallDetector(ENGINE)
    profiles = {f"rollout-{i}": EngineProfile(cycle=Cycle(offset=50.0 * i)) for i in range(4)}
    findings = []
    for name, engine_sample in fleet_trace(profiles, 12 * 3600, interval=30):
        detector.observe(name, engine_sample)
        if name == "rollout-3":
            findings += [e for e in detector.evaluate(engine_sample.t) if e.is_finding]

    assert findings == []


def test_engine_stall_config_comes_from_the_spec() -> None:
    health = Health.model_validate({"interval": "5s", "engineStall": {"timeout": "1m"}})

    assert EngineStallConfig.from_health(health) == EngineStallConfig(60.0, 5.0)


TRAINER = TrainerStallConfig(timeout=1800, startup_grace=1800)
START = 10_000.0

TRAINER_CASES = [
    pytest.param(TrainerSignals(True, START, START + 100, "train"), 7200, "finding", id="stale"),
    pytest.param(TrainerSignals(True, START, START + 6000, "train"), 7200, "healthy", id="fresh"),
    pytest.param(
        TrainerSignals(False, START, START + 100, "train"),
        7200,
        "insufficient_data",
        id="pods-not-running",
    ),
    pytest.param(
        TrainerSignals(True, START, START + 100, "waiting_for_rollouts"),
        7200,
        "healthy",
        id="waiting-for-rollouts",
    ),
    pytest.param(
        TrainerSignals(True, START, None, "train"), 1000, "healthy", id="within-startup-grace"
    ),
    pytest.param(
        TrainerSignals(True, START, None, "train"), 7200, "insufficient_data", id="no-heartbeat"
    ),
    pytest.param(
        TrainerSignals(True, START, START + 4000, "checkpointing"),
        7200,
        "healthy",
        id="checkpointing-gets-twice-the-timeout",
    ),
    pytest.param(
        TrainerSignals(True, START, START + 100, "checkpointing"),
        7200,
        "finding",
        id="checkpoint-hung-beyond-twice-the-timeout",
    ),
    pytest.param(
        TrainerSignals(True, START, START + 9000, "train"),
        7200,
        "healthy",
        id="heartbeat-from-a-clock-ahead",
    ),
]


@pytest.mark.parametrize(("signals", "age", "outcome"), TRAINER_CASES)
def test_trainer_stall(signals: TrainerSignals, age: float, outcome: str) -> None:
    evaluation = TrainerStallDetector(TRAINER).evaluate(signals, START + age)

    assert evaluation.outcome == outcome, evaluation.message
    if outcome == "finding":
        assert evaluation.reason == FailureReason.TRAINER_STALLED
        assert evaluation.message.startswith("trainer heartbeat stale for")


def test_a_heartbeat_is_not_stale_right_after_waiting_for_rollouts() -> None:
    detector = TrainerStallDetector(TRAINER)
    waiting = TrainerSignals(True, START, START + 100, "waiting_for_rollouts")
    detector.evaluate(waiting, START + 7000)

    after = TrainerSignals(True, START, START + 100, "train")

    assert detector.evaluate(after, START + 7060).outcome == "healthy"
    assert detector.evaluate(after, START + 7000 + 1801).outcome == "finding"


@pytest.mark.parametrize(
    ("hang_at", "expected"), [(math.inf, set()), (6 * 3600, {"finding"})], ids=["runs", "hangs"]
)
def test_a_simulated_trainer_is_stalled_only_when_it_hangs(
    hang_at: float, expected: set[str]
) -> None:
    trainer = SimulatedTrainer(TrainerProfile(hang_at=hang_at), start=START)
    detector = TrainerStallDetector(TRAINER)
    outcomes = set()
    for t in range(int(START), int(START + 12 * 3600), 30):
        state = trainer.state(float(t))
        signals = TrainerSignals(True, START, state.heartbeat_at, state.phase, state.step)
        outcomes.add(detector.evaluate(signals, float(t)).outcome)

    assert outcomes & {"finding"} == expected


def test_the_freshest_plausible_heartbeat_counts() -> None:
    assert freshest_heartbeat([math.nan, 5.0, None, -1.0, math.inf, 7.0]) == 7.0
    assert freshest_heartbeat([math.nan, None]) is None


def test_the_current_phase_is_the_set_gauge() -> None:
    gauges = {"train": 0.0, "waiting_for_rollouts": 1.0, "checkpointing": math.nan}

    assert current_phase(gauges) == "waiting_for_rollouts"
    assert current_phase({"train": 0.0}) is None


def test_trainer_stall_config_comes_from_the_spec() -> None:
    health = Health.model_validate({"trainerStall": {"timeout": "2m", "startupGrace": "1m"}})

    assert TrainerStallConfig.from_health(health) == TrainerStallConfig(120.0, 60.0)
