"""The diagnosis series as one trainer or verifier pod exports them, read into samples."""

from __future__ import annotations

import math

import pytest

from rljob.health.profiles.diagnosis import (
    DIAGNOSIS,
    GENERATED_TOKENS,
    PHASE_SECONDS,
    REWARD_EVAL,
    REWARD_TRAIN,
    queue_depths,
    trainer_samples,
)
from rljob.health.profiles.signals import POLICY_GENERATION, TRAINER_STEP, Series


def phase(name: str, *points: tuple[float, float]) -> Series:
    return Series((("phase", name),), tuple(points))


def plain(*points: tuple[float, float]) -> Series:
    return Series((), tuple(points))


def test_one_scrape_reads_every_phase_and_gauge() -> None:
    series = {
        PHASE_SECONDS: [phase("generating", (10.0, 40.0)), phase("training", (10.0, 20.0))],
        TRAINER_STEP: [plain((10.0, 7.0))],
        POLICY_GENERATION: [plain((10.0, 3.0))],
        REWARD_TRAIN: [plain((10.0, 0.5))],
        REWARD_EVAL: [plain((10.0, 0.4))],
        GENERATED_TOKENS: [plain((10.0, 1e6))],
    }
    (sample,) = trainer_samples(DIAGNOSIS, series, 15.0)
    assert sample.t == 10.0
    assert sample.phase_seconds == {"generating": 40.0, "training": 20.0}
    assert (sample.step, sample.policy_generation) == (7.0, 3.0)
    assert (sample.reward_train, sample.reward_eval, sample.generated_tokens_total) == (
        0.5,
        0.4,
        1e6,
    )


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        pytest.param({}, [], id="nothing-exported"),
        pytest.param(
            {PHASE_SECONDS: [phase("training", (1.0, math.nan), (2.0, 5.0))]},
            [(1.0, {}), (2.0, {"training": 5.0})],
            id="garbage-phase-value-dropped",
        ),
        pytest.param(
            {PHASE_SECONDS: [phase("training", (1.0, -3.0))]},
            [(1.0, {})],
            id="negative-seconds-dropped",
        ),
        pytest.param(
            {PHASE_SECONDS: [Series((), ((1.0, 3.0),))]},
            [(1.0, {})],
            id="phase-label-missing",
        ),
    ],
)
def test_phase_seconds_degrade_without_failing(
    series: dict[str, list[Series]], expected: list[tuple[float, dict[str, float]]]
) -> None:
    samples = trainer_samples(DIAGNOSIS, series, 15.0)
    assert [(s.t, dict(s.phase_seconds)) for s in samples] == expected


def test_samples_after_a_time_and_thinned() -> None:
    series = {REWARD_TRAIN: [plain((1.0, 0.1), (2.0, 0.2), (2.5, 0.3), (4.0, 0.4))]}
    samples = trainer_samples(DIAGNOSIS, series, 15.0, after=1.0, min_spacing=1.0)
    assert [(s.t, s.reward_train) for s in samples] == [(2.0, 0.2), (4.0, 0.4)]


def test_queue_depths_drop_garbage() -> None:
    series = [plain((1.0, 3.0), (2.0, math.inf), (3.0, -1.0), (4.0, 5.0))]
    assert queue_depths(series) == [(1.0, 3.0), (4.0, 5.0)]
