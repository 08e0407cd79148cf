"""A stateful model of the action engine: the operator's real passes run against the in-memory
cluster and S3 while the world moves (controllers, kubelets, time), things fail (trainer ranks,
serving containers, nodes, writes, watches, S3 listings, the operator process itself) and the
user acts (suspend, resume, manual restarts, deleting children by hand). The invariants are
checked after every step; a subclass picks which (`CHECKS`), so each is its own test."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from rljob.adapters.kube import KubeError
from rljob.api import FailureReason
from rljob.api.labels import ATTEMPT_LABEL as ATTEMPT
from rljob.api.labels import RESTART_REQUEST_ANNOTATION as RESTART_REQUEST
from rljob.api.labels import RESTARTED_AT_ANNOTATION as RESTARTED_AT
from rljob.api.labels import ROLE_LABEL as ROLE
from rljob.checkpoints.errors import StoreError
from rljob.checkpoints.layout import CheckpointLocation, KeyKind
from rljob.health.evaluation import KV_DRIFT, TRAINER_STALL, finding
from tests.unit.model import harness
from tests.unit.model.cluster import WATCHED_KINDS, Clock, Cluster, ProcessDied, Write
from tests.unit.model.s3 import FakeS3, write_version
from tests.unit.reconcile.world import NAMESPACE, example_body

JSON = dict[str, Any]
NAME = "grpo-demo"
KEY = (NAMESPACE, NAME)
BUCKET = "rljob-demo"
LOCATION = CheckpointLocation.from_uri(f"s3://{BUCKET}/checkpoints", NAMESPACE, NAME)
KV_CACHE_DRIFT = FailureReason.KV_CACHE_DRIFT
TRAINER_STALLED = FailureReason.TRAINER_STALLED
NCCL = (
    "[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4242, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
)
RANK_ENDINGS = {  # how a trainer rank ends: (exit code, reason, termination message)
    "nccl-timeout": (1, "Error", NCCL),
    "exit-93": (93, "Error", "fatal: the reward model is unreachable"),
    "oom-killed": (137, "OOMKilled", ""),
}
CONTAINER_ENDINGS = {"oom-killed": RANK_ENDINGS["oom-killed"], "exit-93": RANK_ENDINGS["exit-93"]}
KIND = "RLJob"
LAGGING = (("Pod",), ("Job",), ("Deployment",), (KIND,), WATCHED_KINDS)
BY_HAND = ("trainer-job", "rollout-deployment", "trainer-service", "trainer-pod", "serving-pod")
S3_FAULTS = ("lag-1-listing", "lag-3-listings", "consistent", "fail", "time-out")
SERVING = frozenset({"rollout", "reference", "verifier"})

# The invariants, by name; a machine checks those in its CHECKS after every step.
ONE_ATTEMPT = "one-trainer-attempt-at-a-time"
NEXT_ATTEMPT = "each-trainer-job-is-the-next-attempt"
NO_DOUBLE_DELETE = "an-action-deletes-a-uid-once"
LEDGER = "restarts-total-is-the-restarts-carried-out"
FAILED_STOPS = "a-failed-job-stops-its-trainer"
FAILJOB_FAILS = "a-decided-failjob-fails-the-job"
ALL_CHECKS = frozenset(
    {ONE_ATTEMPT, NEXT_ATTEMPT, NO_DOUBLE_DELETE, LEDGER, FAILED_STOPS, FAILJOB_FAILS}
)
FAIL_THE_JOB = "fail the job"  # how the failure policy's decision message ends for FailJob


def job_body() -> JSON:
    """The demo job, small (fewer serving replicas) and with a budget a run can exhaust."""
    body = example_body()
    roles = body["spec"]["roles"]
    roles["rollout"]["replicas"] = 2
    roles["verifier"]["replicas"] = 1
    body["spec"]["failurePolicy"]["maxRestarts"] = 4
    return body


def _labels(body: Mapping[str, Any]) -> Mapping[str, str]:
    return body["metadata"].get("labels") or {}


def _running(pod: Mapping[str, Any]) -> bool:
    return pod["status"]["phase"] == "Running" and not pod["metadata"].get("deletionTimestamp")


class ActionEngine(RuleBasedStateMachine):
    """One RLJob, started and running, then any sequence of the rules below. Invariants:

    - one-trainer-attempt-at-a-time: never non-terminal pods (terminating ones included) of two
      trainer attempts at once;
    - each-trainer-job-is-the-next-attempt: every trainer Job created is attempt + 1 of the one
      before;
    - an-action-deletes-a-uid-once: one operator process never deletes a uid twice (with the
      same grace) while one journaled action is in flight;
    - restarts-total-is-the-restarts-carried-out: status.restarts.total is the number of policy
      restarts journaled (manual ones are not counted), and every journaled action but the one
      in flight took effect (the gang's attempt created, the pod deleted, the role rolled);
    - a-failed-job-stops-its-trainer: a pass that starts from phase Failed leaves no trainer pod
      running outside a Job being deleted;
    - a-decided-failjob-fails-the-job: once an Event says the policy decided FailJob, the job is
      Failed after the next pass.
    """

    CHECKS: ClassVar[frozenset[str]] = ALL_CHECKS

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.cluster = Cluster(self.clock)
        self.s3 = FakeS3([BUCKET])
        self._patches = contextlib.ExitStack()
        self._patches.enter_context(harness.use_clock(self.clock))
        self.incarnation = 0
        self.operator = self._start_operator()
        self.uid = ""
        self.step = 0
        self.nonces = 0
        self.failed_passes: list[str] = []  # why a pass that began Failed left a trainer running
        self.unfailed_passes: list[str] = []  # FailJob decided before a pass that left it unfailed

    def teardown(self) -> None:
        self._patches.close()

    def _start_operator(self) -> harness.Operator:
        """A fresh operator process: it keeps nothing of the one before, and its watches start
        with a list."""
        self.incarnation += 1
        self.cluster.actor = f"operator#{self.incarnation}"
        self.cluster.index.relist()
        return harness.make_runtime(self.cluster, self.s3)

    # -- the world -------------------------------------------------------------------------------

    @initialize()
    def user_applies_the_rljob(self) -> None:
        """The job is created and runs: every sequence starts from a running job."""
        self.uid = self.cluster.create(job_body())["metadata"]["uid"]
        for _ in range(6):
            self._round()

    @rule()
    def operator_passes(self) -> None:
        self._pass()

    @rule(rounds=st.integers(1, 6))
    def world_settles(self, rounds: int) -> None:
        """Rounds of controllers, kubelets and an operator pass, a second apart."""
        for _ in range(rounds):
            self._round()

    @rule()
    def controllers_step(self) -> None:
        self.cluster.step_controllers()

    @rule()
    def kubelets_confirm_deletions(self) -> None:
        self.cluster.kubelet_confirm_all()

    @rule(seconds=st.sampled_from([1, 3, 31, 61, 300]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    # -- failures --------------------------------------------------------------------------------

    @precondition(lambda self: bool(self._pods("trainer")))
    @rule(index=st.integers(0, 3), how=st.sampled_from(sorted(RANK_ENDINGS)))
    def trainer_rank_fails(self, index: int, how: str) -> None:
        pods = self._pods("trainer")
        self.cluster.fail_pod(pods[index % len(pods)], *RANK_ENDINGS[how])

    @precondition(lambda self: bool(self._pods(*SERVING)))
    @rule(index=st.integers(0, 7), how=st.sampled_from(sorted(CONTAINER_ENDINGS)))
    def serving_container_restarts(self, index: int, how: str) -> None:
        pods = self._pods(*SERVING)
        exit_code, reason, message = CONTAINER_ENDINGS[how]
        self.cluster.crash_container(pods[index % len(pods)], reason, exit_code, message)

    @precondition(lambda self: bool(self._pods("rollout", "trainer")))
    @rule(index=st.integers(0, 3))
    def health_round_finds(self, index: int) -> None:
        """A finding of the detectors: a drifting engine (index < 2) or a stalled trainer."""
        engines = self._pods("rollout")
        if index < 2 and engines:
            target, detector, reason = engines[index % len(engines)], KV_DRIFT, KV_CACHE_DRIFT
        else:
            target, detector, reason = "trainer", TRAINER_STALL, TRAINER_STALLED
        evaluation = finding(detector, target, reason, f"{reason.value} of {target}", {})
        harness.feed_health(self.operator, KEY, [evaluation])

    @rule(index=st.integers(0, 3), ready=st.booleans())
    def node_readiness_changes(self, index: int, ready: bool) -> None:
        if ready:
            self.cluster.node_ready(f"gpu-{index}")
        else:
            self.cluster.node_not_ready(f"gpu-{index}")

    @rule(status=st.sampled_from([409, 500]))
    def next_write_fails(self, status: int) -> None:
        """409: the next status write loses a race; 500: the next write of any kind fails."""
        if status == 409:
            self.cluster.conflict_next_status_writes()
        else:
            self.cluster.fail_next_writes(status=status)

    @rule(deliveries=st.integers(0, 3), kinds=st.sampled_from(LAGGING))
    def watches_lag(self, deliveries: int, kinds: tuple[str, ...]) -> None:
        """The watches of `kinds` miss the next deliveries; 0: every watch re-lists."""
        if deliveries:
            self.cluster.index.lag(deliveries, kinds)
        else:
            self.cluster.index.relist()

    @rule(dies_before_write=st.none() | st.integers(0, 6))
    def operator_restarts(self, dies_before_write: int | None) -> None:
        """A new operator process, after the old one died in a pass before that write."""
        if dies_before_write is not None:
            self.cluster.die_before_write(dies_before_write)
            with contextlib.suppress(ProcessDied):
                self._pass()
            self.cluster.survive()
        self.operator = self._start_operator()

    @rule(fault=st.sampled_from(S3_FAULTS))
    def s3_misbehaves(self, fault: str) -> None:
        """New keys lag the listings (or stop lagging); the next listing fails or times out."""
        if fault.startswith("lag"):
            self.s3.lag_writes(int(fault.split("-")[1]))
        elif fault == "consistent":
            self.s3.lag_writes(0)
        elif fault == "fail":
            self.s3.fail_listings()
        else:
            self.s3.time_out_listings()

    # -- the trainer's checkpoints ---------------------------------------------------------------

    @precondition(lambda self: bool(self._pods("trainer")))
    @rule()
    def trainer_saves_a_checkpoint(self) -> None:
        attempt = max(int(_labels(p)[ATTEMPT]) for p in self._trainer_pods(running=True))
        self.step += 100
        try:
            write_version(self.s3, LOCATION, self.step, attempt)
        except StoreError:  # CommitRefused (a newer attempt's marker exists) or S3 is down
            return
        harness.report_checkpoint(self.operator, KEY, self.step)

    @precondition(lambda self: len(self._marker_attempts()) > 1)
    @rule()
    def superseded_attempt_commits_late(self) -> None:
        self.step += 100
        with contextlib.suppress(StoreError):
            write_version(self.s3, LOCATION, self.step, self._marker_attempts()[-2], zombie=True)

    # -- the user --------------------------------------------------------------------------------

    @rule(suspend=st.booleans())
    def user_sets_suspend(self, suspend: bool) -> None:
        self.cluster.edit(KIND, NAME, lambda body: body["spec"].update(suspend=suspend))

    @rule(role=st.sampled_from(["trainer", "rollout"]))
    def user_requests_a_restart(self, role: str) -> None:
        self.nonces += 1
        request = f"{role}/n{self.nonces}"

        def annotate(body: JSON) -> None:
            body["metadata"].setdefault("annotations", {})[RESTART_REQUEST] = request

        self.cluster.edit(KIND, NAME, annotate)

    @rule(what=st.sampled_from(BY_HAND), index=st.integers(0, 7))
    def user_deletes_a_child(self, what: str, index: int) -> None:
        kind, names = self._by_hand(what)
        if names:
            self.cluster.remove(kind, names[index % len(names)])

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        checks: dict[str, Callable[[], None]] = {
            ONE_ATTEMPT: self._one_trainer_attempt_at_a_time,
            NEXT_ATTEMPT: self._each_trainer_job_is_the_next_attempt,
            NO_DOUBLE_DELETE: self._an_action_deletes_a_uid_once,
            LEDGER: self._restarts_total_is_the_restarts_carried_out,
            FAILED_STOPS: self._a_failed_job_stops_its_trainer,
            FAILJOB_FAILS: self._a_decided_failjob_fails_the_job,
        }
        for name in sorted(self.CHECKS):
            checks[name]()

    def _one_trainer_attempt_at_a_time(self) -> None:
        live = {p["metadata"]["name"]: _labels(p).get(ATTEMPT) for p in self._trainer_pods()}
        assert len(set(live.values())) <= 1, f"trainer pods of two attempts at once: {live}"

    def _each_trainer_job_is_the_next_attempt(self) -> None:
        """A trainer Job is created for the next attempt; for the same attempt again only when
        the operator never recorded seeing the first (deleted the instant it was created, it is
        created anew from the same resume point: the attempt had not run)."""
        created: list[int] = []
        seen: set[int] = set()
        for write in self.cluster.log:
            if write.verb == "patch_status" and write.code == 200:
                seen |= set(write.detail.get("seen_jobs_after", {}))
            if write.verb == "apply" and write.kind == "Job" and write.code == 201:
                attempt = int(write.detail["attempt"])
                again = bool(created) and attempt == created[-1] and attempt not in seen
                assert not created or attempt == created[-1] + 1 or again, (
                    f"trainer Jobs created for attempts {[*created, attempt]}"
                )
                created.append(attempt)

    def _an_action_deletes_a_uid_once(self) -> None:
        deletes = Counter(
            (w.actor, w.in_flight, w.kind, w.name, w.uid, w.detail.get("grace") == 0)
            for w in self.cluster.writes()
            if w.verb == "delete" and w.in_flight is not None and w.code in (200, 404)
        )  # a delete that failed (409, 500) did nothing: retrying it is no repeat
        twice = [key for key, count in deletes.items() if count > 1]
        assert not twice, (
            f"deleted twice within one action (actor, action, kind, name, ...): {twice}"
        )

    def _restarts_total_is_the_restarts_carried_out(self) -> None:
        job = self.cluster.peek(KIND, NAME)
        if job is None:
            return
        status = job.get("status") or {}
        total = (status.get("restarts") or {}).get("total", 0)
        journaled = self._journaled()
        decided = sorted(i for i, (action, _) in journaled.items() if action.get("reason"))
        assert total == len(decided), f"restarts.total {total}, policy restarts {decided}"
        current = (status.get("inFlight") or {}).get("id")
        undone = [
            i for i, (action, attempt) in journaled.items()
            if i != current and not self._done(action, attempt)
        ]  # fmt: skip
        assert not undone, f"journaled, settled, never carried out: {undone}"

    def _a_failed_job_stops_its_trainer(self) -> None:
        assert not self.failed_passes, self.failed_passes[0]

    def _a_decided_failjob_fails_the_job(self) -> None:
        assert not self.unfailed_passes, self.unfailed_passes[0]

    # -- helpers ---------------------------------------------------------------------------------

    def _round(self) -> None:
        self.cluster.step_controllers()
        self.cluster.kubelet_confirm_all()
        self._pass()
        self.clock.advance(1)

    def _pass(self) -> None:
        """One pass of the RLJob as its worker would run it: with the newest body the watch
        delivered or the operator's own last status write returned."""
        changed = self.cluster.index.deliver()
        shown = self.cluster.index.rljob(NAME)
        if shown is None:
            return
        if KIND in changed or harness.worker_body(self.operator, self.uid) is None:
            harness.submit(self.operator, shown)
        body = harness.worker_body(self.operator, self.uid) or shown
        failed = (body.get("status") or {}).get("phase") == "Failed"
        decided = [e["message"] for e in self.cluster.view("Event") if FAIL_THE_JOB in e["message"]]
        try:
            harness.run_pass(self.operator, body)
        except KubeError:
            return  # the worker retries with backoff
        if failed and (running := self._unstopped_trainer_pods()):
            self.failed_passes.append(f"phase Failed, after a pass still running: {running}")
        job = self.cluster.peek(KIND, NAME)
        phase = (job.get("status") or {}).get("phase") if job is not None else "Failed"
        if decided and phase != "Failed":
            self.unfailed_passes.append(f"phase {phase} after a pass, though: {decided[0]}")

    def _pods(self, *roles: str) -> list[str]:
        """Running pods of these roles, by name."""
        return [
            p["metadata"]["name"]
            for p in self.cluster.view("Pod")
            if _labels(p).get(ROLE) in roles and _running(p)
        ]

    def _trainer_pods(self, *, running: bool = False) -> list[Mapping[str, Any]]:
        """Trainer pods that have not ended (terminating ones included), or only running ones."""
        return [
            p
            for p in self.cluster.view("Pod")
            if _labels(p).get(ROLE) == "trainer"
            and (_running(p) if running else p["status"]["phase"] not in ("Succeeded", "Failed"))
        ]

    def _unstopped_trainer_pods(self) -> list[str]:
        """Trainer pods running on, neither deleting nor owned by a Job being deleted."""
        jobs = {j["metadata"]["uid"]: j for j in self.cluster.view("Job")}
        unstopped = []
        for pod in self._trainer_pods(running=True):
            owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("uid")
            job = jobs.get(owner)
            if job is not None and not job["metadata"].get("deletionTimestamp"):
                unstopped.append(pod["metadata"]["name"])
        return unstopped

    def _marker_attempts(self) -> list[int]:
        parsed = [LOCATION.parse_key(k) for k in self.s3.keys(BUCKET, LOCATION.attempts_prefix)]
        return sorted(p.attempt for p in parsed if p.kind is KeyKind.MARKER and p.attempt)

    def _by_hand(self, what: str) -> tuple[str, list[str]]:
        """(kind, candidate names) of what the user deletes."""
        if what == "trainer-job":
            return "Job", [j["metadata"]["name"] for j in self.cluster.view("Job")]
        if what == "rollout-deployment":
            return "Deployment", [f"{NAME}-rollout"]
        if what == "trainer-service":
            return "Service", [f"{NAME}-trainer"]
        roles = ("trainer",) if what == "trainer-pod" else tuple(SERVING)
        return "Pod", self._pods(*roles)

    def _journaled(self) -> dict[str, tuple[JSON, int | None]]:
        """Every action the operator's status writes journaled, by id, with the attempt the
        journaling write recorded. A policy restart carries its failure reason; a manual one
        has none (and is not counted)."""
        actions: dict[str, tuple[JSON, int | None]] = {}
        for write in self.cluster.writes():
            action = write.detail.get("in_flight_after")
            if write.verb == "patch_status" and write.code == 200 and action:
                actions.setdefault(action["id"], (action, write.detail.get("attempt_after")))
        return actions

    def _done(self, action: JSON, attempt: int | None) -> bool:
        """Whether the action's effect happened: the gang's next attempt created, the pod
        deleted (by anyone), the role's template annotated with the action id."""
        log = self.cluster.log
        kind, target = action["kind"], action.get("target") or {}
        if kind == "RestartTrainerGang":
            return any(_created_job(w, str(attempt)) for w in log)
        if kind == "RestartPod":
            return any(w.verb == "delete" and w.uid == target.get("uid") and w.code == 200
                       for w in log)  # fmt: skip
        return any(
            w.verb == "patch" and w.detail.get("annotations", {}).get(RESTARTED_AT) == action["id"]
            for w in log
        )


def _created_job(write: Write, attempt: str) -> bool:
    return (
        write.verb == "apply"
        and write.kind == "Job"
        and write.code == 201
        and write.detail.get("attempt") == attempt
    )
