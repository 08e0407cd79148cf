"""The rollout roster (status.roles.rollout.engines[]), computed on every pass from the
observed rollout pods, the journal and the engines' latest readings; rljob.sdk.EngineRoster
follows it. A pod is a member while it is neither terminal nor deleting, nor stamped for its
delete by the journal (it is leaving; a pod Kubernetes deletes on a spec edit simply leaves and
its replacement joins). State: draining once the journal stamped its drain, serving when it is
Ready, else joining. Its generation is the one read when its state or address last changed, so
the roster is rewritten on membership or state changes, never at every weight push.

Gated: a member's requiredGeneration is the gate's target (gate.gate_target) when it joined or
its container last restarted, kept while it stays (filled in if nothing was known then) and
lowered to the target while it is still joining (a resume from an older checkpoint); its
restarts count the container's restarts, held back while a restart awaits its gate set False
(it shows joining meanwhile), so a lost gate write is resent by the next pass."""

from __future__ import annotations

from rljob.api import EngineMember, EngineState, RLJob
from rljob.api.roles import MAX_REPLICAS
from rljob.reconcile.drain import (
    ROLLOUT,
    delete_stamped_uids,
    draining_uids,
    gated,
    reading_of,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.gate import gate_target, restarted_behind_gate
from rljob.reconcile.observed import Observed, ObservedPod


def engine_roster(
    job: RLJob,
    observed: Observed,
    readings: tuple[EngineReading, ...],
    previous: list[EngineMember] | None,
    trainer_generation: int | None = None,
) -> list[EngineMember] | None:
    """The roster for status.roles.rollout.engines; None when the job has no rollout role.
    `trainer_generation`: the trainer's live policy generation, if read this round."""
    if job.spec.roles.rollout is None:
        return None
    leaving = delete_stamped_uids(job.status.in_flight)
    draining = draining_uids(job.status)
    before = {member.pod: member for member in previous or []}
    target = gate_target(job, observed, readings, trainer_generation) if gated(job) else None
    members = []
    for pod in observed.pods:
        if pod.role != ROLLOUT or pod.terminal or pod.deleting or pod.uid in leaving:
            continue
        old = before.get(pod.name)
        rejoins = gated(job) and restarted_behind_gate(pod, old)
        state = _state(pod, draining, rejoins)
        required, restarts = _required(pod, old, target, rejoins)
        if state == EngineState.JOINING:
            required = _reachable(required, target)
        member = _member(pod, state, readings, old)
        members.append(
            member.model_copy(update={"required_generation": required, "restarts": restarts})
        )
    return sorted(members, key=lambda m: m.pod)[:MAX_REPLICAS]


def _reachable(required: int | None, target: int | None) -> int | None:
    """A joining engine's requirement lowered to the current target: after a resume from an older
    checkpoint the attempt's driver pushes older generations, and a requirement fixed before it
    would keep the gate shut until training climbed back (for ever, with no engine serving);
    with generationFrom engine, after the driver's count started over (gate.gate_target)."""
    if required is None or target is None:
        return required
    return min(required, target)


def _state(pod: ObservedPod, draining: set[str], rejoins: bool) -> EngineState:
    if pod.uid in draining:
        return EngineState.DRAINING
    return EngineState.SERVING if pod.ready and not rejoins else EngineState.JOINING


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


def _required(
    pod: ObservedPod, before: EngineMember | None, target: int | None, rejoins: bool
) -> tuple[int | None, int]:
    """(requiredGeneration, restarts): fixed on joining or on a restart, kept otherwise;
    `rejoins`: restarted while its gate is True."""
    if before is None:
        return target, pod.restart_count
    if rejoins:
        return target, before.restarts  # counted once the gate is seen False
    if pod.restart_count != before.restarts:
        return target, pod.restart_count
    kept = before.required_generation
    if kept is None and pod.policy_current:
        # It passed its gate when nothing was required: a target filled in now would claim it
        # had to report a generation it never needed (and shows an open gate below it).
        return None, pod.restart_count
    return (target if kept is None else kept), pod.restart_count
