"""The in-turn role restart's invariants in the model (machine.py), read from the cluster's truth
at each pod delete and from its write log, never from what the operator believed:

- an-in-turn-restart-keeps-the-role-within-maxunavailable: when the action deletes a serving pod
  that is ready, the pods it deleted before whose replicas are not served again (the fewer of
  those and the replicas unserved), plus this one, are at most maxUnavailable;
- an-in-turn-restart-deletes-each-listed-pod-once: it deletes only pods of its journaled list,
  each after a status write stamped its turn, and each at most once (whichever process);
- an-in-turn-restart-is-one-budget-entry: every status write while it is in flight carries the
  restarts.total its journaling write did;
- an-in-turn-restart-goes-oldest-first: its list is in creation order and the pods it deletes
  while they serve go in list order;
- an-in-turn-restart-ends-once-its-role-is-ready: two passes of the leader on caught-up watches
  that began with none of its pods left and its role ready (or scaled to zero) settle it;
- a-failed-trainer-attempt-is-acted-on-within-bounded-passes: the current trainer attempt's
  failed Job (its failed rank shown, or the root-cause wait over) is not held behind an in-turn
  restart (a Gated rollout's newcomers need the trainer's weights; any other would hold the
  costliest repair behind the cheapest) for more than ACTING_PASSES passes of the leader on
  caught-up watches that wrote without a fault. An in-turn restart the operator ended early
  (in the write that journals the trainer's repair, or past actionTimeout) counts as carried
  out (`ended_early`), its pods not yet taken left running.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from rljob.reconcile.remediation import ROOT_CAUSE_WAIT_SECONDS
from rljob.vocabulary.labels import ATTEMPT_LABEL, ROLE_LABEL
from tests.unit.model.cluster import Cluster, Write

JSON = dict[str, Any]
KIND = "RLJob"
IN_TURN = "RestartRoleInTurn"

WITHIN_MAX_UNAVAILABLE = "an-in-turn-restart-keeps-the-role-within-maxunavailable"
EACH_POD_ONCE = "an-in-turn-restart-deletes-each-listed-pod-once"
ONE_ENTRY = "an-in-turn-restart-is-one-budget-entry"
OLDEST_FIRST = "an-in-turn-restart-goes-oldest-first"
SETTLES = "an-in-turn-restart-ends-once-its-role-is-ready"
ACTED_ON = "a-failed-trainer-attempt-is-acted-on-within-bounded-passes"
CHECKS = frozenset(
    {WITHIN_MAX_UNAVAILABLE, EACH_POD_ONCE, ONE_ENTRY, OLDEST_FIRST, SETTLES, ACTED_ON}
)
SETTLING_PASSES = 2  # one says the role is ready (and posts the Event), the next clears it
# One pass sends the deletes the restart decided (a drain that ended), the next ends it; a
# second drain ending meanwhile (maxUnavailable 2) takes one more.
ACTING_PASSES = 3


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _condition(body: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def _preempted_by(write: Write, after: Mapping[str, Any]) -> bool:
    """The write journals the trainer's repair (a gang restart, a suspension, the job's end), or
    is written while its attempt's Job has failed (the repair held by its backoff)."""
    gang = after.get("kind") in ("RestartTrainerGang", "RestartJob")
    ended = write.detail.get("phase_after") == "Failed"
    held = bool(write.detail.get("trainer_failed"))
    return gang or ended or held or bool(write.detail.get("suspension_after"))


def _timed_out(action: Mapping[str, Any], at: dt.datetime) -> bool:
    stamps = [action["startedAt"], *(p.get(k) for p in action.get("pods") or []
                                     for k in ("drainStartedAt", "deletedAt"))]  # fmt: skip
    progress = max(_time(s) for s in stamps if s)
    return at >= progress + dt.timedelta(minutes=30)  # the model job's actionTimeout: default


def _faulted(write: Write) -> bool:
    """A write of the operator's that failed (a re-posted named Event's 409 is no fault)."""
    failed = write.code >= 500 or (write.verb == "patch_status" and write.code >= 400)
    return write.actor.startswith("operator") and failed


def ready_running(pod: Mapping[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return (
        ready
        and pod["status"]["phase"] == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    )


class InTurnChecks:
    """Observes one RLJob's in-turn restarts; `faults(check)` says what broke each invariant."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}
        self.deleted: defaultdict[str, list[str]] = defaultdict(list)  # action -> uids, in order
        self.serving_deletes: defaultdict[str, list[str]] = defaultdict(list)
        self.settling: Counter[str] = Counter()  # action -> passes that began with it done
        self.held: Counter[str] = Counter()  # failed attempt -> passes that began held by one
        cluster.pod_delete_observers.append(self._pod_deleted)

    def action(self) -> JSON | None:
        """The RLJob's in-turn restart in flight, as the API server holds it, with `key`: the
        RLJob's uid and the action's id (a re-created RLJob numbers its actions anew)."""
        job = self.cluster.peek(KIND, self.name)
        action = ((job or {}).get("status") or {}).get("inFlight") or {}
        if job is None or action.get("kind") != IN_TURN:
            return None
        return {**action, "key": f"{job['metadata']['uid']}/{action['id']}"}

    def faults(self, check: str) -> list[str]:
        found = list(self.recorded[check])
        if check == ONE_ENTRY:
            found += self._budget_faults()
        if check == EACH_POD_ONCE:
            found += self._repeated_deletes()
        if check == ACTED_ON:
            held = self._held_attempt()
            if held is not None and self.held[held] >= ACTING_PASSES:
                found.append(
                    f"trainer attempt {held} failed and is still held by "
                    f"{(self.action() or {}).get('id')} after {self.held[held]} passes"
                )
        if check == SETTLES:
            action = self.action()
            if action is not None and self.settling[action["key"]] >= SETTLING_PASSES:
                found.append(
                    f"{action['id']} still in flight ({action.get('step')}) after "
                    f"{self.settling[action['key']]} passes that began with its role ready"
                )
        return found

    # -- the pass --------------------------------------------------------------------------------

    def before_pass(self, *, leading: bool) -> tuple[tuple[str, int] | None, str | None, int]:
        """(the in-turn action whose end the coming pass must see, if the truth shows it done;
        the failed trainer attempt it holds, if any; where the write log stands), the first two
        only when the leader's watches are caught up."""
        action = self.action()
        start = len(self.cluster.log)
        if action is None or not leading or self.cluster.index.lagging():
            return None, None, start
        settling = (action["key"], start) if self._done(action) else None
        return settling, self._held_attempt(), start

    def after_pass(self, before: tuple[tuple[str, int] | None, str | None, int]) -> None:
        """A pass that ran to its end (the process lived, no write raised): it counts towards
        settling unless its status write lost a race (409, which the pass answers itself), and
        towards acting on a failed attempt unless any write failed."""
        settling, held, start = before
        writes = self.cluster.log[start:]
        if settling is not None:
            key, _ = settling
            lost = any(w.verb == "patch_status" and w.code != 200 for w in writes)
            self.settling[key] += 0 if lost else 1
        if held is not None and not any(_faulted(w) for w in writes):
            self.held[held] += 1
        action = self.action()
        if action is not None:
            self._check_order(action)

    # -- a trainer failure behind a Gated in-turn restart ----------------------------------------

    def ended_early(self, key: str) -> bool:
        """Whether a status write of the operator ended the action `key` ("<uid>/<id>")
        unfinished, and rightly: in the write that journals a repair of the trainer (a gang
        restart) or a suspension, or actionTimeout after its last progress (read from the
        writes, not the Warning that says so, which a crash right after the write loses)."""
        uid, action_id = key.split("/", 1)
        before: JSON = {}
        for write in self.cluster.writes():
            if write.verb != "patch_status" or write.code != 200 or write.uid != uid:
                continue
            after = write.detail.get("in_flight_after") or {}
            if before.get("id") == action_id and after.get("id") != action_id:
                return _preempted_by(write, after) or _timed_out(before, write.detail["at"])
            before = after
        return False

    def _failed_attempt(self) -> tuple[str, Mapping[str, Any]] | None:
        """("<uid>/a<attempt>", its Job) when the current attempt's Job failed, in a job that
        runs on, with an in-turn restart in flight."""
        job = self.cluster.peek(KIND, self.name)
        action = self.action()
        if job is None or action is None or job["metadata"].get("deletionTimestamp"):
            return None
        status = job.get("status") or {}
        held = job["spec"].get("suspend") or status.get("suspension")
        if held or status.get("phase") == "Failed":
            return None
        attempt = int(status.get("attempt") or 1)
        uid = job["metadata"]["uid"]
        trainer = next(  # the attempt's Job of this RLJob, whatever it is named (status.renamed)
            (
                j for j in self.cluster.view("Job")
                if (j["metadata"].get("labels") or {}).get(ATTEMPT_LABEL) == str(attempt)
                and self.cluster.controlled_by(j, uid)
            ),
            None,
        )  # fmt: skip
        if trainer is None or trainer["metadata"].get("deletionTimestamp"):
            return None
        if not (_condition(trainer, "FailureTarget") or _condition(trainer, "Failed")):
            return None
        return f"{job['metadata']['uid']}/a{attempt}", trainer

    def _held_attempt(self) -> str | None:
        """The failed attempt held by a Gated in-turn restart, once the operator can act on it:
        its failed rank is shown, or the wait for it is over."""
        failed = self._failed_attempt()
        if failed is None:
            return None
        key, trainer = failed
        attempt = key.rsplit("/a", 1)[1]
        rank = any(
            (p["metadata"].get("labels") or {}).get(ATTEMPT_LABEL) == attempt
            and p["status"]["phase"] == "Failed"
            for p in self.cluster.view("Pod")
        )
        began = _condition(trainer, "FailureTarget") or _condition(trainer, "Failed") or {}
        waited = self.cluster.clock.now >= _time(began["lastTransitionTime"]) + dt.timedelta(
            seconds=ROOT_CAUSE_WAIT_SECONDS
        )
        return key if rank or waited else None

    # -- deletes ---------------------------------------------------------------------------------

    def _pod_deleted(self, actor: str, pod: JSON) -> None:
        action = self.action()
        if action is None or not actor.startswith("operator"):
            return
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        listed = {p["uid"]: p for p in action.get("pods") or []}
        if uid not in listed:
            self.recorded[EACH_POD_ONCE].append(f"{action['id']} deleted {name}, not listed")
        elif not listed[uid].get("deletedAt"):
            self.recorded[EACH_POD_ONCE].append(
                f"{action['id']} deleted {name} before the journal stamped its turn"
            )
        if ready_running(pod):
            self._check_room(action, pod)
            self.serving_deletes[action["key"]].append(uid)
        self.deleted[action["key"]].append(uid)

    def _check_room(self, action: JSON, pod: JSON) -> None:
        role = (pod["metadata"].get("labels") or {}).get(ROLE_LABEL, "")
        spec = self._role_spec(role)
        serving = sum(
            1 for p in self.cluster.view("Pod")
            if (p["metadata"].get("labels") or {}).get(ROLE_LABEL) == role and ready_running(p)
        )  # fmt: skip
        unserved = max(0, int(spec.get("replicas", 1)) - serving)
        ours = len(set(self.deleted[action["key"]]))
        limit = max(1, int(spec.get("maxUnavailable", 1)))
        if min(ours, unserved) + 1 > limit:
            self.recorded[WITHIN_MAX_UNAVAILABLE].append(
                f"{action['id']} deleted {pod['metadata']['name']} while {min(ours, unserved)} "
                f"{role} replicas it took down were unserved: maxUnavailable {limit}"
            )

    def _repeated_deletes(self) -> list[str]:
        sent = Counter(
            (w.in_flight, w.uid)
            for w in self.cluster.writes()
            if w.verb == "delete" and w.kind == "Pod" and w.code in (200, 404)
            and (w.in_flight or "").startswith("turn-")
        )  # fmt: skip
        return [f"{action} deleted {uid} {count} times" for (action, uid), count in sent.items()
                if count > 1]  # fmt: skip

    # -- the journal -----------------------------------------------------------------------------

    def _journal_writes(self) -> Iterator[tuple[str, int]]:
        for write in self.cluster.writes():
            action = write.detail.get("in_flight_after") or {}
            if write.verb == "patch_status" and write.code == 200 and action.get("kind") == IN_TURN:
                yield f"{write.uid}/{action['id']}", int(write.detail.get("restarts_after", 0))

    def _budget_faults(self) -> list[str]:
        totals: defaultdict[str, set[int]] = defaultdict(set)
        for action, total in self._journal_writes():
            totals[action].add(total)
        return [f"{a} wrote restarts.total {sorted(t)}" for a, t in totals.items() if len(t) > 1]

    def _check_order(self, action: JSON) -> None:
        listed = [p["uid"] for p in action.get("pods") or []]
        born = self._creation()
        keys = [born.get(uid, ("", "")) for uid in listed]
        if keys != sorted(keys):
            self.recorded[OLDEST_FIRST].append(f"{action['id']} lists {keys}, not oldest first")
        went = [listed.index(uid) for uid in self.serving_deletes[action["key"]] if uid in listed]
        if went != sorted(went):
            self.recorded[OLDEST_FIRST].append(
                f"{action['id']} took serving pods down in list positions {went}"
            )

    def _creation(self) -> dict[str, tuple[str, str]]:
        """(creationTimestamp, name) of every pod the cluster ever held, by uid."""
        return {
            body["metadata"]["uid"]: (
                body["metadata"]["creationTimestamp"],
                body["metadata"]["name"],
            )
            for _, body in self.cluster.history["Pod"]
            if body is not None
        }

    # -- the truth -------------------------------------------------------------------------------

    def _role_spec(self, role: str) -> Mapping[str, Any]:
        job = self.cluster.peek(KIND, self.name) or {"spec": {"roles": {}}}
        return job["spec"]["roles"].get(role) or {}

    def _done(self, action: JSON) -> bool:
        """None of its pods is left and its role is ready, or scaled to zero."""
        listed = {p["uid"] for p in action.get("pods") or []}
        if any(p["metadata"]["uid"] in listed for p in self.cluster.view("Pod")):
            return False
        job = self.cluster.peek(KIND, self.name) or {}
        role = (action.get("target") or {}).get("role", "")
        spec = self._role_spec(role)
        finished = (job.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        held = (job.get("status") or {}).get("suspension")  # the failure policy's Suspend
        if not spec or job.get("spec", {}).get("suspend") or held or finished:
            return True
        replicas = int(spec.get("replicas", 1))
        uid = (job.get("metadata") or {}).get("uid", "")
        deployment = self.cluster.role_child("Deployment", uid, role) or {"status": {}}
        ready = int((deployment.get("status") or {}).get("readyReplicas", 0))
        serving = sum(
            1 for p in self.cluster.view("Pod")
            if (p["metadata"].get("labels") or {}).get(ROLE_LABEL) == role and ready_running(p)
        )  # fmt: skip
        return ready >= replicas and serving >= replicas
