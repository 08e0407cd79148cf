"""Engine slots (spec.roles.rollout.slotServices, docs/weight-sync.md#engine-slots): slot k's
ClusterIP Service selects the rollout pod labelled `rljob.io/slot-<k>: held`, and a driver that
reads its engine addresses once (slime) keeps those Services' names. A slot is lent, never
emptied:

- every slot is held by a serving engine (Ready, not draining, not leaving) whenever one
  serves: an unheld slot goes to the serving engine holding the fewest;
- an engine that stops serving (its drain began, its gate closes after an in-place restart, it
  is not Ready) gives its slots up only once another serving engine holds them: the stamps come
  before the gate closes and before the removals in the same pass (steps.execution_steps), so
  the Service always has a Ready endpoint;
- an engine joins behind its gate holding no slot; the operator brings it to the slots' weights
  itself (a WeightCopy: SGLang's `/update_weights_from_disk` with the `model_path` and
  `weight_version` a serving engine reports in `/model_info`), and once its gate opened and it
  reports what the slot holders report (a sync may have come after its copy: it is copied
  again) it takes a slot from an engine holding more than one (stamped on it, then removed from
  the lender).

The pure part: which labels move this pass and which copies start; the runtime applies them."""

from __future__ import annotations

from dataclasses import dataclass

from rljob.api import RLJob, RLJobStatus, RoleName
from rljob.reconcile.drain import ROLLOUT, delete_stamped_uids, draining_uids, reading_of
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.gate import awaiting_gate, restarted_behind_gate, roster_members
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.pods import serving_port


@dataclass(frozen=True)
class SlotMove:
    """Slot `slot` stamped on (`held`) or removed from one rollout pod's labels."""

    pod: str
    uid: str
    slot: int
    held: bool


@dataclass(frozen=True)
class WeightCopy:
    """The weights a serving engine reports copied into a joining one over HTTP (`port`: the
    engines' serving port on both pod IPs)."""

    source: str
    source_ip: str
    target: str
    target_uid: str
    target_ip: str
    port: int
    generation: int


def slot_count(job: RLJob) -> int:
    rollout = job.spec.roles.rollout
    return rollout.replicas if rollout is not None and rollout.slot_services else 0


def serving_engines(status: RLJobStatus, observed: Observed) -> list[ObservedPod]:
    """The rollout pods a slot may route to: Ready behind their gate, neither deleting nor
    draining nor stamped for their delete, nor restarted in place (their gate closes this
    pass: gate.to_close); by name."""
    leaving = draining_uids(status) | delete_stamped_uids(status.in_flight)
    members = roster_members(status)
    return sorted(
        (
            p
            for p in observed.pods
            if p.role == ROLLOUT
            and p.ready
            and p.policy_current
            and not p.terminal
            and not p.deleting
            and p.uid not in leaving
            and not restarted_behind_gate(p, members.get(p.name))
        ),
        key=lambda p: p.name,
    )


def slot_moves(
    job: RLJob,
    status: RLJobStatus,
    observed: Observed,
    readings: tuple[EngineReading, ...] = (),
) -> tuple[SlotMove, ...]:
    """This pass's label changes, every stamp before any removal (`status`: the pass's own, so
    a drain it journals lends the draining engine's slots out in the same pass). A slot goes
    only to an engine reporting at least what the slot holders report (`readings`): a newcomer
    whose gate opened before the driver's last sync is brought up to date first."""
    count = slot_count(job)
    if count == 0:
        return ()
    serving = serving_engines(status, observed)
    held = _kept(serving, count)
    newest = _newest_held(serving, held, readings)
    current = [p for p in serving if _reports_at_least(p, reading_of(readings, p.name), newest)]
    for slot in range(count):
        if serving and not any(slot in slots for slots in held.values()):
            _fewest(current or serving, held).add(slot)  # a stale holder beats an empty slot
    _balance(serving, current, held)
    stamps = [
        SlotMove(p.name, p.uid, slot, True)
        for p in serving
        for slot in sorted(held[p.uid] - p.slots)
    ]
    covered = set().union(*held.values()) if held else set()
    removals = [
        SlotMove(p.name, p.uid, slot, False)
        for p in observed.pods
        if p.role == ROLLOUT and not p.deleting
        for slot in sorted(p.slots)
        if slot not in held.get(p.uid, set()) and (slot >= count or slot in covered)
    ]
    return (*stamps, *removals)


def _newest_held(
    serving: list[ObservedPod], held: dict[str, set[int]], readings: tuple[EngineReading, ...]
) -> int | None:
    """The newest generation a slot holder reports: what the driver last synced to."""
    reported = [
        reading.generation
        for p in serving
        if held[p.uid]
        and (reading := reading_of(readings, p.name)) is not None
        and reading.generation is not None
    ]
    return max(reported, default=None)


def _kept(serving: list[ObservedPod], count: int) -> dict[str, set[int]]:
    """What each serving engine keeps of the slots it holds: a slot two of them hold (a pass
    cut between a stamp and its removal) stays with the one holding fewer."""
    held = {p.uid: {s for s in p.slots if s < count} for p in serving}
    for slot in range(count):
        holders = sorted(
            (p for p in serving if slot in held[p.uid]), key=lambda p: (len(held[p.uid]), p.name)
        )
        for extra in holders[1:]:
            held[extra.uid].discard(slot)
    return held


def _fewest(serving: list[ObservedPod], held: dict[str, set[int]]) -> set[int]:
    return held[min(serving, key=lambda p: (len(held[p.uid]), p.name)).uid]


def _balance(
    serving: list[ObservedPod], current: list[ObservedPod], held: dict[str, set[int]]
) -> None:
    """Slots move from the engine holding the most to the current one holding the fewest while
    they differ by two or more: a newcomer takes back a slot lent out during a repair."""
    while serving and current:
        most = max(serving, key=lambda p: (len(held[p.uid]), p.name))
        least = min(current, key=lambda p: (len(held[p.uid]), p.name))
        if len(held[most.uid]) - len(held[least.uid]) < 2:
            return
        slot = max(held[most.uid])
        held[most.uid].discard(slot)
        held[least.uid].add(slot)


def weight_copies(
    job: RLJob, status: RLJobStatus, observed: Observed, readings: tuple[EngineReading, ...]
) -> tuple[WeightCopy, ...]:
    """The copies this pass starts, from the serving engine reporting the newest generation into
    each engine behind it that no sync reaches: one awaiting its gate whose server answers
    (containers Ready), or one serving that holds no slot. Only within this job's engines."""
    role = job.spec.roles.rollout
    if role is None or not role.slot_services:
        return ()
    source = _newest_source(status, observed, readings)
    if source is None:
        return ()
    pod, generation = source
    port = serving_port(RoleName.ROLLOUT, role)
    leaving = draining_uids(status) | delete_stamped_uids(status.in_flight)  # going: no copy
    unslotted = [p for p in serving_engines(status, observed) if not p.slots]
    copies = []
    for target in [*awaiting_gate(job, observed), *unslotted]:
        if target.uid in leaving or not target.containers_ready or not target.ip:
            continue
        if _reports_at_least(target, reading_of(readings, target.name), generation):
            continue
        copies.append(
            WeightCopy(pod.name, pod.ip, target.name, target.uid, target.ip, port, generation)
        )
    return tuple(copies)


def _newest_source(
    status: RLJobStatus, observed: Observed, readings: tuple[EngineReading, ...]
) -> tuple[ObservedPod, int] | None:
    """The serving engine reporting the newest generation, and that generation."""
    best: tuple[ObservedPod, int] | None = None
    for pod in serving_engines(status, observed):
        reading = reading_of(readings, pod.name)
        if reading is None or reading.generation is None or not pod.ip:
            continue
        if best is None or reading.generation > best[1]:
            best = (pod, reading.generation)
    return best


def _reports_at_least(
    pod: ObservedPod, reading: EngineReading | None, generation: int | None
) -> bool:
    """A reading of its running container shows `generation` or newer (None: anything does)."""
    if generation is None:
        return True
    if reading is None or reading.generation is None:
        return False
    fresh = pod.started_at is None or reading.at >= pod.started_at
    return fresh and reading.generation >= generation
