"""Draining a rollout engine before the operator replaces it (spec.roles.rollout.weightSync:
Gated): the journal stamps the pod's `drainStartedAt` (the roster then says draining and the
driver stops sending to it), and the pod is deleted only once drained: a reading of it taken at
least DRAIN_SETTLE after the drain began shows no request running, its pod has no container
running (a crash loop: nothing left to finish), or drainTimeout passed (with no reading, only the
timeout ends it). The journal holds the start, so a restarted operator keeps the deadline.
Ungated jobs never drain.

A drain that waits asks for another pass soon (`recheck_after`), as does a Gated engine waiting
for its policy-current gate; the health loop also wakes the job when a reading moves either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rljob.api import ActionPod, InFlightAction, RLJob, RLJobStatus, RoleName, WeightSync
from rljob.api.durations import parse_duration
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.events import EventSpec
from rljob.reconcile.policy.ledger import utc

DRAIN_SETTLE = timedelta(seconds=1)  # a reading this long after the start saw the drain
DRAIN_RECHECK_SECONDS = 2.0  # a waiting drain's next pass, at the latest
DRAINING_STEP = "Draining"  # a Gated RestartPod's step while its pod drains
DRAIN_STARTED = "EngineDraining"
DRAINED = "EngineDrained"
ROLLOUT = RoleName.ROLLOUT.value


def gated(job: RLJob) -> bool:
    """The job's rollout engines drain before a replacement and rejoin behind the gate."""
    rollout = job.spec.roles.rollout
    return rollout is not None and rollout.weight_sync == WeightSync.GATED


def drains(job: RLJob, role: str) -> bool:
    """Whether the operator drains a pod of `role` before deleting it."""
    return role == ROLLOUT and gated(job)


def drain_timeout(job: RLJob) -> float:
    rollout = job.spec.roles.rollout
    return parse_duration(rollout.drain_timeout) if rollout is not None else 0.0


def drain_entry(name: str, uid: str, now: datetime) -> ActionPod:
    """A pod whose drain begins with the journal write that carries this entry."""
    return ActionPod(name=name, uid=uid, drain_started_at=now)


def draining(status: RLJobStatus) -> list[ActionPod]:
    """The journaled pods whose drain began and whose delete has not come yet."""
    action = status.in_flight
    if action is None:
        return []
    return [p for p in action.pods or [] if p.drain_started_at is not None and p.deleted_at is None]


def draining_uids(status: RLJobStatus) -> set[str]:
    return {p.uid for p in draining(status)}


def delete_stamped_uids(action: InFlightAction | None) -> set[str]:
    """The journaled pods whose delete was decided (their `deletedAt` stamped)."""
    return {p.uid for p in action.pods or [] if p.deleted_at is not None} if action else set()


def reading_of(readings: tuple[EngineReading, ...], pod: str) -> EngineReading | None:
    return next((r for r in readings if r.pod == pod), None)


@dataclass(frozen=True)
class DrainEnd:
    """How a drain ended: `timed_out` (drainTimeout passed) or drained; `running`: the requests
    its last reading showed (None: no reading); `seconds` since it began; `stopped`: no container
    of its pod was running."""

    timed_out: bool
    running: float | None
    seconds: float
    stopped: bool = False


def drain_end(
    job: RLJob, entry: ActionPod, readings: tuple[EngineReading, ...], now: datetime
) -> DrainEnd | None:
    """The drain's end if it ended by `now`; None while it waits (and for a pod not draining)."""
    if entry.drain_started_at is None:
        return None
    started = utc(entry.drain_started_at)
    seconds = max(0.0, (now - started).total_seconds())
    reading = reading_of(readings, entry.name)
    if reading is not None and reading.stopped:
        return DrainEnd(timed_out=False, running=0, seconds=seconds, stopped=True)
    if reading is not None and reading.running == 0 and utc(reading.at) >= started + DRAIN_SETTLE:
        return DrainEnd(timed_out=False, running=0, seconds=seconds)
    if seconds >= drain_timeout(job):
        return DrainEnd(
            timed_out=True, running=reading.running if reading else None, seconds=seconds
        )
    return None


def drain_waits(
    job: RLJob, entry: ActionPod | None, readings: tuple[EngineReading, ...], now: datetime
) -> bool:
    """Whether this pod's delete must wait: its drain began and has not ended."""
    return (
        entry is not None
        and entry.drain_started_at is not None
        and (drain_end(job, entry, readings, now) is None)
    )


def action_entry(action: InFlightAction | None, uid: str) -> ActionPod | None:
    if action is None:
        return None
    return next((p for p in action.pods or [] if p.uid == uid), None)


def recheck_after(job: RLJob, readings: tuple[EngineReading, ...], now: datetime) -> float | None:
    """Seconds until a pass should look again at a drain that waits (None: none waits)."""
    waits = []
    for entry in draining(job.status):
        if drain_end(job, entry, readings, now) is not None:
            continue
        started = utc(entry.drain_started_at or now)
        remaining = (started - now).total_seconds() + drain_timeout(job)
        waits.append(min(DRAIN_RECHECK_SECONDS, max(remaining, 0.0) + 0.5))
    return min(waits, default=None)


def started_event(job: RLJob, action: InFlightAction, entry: ActionPod) -> tuple[str, EventSpec]:
    """(name, Event) saying the drain began; named: said once whoever posts it."""
    timeout = job.spec.roles.rollout.drain_timeout if job.spec.roles.rollout else ""
    message = (
        f"{entry.name} draining: the roster says draining; deleted once no request runs on it "
        f"or after {timeout} (drainTimeout)"
    )
    name = f"{job.metadata.name}.{action.id}.drain-{entry.uid}"
    return name, EventSpec("Normal", DRAIN_STARTED, message)


def ended_event(
    job: RLJob,
    action: InFlightAction,
    entry: ActionPod,
    readings: tuple[EngineReading, ...],
    at: datetime,
) -> tuple[str, EventSpec] | None:
    """(name, Event) saying how the drain ended, posted before the pod's delete; `at`: when the
    delete was decided. None for a pod that was not drained."""
    if entry.drain_started_at is None:
        return None
    end = drain_end(job, entry, readings, at) or _decided_end(job, entry, readings, at)
    name = f"{job.metadata.name}.{action.id}.drained-{entry.uid}"
    return name, EventSpec("Normal", DRAINED, ended_message(job, entry.name, end))


def ended_message(job: RLJob, pod: str, end: DrainEnd) -> str:
    """ "<pod> drained: 0 running after 4s" or "<pod> drain timed out after 2m with 3 running:
    deleted"."""
    if end.stopped:
        return f"{pod} drained: no container of it running after {end.seconds:.0f}s"
    if not end.timed_out:
        return f"{pod} drained: 0 running after {end.seconds:.0f}s"
    timeout = job.spec.roles.rollout.drain_timeout if job.spec.roles.rollout else ""
    if end.running is None:
        return f"{pod} drain timed out after {timeout} with its running requests unread: deleted"
    return f"{pod} drain timed out after {timeout} with {end.running:.0f} running: deleted"


def _decided_end(
    job: RLJob, entry: ActionPod, readings: tuple[EngineReading, ...], at: datetime
) -> DrainEnd:
    """A delete decided on a reading that has moved on since (resumed after a crash): said by
    the time it took."""
    started = utc(entry.drain_started_at or at)
    seconds = max(0.0, (at - started).total_seconds())
    reading = reading_of(readings, entry.name)
    timed_out = seconds >= drain_timeout(job)
    running = reading.running if reading is not None and timed_out else 0
    return DrainEnd(timed_out=timed_out, running=running, seconds=seconds)
