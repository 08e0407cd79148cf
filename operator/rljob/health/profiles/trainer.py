"""The trainer's signals: each rank pod's newest reading, and the gang's signals from them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rljob.health.profiles.signals import (
    CHECKPOINT_STEP,
    POLICY_GENERATION,
    TIME_EPSILON,
    TRAINER_HEARTBEAT,
    TRAINER_PHASE,
    TRAINER_STEP,
    Series,
)
from rljob.health.profiles.workloads import TrainerMetrics
from rljob.health.stall import TrainerSignals, current_phase, freshest_heartbeat


@dataclass(frozen=True, slots=True)
class TrainerReading:
    """The latest trainer signals of one pod; None: not exported."""

    t: float
    heartbeat_at: float | None
    phase: str | None
    step: float | None
    policy_generation: float | None
    checkpoint_step: float | None = None
    heartbeat_scraped_at: float | None = None  # the heartbeat point's own time


def _latest(series: Iterable[Series]) -> tuple[float, float] | None:
    """The newest point over the series (the largest value among equally new ones)."""
    best: tuple[float, float] | None = None
    for one in series:
        if one.points:
            point = one.points[-1]
            if best is None or point > best:
                best = point
    return best


def trainer_reading(
    profile: TrainerMetrics, series: Mapping[str, Sequence[Series]]
) -> TrainerReading | None:
    """One trainer pod's newest signals, or None when it exports none of them."""
    heartbeat = _latest(series.get(TRAINER_HEARTBEAT, ()))
    step = _latest(series.get(TRAINER_STEP, ()))
    generation = _latest(series.get(POLICY_GENERATION, ()))
    checkpoint = _latest(series.get(CHECKPOINT_STEP, ()))
    phases: dict[str, tuple[float, float]] = {}
    for one in series.get(TRAINER_PHASE, ()):
        phase = one.label(profile.phase_label)
        if phase is None or not one.points:
            continue
        point = one.points[-1]
        if phase not in phases or point[0] > phases[phase][0]:
            phases[phase] = point
    # Phases whose series stopped before the newest one are over.
    newest_phase_time = max((t for t, _ in phases.values()), default=None)
    current = None
    if newest_phase_time is not None:
        current = current_phase(
            {
                phase: value
                for phase, (t, value) in phases.items()
                if t >= newest_phase_time - TIME_EPSILON
            }
        )
    times = [p[0] for p in (heartbeat, step, generation) if p is not None]
    times.extend(t for t, _ in phases.values())
    if not times:
        return None
    return TrainerReading(
        t=max(times),
        heartbeat_at=heartbeat[1] if heartbeat is not None else None,
        phase=current,
        step=step[1] if step is not None else None,
        policy_generation=generation[1] if generation is not None else None,
        checkpoint_step=checkpoint[1] if checkpoint is not None else None,
        heartbeat_scraped_at=heartbeat[0] if heartbeat is not None else None,
    )


def trainer_signals(
    readings: Iterable[TrainerReading], *, pods_running: bool, attempt_started_at: float
) -> TrainerSignals:
    """The gang's signals from its ranks' latest readings: the freshest plausible heartbeat and
    when it was read (a rank whose metrics stopped arriving leaves an old reading behind: the
    heartbeat is judged as of then, not read as a stall now), the phase of that rank (else of
    the newest reading) and the highest step."""
    readings = list(readings)
    beating = [r for r in readings if freshest_heartbeat([r.heartbeat_at]) is not None]
    source = max(beating, key=lambda r: (r.heartbeat_at or 0.0, _heartbeat_time(r)), default=None)
    phase_from = source or max(readings, key=lambda r: r.t, default=None)
    steps = [r.step for r in readings if r.step is not None]
    return TrainerSignals(
        pods_running=pods_running,
        attempt_started_at=attempt_started_at,
        heartbeat_at=source.heartbeat_at if source is not None else None,
        phase=phase_from.phase if phase_from is not None else None,
        step=max(steps) if steps else None,
        observed_at=_heartbeat_time(source) if source is not None else None,
    )


def _heartbeat_time(reading: TrainerReading) -> float:
    return reading.heartbeat_scraped_at if reading.heartbeat_scraped_at is not None else reading.t
