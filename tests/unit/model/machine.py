"""A stateful model of the action engine: the operator's real passes run against the in-memory
cluster and S3 while the world moves (controllers, kubelets, time), things fail (trainer ranks,
serving containers, nodes, writes, watches, S3 listings, the operator process itself) and the
user acts (suspend, resume, manual restarts, deleting children by hand). The invariants are
checked after every step; a subclass picks which (`CHECKS`), so each is its own test."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
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
from rljob.api import FailureReason, parse_duration
from rljob.checkpoint_protocol.errors import CommitRefused, StoreError
from rljob.checkpoint_protocol.layout import CheckpointLocation, KeyKind, VersionId
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.health.evaluation import (
    AMONG_FAST_PEERS_EVIDENCE,
    KV_DRIFT,
    TRAINER_STALL,
    VERIFIER_LATENCY,
    finding,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.slots import WeightCopy
from rljob.runtime.runtime import RuntimeOptions
from rljob.vocabulary.labels import ATTEMPT_LABEL as ATTEMPT
from rljob.vocabulary.labels import RESTART_REQUEST_ANNOTATION as RESTART_REQUEST
from rljob.vocabulary.labels import RESTARTED_AT_ANNOTATION as RESTARTED_AT
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION as RESUME_REQUEST
from rljob.vocabulary.labels import ROLE_LABEL as ROLE
from tests.unit.model import (
    bounds,
    drain,
    harness,
    in_turn,
    nodes,
    placement,
    slots,
    suspension,
    weights,
)
from tests.unit.model.cluster import (
    RESTART_KINDS,
    TEMPLATE_HASH_LABEL,
    WATCHED_KINDS,
    Clock,
    Cluster,
    ProcessDied,
    Write,
    clone,
)
from tests.unit.model.s3 import FakeS3, write_version
from tests.unit.model.suspects import suspect_faults
from tests.unit.reconcile.world import NAMESPACE, example_body

JSON = dict[str, Any]
NAME = "grpo-demo"
KEY = (NAMESPACE, NAME)
BUCKET = "rljob-demo"
LOCATION = CheckpointLocation.from_uri(f"s3://{BUCKET}/checkpoints", NAMESPACE, NAME)
KV_CACHE_DRIFT = FailureReason.KV_CACHE_DRIFT
KV_FRAGMENTATION = FailureReason.KV_CACHE_FRAGMENTATION
FLEET_KV_FRAGMENTATION = FailureReason.FLEET_KV_CACHE_FRAGMENTATION
TRAINER_STALLED = FailureReason.TRAINER_STALLED
PREFIX_COLLAPSE = FailureReason.PREFIX_CACHE_COLLAPSE
VERIFIER_SLOW = FailureReason.VERIFIER_SLOW
REWARD_HACKING = FailureReason.REWARD_HACKING_SUSPECTED
NCCL = (
    "[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4242, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
)
RANK_ENDINGS = {  # how a trainer rank ends: (exit code, reason, termination message)
    "nccl-timeout": (1, "Error", NCCL),
    # torch.AcceleratorError for cudaErrorECCUncorrectable: hardware-like, its node turns suspect.
    "gpu-ecc": (1, "Error", "CUDA error: uncorrectable ECC error encountered"),
    "exit-93": (93, "Error", "fatal: the reward model is unreachable"),
    "oom-killed": (137, "OOMKilled", ""),
}
CONTAINER_ENDINGS = {"oom-killed": RANK_ENDINGS["oom-killed"], "exit-93": RANK_ENDINGS["exit-93"]}
KIND = "RLJob"
LAGGING = (("Pod",), ("Job",), ("Deployment",), (KIND,), WATCHED_KINDS)
BY_HAND = ("trainer-job", "rollout-deployment", "trainer-service", "trainer-pod", "serving-pod")
S3_FAULTS = ("lag-1-listing", "lag-3-listings", "consistent", "fail", "time-out",
             "deny-multipart-listing", "allow-multipart-listing")  # fmt: skip
SERVING = frozenset({"rollout", "reference", "verifier"})
TRAINER_RESTARTS = ("RestartTrainerGang", "RestartJob")  # the kinds that start an attempt

# The invariants, by name; a machine checks those in its CHECKS after every step.
ONE_ATTEMPT = "one-trainer-attempt-at-a-time"
NEXT_ATTEMPT = "each-trainer-job-is-the-next-attempt"
NO_DOUBLE_DELETE = "an-action-deletes-a-uid-once"
LEDGER = "restarts-total-is-the-restarts-carried-out"
FAILED_STOPS = "a-failed-job-stops-its-trainer"
FAILJOB_FAILS = "a-decided-failjob-fails-the-job"
RESUMES_NEWEST = "each-attempt-resumes-from-the-newest-eligible-valid-version"
KEEPS_LINEAGE = "no-version-from-the-resume-point-on-is-deleted"
WITHIN_MAX_UNAVAILABLE = "operator-disruptions-stay-within-maxunavailable"
NO_PROGRESS_COUNTS_POLICY = "no-progress-counts-policy-restarts-only"
FORGETS_DELETED = "a-deleted-rljob-leaves-nothing-in-memory"
LEASED_WRITES = "a-replica-without-the-lease-writes-nothing"
SOFT_SUSPECTS = "suspect-nodes-are-expiring-preferences"
GOODPUT = "goodput-counts-each-second-once"
ALL_CHECKS = frozenset(
    {ONE_ATTEMPT, NEXT_ATTEMPT, NO_DOUBLE_DELETE, LEDGER, FAILED_STOPS, FAILJOB_FAILS,
     RESUMES_NEWEST, KEEPS_LINEAGE, WITHIN_MAX_UNAVAILABLE, NO_PROGRESS_COUNTS_POLICY,
     FORGETS_DELETED, LEASED_WRITES, SOFT_SUSPECTS, GOODPUT, *in_turn.CHECKS, *suspension.CHECKS,
     *drain.CHECKS, *nodes.CHECKS, *bounds.CHECKS, *placement.CHECKS, *slots.CHECKS}
)  # fmt: skip
FAIL_THE_JOB = "fail the job"  # how the failure policy's decision message ends for FailJob
# The failure policy's note when gang restarts made no progress (policy/choose.py).
NO_PROGRESS = re.compile(
    r"no progress: the last (\d+) gang restarts all resumed from (step \d+|scratch)"
)
EDITED_VARIABLE = "MODEL_EDIT"
GATED_DRAIN_TIMEOUT = "30s"
SUSPECT_NODE_TTL = "10m"
# slotServices' engines: SGLang's (its /update_weights_from_disk copies a slot's weights).
SLOTTED_ROLLOUT = {
    "engine": "sglang",
    "args": ["--model-path", "Qwen/Qwen2.5-7B-Instruct"],
    "slotServices": True,
}
EDITS = ("rollout-replicas-1", "rollout-replicas-3", "rollout-env", "verifier-env")
GANG_ENGINE_RULE = {
    "roles": ["trainer"],
    "onReasons": ["KVCacheDrift"],
    "action": "RestartTrainerGang",
}
# The KV-cache findings that report by default, made to act: an engine restarted alone, a fleet
# restarted in turn, oldest first.
KV_FRAGMENTATION_RULES = [
    {"roles": ["rollout"], "onReasons": ["KVCacheFragmentation"], "action": "RestartPod"},
    {"onReasons": ["FleetKVCacheFragmentation"], "action": "RestartRoleInTurn"},
]
# The whole job restarted as one action (RestartJob): on an engine's prefix-cache collapse, and
# on a trainer rank's GPU hardware error (what a JobSet's restart-everything does for any failure).
RESTART_JOB_RULES = [
    {"roles": ["rollout"], "onReasons": ["PrefixCacheCollapse"], "action": "RestartJob"},
    {"roles": ["trainer"], "onReasons": ["GPUHardwareError"], "action": "RestartJob"},
]
# The failure policy's Suspend: on an RL canary's finding, and on a trainer rank OOMKilled.
SUSPEND_RULES = [
    {"onReasons": ["RewardHackingSuspected"], "action": "Suspend"},
    {"roles": ["trainer"], "onReasons": ["OOMKilled"], "action": "Suspend"},
]


def job_body(*, gated: bool = False, from_engine: bool = False, slotted: bool = False) -> JSON:
    """The demo job, small (fewer serving replicas) and with a budget a run can exhaust;
    `gated`: its engines drain (drainTimeout 30s) and rejoin behind the policy-current gate;
    `from_engine`: the gate reads the engines' own weight version (generationFrom engine);
    `slotted`: SGLang engines behind one Service per slot (slotServices: needs both before)."""
    body = example_body()
    roles = body["spec"]["roles"]
    if gated:
        roles["rollout"].update(weightSync="Gated", drainTimeout=GATED_DRAIN_TIMEOUT)
    if from_engine:
        roles["rollout"]["generationFrom"] = "engine"
    if slotted:
        roles["rollout"].update(SLOTTED_ROLLOUT)
    roles["rollout"]["replicas"] = 2
    roles["verifier"]["replicas"] = 1
    body["spec"]["failurePolicy"]["maxRestarts"] = 4
    # Short enough that runs see suspect nodes expire.
    body["spec"]["failurePolicy"]["suspectNodeTTL"] = SUSPECT_NODE_TTL
    # Engines inside the trainer gang too; a drifting one restarts the gang by this rule.
    roles["trainer"]["engines"] = {"exporter": "engine", "port": 8100}
    body["spec"]["failurePolicy"]["rules"] += [
        GANG_ENGINE_RULE,
        *KV_FRAGMENTATION_RULES,
        *RESTART_JOB_RULES,
        *SUSPEND_RULES,
    ]
    return body


def _labels(body: Mapping[str, Any]) -> Mapping[str, str]:
    return body["metadata"].get("labels") or {}


def _accounted(totals: Mapping[str, Any] | None) -> float:
    """Seconds a goodput block accounts: productive, lost and suspended."""
    totals = totals or {}
    return float(
        totals.get("productiveSeconds", 0)
        + sum((totals.get("lostSeconds") or {}).values())
        + sum((totals.get("suspendedSeconds") or {}).values())
    )


def _parsed(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _nothing_recorded(*findings: list[str]) -> None:
    """The invariants checked where they can break (in a pass, at a delete or an S3 write):
    what broke them is recorded there, and reported after the step."""
    found = [f for recorded in findings for f in recorded]
    assert not found, found[0]


def _operator(actor: str) -> bool:
    return actor.startswith("operator")


def _edit_role(body: JSON, edit: str) -> None:
    """A spec change of a serving role that rolls its Deployment: `<role>-replicas-<n>`, or
    `<role>-env` (the MODEL_EDIT variable counts up)."""
    role, what, *value = edit.split("-")
    spec = body["spec"]["roles"][role]
    if what == "replicas":
        spec["replicas"] = int(value[0])
        return
    env = [e for e in spec.get("env") or [] if e["name"] != EDITED_VARIABLE]
    edits = len(spec.get("env") or []) - len(env)
    edited = (
        int(next(e["value"] for e in spec["env"] if e["name"] == EDITED_VARIABLE)) if edits else 0
    )
    spec["env"] = [*env, {"name": EDITED_VARIABLE, "value": str(edited + 1)}]


def _owner(body: Mapping[str, Any]) -> str | None:
    owners = body["metadata"].get("ownerReferences") or []
    return next((str(o["uid"]) for o in owners if o.get("controller")), None)


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _running(pod: Mapping[str, Any]) -> bool:
    return pod["status"]["phase"] == "Running" and not pod["metadata"].get("deletionTimestamp")


class ActionEngine(RuleBasedStateMachine):
    """One RLJob, started and running, then any sequence of the rules below. Invariants:

    - one-trainer-attempt-at-a-time: never non-terminal pods (terminating ones included) of two
      trainer attempts at once, but for an old attempt's pods terminating on a lost node, which
      the next attempt does not wait for (fenced from the checkpoint store by its marker);
    - each-trainer-job-is-the-next-attempt: every trainer Job created is attempt + 1 of the one
      before;
    - an-action-deletes-a-uid-once: one operator process never deletes a uid twice (with the
      same grace) while one journaled action is in flight;
    - restarts-total-is-the-restarts-carried-out: status.restarts.total is the number of
      restarts journaled, the policy's and the user's (manual ones), byRole adds up to it, and
      every journaled action but the one in flight took effect (the gang's attempt created, the
      pod deleted, the role rolled, the whole job's attempt created and every serving role
      rolled);
    - a-failed-job-stops-its-trainer: a pass that starts from phase Failed leaves no trainer pod
      running outside a Job being deleted;
    - a-decided-failjob-fails-the-job: once an Event says the policy decided FailJob, the job is
      Failed after the next pass;
    - each-attempt-resumes-from-the-newest-eligible-valid-version: when an attempt's marker is
      written, the version it names is the newest one that is committed (its manifest stored),
      returned by a listing already (a lagging store hides it until then) and eligible under
      the markers before it (checkpoints/lineage.py: a version of attempt k < A - 1 only when
      every attempt j, k < j < A, resumed from a step at or after it); from scratch only when
      there is none;
    - no-version-from-the-resume-point-on-is-deleted: no key of a committed version that is
      eligible in the current lineage (the highest marker's, with that marker) and not older than
      the current attempt's resume step is ever deleted;
    - operator-disruptions-stay-within-maxunavailable: the serving pods of a role terminating
      because the operator deleted them or its Deployment rolled never outnumber the role's
      maxUnavailable (at least 1);
    - no-progress-counts-policy-restarts-only: a FailJob for "no progress: the last N gang
      restarts all resumed from X" has N attempts started by journaled policy gang restarts, the
      last N of them, each resuming from X (by their markers);
    - a-deleted-rljob-leaves-nothing-in-memory: once the operator was told an RLJob is gone (its
      DELETED event, or a prune after a re-list), no memory, worker or health-loop state of it
      remains;
    - a-replica-without-the-lease-writes-nothing: no write of a replica that does not hold the
      leader Lease reaches the API server or S3;
    - the lost-node invariants (model/nodes.py): a rank lost with its node leads to a new
      attempt within a bound, and a pod is force-deleted only where nothing can still run it;
    - suspect-nodes-are-expiring-preferences: after a pass, status.suspectNodes lists only nodes
      with hardware-like evidence (a lost node here), each until at most the TTL after marking,
      none expired if the pass wrote the status; no trainer Job requires avoiding a node
      (model/suspects.py);
    - the in-turn role restart's (model/in_turn.py): within maxUnavailable by its own deletes,
      each listed pod deleted once and only after its turn was journaled, one budget entry,
      oldest first, settled once its role is ready, and a trainer attempt failing behind a
      Gated one acted on within a few passes;
    - the failure policy's Suspend and its resume (model/suspension.py): nothing created while
      a suspension is journaled, a suspension kept and applied once, a resume nonce handled once
      and ending only a suspension journaled before the user wrote it, no restart counted;
    - the engine slots' (model/slots.py): no operator write empties a slot, every slot held once
      and only once after a settled pass, slots stamped only on serving engines, weight copies
      only from a serving engine into one no slot routes to, and none of it without
      slotServices.
    """

    CHECKS: ClassVar[frozenset[str]] = ALL_CHECKS
    GATED: ClassVar[bool] = False  # weightSync Gated: engines drain and rejoin behind the gate
    FROM_ENGINE: ClassVar[bool] = False  # generationFrom engine: the gate reads the driver's count
    SLOTTED: ClassVar[bool] = False  # slotServices: one Service per engine slot (needs both)
    # How each operator process is started (test_kueue_model's runs with --kueue).
    OPTIONS: ClassVar[RuntimeOptions] = RuntimeOptions()

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
        self.goodput_seen: dict[str, tuple[int, float]] = {}  # uid -> closedThrough, closed
        self.nonces = 0
        self.written_annotations: dict[str, list[str]] = {}  # request annotation -> its values
        self.failed_passes: list[str] = []  # why a pass that began Failed left a trainer running
        self.unfailed_passes: list[str] = []  # FailJob decided before a pass that left it unfailed
        self.stale_resumes: list[str] = []  # markers naming other than the newest resumable
        self.lineage_deletes: list[str] = []  # keys of protected versions deleted
        self.miscounted: list[str] = []  # no-progress FailJobs the policy restarts do not explain
        self.told_gone: dict[str, str] = {}  # uid -> name of RLJobs the operator was told are gone
        self.taken_down: set[str] = set()  # uids of serving pods ready until the operator's hand
        self.overdisruptions: list[str] = []  # deletes past a role's maxUnavailable
        self.cluster.pod_delete_observers.append(self._pod_deleted)
        # (RLJob uid, attempt) -> the keys listings had returned when the attempt's resume
        # choice was journaled (a later listing, retention's, may show a version it could not).
        self.shown_at_choice: dict[tuple[str, int], frozenset[tuple[str, str]]] = {}
        self.cluster.status_observers.append(self._choices_journaled)
        self.s3.observers.append(self._store_changes)
        self.passing: str | None = None  # the replica whose pass runs now
        self.unleased_store_writes: list[str] = []
        self.suspect_faults: list[str] = []  # what passes got wrong about suspect nodes
        self.in_turn = in_turn.InTurnChecks(self.cluster, NAME)
        self.suspension = suspension.SuspensionChecks(self.cluster)
        self.readings: dict[str, EngineReading] = {}  # the health loop's, by rollout pod
        self.drains = drain.DrainChecks(self.cluster, NAME, self.readings)
        self.node_checks = nodes.NodeChecks(self.cluster, NAME)
        self.bound_checks = bounds.BoundChecks(self.cluster, NAME)
        self.placement = placement.PlacementChecks(self.cluster, KEY)
        self.slot_checks = slots.SlotChecks(self.cluster, NAME, self.readings)
        self.weights = weights.EngineWeights(
            self.cluster, self.readings, self.drains.engine_reported
        )

    def teardown(self) -> None:
        self._patches.close()

    def job_body(self) -> JSON:
        """The RLJob this machine's user creates (and creates again)."""
        return job_body(gated=self.GATED, from_engine=self.FROM_ENGINE, slotted=self.SLOTTED)

    def _start_operator(self, *, lease: bool = True) -> harness.Operator:
        """A fresh operator process: it keeps nothing of the one before, and its watches start
        with a list. With `lease`, it takes the leader Lease at once (the one before is gone)."""
        self.incarnation += 1
        identity = f"operator#{self.incarnation}"
        self.cluster.actor = identity
        self.cluster.index.relist()
        self.shown: JSON | None = self.cluster.index.rljob(NAME)
        if lease:
            self.cluster.move_lease_after_writes(0, identity)
        copies = harness.RecordedCopies(self._copy_started)
        return harness.make_runtime(self.cluster, self.s3, identity, self.OPTIONS, copies)

    def _copy_started(self, copy: WeightCopy) -> None:
        """A pass started a weight copy: checked as it starts, loaded by the engines."""
        self.slot_checks.copy_started(copy)
        self.weights.copy_started(copy)

    # -- the world -------------------------------------------------------------------------------

    @initialize()
    def user_applies_the_rljob(self) -> None:
        """The job is created and runs: every sequence starts from a running job."""
        self.uid = self.cluster.create(self.job_body())["metadata"]["uid"]
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

    @precondition(lambda self: bool(self._pods("rollout")))
    @rule(running=st.sampled_from([0, 0, 3]), current=st.booleans())
    def engines_report(self, running: int, current: bool) -> None:
        """A health round reads every running engine: its requests running now and the policy
        generation it serves (the job's current one, or none yet)."""
        job = self.cluster.peek(KIND, NAME) or {}
        status_generation = (job.get("status") or {}).get("policyGeneration") or 1
        policy = self.drains.trainer_generation or status_generation
        if self.FROM_ENGINE:  # the engine's own weight version: the driver's last push
            policy = self.drains.driver_count or 1
        for name in self._pods("rollout"):
            generation = policy if current else None
            self.readings[name] = EngineReading(name, self.clock.now, running, generation)
            self.drains.engine_reported(name, generation)

    # -- failures --------------------------------------------------------------------------------

    @precondition(lambda self: bool(self._pods("trainer")))
    @rule(index=st.integers(0, 3), how=st.sampled_from(sorted(RANK_ENDINGS)))
    def trainer_rank_fails(self, index: int, how: str) -> None:
        pods = self._pods("trainer")
        if how == "oom-killed":  # SUSPEND_RULES suspend on it
            self.suspension.finding_fed()
        self.cluster.fail_pod(pods[index % len(pods)], *RANK_ENDINGS[how])

    @precondition(lambda self: bool(self._pods(*SERVING)))
    @rule(index=st.integers(0, 7), how=st.sampled_from(sorted(CONTAINER_ENDINGS)))
    def serving_container_restarts(self, index: int, how: str) -> None:
        pods = self._pods(*SERVING)
        exit_code, reason, message = CONTAINER_ENDINGS[how]
        name = pods[index % len(pods)]
        # The health loop keeps its last reading until the new container reports: a pass must
        # not take it for the new container's (drain.py's gate-freshness check).
        self.cluster.crash_container(name, reason, exit_code, message)

    @precondition(lambda self: bool(self._pods("rollout", "trainer")))
    @rule(index=st.integers(0, 8))
    def health_round_finds(self, index: int) -> None:
        """A finding of the detectors: a drifting engine (index < 2), a drifting engine inside
        a trainer pod (index 4: the gang restarts by GANG_ENGINE_RULE), a fragmented engine (5:
        restarted alone by KV_FRAGMENTATION_RULES), a slow verifier among fast peers (6:
        restarted alone by the built-in slow-verifier rule) or without them (7: reported), an
        engine's prefix cache collapsed (8: the whole job restarts by RESTART_JOB_RULES), or a
        stalled trainer."""
        engines, ranks, verifiers = (
            self._pods("rollout"),
            self._pods("trainer"),
            self._pods("verifier"),
        )
        evidence: dict[str, float | str] = {}
        if index < 2 and engines:
            target, detector, reason = engines[index % len(engines)], KV_DRIFT, KV_CACHE_DRIFT
        elif index == 4 and ranks:
            target, detector, reason = ranks[0], KV_DRIFT, KV_CACHE_DRIFT
        elif index == 5 and engines:
            target, detector, reason = engines[0], KV_DRIFT, KV_FRAGMENTATION
        elif index in (6, 7) and verifiers:
            target, detector, reason = verifiers[0], VERIFIER_LATENCY, VERIFIER_SLOW
            evidence[AMONG_FAST_PEERS_EVIDENCE] = float(index == 6)
        elif index == 8 and engines:
            target, detector, reason = engines[-1], KV_DRIFT, PREFIX_COLLAPSE
        else:
            target, detector, reason = "trainer", TRAINER_STALL, TRAINER_STALLED
        evaluation = finding(detector, target, reason, f"{reason.value} of {target}", evidence)
        harness.feed_health(self.operator, KEY, [evaluation])

    @precondition(lambda self: bool(self._pods("rollout")))
    @rule(index=st.integers(0, 3))
    def health_round_finds_the_fleet_fragmented(self, index: int) -> None:
        """Every rollout engine down together: one finding naming one of them; the role is
        restarted in turn by KV_FRAGMENTATION_RULES. The finding wakes the job at once (the
        runtime's health loop does), so a pass follows."""
        engines = self._pods("rollout")
        target = engines[index % len(engines)]
        message = f"every rollout engine ({len(engines)}) is down together: {' '.join(engines)}"
        fleet = finding(KV_DRIFT, target, FLEET_KV_FRAGMENTATION, message, {})
        harness.feed_health(self.operator, KEY, [fleet])
        self._pass()

    @precondition(lambda self: bool(self._pods("trainer")))
    @rule()
    def health_round_finds_reward_hacking(self) -> None:
        """An RL canary: the trainer's reward rises while its evaluation stays flat. Suspended by
        SUSPEND_RULES; the finding wakes the job at once (the health loop does)."""
        message = "train reward +0.08/h over 2h while eval reward +0.001/h"
        canary = finding("rl_canaries", "trainer", REWARD_HACKING, message, {})
        self.suspension.finding_fed()
        harness.feed_health(self.operator, KEY, [canary])
        self._pass()

    @rule(index=st.integers(0, 3), ready=st.booleans())
    def node_readiness_changes(self, index: int, ready: bool) -> None:
        """A node stops answering, its pods evicted at once (a short unreachable toleration, as
        on the bed), or answers again."""
        if ready:
            self.cluster.node_ready(f"gpu-{index}")
        else:
            self.cluster.node_not_ready(f"gpu-{index}")

    @rule(index=st.integers(0, 3))
    def node_stops_answering(self, index: int) -> None:
        """A node's kubelet goes silent within the default 300 s toleration: its pods turn not
        ready and stay running as far as the API knows (a partition, or a dead machine)."""
        self.cluster.node_not_ready(f"gpu-{index}", evict=False)

    @precondition(lambda self: bool(self._pods("trainer")))
    @rule(index=st.integers(0, 3), how=st.sampled_from(["silent", "deleted"]))
    def trainer_node_is_lost(self, index: int, how: str) -> None:
        """The node under a running trainer rank goes silent, or its Node object is deleted."""
        pods = [
            p for p in self.cluster.view("Pod") if p["metadata"]["name"] in self._pods("trainer")
        ]
        node = pods[index % len(pods)]["spec"]["nodeName"]
        if how == "silent":
            self.cluster.node_not_ready(node, evict=False)
        else:
            self.cluster.node_deleted(node)

    @rule(index=st.integers(0, 3))
    def node_object_deleted(self, index: int) -> None:
        """The machine is gone and its Node object with it (a cloud node deleted)."""
        self.cluster.node_deleted(f"gpu-{index}")

    @precondition(lambda self: not all(self.cluster.nodes.values()))
    @rule(index=st.integers(0, 3))
    def node_marked_out_of_service(self, index: int) -> None:
        """A person (or a remediator) that powered a silent node off taints it out-of-service."""
        silent = sorted(node for node, ready in self.cluster.nodes.items() if not ready)
        self.cluster.node_out_of_service(silent[index % len(silent)])

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
            self._watch_delivered(deleted_events=False)

    @rule(dies_before_write=st.none() | st.integers(0, 6))
    def operator_restarts(self, dies_before_write: int | None) -> None:
        """A new operator process, after the old one died in a pass before that write."""
        if dies_before_write is not None:
            self.cluster.die_before_write(dies_before_write)
            with contextlib.suppress(ProcessDied):
                self._pass()
            self.cluster.survive()
        self.operator = self._start_operator()

    @rule(after_writes=st.none() | st.integers(0, 4))
    def lease_moves_to_a_standby(self, after_writes: int | None) -> None:
        """A standby replica takes the leader Lease: the leader stalls (a long GC pause, a
        frozen node) right after its `after_writes`-th write of a pass, or between passes
        (None), past the lease duration; it runs on until it notices, then exits."""
        deposed = self.operator
        standby = self._start_operator(lease=False)
        if after_writes is None:
            self.cluster.move_lease_after_writes(0, standby.leadership.identity)
            self._pass(deposed)  # woken, it has not noticed yet
        else:
            self.cluster.move_lease_after_writes(after_writes, standby.leadership.identity)
            self._pass(deposed)
            self.cluster.move_lease_after_writes(0, standby.leadership.identity)
        self.operator = standby

    @rule(fault=st.sampled_from(S3_FAULTS))
    def s3_misbehaves(self, fault: str) -> None:
        """New keys lag the listings (or stop lagging); the next listing fails or times out."""
        if fault.startswith("lag"):
            self.s3.lag_writes(int(fault.split("-")[1]))
        elif fault == "consistent":
            self.s3.lag_writes(0)
        elif fault.endswith("multipart-listing"):
            self.s3.deny_multipart_listing = fault.startswith("deny")
        elif fault == "fail":
            self.s3.fail_listings()
        else:
            self.s3.time_out_listings()

    # -- the trainer's checkpoints ---------------------------------------------------------------

    @precondition(lambda self: bool(self._pods("trainer")))
    @rule()
    def trainer_saves_a_checkpoint(self) -> None:
        """The newest running attempt writes (a leftover of a deleted namesake's too)."""
        attempt = max(int(_labels(p)[ATTEMPT]) for p in self._trainer_pods(running=True))
        self.step += 100
        try:
            write_version(self.s3, LOCATION, self.step, attempt)
        except (StoreError, CommitRefused):  # a newer attempt's marker exists, or S3 is down
            return
        harness.report_checkpoint(self.operator, KEY, self.step)

    @precondition(lambda self: len(self._marker_attempts()) > 1)
    @rule()
    def superseded_attempt_commits_late(self) -> None:
        self.step += 100
        with contextlib.suppress(StoreError):
            write_version(self.s3, LOCATION, self.step, self._marker_attempts()[-2], zombie=True)

    # -- the user --------------------------------------------------------------------------------

    @precondition(lambda self: self._live_job() is not None)
    @rule(suspend=st.booleans())
    def user_sets_suspend(self, suspend: bool) -> None:
        self.cluster.edit(KIND, NAME, lambda body: body["spec"].update(suspend=suspend))

    @precondition(lambda self: self._live_job() is not None)
    @rule(role=st.sampled_from(["trainer", "rollout"]))
    def user_requests_a_restart(self, role: str) -> None:
        self.nonces += 1
        request = f"{role}/n{self.nonces}"

        def annotate(body: JSON) -> None:
            body["metadata"].setdefault("annotations", {})[RESTART_REQUEST] = request

        self.cluster.edit(KIND, NAME, annotate)
        self.written_annotations.setdefault(RESTART_REQUEST, []).append(request)

    @precondition(lambda self: self._live_job() is not None)
    @rule()
    def user_requests_a_resume(self) -> None:
        """`kubectl rljob resume`: a new nonce in rljob.io/resume-request, suspended or not."""
        self.nonces += 1
        nonce = f"r{self.nonces}"

        def annotate(body: JSON) -> None:
            body["metadata"].setdefault("annotations", {})[RESUME_REQUEST] = nonce

        self.cluster.edit(KIND, NAME, annotate)
        self.suspension.nonce_written(nonce)
        self.written_annotations.setdefault(RESUME_REQUEST, []).append(nonce)

    @rule(what=st.sampled_from(BY_HAND), index=st.integers(0, 7))
    def user_deletes_a_child(self, what: str, index: int) -> None:
        kind, names = self._by_hand(what)
        if names:
            self.cluster.remove(kind, names[index % len(names)])

    @precondition(lambda self: self._live_job() is not None)
    @rule(cascade=st.sampled_from(["Background", "Orphan"]))
    def user_deletes_the_rljob(self, cascade: str) -> None:
        """kubectl delete, or with --cascade=orphan: its children stay, without an owner."""
        self.cluster.remove(KIND, NAME, propagation=cascade)

    @precondition(lambda self: self.cluster.peek(KIND, NAME) is None)
    @rule(store=st.booleans())
    def user_recreates_the_rljob(self, store: bool) -> None:
        """The same name again, maybe before the old children were collected: a new uid. With
        the checkpoint store its attempts continue after the old markers; without, they number
        from 1 again, the old trainer Jobs' names."""
        body = self.job_body()
        if not store:
            body["spec"].pop("checkpoint", None)
        self.uid = self.cluster.create(body)["metadata"]["uid"]

    @precondition(lambda self: self._live_job() is not None and self.nonces > 0)
    @rule(which=st.sampled_from([RESTART_REQUEST, RESUME_REQUEST]), back=st.integers(1, 3))
    def user_sets_an_annotation_back(self, which: str, back: int) -> None:
        """A GitOps tool re-applies an older manifest: a request annotation takes a value it
        had before (a nonce already handled)."""
        earlier = self.written_annotations.get(which, [])
        if len(earlier) < 2:
            return
        value = earlier[-min(back + 1, len(earlier))]

        def annotate(body: JSON) -> None:
            body["metadata"].setdefault("annotations", {})[which] = value

        self.cluster.edit(KIND, NAME, annotate)
        if which == RESUME_REQUEST:  # a value the operator never handled is a request, now
            self.suspension.nonce_written(value)

    @precondition(lambda self: bool(self._pods(*SERVING)))
    @rule(role=st.sampled_from(sorted(SERVING)), fixed=st.booleans())
    def role_replacements_never_start(self, role: str, fixed: bool) -> None:
        """New pods of a role never start (an image that no longer pulls, quota), or do again."""
        if fixed:
            self.cluster.unstartable.pop(role, None)
        else:
            self.cluster.unstartable.setdefault(role, self.clock.now)

    @precondition(lambda self: self._live_job() is not None)
    @rule(move=st.sampled_from([1, 1, 1, -3]))
    def trainer_reports_its_generation(self, move: int) -> None:
        """The trainer's rljob_policy_generation: a step further, or back (a gang restart that
        resumed from an older checkpoint)."""
        generation = max(1, (self.drains.trainer_generation or 1) + move)
        self.drains.trainer_generation = generation
        harness.report_generation(self.operator, KEY, generation)

    @precondition(lambda self: self._live_job() is not None)
    @rule(edit=st.sampled_from(EDITS))
    def user_edits_a_role(self, edit: str) -> None:
        self.cluster.edit(KIND, NAME, lambda body: _edit_role(body, edit))

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        checks: dict[str, Callable[[], None]] = {
            ONE_ATTEMPT: self._one_trainer_attempt_at_a_time,
            NEXT_ATTEMPT: self._each_trainer_job_is_the_next_attempt,
            NO_DOUBLE_DELETE: self._an_action_deletes_a_uid_once,
            LEDGER: self._restarts_total_is_the_restarts_carried_out,
            FAILED_STOPS: partial(_nothing_recorded, self.failed_passes),
            FAILJOB_FAILS: partial(_nothing_recorded, self.unfailed_passes),
            RESUMES_NEWEST: partial(_nothing_recorded, self.stale_resumes),
            KEEPS_LINEAGE: partial(_nothing_recorded, self.lineage_deletes),
            WITHIN_MAX_UNAVAILABLE: partial(_nothing_recorded, self.overdisruptions),
            NO_PROGRESS_COUNTS_POLICY: partial(_nothing_recorded, self.miscounted),
            FORGETS_DELETED: self._a_deleted_rljob_leaves_nothing_in_memory,
            LEASED_WRITES: partial(
                _nothing_recorded, self.cluster.unleased_writes, self.unleased_store_writes
            ),
            SOFT_SUSPECTS: partial(_nothing_recorded, self.suspect_faults),
            GOODPUT: self._goodput_counts_each_second_once,
            **{check: partial(self._in_turn_holds, check) for check in in_turn.CHECKS},
            **{
                check: partial(_nothing_recorded, self.drains.faults(check))
                for check in drain.CHECKS
            },
            **{
                check: partial(_nothing_recorded, self.node_checks.faults(check))
                for check in nodes.CHECKS
            },
            **{
                check: partial(_nothing_recorded, self.bound_checks.faults(check))
                for check in bounds.CHECKS
            },
            **{
                check: partial(_nothing_recorded, *[self.suspension.faults(check)])
                for check in suspension.CHECKS
            },
            **{
                check: partial(_nothing_recorded, self.placement.faults(check))
                for check in placement.CHECKS
            },
            **{
                check: partial(_nothing_recorded, self.slot_checks.faults(check))
                for check in slots.CHECKS
            },
        }
        for name in sorted(self.CHECKS):
            try:
                checks[name]()
            except AssertionError as broken:  # said with the invariant's name
                raise AssertionError(f"{name}: {broken}") from broken

    def _in_turn_holds(self, check: str) -> None:
        _nothing_recorded(self.in_turn.faults(check))

    def _one_trainer_attempt_at_a_time(self) -> None:
        """Of this RLJob's: a deleted namesake's leftovers are the user's (their late writes
        are fenced by the markers of the attempts after them)."""
        live = {
            p["metadata"]["name"]: _labels(p).get(ATTEMPT)
            for p in self._trainer_pods()
            if not self.node_checks.fenced(p) and self.cluster.controlled_by(p, self.uid)
        }
        assert len(set(live.values())) <= 1, f"trainer pods of two attempts at once: {live}"

    def _each_trainer_job_is_the_next_attempt(self) -> None:
        """A trainer Job is created for the next attempt; for the same attempt again only when
        the operator never recorded seeing the first (deleted the instant it was created, it is
        created anew from the same resume point: the attempt had not run)."""
        # Each RLJob's own: a re-created one (a new uid) continues after every marker of the
        # name (some of which may have no Job), or numbers from 1 again without a store.
        created: dict[str, list[int]] = {}
        seen: dict[str, set[int]] = {}
        for write in self.cluster.log:
            if write.verb == "patch_status" and write.code == 200:
                seen.setdefault(write.uid, set()).update(write.detail.get("seen_jobs_after", {}))
            if write.verb == "apply" and write.kind == "Job" and write.code == 201:
                owner, attempt = str(write.detail.get("owner")), int(write.detail["attempt"])
                mine = created.setdefault(owner, [])
                again = bool(mine) and attempt == mine[-1] and attempt not in seen.get(owner, ())
                assert not mine or attempt == mine[-1] + 1 or again, (
                    f"trainer Jobs created for attempts {[*mine, attempt]} of {owner}"
                )
                mine.append(attempt)

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
        ledger = status.get("restarts") or {}
        total, by_role = ledger.get("total", 0), ledger.get("byRole") or {}
        assert sum(by_role.values()) == total, f"restarts.byRole {by_role}, total {total}"
        journaled = self._journaled()
        restarts = sorted(
            i for i, (action, _) in journaled.items() if action["kind"] in RESTART_KINDS
        )
        assert total == len(restarts), f"restarts.total {total}, restarts journaled {restarts}"
        current = (status.get("inFlight") or {}).get("id")
        undone = [
            i for i, (action, attempt) in journaled.items()
            if i != current and not self._done(action, attempt)
        ]  # fmt: skip
        assert not undone, f"journaled, settled, never carried out: {undone}"

    def _goodput_counts_each_second_once(self) -> None:
        """status.goodput as written: what ended attempts added never shrinks or goes back, and
        the seconds it accounts fit in the wall-clock since the job's creation (whole seconds,
        rounded per bucket and attempt)."""
        job = self.cluster.peek(KIND, NAME)
        goodput = ((job or {}).get("status") or {}).get("goodput")
        if job is None or not goodput:
            return
        uid, through = job["metadata"]["uid"], goodput.get("closedThrough", 0)
        closed, total = _accounted(goodput.get("closed")), _accounted(goodput.get("total"))
        seen = self.goodput_seen.get(uid, (0, 0.0))
        assert (through, closed) >= seen, f"closed went back: {seen} -> {(through, closed)}"
        self.goodput_seen[uid] = (through, closed)
        assert total >= closed, f"total {total} s below what ended attempts added ({closed} s)"
        created, updated = (
            _parsed(job["metadata"]["creationTimestamp"]),
            _parsed(goodput["updatedAt"]),
        )
        wall = (updated - created).total_seconds()
        assert total <= wall + 8 * (through + 1), f"{total} s accounted in {wall} s of wall-clock"

    def _a_deleted_rljob_leaves_nothing_in_memory(self) -> None:
        left = {
            uid: held
            for uid, name in self.told_gone.items()
            if (held := harness.remembered(self.operator, uid, (NAMESPACE, name)))
        }
        assert not left, f"the operator still holds deleted RLJobs (uid: what): {left}"

    def _pod_deleted(self, actor: str, pod: JSON) -> None:
        """The cluster model's observer: a serving pod that served goes by the operator's hand
        (its delete, or its Deployment rolling past the pod's template); the replicas the
        operator's hand took down before and that are not yet replaced by a ready pod (the
        fewer of its pods still terminating and the replicas unserved) must leave room."""
        role = _labels(pod).get(ROLE, "")
        if role not in SERVING or not _running(pod) or not _ready(pod):
            return
        deployment = self.cluster.role_child("Deployment", self.uid, role)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return
        if _owner(pod) != deployment["metadata"]["uid"]:
            return  # a pod of a deleted RLJob's Deployment, collected
        current = self.cluster.template_hash(deployment["spec"]["template"])
        rolled = actor == "controller" and _labels(pod).get(TEMPLATE_HASH_LABEL) != current
        if not (_operator(actor) or rolled):
            return
        terminating = {
            p["metadata"]["uid"]: p["metadata"]["name"]
            for p in self.cluster.view("Pod")
            if p["metadata"].get("deletionTimestamp")
            and p["status"]["phase"] not in ("Succeeded", "Failed")
        }
        down = [terminating[uid] for uid in sorted(self.taken_down & terminating.keys())]
        serving = sum(
            1 for p in self.cluster.view("Pod")
            if _labels(p).get(ROLE) == role and _running(p) and _ready(p)
        )  # fmt: skip
        unserved = max(0, int(deployment["spec"].get("replicas", 1)) - serving)
        rolling = deployment["spec"].get("strategy", {}).get("rollingUpdate", {})
        limit = max(1, int(rolling.get("maxUnavailable", 1)))
        if min(len(down), unserved) + 1 > limit:
            self.overdisruptions.append(
                f"{actor} took down {role} pod {pod['metadata']['name']} while {down}, taken "
                f"down before, were terminating and {unserved} replicas unserved: "
                f"maxUnavailable {limit}"
            )
        self.taken_down.add(pod["metadata"]["uid"])

    # -- checkpoints -----------------------------------------------------------------------------

    def _store_changes(self, bucket: str, key: str, data: bytes | None) -> None:
        """The S3 model's observer, right before a key is stored (data) or deleted (None)."""
        parsed = LOCATION.parse_key(key)
        stored = self.s3.buckets[bucket]
        if self.passing is not None and self.cluster.lease_holder != self.passing:
            change = "deleted" if data is None else "wrote"
            self.unleased_store_writes.append(
                f"{self.passing} {change} s3://{bucket}/{key} while "
                f"{self.cluster.lease_holder} held the Lease"
            )
        if data is not None and parsed.kind is KeyKind.MARKER and key not in stored:
            self._check_resume(AttemptMarker.parse(data))
        if data is None and parsed.kind is KeyKind.VERSION_OBJECT and parsed.version is not None:
            self._check_delete(key, parsed.version)

    def _markers(self) -> dict[int, AttemptMarker]:
        stored = self.s3.buckets[BUCKET]
        markers = {}
        for key in self.s3.keys(BUCKET, LOCATION.attempts_prefix):
            parsed = LOCATION.parse_key(key)
            if parsed.kind is KeyKind.MARKER and parsed.attempt is not None:
                markers[parsed.attempt] = AttemptMarker.parse(stored[key].data)
        return markers

    def _choices_journaled(self, job: JSON) -> None:
        uid = job["metadata"]["uid"]
        for record in (job.get("status") or {}).get("attempts") or []:
            self.shown_at_choice.setdefault((uid, int(record["attempt"])), frozenset(self.s3.shown))

    def _committed(
        self, *, listed: bool, shown: frozenset[tuple[str, str]] | None = None
    ) -> list[VersionId]:
        """Versions whose manifest is stored (and, when `listed`, every key of which a listing
        returned, by `shown` when given: a key a lagging store never listed yet is one the
        operator cannot know, and a version missing a file it names is incomplete to it)."""
        seen = self.s3.shown if shown is None else shown
        keys = self.s3.keys(BUCKET, LOCATION.versions_prefix)
        hidden = {
            parsed.version
            for key in keys
            if (BUCKET, key) not in seen and (parsed := LOCATION.parse_key(key)).version
        }  # fmt: skip
        versions = []
        for key in keys:
            parsed = LOCATION.parse_key(key)
            known = not listed or parsed.version not in hidden
            if parsed.is_manifest and parsed.version is not None and known:
                versions.append(parsed.version)
        return versions

    def _check_resume(self, marker: AttemptMarker) -> None:
        attempt = marker.attempt
        markers = {a: m for a, m in self._with_unstarted(self._markers()).items() if a < attempt}
        shown = self.shown_at_choice.get((self.uid, attempt))
        resumable = [
            v for v in self._committed(listed=True, shown=shown)
            if _in_lineage(v, attempt - 1, markers) and v.attempt < attempt
        ]  # fmt: skip
        newest = max(resumable, default=None)
        expected = None if newest is None or not (markers or attempt > 1) else newest.name
        if marker.resumed_from_version != expected:
            self.stale_resumes.append(
                f"attempt {attempt} resumes from {marker.resumed_from_version}, the newest "
                f"resumable version is {expected} (markers {sorted(markers)})"
            )

    def _with_unstarted(self, markers: dict[int, AttemptMarker]) -> dict[int, AttemptMarker]:
        """The markers, and for an attempt the RLJob's status journaled but that never got its
        marker (so never ran and wrote nothing) the marker its record implies: such an attempt
        fences nothing (checkpoints/attempt_plan.with_journaled_markers)."""
        status = (self.cluster.peek(KIND, NAME) or {}).get("status") or {}
        implied = {
            int(record["attempt"]): AttemptMarker(
                job=NAME, namespace=NAMESPACE, attempt=int(record["attempt"]),
                started_at=record["startedAt"], resumed_from_step=record.get("resumedFromStep"),
                resumed_from_version=record.get("resumedFromVersion"),
            )
            for record in status.get("attempts") or []
        }  # fmt: skip
        return {**implied, **markers}

    def _check_delete(self, key: str, version: VersionId) -> None:
        if version not in self._committed(listed=False):
            return  # an incomplete version: retention's grace decides
        markers = self._markers()
        if not markers:
            return
        current = max(markers)
        resumed = markers[current].resumed_from_step
        if _in_lineage(version, current, markers) and (resumed is None or version.step >= resumed):
            self.lineage_deletes.append(
                f"{key} deleted: {version.name} is in attempt {current}'s lineage, which resumed "
                f"from step {resumed}"
            )

    # -- helpers ---------------------------------------------------------------------------------

    def _round(self) -> None:
        self.weights.land(self.clock.now)  # copies started a round ago have loaded
        self.cluster.step_controllers()
        self.cluster.kubelet_confirm_all()
        self._health_reads()
        self._pass()
        self.clock.advance(1)

    def _health_reads(self) -> None:
        """What the health loop reads of the engines every round (here: nothing; a machine
        whose engines report on their own says what)."""

    def _pass(self, replica: harness.Operator | None = None) -> None:
        """One pass of the RLJob as the leader's worker (or `replica`'s) would run it: with the
        newest body the watch delivered or the operator's own last status write returned."""
        runtime = replica or self.operator
        settling = self.in_turn.before_pass(leading=runtime.leadership.acting())
        draining = self.drains.before_pass(
            leading=runtime.leadership.acting(), handed=harness.trainer_generation(runtime, KEY)
        )
        lost = self.node_checks.before_pass(leading=runtime.leadership.acting())
        overdue = self.bound_checks.before_pass(leading=runtime.leadership.acting())
        slotting = self.slot_checks.before_pass(leading=runtime.leadership.acting())
        changed = self.cluster.index.deliver()
        gang = self.placement.before_pass()
        if KIND in changed:
            self._watch_delivered(deleted_events=True)
        shown = self.cluster.index.rljob(NAME)
        if shown is None:
            self.slot_checks.pass_ended()
            return
        if KIND in changed or harness.worker_body(runtime, self.uid) is None:
            harness.submit(runtime, shown)
        body = harness.worker_body(runtime, self.uid) or shown
        failed = (body.get("status") or {}).get("phase") == "Failed"
        decided = self._failjob_events()
        self.passing = runtime.leadership.identity
        before = clone(self.cluster.peek(KIND, NAME))
        try:
            harness.run_pass(runtime, body, tuple(self.readings.values()))
        except (KubeError, StoreError):
            return  # the worker retries with backoff
        finally:
            self.passing = None
            self.slot_checks.pass_ended()
            self._check_no_progress(decided)
        self.in_turn.after_pass(settling)
        self.drains.after_pass(draining)
        self.node_checks.after_pass(lost)
        self.bound_checks.after_pass(overdue)
        self.placement.after_pass(gang)
        self.slot_checks.after_pass(slotting)
        after, jobs = self.cluster.peek(KIND, NAME), self.cluster.view("Job")
        ttl = dt.timedelta(seconds=parse_duration(SUSPECT_NODE_TTL))
        self.suspect_faults += suspect_faults(before, after, jobs, self.clock.now, ttl)
        if failed and (running := self._unstopped_trainer_pods()):
            self.failed_passes.append(f"phase Failed, after a pass still running: {running}")
        job = self.cluster.peek(KIND, NAME)
        phase = (job.get("status") or {}).get("phase") if job is not None else "Failed"
        if decided and phase != "Failed":
            self.unfailed_passes.append(f"phase {phase} after a pass, though: {decided[0]}")

    def _watch_delivered(self, *, deleted_events: bool) -> None:
        """The RLJob's watch moved on: a job it showed and no longer shows is gone for the
        operator, through its DELETED event, or (after a re-list, which sends none) the prune."""
        shown = self.cluster.index.rljob(NAME)
        before, self.shown = self.shown, shown
        if before is None or (shown and shown["metadata"]["uid"] == before["metadata"]["uid"]):
            return
        if deleted_events:
            harness.forget(self.operator, before)
        else:
            harness.prune(self.operator)
        self.told_gone[before["metadata"]["uid"]] = NAME

    def _check_no_progress(self, decided_before: list[str]) -> None:
        """A FailJob for no progress, decided in the pass just run, is explained by the policy
        gang restarts journaled for this RLJob and their markers."""
        new = [m for m in self._failjob_events() if m not in decided_before]
        policy_attempts = [
            attempt
            for action, attempt in self._journaled().values()
            if action["kind"] in TRAINER_RESTARTS and action.get("reason") and attempt
        ]
        markers = self._markers()
        for message in new:
            found = NO_PROGRESS.search(message)
            if found is None:
                continue
            count, where = int(found[1]), found[2]
            last = policy_attempts[-count:] if len(policy_attempts) >= count else []
            resumed = [_resumed_from(markers.get(a)) for a in last]
            if not last or any(r != where for r in resumed):
                self.miscounted.append(
                    f"{message!r}, though the policy gang restarts started attempts "
                    f"{policy_attempts}, the last {count} resuming from {resumed}"
                )

    def _failjob_events(self) -> list[str]:
        """The messages of this RLJob's (this uid's) Events saying the policy decided FailJob."""
        return [
            e["message"] for e in self.cluster.view("Event")
            if FAIL_THE_JOB in e["message"] and e["involvedObject"].get("uid") == self.uid
        ]  # fmt: skip

    def _live_job(self) -> Mapping[str, Any] | None:
        job = self.cluster.peek(KIND, NAME)
        return None if job is None or job["metadata"].get("deletionTimestamp") else job

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
        has none."""
        actions: dict[str, tuple[JSON, int | None]] = {}
        for write in self.cluster.writes():
            action = write.detail.get("in_flight_after")
            if (
                write.verb == "patch_status"
                and write.code == 200
                and action
                and write.uid == self.uid
            ):
                actions.setdefault(action["id"], (action, write.detail.get("attempt_after")))
        return actions

    def _done(self, action: JSON, attempt: int | None) -> bool:
        """Whether the action's effect happened: the gang's next attempt created, the pod
        deleted (by anyone), the role's template annotated with the action id."""
        log = self.cluster.log
        kind, target = action["kind"], action.get("target") or {}
        if kind == "RestartTrainerGang":
            return any(_created_job(w, str(attempt)) for w in log)
        if kind == "RestartJob":  # the next attempt created and every serving role rolled
            return any(_created_job(w, str(attempt)) for w in log) and all(
                self._rolled(action["id"], f"{NAME}-{role}") for role in SERVING
            )
        if kind == "RestartPod":  # the pod deleted (by anyone), gone, or the collector's
            pod = next((p for p in self.cluster.view("Pod")
                        if p["metadata"]["uid"] == target.get("uid")), None)  # fmt: skip
            return (
                pod is None
                or self.cluster.orphaned(pod)
                or any(
                    w.verb == "delete" and w.uid == target.get("uid") and w.code == 200 for w in log
                )
            )
        if kind == "RestartRoleInTurn":  # each listed pod deleted (by anyone) or gone
            if self.in_turn.ended_early(f"{self.uid}/{action['id']}"):
                return True  # ended early (preempted, timed out): its pods not yet taken stay
            # A pod whose Deployment is gone is the garbage collector's: going, as if deleted.
            live = {p["metadata"]["uid"] for p in self.cluster.view("Pod")
                    if not self.cluster.orphaned(p)}  # fmt: skip
            deleted = {w.uid for w in log if w.verb == "delete" and w.code == 200}
            return all(p["uid"] in deleted or p["uid"] not in live for p in action["pods"])
        return self._rolled(action["id"])

    def _rolled(self, action_id: str, name: str | None = None) -> bool:
        """A Deployment's template (the one `name`s, if given) annotated with the action id."""
        return any(
            w.verb == "patch"
            and w.detail.get("annotations", {}).get(RESTARTED_AT) == action_id
            and (name is None or w.name == name)
            for w in self.cluster.log
        )


def _created_job(write: Write, attempt: str) -> bool:
    return (
        write.verb == "apply"
        and write.kind == "Job"
        and write.code == 201
        and write.detail.get("attempt") == attempt
    )


def _in_lineage(version: VersionId, current: int, markers: Mapping[int, AttemptMarker]) -> bool:
    """Whether `version` is eligible while `current` is the current attempt: its own, or an
    older attempt's at a step no later attempt up to `current` resumed before."""
    if version.attempt >= current:
        return version.attempt == current
    for later in range(version.attempt + 1, current + 1):
        marker = markers.get(later)
        step = None if marker is None else marker.resumed_from_step
        if step is None or version.step > step:
            return False
    return True


def _resumed_from(marker: AttemptMarker | None) -> str:
    """How the failure policy names an attempt's resume point: "step N" or "scratch"."""
    if marker is None or marker.resumed_from_step is None:
        return "scratch"
    return f"step {marker.resumed_from_step}"
