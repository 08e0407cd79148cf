"""Samples one goodput run into an ArmRecord per arm: the simulator's trainers and workload
instances every 0.5 s, the JobSet's restarts, the operator arms' restart ledgers, report Warnings
and status.goodput every second."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from bench.goodput.arms import JOB_NAME, Arm
from bench.goodput.measure import (
    GANG,
    JOB_RESTART,
    JOBSET_RESTART,
    POD,
    REPORT,
    ROLE,
    Action,
    ArmRecord,
    Sample,
)
from rljob.dev.jobset import JOBSET_API
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.sim.client import SimClient, SimError
from rljob.vocabulary.enums import FailureReason, RoleName

_ACTIONS = {
    "RestartTrainerGang": GANG,
    "RestartJob": JOB_RESTART,
    "RestartPod": POD,
    "RestartRole": ROLE,
    "RestartRoleInTurn": ROLE,
}
_REPORT_ROLES = {
    FailureReason.VERIFIER_SLOW.value: "verifier",
    FailureReason.KV_CACHE_DRIFT.value: "rollout",
    FailureReason.ENGINE_STALLED.value: "rollout",
    FailureReason.TRAINER_STALLED.value: "trainer",
}
_REASONS = frozenset(r.value for r in FailureReason)
_ROLES = frozenset(r.value for r in RoleName)


def _timestamp(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _report_role(event: dict[str, Any]) -> str:
    """The role a Warning is about: its message's first word when a role ("rollout pod ..."),
    else the role its reason is found on."""
    words = str(event.get("message", "")).split()
    if words and words[0] in _ROLES:
        return words[0]
    return _REPORT_ROLES.get(str(event.get("reason")), "")


def _attempt_of(workload: dict[str, Any]) -> int:
    attempt = workload.get("attempt")
    return -1 if attempt is None else int(attempt)


class Recorder:
    """Samples the simulator and the API into one ArmRecord per arm."""

    def __init__(self, api: KubeApi, sim: SimClient, records: dict[Arm, ArmRecord]) -> None:
        self.api, self.sim, self.records = api, sim, records
        self._ledger: dict[Arm, set[tuple[Any, ...]]] = {arm: set() for arm in records}
        self._events: dict[Arm, set[tuple[Any, ...]]] = {arm: set() for arm in records}
        self._jobset_restarts = 0
        self.errors = 0

    def sample_sim(self) -> None:
        now = time.time()
        try:
            workloads = self.sim.workloads()
        except (SimError, OSError):
            self.errors += 1
            return
        for arm, record in self.records.items():
            mine = [w for w in workloads if w["namespace"] == arm.namespace]
            for w in mine:
                record.seen(now, str(w["instance"]), str(w["pod"]), str(w["role"]))
            ranks = [w for w in mine if w["role"] == "trainer"]
            if not ranks:
                continue
            newest = max(_attempt_of(w) for w in ranks)
            current = [w for w in ranks if _attempt_of(w) == newest]
            top = max(current, key=lambda w: int(w["state"].get("step", 0)))
            step, phase = int(top["state"].get("step", 0)), str(top["state"].get("phase"))
            record.samples.append(Sample(now, newest, step, phase))

    def poll_jobset(self) -> None:
        record = self.records.get(Arm.JOBSET)
        if record is None:
            return
        path = f"{JOBSET_API}/namespaces/{Arm.JOBSET.namespace}/jobsets/{JOB_NAME}"
        try:
            body = self.api.get(path)
        except (ApiError, OSError):
            self.errors += 1
            return
        restarts = int((body.get("status") or {}).get("restarts") or 0)
        now = time.time()
        while self._jobset_restarts < restarts:
            self._jobset_restarts += 1
            record.actions.append(Action(now, JOBSET_RESTART, "all", "JobSet failurePolicy"))

    def poll_operator(self) -> None:
        for arm, record in self.records.items():
            if arm.is_jobset:
                continue
            try:
                job = self.api.get(
                    f"/apis/rljob.io/v1alpha1/namespaces/{arm.namespace}/rljobs/{JOB_NAME}"
                )
                events = self.api.get(f"/api/v1/namespaces/{arm.namespace}/events")["items"]
            except (ApiError, OSError):
                self.errors += 1
                continue
            status = job.get("status") or {}
            for entry in (status.get("restarts") or {}).get("recent") or []:
                key = tuple(sorted((k, str(v)) for k, v in entry.items()))
                if key in self._ledger[arm]:
                    continue
                self._ledger[arm].add(key)
                at = _timestamp(entry.get("time")) or time.time()
                kind = _ACTIONS.get(str(entry.get("action")), str(entry.get("action")))
                record.actions.append(
                    Action(at, kind, str(entry.get("role")), str(entry.get("reason")),
                           str(entry.get("pod") or ""))
                )  # fmt: skip
            for event in events:
                reason = str(event.get("reason"))
                involved = event.get("involvedObject") or {}
                if event.get("type") != "Warning" or involved.get("kind") != "RLJob":
                    continue
                if reason not in _REASONS:
                    continue
                said = _timestamp(event.get("eventTime")) or _timestamp(event.get("firstTimestamp"))
                seen = (reason, said, event["metadata"]["name"])
                if seen in self._events[arm]:
                    continue
                self._events[arm].add(seen)
                record.actions.append(
                    Action(said or time.time(), REPORT, _report_role(event), reason)
                )
            record.status_goodput = status.get("goodput")


__all__ = ["Recorder"]
