"""The engine slots' invariants in the model (machine.py; spec.roles.rollout.slotServices,
reconcile/slots.py), read from the cluster's truth (the RLJob as stored, the pods, the write log,
the copies passes started), never from what the operator believed. A pod *serves* while it is
Ready with every readiness gate True, running and not terminating (a gate set False turns it
NotReady at its kubelet's next sync, which may come at once), and its container has not
restarted since the stored roster counted it (its weights are the command line's again, and the
pass that sees it closes its gate); it *holds* slot k while labelled
`rljob.io/slot-<k>: held`. Engines are this RLJob's rollout pods; an engine *leaves* once the
stored journal lists it draining (drainStartedAt) or for its delete (deletedAt). All but the last
are checked on passes of the leader whose watches were caught up as they began (a stale view may
hide a crash the operator cannot know of):

- the-operator-never-empties-a-slot: no operator write leaves a slot k < replicas that a serving
  engine held before the write with no serving holder after it, while an engine it could be lent
  to (serving, not leaving) remains;
- every-slot-is-held-once-the-operator-settles: after such a pass that wrote without a fault,
  on a job whose status says its newest spec was observed, every slot k < replicas has a
  serving holder whenever an engine serves and is not leaving;
- no-slot-is-held-twice-once-settled: after such a pass, no slot has two serving holders;
- a-slot-is-stamped-only-on-a-serving-engine: the operator never stamps a slot on an engine that
  does not serve, or leaves, as the write arrives;
- a-copy-goes-from-a-serving-engine-to-one-no-slot-routes-to: every weight copy started is from
  a pod of this RLJob's rollout Deployment, at its own IP, serving and not leaving, the generation
  a reading of its running container handed to the pass says; into a pod of that Deployment at
  its own uid and IP, neither terminating nor leaving, that no slot's Service routes to: joining
  (not serving), or serving while holding no slot (no sync reaches it);
- an-unslotted-job-never-gets-a-slot-or-a-copy: a job without slotServices (Gated or not) never
  has a slot label stamped on a pod, nor a weight copy started (checked on every pass).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.slots import WeightCopy
from rljob.vocabulary.labels import ROLE_LABEL, slots_held
from tests.unit.model.cluster import Cluster, Ref, Write
from tests.unit.model.in_turn import ready_running
from tests.unit.model.weights import container_started

KIND = "RLJob"
ROLLOUT = "rollout"

NEVER_EMPTIED = "the-operator-never-empties-a-slot"
HELD_WHEN_SETTLED = "every-slot-is-held-once-the-operator-settles"
HELD_ONCE = "no-slot-is-held-twice-once-settled"
STAMPED_ON_SERVING = "a-slot-is-stamped-only-on-a-serving-engine"
COPY_WITHIN = "a-copy-goes-from-a-serving-engine-to-one-no-slot-routes-to"
UNSLOTTED = "an-unslotted-job-never-gets-a-slot-or-a-copy"
CHECKS = frozenset(
    {NEVER_EMPTIED, HELD_WHEN_SETTLED, HELD_ONCE, STAMPED_ON_SERVING, COPY_WITHIN, UNSLOTTED}
)
Before = tuple[bool, int]  # (the pass is the leader's on caught-up watches, the log's length)


@dataclass(frozen=True)
class Engine:
    """One engine as the cluster holds it."""

    name: str
    slots: frozenset[int]
    serving: bool
    leaving: bool

    def holds(self, slot: int) -> bool:
        return self.serving and slot in self.slots


Engines = dict[str, Engine]  # by pod uid


@dataclass(frozen=True)
class CopyRecord:
    """A copy a pass started, with the engines as the cluster held them then."""

    copy: WeightCopy
    at: dt.datetime
    engines: Engines


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _role(pod: Mapping[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(ROLE_LABEL, ""))


def _owner(pod: Mapping[str, Any]) -> str | None:
    owners = pod["metadata"].get("ownerReferences") or []
    return next((str(o["uid"]) for o in owners if o.get("controller")), None)


def serving(pod: Mapping[str, Any]) -> bool:
    """A Service routes to it and no closed readiness gate is about to take it out."""
    gates = [g["conditionType"] for g in pod["spec"].get("readinessGates") or []]
    conditions = {c["type"]: c.get("status") for c in pod["status"].get("conditions") or []}
    return ready_running(pod) and all(conditions.get(gate) == "True" for gate in gates)


def _rollout_spec(job: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (job or {}).get("spec", {}).get("roles", {}).get(ROLLOUT) or {}


def slot_count(job: Mapping[str, Any] | None) -> int:
    rollout = _rollout_spec(job)
    return int(rollout.get("replicas", 1)) if rollout.get("slotServices") else 0


def _leaving(job: Mapping[str, Any]) -> set[str]:
    entries = (((job.get("status") or {}).get("inFlight") or {}).get("pods")) or []
    return {e["uid"] for e in entries if e.get("drainStartedAt") or e.get("deletedAt")}


def _restarted(pod: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """Its container restarted since the roster in the stored status counted it: its weights
    are the command line's again, so it serves no slot whatever its gate still says."""
    rollout = ((job.get("status") or {}).get("roles") or {}).get(ROLLOUT) or {}
    members = {m["pod"]: m for m in rollout.get("engines") or []}
    member = members.get(pod["metadata"]["name"])
    count = sum(int(c.get("restartCount", 0)) for c in pod["status"].get("containerStatuses") or [])
    return member is not None and count > int(member.get("restarts", 0))


def _behind(job: Mapping[str, Any]) -> bool:
    """The operator has not acted on the job's newest spec yet (a replicas edit it has not
    seen: its slots are the old count's)."""
    observed = (job.get("status") or {}).get("observedGeneration")
    return bool(observed != job["metadata"].get("generation"))


class SlotChecks:
    """Observes one RLJob's slots and copies; `faults(check)` says what broke each invariant."""

    def __init__(self, cluster: Cluster, name: str, readings: Mapping[str, EngineReading]) -> None:
        self.cluster = cluster
        self.name = name
        self.readings = readings  # the health loop's, by pod: what a pass is handed
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}
        self.copies: list[CopyRecord] = []  # every copy a pass started
        self.watching = False  # a pass of the leader on caught-up watches runs
        self._handed: dict[str, EngineReading] = {}  # the readings that pass was handed
        self._arrival: tuple[int, Engines] | None = None  # (slots, engines) as a write arrived
        cluster.arrival_observers.append(self._arriving)
        cluster.write_observers.append(self._written)

    # -- the truth -------------------------------------------------------------------------------

    def _job(self) -> Mapping[str, Any] | None:
        return self.cluster.peek(KIND, self.name)

    def _engines(self, job: Mapping[str, Any]) -> Engines:
        uid, leaving = job["metadata"]["uid"], _leaving(job)
        return {
            pod["metadata"]["uid"]: Engine(
                pod["metadata"]["name"],
                slots_held(pod["metadata"].get("labels") or {}),
                serving(pod) and not _restarted(pod, job),
                pod["metadata"]["uid"] in leaving,
            )
            for pod in self.cluster.view("Pod")
            # An orphan (its Deployment deleted by hand) is the garbage collector's: the
            # operator no longer counts it as the job's, and it goes with its engine.
            if _role(pod) == ROLLOUT
            and self.cluster.controlled_by(pod, uid)
            and not self.cluster.orphaned(pod)
        }

    # -- the writes ------------------------------------------------------------------------------

    def _arriving(self, verb: str, ref: Ref) -> None:
        job = self._job()
        if self.watching and job is not None and slot_count(job):
            self._arrival = (slot_count(job), self._engines(job))

    def _written(self, write: Write | None) -> None:
        arrival, self._arrival = self._arrival, None
        job = self._job()
        if job is None:
            return
        if write is not None and write.kind == "Pod" and not slot_count(job):
            self._check_unslotted(write.name)
        if arrival is None:
            return
        count, before = arrival
        after = self._engines(job)
        said = f"{write.verb} {write.kind} {write.name}" if write is not None else "a write"
        self._check_emptied(said, count, before, after)
        self._check_stamped(said, before, after)

    def _check_unslotted(self, pod_name: str) -> None:
        pod = self.cluster.peek("Pod", pod_name)
        held = slots_held(pod["metadata"].get("labels") or {}) if pod is not None else frozenset()
        if held:
            self.recorded[UNSLOTTED].append(f"{pod_name} of an unslotted job holds slots {held}")

    def _check_emptied(self, said: str, count: int, before: Engines, after: Engines) -> None:
        lenders = sorted(e.name for e in after.values() if e.serving and not e.leaving)
        for slot in range(count):
            held = sorted(e.name for e in before.values() if e.holds(slot))
            if held and lenders and not any(e.holds(slot) for e in after.values()):
                self.recorded[NEVER_EMPTIED].append(
                    f"{said} emptied slot {slot}, held by {held} before, while {lenders} serve"
                )

    def _check_stamped(self, said: str, before: Engines, after: Engines) -> None:
        for uid, engine in after.items():
            was = before.get(uid)
            stamped = engine.slots - was.slots if was is not None else engine.slots
            if stamped and (was is None or not was.serving or was.leaving):
                self.recorded[STAMPED_ON_SERVING].append(
                    f"{said} stamped slots {sorted(stamped)} on {engine.name}, which was {was}"
                )

    # -- the copies ------------------------------------------------------------------------------

    def copy_started(self, copy: WeightCopy) -> None:
        """harness.RecordedCopies' hook: a pass started `copy`."""
        job = self._job()
        engines = self._engines(job) if job is not None else {}
        self.copies.append(CopyRecord(copy, self.cluster.clock.now, engines))
        if job is None:
            return
        if not slot_count(job):
            self.recorded[UNSLOTTED].append(f"a copy started for an unslotted job: {copy}")
        elif self.watching:
            self.recorded[COPY_WITHIN] += [f"{copy}: {why}" for why in self._copy_faults(copy)]

    def _copy_faults(self, copy: WeightCopy) -> list[str]:
        job = self._job() or {}
        deployment = self.cluster.role_child("Deployment", job["metadata"]["uid"], ROLLOUT)
        ours = deployment["metadata"]["uid"] if deployment is not None else None
        pods = {p["metadata"]["name"]: p for p in self.cluster.view("Pod") if _owner(p) == ours}
        engines = {e.name: e for e in self._engines(job).values()}
        source, target = pods.get(copy.source), pods.get(copy.target)
        if source is None or target is None or ours is None:
            return [f"not between pods of this job's rollout Deployment {ours}"]
        faults = self._source_faults(copy, source, engines[copy.source])
        return faults + self._target_faults(copy, target, engines[copy.target])

    def _source_faults(self, copy: WeightCopy, pod: Mapping[str, Any], engine: Engine) -> list[str]:
        faults = []
        if not engine.serving or engine.leaving:
            faults.append(f"its source {engine} does not serve")
        if copy.source_ip != pod["status"].get("podIP"):
            faults.append(f"its source is at {pod['status'].get('podIP')}")
        reading = self._handed.get(copy.source)
        started = container_started(pod)
        fresh = reading is not None and (started is None or reading.at >= _time(started))
        if not fresh or reading is None or reading.generation != copy.generation:
            faults.append(f"its source's running container reported {reading} (since {started})")
        return faults

    def _target_faults(self, copy: WeightCopy, pod: Mapping[str, Any], engine: Engine) -> list[str]:
        faults = []
        if copy.target_uid != pod["metadata"]["uid"] or copy.target_ip != pod["status"].get(
            "podIP"
        ):
            faults.append(f"its target is {pod['metadata']['uid']} at {pod['status'].get('podIP')}")
        if pod["metadata"].get("deletionTimestamp") or engine.leaving:
            faults.append(f"its target {engine} is leaving")
        if engine.serving and engine.slots:
            faults.append(f"its target {engine} serves slots already")
        return faults

    # -- the pass --------------------------------------------------------------------------------

    def before_pass(self, *, leading: bool) -> Before:
        """Whether the pass is the leader's on caught-up watches, and the log's length."""
        self.watching = leading and not self.cluster.index.lagging()
        self._handed = dict(self.readings)
        return self.watching, len(self.cluster.log)

    def pass_ended(self) -> None:
        self.watching = False
        self._arrival = None

    def after_pass(self, before: Before) -> None:
        caught_up, start = before
        writes = self.cluster.log[start:]
        faulted = any(w.actor.startswith("operator") and w.code >= 400 for w in writes)
        job = self._job()
        if not caught_up or faulted or job is None or not slot_count(job) or _behind(job):
            return
        engines = self._engines(job).values()
        candidates = [e.name for e in engines if e.serving and not e.leaving]
        for slot in range(slot_count(job)):
            holders = sorted(e.name for e in engines if e.holds(slot))
            if candidates and not holders:
                self.recorded[HELD_WHEN_SETTLED].append(
                    f"slot {slot} is held by no serving engine after a pass while {candidates} "
                    "serve"
                )
            if len(holders) > 1:
                self.recorded[HELD_ONCE].append(f"slot {slot} is held by {holders} after a pass")

    def faults(self, check: str) -> list[str]:
        return list(self.recorded[check])
