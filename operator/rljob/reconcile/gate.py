"""The rljob.io/policy-current readiness gate of Gated rollout engines: a live engine turns
Ready (and the roster says serving) only once the operator set the gate's condition True, which
it does when the engine reports at least its roster member's requiredGeneration, the target
fixed when it joined (so a push slower than a training step still passes). The operator sets
it back to False when the engine's drain begins (the Service stops routing to it, a user's roll
counts it unavailable) and when its container restarted in place (its weights are the command
line's again). While the operator is down no new engine turns Ready.

With generationFrom engine the generation is the engine's own weight version, a counter the
driver keeps: slime (THUDM/slime 624b824) tells engines str(N) with N counted in memory from 0
in each new process, so after a trainer restart the engines hear "1" again. The target is then
what the serving engines report now, never status.policyGeneration's memory nor the trainer's
rljob_policy_generation (another count), and a joining member's requiredGeneration above what
every serving engine reports now is re-based down to it (roster._reachable lowers a joining
member to the target): without it a newcomer would wait until the new counter climbed back."""

from __future__ import annotations

from rljob.api import EngineMember, GenerationFrom, RLJob, RLJobStatus
from rljob.reconcile.drain import ROLLOUT, draining_uids, gated, reading_of
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.progress import newer_generation

GATE_RECHECK_SECONDS = 5.0  # a pass at least this often while an engine awaits its gate
DRAINING = "Draining"  # the gate's reason while the engine drains
RESTARTED = "ContainerRestarted"  # the gate's reason after an in-place restart


def generation_from_engine(job: RLJob) -> bool:
    """The rollout engines' generation is their own weight version, read over HTTP."""
    rollout = job.spec.roles.rollout
    return rollout is not None and rollout.generation_from == GenerationFrom.ENGINE


def live_engines(job: RLJob, observed: Observed) -> list[ObservedPod]:
    """Gated rollout pods neither terminal nor deleting (none for an Ungated job)."""
    if not gated(job):
        return []
    return [p for p in observed.pods if p.role == ROLLOUT and not p.terminal and not p.deleting]


def awaiting_gate(job: RLJob, observed: Observed) -> list[ObservedPod]:
    """Live Gated rollout pods whose gate condition is not True yet (not draining ones)."""
    leaving = draining_uids(job.status)
    return [p for p in live_engines(job, observed) if not p.policy_current and p.uid not in leaving]


def gate_target(
    job: RLJob,
    observed: Observed,
    readings: tuple[EngineReading, ...],
    trainer_generation: int | None,
) -> int | None:
    """The generation an engine joining now must report: the trainer's live reading when there
    is one (the current attempt's: a resume from an older checkpoint is followed), else the
    newest of status.policyGeneration and what serving engines report; with generationFrom
    engine, what the serving engines report now alone; None: nothing known."""
    serving = _serving_generation(job, observed, readings)
    if generation_from_engine(job):
        return serving  # the driver's counter may have started over: no memory of it counts
    if trainer_generation is not None:
        return trainer_generation
    return newer_generation(job.status.policy_generation, serving)


def passes(reading: EngineReading | None, member: EngineMember | None) -> bool:
    """The engine reports at least its member's required generation (None: any generation)."""
    if reading is None or reading.generation is None:
        return False
    required = member.required_generation if member is not None else None
    return required is None or reading.generation >= required


def restarted_behind_gate(pod: ObservedPod, member: EngineMember | None) -> bool:
    """Its container restarted since the roster last counted while its gate is still True (the
    roster holds the count back until the gate is seen False, so a lost write is resent)."""
    return pod.policy_current and member is not None and pod.restart_count > member.restarts


def to_close(job: RLJob, status: RLJobStatus, observed: Observed) -> list[tuple[ObservedPod, str]]:
    """(pod, reason) whose gate this pass sets False: True still while it drains or after its
    container restarted in place. Idempotent: resent while the gate is seen True."""
    leaving = draining_uids(status)
    members = roster_members(status)
    closing = []
    for pod in live_engines(job, observed):
        if pod.policy_current and pod.uid in leaving:
            closing.append((pod, DRAINING))
        elif restarted_behind_gate(pod, members.get(pod.name)):
            closing.append((pod, RESTARTED))
    return closing


def to_open(
    job: RLJob, status: RLJobStatus, observed: Observed, readings: tuple[EngineReading, ...]
) -> list[tuple[ObservedPod, int]]:
    """(pod, generation reported) whose gate this pass sets True: awaiting it and reporting at
    least its member's required generation in `status`'s roster."""
    members = roster_members(status)
    leaving = draining_uids(status)
    opened = []
    for pod in awaiting_gate(job, observed):
        reading = reading_of(readings, pod.name)
        if pod.uid not in leaving and passes(reading, members.get(pod.name)) and reading:
            opened.append((pod, reading.generation or 0))
    return opened


def roster_members(status: RLJobStatus) -> dict[str, EngineMember]:
    rollout = status.roles.rollout if status.roles is not None else None
    return {m.pod: m for m in (rollout.engines if rollout is not None else None) or []}


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


def gate_recheck_after(job: RLJob, observed: Observed) -> float | None:
    """Seconds until a pass should look again at engines awaiting their gate."""
    return GATE_RECHECK_SECONDS if awaiting_gate(job, observed) else None
