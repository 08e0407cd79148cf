"""The rollout roster (status.roles.rollout.engines[]), computed on every pass from the
observed rollout pods, the journal and the engines' latest readings; rljob.sdk.EngineRoster
follows it. A pod is a member while it is neither terminal nor deleting, nor stamped for its
delete by the journal (it is leaving; a pod Kubernetes deletes on a spec edit simply leaves and
its replacement joins). State: draining once the journal stamped its drain, serving when it is
Ready, else joining. Its generation is the one read when its state or address last changed, so
the roster is rewritten on membership or state changes, never at every weight push."""

from __future__ import annotations

from rljob.api import EngineMember, EngineState, RLJob
from rljob.api.roles import MAX_REPLICAS
from rljob.reconcile.drain import ROLLOUT, draining_uids, reading_of
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.observed import Observed, ObservedPod


def engine_roster(
    job: RLJob,
    observed: Observed,
    readings: tuple[EngineReading, ...],
    previous: list[EngineMember] | None,
) -> list[EngineMember] | None:
    """The roster for status.roles.rollout.engines; None when the job has no rollout role."""
    if job.spec.roles.rollout is None:
        return None
    leaving = _stamped_for_delete(job)
    draining = draining_uids(job.status)
    before = {member.pod: member for member in previous or []}
    members = [
        _member(pod, _state(pod, draining), readings, before.get(pod.name))
        for pod in observed.pods
        if pod.role == ROLLOUT and not pod.terminal and not pod.deleting and pod.uid not in leaving
    ]
    return sorted(members, key=lambda m: m.pod)[:MAX_REPLICAS]


def _stamped_for_delete(job: RLJob) -> set[str]:
    action = job.status.in_flight
    return {p.uid for p in (action.pods or []) if p.deleted_at is not None} if action else set()


def _state(pod: ObservedPod, draining: set[str]) -> EngineState:
    if pod.uid in draining:
        return EngineState.DRAINING
    return EngineState.SERVING if pod.ready else EngineState.JOINING


def _member(
    pod: ObservedPod,
    state: EngineState,
    readings: tuple[EngineReading, ...],
    before: EngineMember | None,
) -> EngineMember:
    if before is not None and before.state == state and before.address == pod.ip:
        generation = before.generation
    else:
        reading = reading_of(readings, pod.name)
        generation = reading.generation if reading is not None else None
    return EngineMember(pod=pod.name, address=pod.ip, state=state, generation=generation)
