"""RewardHackingSuspected from per-pod reward samples: the alert's judgement, its full-window and
eval-coverage guards, the healthy cases it could be confused with, garbage and restarts."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from rljob.api.spec import Health
from rljob.health.canaries.reward_hacking import (
    REWARD_HACKING,
    REWARD_HACKING_VALUE,
    RewardHackingConfig,
    RewardHackingDetector,
    RewardSample,
    evaluations,
    slope,
)
from rljob.health.evaluation import FINDING, HEALTHY, INSUFFICIENT_DATA
from rljob.vocabulary.enums import FailureReason

HOUR = 3600.0
START = 1_700_000_000.0
INTERVAL = 30.0
EVAL_EVERY = 20 * 60.0
CONFIG = RewardHackingConfig(interval=INTERVAL)

Curve = Callable[[float], float]


def held(curve: Curve, every: float = EVAL_EVERY) -> Curve:
    """The eval gauge as the SDK exports it: set on eval steps, held in between."""
    return lambda elapsed: curve(math.floor(elapsed / every) * every)


def trace(
    train: Curve, eval_curve: Curve | None, duration: float, start: float = START
) -> list[RewardSample]:
    samples = []
    for i in range(int(duration // INTERVAL) + 1):
        elapsed = i * INTERVAL
        value = eval_curve(elapsed) if eval_curve is not None else None
        samples.append(RewardSample(start + elapsed, train(elapsed), value))
    return samples


def run(
    samples: list[RewardSample], pod: str = "trainer-0", config: RewardHackingConfig = CONFIG
) -> RewardHackingDetector:
    detector = RewardHackingDetector(config)
    for sample in samples:
        detector.observe(pod, sample)
    return detector


def rising(per_hour: float, base: float = 0.3) -> Curve:
    return lambda elapsed: base + per_hour * elapsed / HOUR


def wobbly(per_hour: float, base: float = 0.5) -> Curve:
    # Distinct values at every eval step, no trend beyond `per_hour`.
    return lambda elapsed: base + per_hour * elapsed / HOUR + 0.002 * math.sin(elapsed)


CASES = [
    pytest.param(rising(0.12), held(wobbly(0.0)), 3 * HOUR, FINDING, id="train-up-eval-flat"),
    pytest.param(rising(0.12), held(wobbly(-0.05)), 3 * HOUR, FINDING, id="train-up-eval-down"),
    pytest.param(rising(0.12), held(rising(0.1, 0.2)), 3 * HOUR, HEALTHY, id="eval-rises-too"),
    pytest.param(rising(0.12), held(rising(0.03, 0.2)), 3 * HOUR, HEALTHY, id="eval-rises-slower"),
    pytest.param(rising(0.02), held(wobbly(0.0)), 3 * HOUR, HEALTHY, id="train-barely-rising"),
    pytest.param(rising(-0.2, 0.9), None, 3 * HOUR, HEALTHY, id="train-falling-no-eval"),
    pytest.param(rising(0.12), held(wobbly(0.0)), 1.5 * HOUR, INSUFFICIENT_DATA, id="partial"),
    pytest.param(rising(0.12), None, 3 * HOUR, INSUFFICIENT_DATA, id="no-eval"),
    pytest.param(
        rising(0.12),
        held(wobbly(0.0), every=HOUR),
        3 * HOUR,
        INSUFFICIENT_DATA,
        id="evals-too-rare",
    ),
    pytest.param(
        rising(0.12), held(lambda _: 0.5), 3 * HOUR, INSUFFICIENT_DATA, id="eval-one-value"
    ),
]


@pytest.mark.parametrize(("train", "eval_curve", "duration", "outcome"), CASES)
def test_outcomes(train: Curve, eval_curve: Curve | None, duration: float, outcome: str) -> None:
    samples = trace(train, eval_curve, duration)
    evaluation = run(samples).evaluate(samples[-1].t)
    assert evaluation.outcome == outcome, evaluation.message
    assert evaluation.detector == REWARD_HACKING
    assert evaluation.target == "trainer"


def test_finding_carries_reason_and_evidence() -> None:
    samples = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    evaluation = run(samples).evaluate(samples[-1].t)
    assert evaluation.reason == FailureReason.REWARD_HACKING_SUSPECTED
    evidence = evaluation.evidence
    assert evidence["pod"] == "trainer-0"
    assert evidence[REWARD_HACKING_VALUE] == pytest.approx(0.12, rel=1e-6)
    assert abs(float(evidence["eval_slope_per_hour"])) < 0.01
    assert evidence["eval_points"] == 7  # 2h at one eval per 20 minutes, both ends included
    assert evidence["window_seconds"] == 2 * HOUR
    assert "trainer pod trainer-0" in evaluation.message and "+0.120/h" in evaluation.message


def test_eval_gaps_within_coverage_still_judged() -> None:
    # The eval series missing 5 % of the scrapes (a slow eval step) is still a full window.
    samples = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    gappy = [
        RewardSample(s.t, s.reward_train, None) if i % 20 == 0 else s for i, s in enumerate(samples)
    ]
    assert run(gappy).evaluate(samples[-1].t).outcome == FINDING


def test_eval_covering_too_little_of_the_window_is_insufficient() -> None:
    # Evals started an hour ago: the two slopes would not cover the same span.
    samples = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    cut = samples[-1].t - HOUR
    late = [s if s.t >= cut else RewardSample(s.t, s.reward_train) for s in samples]
    evaluation = run(late).evaluate(samples[-1].t)
    assert evaluation.outcome == INSUFFICIENT_DATA
    assert "present in" in evaluation.message


def test_window_fills_exactly_at_window_age() -> None:
    samples = trace(rising(0.12), held(wobbly(0.0)), 2 * HOUR)
    detector = run(samples)
    assert detector.evaluate(samples[-1].t).outcome == FINDING
    assert detector.evaluate(samples[-1].t - 1).outcome == INSUFFICIENT_DATA


def test_stale_series_is_insufficient() -> None:
    samples = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    evaluation = run(samples).evaluate(samples[-1].t + 10 * INTERVAL)
    assert evaluation.outcome == INSUFFICIENT_DATA
    assert "no recent" in evaluation.message


GARBAGE = [
    pytest.param(RewardSample(math.nan, 0.5, 0.5), id="nan-time"),
    pytest.param(RewardSample(-1.0, 0.5, 0.5), id="negative-time"),
    pytest.param(RewardSample(START + 10 * HOUR, math.nan, 0.5), id="nan-train"),
    pytest.param(RewardSample(START + 10 * HOUR, math.inf, 0.5), id="inf-train"),
    pytest.param(RewardSample(START + 10 * HOUR, 1e300, 0.5), id="huge-train"),
]


@pytest.mark.parametrize("sample", GARBAGE)
def test_garbage_samples_are_dropped(sample: RewardSample) -> None:
    detector = RewardHackingDetector(CONFIG)
    detector.observe("trainer-0", sample)
    assert detector.retained_values() == 0


def test_garbage_eval_reads_as_absent() -> None:
    detector = RewardHackingDetector(CONFIG)
    detector.observe("trainer-0", RewardSample(START, 0.5, math.inf))
    detector.observe("trainer-0", RewardSample(START + INTERVAL, 0.5, math.nan))
    assert detector.retained_values() == 2
    assert all(s.reward_eval is None for s in detector._pods.of("trainer-0").samples)


def test_duplicates_and_out_of_order_samples_are_dropped() -> None:
    samples = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    detector = RewardHackingDetector(CONFIG)
    for sample in samples:
        detector.observe("trainer-0", sample)
        detector.observe("trainer-0", sample)  # a duplicate
        detector.observe("trainer-0", RewardSample(sample.t - 10, 5.0, 5.0))  # late
        detector.observe("trainer-0", RewardSample(sample.t + 1, -5.0, 5.0))  # too close
    reference = run(samples).evaluate(samples[-1].t)
    assert detector.evaluate(samples[-1].t) == reference
    assert reference.outcome == FINDING


def test_ring_is_bounded_by_the_window() -> None:
    samples = trace(rising(0.12), held(wobbly(0.0)), 24 * HOUR)
    detector = run(samples)
    assert detector.retained_values() <= 2 * CONFIG.window / INTERVAL
    assert detector.evaluate(samples[-1].t).outcome == FINDING


def test_restart_forgets_the_old_attempt() -> None:
    samples = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    detector = run(samples)
    restart = samples[-1].t + INTERVAL
    detector.note_restart(restart)
    detector.observe("trainer-0", samples[-1])  # the old attempt's sample, arriving late
    after = trace(rising(0.12), held(wobbly(0.0)), HOUR, start=restart)
    for sample in after:
        detector.observe("trainer-0", sample)
    evaluation = detector.evaluate(after[-1].t)
    assert evaluation.outcome == INSUFFICIENT_DATA
    assert "reported for 1h of the 2h window" in evaluation.message


def test_any_pod_with_a_full_window_finds() -> None:
    hacked = trace(rising(0.12), held(wobbly(0.0)), 3 * HOUR)
    fine = trace(rising(0.12), held(rising(0.1)), 3 * HOUR)
    young = trace(rising(0.5), held(wobbly(0.0)), HOUR, start=START + 2 * HOUR)
    detector = RewardHackingDetector(CONFIG)
    for pod, samples in (("rank-1", fine), ("rank-0", hacked), ("rank-2", young)):
        for sample in samples:
            detector.observe(pod, sample)
    evaluation = detector.evaluate(hacked[-1].t)
    assert evaluation.outcome == FINDING
    assert evaluation.evidence["pod"] == "rank-0"
    assert "(of 3 trainer pods)" in evaluation.message
    detector.retain({"rank-1", "rank-2"})
    assert detector.evaluate(hacked[-1].t).outcome == HEALTHY


def test_no_pods_is_insufficient() -> None:
    evaluation = RewardHackingDetector(CONFIG).evaluate(START)
    assert evaluation.outcome == INSUFFICIENT_DATA
    assert "rljob_rl_reward_train" in evaluation.message


def test_config_from_spec() -> None:
    health = Health.model_validate(
        {"interval": "1m", "canaries": {"rewardHacking": {"window": "3h", "minEvalPoints": 6}}}
    )
    config = RewardHackingConfig.from_health(health)
    assert config == RewardHackingConfig(
        window=3 * HOUR, min_slope_per_hour=0.05, max_eval_ratio=0.1, min_eval_points=6, interval=60
    )


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        pytest.param([], None, id="empty"),
        pytest.param([(5.0, 1.0)], None, id="one-point"),
        pytest.param([(5.0, 1.0), (5.0, 2.0)], None, id="same-time"),
        pytest.param([(START, 1.0), (START + 10, 2.0), (START + 20, 3.0)], 0.1, id="line"),
        pytest.param([(START, 0.0), (START + 10, 1.0), (START + 20, 0.0)], 0.0, id="tent"),
    ],
)
def test_slope(points: list[tuple[float, float]], expected: float | None) -> None:
    assert slope(points) == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([], 0, id="empty"),
        pytest.param([0.5, 0.5, 0.5], 1, id="held"),
        pytest.param([0.5, 0.5, 0.6, 0.6, 0.5], 3, id="returns-to-a-value"),
    ],
)
def test_evaluations(values: list[float], expected: int) -> None:
    assert evaluations(values) == expected
