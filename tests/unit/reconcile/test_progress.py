"""status.progress and status.policyGeneration from health evidence: at most every 5 minutes,
no write when nothing moved, a newer policy generation at once; the engines' weight-sync env."""

from __future__ import annotations

import datetime as dt

import pytest

from rljob.api import Progress, RLJobStatus
from rljob.health.evaluation import (
    KV_DRIFT,
    POLICY_GENERATION_EVIDENCE,
    TRAINER_STALL,
    TRAINER_STEP_EVIDENCE,
    healthy,
    insufficient,
)
from rljob.reconcile.progress import (
    ProgressReading,
    StepSample,
    engine_policy_env,
    progress_reading,
    step_rate,
    step_window,
    with_progress,
)
from tests.unit.reconcile.world import T0, example_job

MINUTE = dt.timedelta(minutes=1)


def test_a_reading_sums_engines_and_takes_the_trainers_step() -> None:
    evaluations = [
        healthy(KV_DRIFT, "r-0", "", {"throughput": 800.0, "baseline": 840.0}),
        healthy(KV_DRIFT, "r-1", "", {"throughput": 820.0, "baseline": 830.0}),
        insufficient(KV_DRIFT, "r-2", "warming up"),
        healthy(TRAINER_STALL, "trainer", "", {TRAINER_STEP_EVIDENCE: 120.0,
                                               POLICY_GENERATION_EVIDENCE: 7.0}),
    ]  # fmt: skip
    assert progress_reading(evaluations) == ProgressReading(120, 1620.0, 1670.0, 7)


def test_garbage_evidence_reads_as_unknown() -> None:
    evaluations = [
        healthy(TRAINER_STALL, "trainer", "", {TRAINER_STEP_EVIDENCE: -5.0}),
        healthy(KV_DRIFT, "r-0", "", {"throughput": "fast"}),
    ]
    assert progress_reading(evaluations) == ProgressReading()


OLD = Progress(step=100, last_step_time=T0, tokens_per_second=1600.0, updated_at=T0)


@pytest.mark.parametrize(
    ("old", "reading", "later", "expected_step", "updated"),
    [
        pytest.param(None, ProgressReading(step=5), MINUTE, 5, True, id="first-reading"),
        pytest.param(OLD, ProgressReading(step=130), 4 * MINUTE, 100, False, id="within-5m"),
        pytest.param(OLD, ProgressReading(step=130), 5 * MINUTE, 130, True, id="after-5m"),
        pytest.param(
            OLD,
            ProgressReading(step=100, tokens_per_second=1600.0),
            30 * MINUTE,
            100,
            False,
            id="nothing-moved-no-write",
        ),
    ],
)
def test_progress_is_refreshed_at_most_every_five_minutes(
    old: Progress | None,
    reading: ProgressReading,
    later: dt.timedelta,
    expected_step: int,
    updated: bool,
) -> None:
    status = with_progress(RLJobStatus(progress=old), reading, T0 + later)
    assert status.progress is not None and status.progress.step == expected_step
    assert (status.progress.updated_at == T0 + later) is updated


def test_an_empty_first_reading_writes_no_progress() -> None:
    """A health round that read nothing of the trainer or the engines yet (a new attempt's
    first): a progress of only updatedAt would be a status write that says nothing."""
    assert with_progress(RLJobStatus(), ProgressReading(), T0).progress is None
    first = with_progress(RLJobStatus(), ProgressReading(tokens_per_second=10.0), T0)
    assert first.progress == Progress(tokens_per_second=10.0, updated_at=T0)


@pytest.mark.parametrize(
    ("reading", "at", "recorded"),
    [
        pytest.param(6, T0, 4, id="waits-for-the-refresh"),
        pytest.param(6, T0 + 5 * MINUTE, 6, id="a-newer-one-with-the-refresh"),
        pytest.param(2, T0 + 5 * MINUTE, 2, id="an-older-one-after-a-resume"),
        pytest.param(None, T0 + 5 * MINUTE, 4, id="unread-keeps-the-last"),
    ],
)
def test_the_policy_generation_follows_the_current_attempt_with_the_refresh(
    reading: int | None, at: dt.datetime, recorded: int
) -> None:
    """The trainer's reading is its current attempt's: after a resume from an older checkpoint
    the generation goes back with it (a higher one kept would be out of the attempt's reach)."""
    status = RLJobStatus(progress=OLD, policy_generation=4)
    refreshed = with_progress(status, ProgressReading(policy_generation=reading), at)
    assert refreshed.policy_generation == recorded


def test_engines_get_the_policy_uri_and_generation() -> None:
    job = example_job()
    job = job.model_copy(update={"status": RLJobStatus(policy_generation=9)})
    env = engine_policy_env(job)
    assert env["RLJOB_POLICY_URI"].startswith("s3://")
    assert env["RLJOB_POLICY_URI"].endswith(f"/rl/{job.metadata.name}/")
    assert env["RLJOB_POLICY_GENERATION"] == "9"


def test_no_policy_env_without_a_checkpoint_store() -> None:
    assert engine_policy_env(example_job(checkpoint=None)) == {}


@pytest.mark.parametrize(
    ("readings", "rate"),
    [
        pytest.param([(10, 0.0)], None, id="one-reading"),
        pytest.param([(10, 0.0), (40, 60.0)], 0.5, id="steady"),
        pytest.param([(10, 0.0), (40, 60.0), (40, 120.0)], 0.25, id="stalled-decays"),
        pytest.param([(10, 0.0), (40, 400.0)], None, id="old-readings-leave-the-window"),
        pytest.param([(500, 0.0), (20, 60.0), (50, 120.0)], 0.5, id="resumed-attempt-restarts"),
    ],
)
def test_the_step_rate_over_the_last_minutes(
    readings: list[tuple[int, float]], rate: float | None
) -> None:
    window: list[StepSample] = []
    for step, at in readings:
        window = step_window(window, StepSample(step, at))
    assert step_rate(window) == rate
