"""The drain's invariants in the model (machine.py), read from the cluster's truth (the RLJob
as the API server stores it, the pods, the write log), never from what the operator believed:

- a-gated-engine-is-deleted-only-after-its-drain-was-journaled: every rollout pod the operator
  deletes in a Gated job is listed in the stored journal with its drainStartedAt;
- draining-or-down-engines-stay-within-maxunavailable: when a written journal starts the drain
  of a ready engine, the ready engines draining (it included) plus those the operator took down
  that still terminate (no more than the replicas unserved) are at most maxUnavailable;
- a-drain-always-ends: a pass of the leader on caught-up watches, that began past a drain's
  drainTimeout and wrote without a fault, leaves that pod deleting or gone (a suspended, failed
  or deleted job's pods go with it instead);
- an-ungated-job-never-shows-draining: no roster member draining, no drain journaled;
- a-gated-engine-passes-its-gate-at-its-required-generation: a Gated rollout pod whose
  policy-current condition is True has reported at least its roster member's
  requiredGeneration (any generation while that is empty);
- a-gate-opens-only-on-a-reading-of-the-running-container: a pass that sets a Gated engine's
  gate True had, for that engine, a reading taken at or after its container last started (the
  health loop keeps an engine's last reading across an in-place restart);
- a-joining-engines-requirement-is-within-the-current-attempts-reach: after a pass of the leader
  on caught-up watches that wrote without a fault, a joining member's requiredGeneration is at
  most the trainer's generation the pass was handed (a resume from an older checkpoint takes it
  back); with generationFrom engine the trainer's gauge is another count, and the next holds;
- a-joining-engines-requirement-is-within-what-serving-engines-report: with generationFrom
  engine, after a pass of the leader on caught-up watches that wrote without a fault, a joining
  member's requiredGeneration is at most the newest generation a serving engine (Ready, neither
  deleting nor draining) reported in the readings the pass was handed, read since its container
  started (the driver's counter starts over in a new process: slime's does).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from rljob.api import parse_duration
from rljob.reconcile.engine_readings import EngineReading
from rljob.vocabulary.labels import POLICY_CURRENT_GATE, ROLE_LABEL
from tests.unit.model.cluster import Cluster
from tests.unit.model.in_turn import ready_running

JSON = dict[str, Any]
KIND = "RLJob"
ROLLOUT = "rollout"

DRAIN_BEFORE_DELETE = "a-gated-engine-is-deleted-only-after-its-drain-was-journaled"
WITHIN_MAX_UNAVAILABLE = "draining-or-down-engines-stay-within-maxunavailable"
DRAIN_ENDS = "a-drain-always-ends"
UNGATED_NEVER_DRAINS = "an-ungated-job-never-shows-draining"
GATE_AT_REQUIRED = "a-gated-engine-passes-its-gate-at-its-required-generation"
GATE_FRESH = "a-gate-opens-only-on-a-reading-of-the-running-container"
REACHABLE = "a-joining-engines-requirement-is-within-the-current-attempts-reach"
REBASED = "a-joining-engines-requirement-is-within-what-serving-engines-report"
CHECKS = frozenset(
    {DRAIN_BEFORE_DELETE, WITHIN_MAX_UNAVAILABLE, DRAIN_ENDS, UNGATED_NEVER_DRAINS,
     GATE_AT_REQUIRED, GATE_FRESH, REACHABLE, REBASED}
)  # fmt: skip
Before = tuple[set[str], list[str], int, set[str], int | None, int | None]


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _role(pod: Mapping[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(ROLE_LABEL, ""))


def _running_since(pod: Mapping[str, Any]) -> dt.datetime | None:
    """When its newest running container started; None: none runs."""
    starts = [
        _time(c["state"]["running"]["startedAt"])
        for c in pod["status"].get("containerStatuses") or []
        if "running" in (c.get("state") or {})
    ]
    return max(starts, default=None)


def _terminating(pod: Mapping[str, Any]) -> bool:
    ended = pod["status"]["phase"] in ("Succeeded", "Failed")
    return bool(pod["metadata"].get("deletionTimestamp")) and not ended


class DrainChecks:
    """Observes one RLJob's drains; `faults(check)` says what broke each invariant."""

    def __init__(self, cluster: Cluster, name: str, readings: Mapping[str, EngineReading]) -> None:
        self.cluster = cluster
        self.name = name
        self.readings = readings  # the health loop's, by pod: what a pass is handed
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}
        self.taken_down: set[str] = set()  # ready rollout pods the operator deleted
        self.reported: dict[str, int] = {}  # the newest generation each engine reported
        self.trainer_generation: int | None = None  # the trainer's current, once it reports
        self.driver_count: int | None = None  # generationFrom engine: the driver's last push
        cluster.pod_delete_observers.append(self._pod_deleted)

    # -- the truth -------------------------------------------------------------------------------

    def _job(self) -> Mapping[str, Any] | None:
        return self.cluster.peek(KIND, self.name)

    def _gated(self, job: Mapping[str, Any] | None) -> bool:
        rollout = (job or {}).get("spec", {}).get("roles", {}).get(ROLLOUT) or {}
        return rollout.get("weightSync") == "Gated"

    def _from_engine(self, job: Mapping[str, Any] | None) -> bool:
        rollout = (job or {}).get("spec", {}).get("roles", {}).get(ROLLOUT) or {}
        return self._gated(job) and rollout.get("generationFrom") == "engine"

    def _entries(self, job: Mapping[str, Any] | None) -> list[JSON]:
        return list((((job or {}).get("status") or {}).get("inFlight") or {}).get("pods") or [])

    def _draining(self, job: Mapping[str, Any] | None) -> Iterator[JSON]:
        for entry in self._entries(job):
            if entry.get("drainStartedAt") and not entry.get("deletedAt"):
                yield entry

    def _pods(self) -> dict[str, Mapping[str, Any]]:
        return {p["metadata"]["uid"]: p for p in self.cluster.view("Pod") if _role(p) == ROLLOUT}

    def _stopped(self, job: Mapping[str, Any] | None) -> bool:
        if job is None or job["metadata"].get("deletionTimestamp"):
            return True
        status = job.get("status") or {}
        held = job.get("spec", {}).get("suspend") or status.get("suspension")
        return bool(held) or status.get("phase") in ("Succeeded", "Failed")

    # -- deletes ---------------------------------------------------------------------------------

    def _pod_deleted(self, actor: str, pod: JSON) -> None:
        if not actor.startswith("operator") or _role(pod) != ROLLOUT:
            return
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        if ready_running(pod):
            self.taken_down.add(uid)
        job = self._job()
        if not self._gated(job):
            return
        entry = next((e for e in self._entries(job) if e["uid"] == uid), None)
        if entry is None or not entry.get("drainStartedAt"):
            self.recorded[DRAIN_BEFORE_DELETE].append(
                f"{actor} deleted Gated engine {name} with no drain journaled: {entry}"
            )

    # -- the pass --------------------------------------------------------------------------------

    def before_pass(self, *, leading: bool, handed: int | None = None) -> Before:
        """(the drains journaled now, those past their timeout the pass must end, the log's
        length, the engines whose gate is True, the trainer's generation the pass is handed
        (`handed`, the health loop's latest) and, with generationFrom engine, the newest
        generation a serving engine reports, both when the leader's watches are caught up) as
        the pass begins."""
        job = self._job()
        started = {e["uid"] for e in self._draining(job)}
        due: list[str] = []
        if leading and not self.cluster.index.lagging() and not self._stopped(job):
            rollout = job.get("spec", {}).get("roles", {}).get(ROLLOUT) or {} if job else {}
            timeout = dt.timedelta(seconds=parse_duration(rollout.get("drainTimeout", "2m")))
            live = self._pods()
            for entry in self._draining(job):
                pod = live.get(entry["uid"])
                past = self.cluster.clock.now >= _time(entry["drainStartedAt"]) + timeout
                if past and pod is not None and not pod["metadata"].get("deletionTimestamp"):
                    due.append(entry["uid"])
        caught_up = leading and not self.cluster.index.lagging()
        from_engine = caught_up and self._from_engine(job)
        return (
            started,
            due,
            len(self.cluster.log),
            self._gated_open(),
            handed if caught_up and not self._from_engine(job) else None,
            self._serving_report(job) if from_engine else None,
        )

    def _serving_report(self, job: Mapping[str, Any] | None) -> int | None:
        """The newest generation a serving engine reports, read since its container started."""
        leaving = {e["uid"] for e in self._draining(job)}
        found = []
        for uid, pod in self._pods().items():
            conditions = {c["type"]: c.get("status") for c in pod["status"].get("conditions") or []}
            reading = self.readings.get(pod["metadata"]["name"])
            serving = conditions.get("Ready") == "True" and uid not in leaving
            if not serving or pod["metadata"].get("deletionTimestamp") or reading is None:
                continue
            starts = _running_since(pod)
            if starts is not None and reading.at >= starts and reading.generation is not None:
                found.append(reading.generation)
        return max(found, default=None)

    def after_pass(self, before: Before) -> None:
        started, due, start, open_before, handed, serving = before
        job = self._job()
        self._check_fresh(self._gated_open() - open_before)
        writes = self.cluster.log[start:]
        faulted = any(w.actor.startswith("operator") and w.code >= 400 for w in writes)
        if handed is not None and not faulted:
            self.recorded[REACHABLE] += self._out_of_reach(handed)
        if serving is not None and not faulted:
            self.recorded[REBASED] += self._out_of_reach(serving, "what serving engines report")
        live = self._pods()
        if not faulted and not self._stopped(job):
            for uid in due:
                pod = live.get(uid)
                if pod is None or self.cluster.orphaned(pod):  # the garbage collector's
                    continue
                if not pod["metadata"].get("deletionTimestamp"):
                    self.recorded[DRAIN_ENDS].append(
                        f"{pod['metadata']['name']} still runs after a pass past its drainTimeout"
                    )
        fresh = [e for e in self._draining(job) if e["uid"] not in started]
        if any(ready_running(live[e["uid"]]) for e in fresh if e["uid"] in live):
            self._check_room(job, live)

    def _check_room(
        self, job: Mapping[str, Any] | None, live: Mapping[str, Mapping[str, Any]]
    ) -> None:
        spec = (job or {}).get("spec", {}).get("roles", {}).get(ROLLOUT) or {}
        limit = max(1, int(spec.get("maxUnavailable", 1)))
        draining = [
            live[e["uid"]]["metadata"]["name"]
            for e in self._draining(job)
            if e["uid"] in live and ready_running(live[e["uid"]])
        ]
        down = [p["metadata"]["name"] for u, p in live.items() if u in self.taken_down
                and _terminating(p)]  # fmt: skip
        serving = sum(1 for p in live.values() if ready_running(p))
        unserved = max(0, int(spec.get("replicas", 1)) - serving)
        if len(draining) + min(len(down), unserved) > limit:
            self.recorded[WITHIN_MAX_UNAVAILABLE].append(
                f"draining {draining} while {down} taken down still terminate ({unserved} "
                f"replicas unserved): maxUnavailable {limit}"
            )

    def _gated_open(self) -> set[str]:
        return {
            p["metadata"]["uid"]
            for p in self._pods().values()
            if any(c["type"] == POLICY_CURRENT_GATE and c.get("status") == "True"
                   for c in p["status"].get("conditions") or [])
        }  # fmt: skip

    def _check_fresh(self, opened: set[str]) -> None:
        live = self._pods()
        for uid in opened:
            pod = live[uid]
            name = pod["metadata"]["name"]
            starts = _running_since(pod)
            reading = self.readings.get(name)
            if starts is not None and (reading is None or reading.at < starts):
                self.recorded[GATE_FRESH].append(
                    f"{name}'s gate opened on a reading from {reading.at if reading else None}, "
                    f"before its container started at {starts}"
                )

    def engine_reported(self, pod: str, generation: int | None) -> None:
        if generation is not None:
            self.reported[pod] = max(generation, self.reported.get(pod, generation))

    # -- the verdicts ----------------------------------------------------------------------------

    def faults(self, check: str) -> list[str]:
        found = list(self.recorded[check])
        if check == UNGATED_NEVER_DRAINS:
            found += self._ungated_drains()
        if check == GATE_AT_REQUIRED:
            found += self._gates_below_required()
        return found

    def _out_of_reach(self, generation: int, whose: str = "the trainer's") -> list[str]:
        job = self._job()
        if not self._gated(job):
            return []
        rollout = (((job or {}).get("status") or {}).get("roles") or {}).get(ROLLOUT) or {}
        return [
            f"{m['pod']} joins at requiredGeneration {m['requiredGeneration']}, above "
            f"{whose} {generation}"
            for m in rollout.get("engines") or []
            if m["state"] == "joining"
            and m.get("requiredGeneration") is not None
            and m["requiredGeneration"] > generation
        ]

    def _gates_below_required(self) -> list[str]:
        job = self._job()
        if not self._gated(job):
            return []
        rollout = (((job or {}).get("status") or {}).get("roles") or {}).get(ROLLOUT) or {}
        members = {m["pod"]: m for m in rollout.get("engines") or []}
        found = []
        for pod in self._pods().values():
            name = pod["metadata"]["name"]
            conditions = {c["type"]: c.get("status") for c in pod["status"].get("conditions") or []}
            if conditions.get(POLICY_CURRENT_GATE) != "True" or name not in members:
                continue
            required = members[name].get("requiredGeneration")
            reported = self.reported.get(name)
            if reported is None or (required is not None and reported < required):
                found.append(f"{name}'s gate is True; it reported {reported}, needs {required}")
        return found

    def _ungated_drains(self) -> list[str]:
        job = self._job()
        if job is None or self._gated(job):
            return []
        rollout = ((job.get("status") or {}).get("roles") or {}).get(ROLLOUT) or {}
        members = [m["pod"] for m in rollout.get("engines") or [] if m["state"] == "draining"]
        journaled = [e["name"] for e in self._entries(job) if e.get("drainStartedAt")]
        if members or journaled:
            return [f"Ungated job shows draining {members}, journals drains of {journaled}"]
        return []
