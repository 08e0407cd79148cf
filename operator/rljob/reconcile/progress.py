"""Training progress and the policy generation in status, from the health rounds' evidence:
refreshed at most every 5 minutes (live values are metrics), so a healthy job costs one status
write per refresh and nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rljob.api import Progress, RLJob, RLJobStatus
from rljob.checkpoint_protocol.layout import CheckpointLocation, policy_env
from rljob.health.evaluation import (
    KV_DRIFT,
    POLICY_GENERATION_EVIDENCE,
    TRAINER_STEP_EVIDENCE,
    Evaluation,
)

PROGRESS_REFRESH = timedelta(minutes=5)


@dataclass(frozen=True)
class StepSample:
    """A trainer step and when the operator read it (unix seconds)."""

    step: int
    at: float


# The distinct steps whose first reading is kept: an attempt's first step past its resume step is
# timed from the round that read it, not from the pass that next looks (up to a resync later).
STEPS_KEPT = 8


def with_step(steps: tuple[StepSample, ...], sample: StepSample) -> tuple[StepSample, ...]:
    """The last STEPS_KEPT distinct steps read, each with when it was first read, oldest first."""
    if steps and steps[-1].step == sample.step:
        return steps
    return (*steps, sample)[-STEPS_KEPT:]


@dataclass(frozen=True)
class ProgressReading:
    """What the latest health round saw; None where nothing was reported."""

    step: int | None = None
    tokens_per_second: float | None = None
    baseline_tokens_per_second: float | None = None
    policy_generation: int | None = None
    # The newest step the operator has read of the trainer (this round's, or an earlier round's
    # when this one read none: a hung trainer's page may stop answering) and when it first read
    # it (unix seconds): the trainer's last evidence of health.
    seen_step: int | None = None
    step_at: float | None = None
    # The last distinct steps read and when each was first read (with_step), oldest first.
    steps_seen: tuple[StepSample, ...] = ()


def progress_reading(evaluations: Sequence[Evaluation]) -> ProgressReading:
    """The trainer's step and policy generation, and rollout throughput summed over engines."""

    def number(key: str) -> float | None:
        values = [e.evidence.get(key) for e in evaluations]
        found = [float(v) for v in values if isinstance(v, int | float)]
        return max(found) if found else None

    def total(key: str) -> float | None:
        values = [e.evidence.get(key) for e in evaluations if e.detector == KV_DRIFT]
        found = [float(v) for v in values if isinstance(v, int | float) and v >= 0]
        return round(sum(found), 1) if found else None

    step, generation = number(TRAINER_STEP_EVIDENCE), number(POLICY_GENERATION_EVIDENCE)
    return ProgressReading(
        step=int(step) if step is not None and step >= 0 else None,
        tokens_per_second=total("throughput"),
        baseline_tokens_per_second=total("baseline"),
        policy_generation=int(generation) if generation is not None and generation >= 0 else None,
    )


def with_progress(
    status: RLJobStatus, reading: ProgressReading | None, now: datetime
) -> RLJobStatus:
    """status.progress and status.policyGeneration from the reading, at most every 5 minutes
    (the policy generation with it: a new generation never rolls engines anyway). The reading
    is the current attempt's, so the generation follows it back after a resume from an older
    checkpoint."""
    if reading is None:
        return status
    old = status.progress
    if old is not None and old.updated_at is not None and now - old.updated_at < PROGRESS_REFRESH:
        return status  # the generation waits too: a write per trainer step would be too many
    if reading.policy_generation is not None:
        status = status.model_copy(update={"policy_generation": reading.policy_generation})
    fresh = Progress(
        step=reading.step if reading.step is not None else (old.step if old else None),
        last_step_time=_last_step_time(old, reading.step, now),
        tokens_per_second=reading.tokens_per_second,
        baseline_tokens_per_second=reading.baseline_tokens_per_second,
        updated_at=now,
    )
    if old is None and fresh.model_copy(update={"updated_at": None}) == Progress():
        return status  # an empty first reading: a progress of nothing but its time is no news
    if old is not None and fresh.model_copy(update={"updated_at": old.updated_at}) == old:
        return status  # nothing moved: no write
    return status.model_copy(update={"progress": fresh})


def engine_policy_env(job: RLJob) -> dict[str, str]:
    """RLJOB_POLICY_URI/RLJOB_POLICY_GENERATION for the engines (none without a checkpoint
    store)."""
    if job.spec.checkpoint is None:
        return {}
    location = CheckpointLocation.from_uri(
        job.spec.checkpoint.uri, job.metadata.namespace or "default", job.metadata.name
    )
    return policy_env(location, job.status.policy_generation)


def newer_generation(current: int | None, seen: int | None) -> int | None:
    """The newer of two policy generations, either possibly unknown."""
    if seen is None:
        return current
    return seen if current is None else max(current, seen)


def _last_step_time(old: Progress | None, step: int | None, now: datetime) -> datetime | None:
    if old is None or step is None or old.step != step:
        return now if step is not None else None
    return old.last_step_time


STEP_RATE_WINDOW = 300.0  # seconds of step readings the rate is taken over


def step_window(samples: Sequence[StepSample], current: StepSample) -> list[StepSample]:
    """The readings the rate is taken over: the last STEP_RATE_WINDOW seconds; a step that went
    back (a resumed attempt) starts the window afresh."""
    if samples and current.step < samples[-1].step:
        return [current]
    kept = [s for s in samples if current.at - s.at <= STEP_RATE_WINDOW]
    return [*kept, current]


def step_rate(samples: Sequence[StepSample]) -> float | None:
    """Steps per second from the window's first to its last reading (0 while stalled)."""
    if len(samples) < 2 or samples[-1].at <= samples[0].at:
        return None
    return (samples[-1].step - samples[0].step) / (samples[-1].at - samples[0].at)
