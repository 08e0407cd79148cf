"""Invariants of the model (machine.py) on what an RLJob's status may rest on and how long its
actions may wait, read from the cluster's truth:

- another-uids-objects-never-change-this-jobs-status: every object the RLJob's stored status
  names (an attempt's Job uid, the action in flight's target and pods, the roster's engines) is
  one whose controller chain ends at that RLJob's uid, never a leftover of a deleted namesake;
- every-role-restart-ends-within-its-bound: a pass of the leader on caught-up watches that wrote
  without a fault, begun with a role restart (in turn, or a roll) in flight that has made no
  progress for actionTimeout and has no drain under way, ends it (or the job stopped);
- a-restart-request-is-carried-out-once-per-nonce: no two journaled manual actions share a
  nonce, whatever the annotation was set back to (a GitOps tool re-applying an old manifest).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping

from rljob.api import parse_duration
from tests.unit.model.cluster import Cluster, Write

KIND = "RLJob"
FOREIGN = "another-uids-objects-never-change-this-jobs-status"
BOUNDED = "every-role-restart-ends-within-its-bound"
ONCE_PER_NONCE = "a-restart-request-is-carried-out-once-per-nonce"
CHECKS = frozenset({FOREIGN, BOUNDED, ONCE_PER_NONCE})
ENDABLE = ("RestartRoleInTurn", "RestartRole")
MAX_CHAIN = 3


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _faulted(write: Write) -> bool:
    failed = write.code >= 500 or (write.verb == "patch_status" and write.code >= 400)
    return write.actor.startswith("operator") and failed


class BoundChecks:
    """Observes one RLJob's status and actions; `faults(check)` says what broke each."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}

    def faults(self, check: str) -> list[str]:
        found = list(self.recorded[check])
        if check == FOREIGN:
            found += self._foreign()
        if check == ONCE_PER_NONCE:
            found += self._repeated_nonces()
        return found

    # -- another uid's objects -------------------------------------------------------------------

    def _foreign(self) -> list[str]:
        job = self.cluster.peek(KIND, self.name)
        if job is None:
            return []
        uid, status = job["metadata"]["uid"], job.get("status") or {}
        owners = self.cluster.controllers
        named = [(f"attempt {a.get('attempt')}'s Job", a.get("jobUid"))
                 for a in status.get("attempts") or []]  # fmt: skip
        action = status.get("inFlight") or {}
        named.append((f"{action.get('kind')}'s target", (action.get("target") or {}).get("uid")))
        named += [(f"{action.get('kind')}'s pod", p.get("uid")) for p in action.get("pods") or []]
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.cluster.view("Pod")}
        engines = ((status.get("roles") or {}).get("rollout") or {}).get("engines") or []
        named += [("roster member", pods.get(m["pod"])) for m in engines]
        return [
            f"status names {what} {target}, not {self.name} ({uid})'s"
            for what, target in named
            if target and target in owners and not _ends_at(target, owners, uid)
        ]

    # -- bounded waits ---------------------------------------------------------------------------

    def before_pass(self, *, leading: bool) -> tuple[str | None, int]:
        """(the role restart past its bound as the pass begins, on the leader's caught-up
        watches; where the write log stands)."""
        start = len(self.cluster.log)
        if not leading or self.cluster.index.lagging():
            return None, start
        return self._overdue(), start

    def after_pass(self, before: tuple[str | None, int]) -> None:
        overdue, start = before
        if overdue is None or any(_faulted(w) for w in self.cluster.log[start:]):
            return
        job = self.cluster.peek(KIND, self.name) or {}
        action = (job.get("status") or {}).get("inFlight") or {}
        if f"{job.get('metadata', {}).get('uid')}/{action.get('id')}" == overdue:
            self.recorded[BOUNDED].append(f"{overdue} still in flight past its actionTimeout")

    def _overdue(self) -> str | None:
        job = self.cluster.peek(KIND, self.name)
        status = (job or {}).get("status") or {}
        action = status.get("inFlight") or {}
        if job is None or action.get("kind") not in ENDABLE or action.get("step") == "RoleReady":
            return None
        live = {p["metadata"]["uid"] for p in self.cluster.view("Pod")
                if not p["metadata"].get("deletionTimestamp")}  # fmt: skip
        pods = action.get("pods") or []
        if any(p.get("drainStartedAt") and not p.get("deletedAt") and p["uid"] in live
               for p in pods):  # fmt: skip
            return None  # bounded by drainTimeout instead (drain.py)
        stamps = [action["startedAt"], *(p.get(k) for p in pods
                                         for k in ("drainStartedAt", "deletedAt"))]  # fmt: skip
        progress = max(_time(s) for s in stamps if s)
        policy = job.get("spec", {}).get("failurePolicy") or {}
        timeout = dt.timedelta(seconds=parse_duration(policy.get("actionTimeout", "30m")))
        if self.cluster.clock.now < progress + timeout:
            return None
        return f"{job['metadata']['uid']}/{action['id']}"

    # -- nonces ----------------------------------------------------------------------------------

    def _repeated_nonces(self) -> list[str]:
        journaled: dict[tuple[str, str], set[str]] = {}
        for write in self.cluster.writes():
            action = write.detail.get("in_flight_after") or {}
            if write.verb == "patch_status" and write.code == 200 and action:
                journaled.setdefault((write.uid, action["id"]), set()).add(action["startedAt"])
        starts = Counter(
            (uid, action_id) for (uid, action_id), began in journaled.items()
            for _ in began if action_id.startswith("manual-")
        )  # fmt: skip
        return [f"{uid}'s {action} journaled {n} times" for (uid, action), n in starts.items()
                if n > 1]  # fmt: skip


def _ends_at(uid: str, owners: Mapping[str, str], job: str) -> bool:
    for _ in range(MAX_CHAIN):
        uid = owners.get(uid, "")
        if not uid:
            return False
        if uid == job:
            return True
    return False
