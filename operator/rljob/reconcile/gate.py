"""The rljob.io/policy-current readiness gate of Gated rollout engines: a live engine turns
Ready (and the roster says serving) only once the operator set the gate's condition True,
which it does when the engine reports the job's current policy generation. Set once per pod,
never set back to False; while the operator is down no new engine turns Ready."""

from __future__ import annotations

from rljob.api import RLJob
from rljob.reconcile.drain import ROLLOUT, draining_uids, gated, reading_of
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.observed import Observed, ObservedPod

GATE_RECHECK_SECONDS = 5.0  # a pass at least this often while an engine awaits its gate


def awaiting_gate(job: RLJob, observed: Observed) -> list[ObservedPod]:
    """Live Gated rollout pods whose gate condition is not True yet (not draining ones)."""
    if not gated(job):
        return []
    leaving = draining_uids(job.status)
    return [
        p
        for p in observed.pods
        if p.role == ROLLOUT
        and not p.terminal
        and not p.deleting
        and not p.policy_current
        and p.uid not in leaving
    ]


def current(generation: int | None, policy_generation: int | None) -> bool:
    """An engine's reported generation serves the job's current policy."""
    if generation is None:
        return False
    return policy_generation is None or generation >= policy_generation


def to_mark_current(
    job: RLJob,
    observed: Observed,
    readings: tuple[EngineReading, ...],
    policy: int | None,
) -> list[ObservedPod]:
    """The pods whose gate this pass sets: awaiting it, and reporting `policy`, the newest
    generation known (the trainer's latest reading: status.policyGeneration lags by up to 5
    minutes, and an engine still on its command-line weights must not pass for current), or
    the newest a serving engine reports (a driver without the SDK's trainer metrics)."""
    policy = _newest(policy, _serving_generation(job, observed, readings))
    marked = []
    for pod in awaiting_gate(job, observed):
        reading = reading_of(readings, pod.name)
        if reading is not None and current(reading.generation, policy):
            marked.append(pod)
    return marked


def _serving_generation(
    job: RLJob, observed: Observed, readings: tuple[EngineReading, ...]
) -> int | None:
    leaving = draining_uids(job.status)
    serving = {
        p.name
        for p in observed.pods
        if p.role == ROLLOUT and p.ready and not p.deleting and p.uid not in leaving
    }
    reported = [r.generation for r in readings if r.pod in serving and r.generation is not None]
    return max(reported, default=None)


def _newest(first: int | None, second: int | None) -> int | None:
    return max((g for g in (first, second) if g is not None), default=None)


def gate_recheck_after(job: RLJob, observed: Observed) -> float | None:
    """Seconds until a pass should look again at engines awaiting their gate."""
    return GATE_RECHECK_SECONDS if awaiting_gate(job, observed) else None
