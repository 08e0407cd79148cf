"""The failure policy's rules: what to do about one failure or finding (docs/architecture.md
section 8). Pure.

Order of decisions, each able to end the story:
1. The first matching rule, user rules before the built-in ones (Suspend, Report, Ignore and
   FailJob end here: none is a restart, none is counted); a RestartPod or RestartRole for
   the trainer becomes RestartTrainerGang (its ranks cannot restart alone); a RestartRoleInTurn
   rule never matches the trainer.
2. Cooldown: a metric finding on a target (a pod for RestartPod, else its role) restarted less
   than its cooldown ago is ignored; the restart has not had time to show its effect yet.
3. Escalation pod -> role -> job: pods of a role already restarted ESCALATE_POD_AFTER times for
   the same reason within the window (whichever pods: a Deployment renames replacements) get
   their role restarted instead; a role already restarted ESCALATE_ROLE_AFTER times
   within the window fails the job. Trainer gang restarts (and RestartJob, one with every
   serving role rolled) do not escalate: `noProgressRestarts` and the budget bound them; nor
   do in-turn restarts, a repair meant to recur (fragmentation builds up again), bounded by
   their cooldown and the budget.
4. No progress: `noProgressRestarts` gang restarts (RestartJob's too) in a row that resumed
   from the same step fail the job instead of a further one from that step.
5. Budget: `maxRestarts` counted restarts within `window` (from `status.restarts.countedAt`);
   one more fails the job. Infrastructure reasons do not count by default.
6. Backoff: none for the first counted restart in the window, then initial * 2^(n-1) capped at
   max, counted from the previous counted restart (a failure long after it does not wait).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rljob.api.durations import parse_duration
from rljob.api.spec import FailureRule, Health
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName

ESCALATE_POD_AFTER = 3
ESCALATE_ROLE_AFTER = 3
# Nvidia Resiliency Extension's "do not requeue" exit code.
EXIT_DO_NOT_REQUEUE = 93

RESTART_ACTIONS = frozenset(
    {
        FailureAction.RESTART_POD,
        FailureAction.RESTART_ROLE,
        FailureAction.RESTART_ROLE_IN_TURN,
        FailureAction.RESTART_TRAINER_GANG,
        FailureAction.RESTART_JOB,
    }
)
_R = FailureReason
# The classifier's CUDA, GPU and NCCL network reasons restart like any rank failure; a GPU
# hardware or NCCL network fault also makes the rank's node suspect (reconcile/suspects.py).
_ACCELERATOR_FAILURES = [
    _R.NCCL_NETWORK_ERROR,
    _R.CUDA_OUT_OF_MEMORY,
    _R.CUDA_ERROR,
    _R.GPU_HARDWARE_ERROR,
]
_TRAINER_FAILURES = [
    _R.NCCL_TIMEOUT,
    *_ACCELERATOR_FAILURES,
    _R.TRAINER_STALLED,
    _R.OOM_KILLED,
    _R.CRASH_LOOP,
    _R.CONTAINER_FAILED,
    # A Ray driver's view of its cluster (launcher ray): a gang failure like any other.
    _R.RAY_ACTOR_DIED,
    _R.RAY_NODE_DIED,
    _R.RAY_OUT_OF_MEMORY,
]
# Causes named from an engine's own page (issue 32): no false restart and full recall on vLLM's
# own core and the simulator's workload shifts (bench/OPERATING-POINT.md), so they act.
_ENGINE_CAUSES = [_R.KV_CACHE_LEAK, _R.PREFIX_CACHE_COLLAPSE]
_POD_FAILURES = [
    _R.KV_CACHE_DRIFT,
    _R.ENGINE_STALLED,
    *_ENGINE_CAUSES,
    _R.OOM_KILLED,
    _R.CRASH_LOOP,
    _R.CONTAINER_FAILED,
    _R.NCCL_TIMEOUT,
    *_ACCELERATOR_FAILURES,
]
_IMAGE_OR_CONFIG = frozenset({_R.IMAGE_PULL_FAILED, _R.CONFIG_ERROR})
_RL_CANARIES = [_R.REWARD_HACKING_SUSPECTED, _R.THROUGHPUT_REGRESSION]
_KV_FINDINGS = [_R.KV_CACHE_DRIFT, _R.KV_CACHE_FRAGMENTATION, _R.FLEET_KV_CACHE_FRAGMENTATION]

BUILT_IN_RULES: tuple[tuple[str, FailureRule], ...] = (
    (
        "do-not-requeue-exit-code",
        FailureRule(on_exit_codes=[EXIT_DO_NOT_REQUEUE], action=FailureAction.FAIL_JOB),
    ),
    (
        "trainer-failures",
        FailureRule(
            roles=[RoleName.TRAINER],
            on_reasons=_TRAINER_FAILURES,
            action=FailureAction.RESTART_TRAINER_GANG,
        ),
    ),
    (
        "infrastructure",
        FailureRule(
            on_reasons=[_R.PREEMPTED, _R.EVICTED, _R.NODE_LOST],
            action=FailureAction.RESTART_POD,
            counts_towards_max=False,
        ),
    ),
    # Softened to Report once the role has run: then it is a registry or secret hiccup to
    # surface (Degraded) while the kubelet retries, not a broken spec.
    (
        "image-or-config",
        FailureRule(on_reasons=sorted(_IMAGE_OR_CONFIG), action=FailureAction.FAIL_JOB),
    ),
    # An engine inside the gang (trainer.engines) cannot restart alone, and a gang restart
    # costs the whole step: said, not acted on, unless a user rule on role trainer asks.
    (
        "engines-in-gang",
        FailureRule(
            roles=[RoleName.TRAINER],
            on_reasons=[*_KV_FINDINGS, *_ENGINE_CAUSES, _R.ENGINE_STALLED, _R.ENGINE_MEMORY_GROWTH],
            action=FailureAction.REPORT,
        ),
    ),
    # New detectors report until docs/writing-an-rljob.md's calibration section says why they
    # are trusted; a user rule (tried first) makes them act.
    (
        "new-kv-findings",
        FailureRule(
            on_reasons=[
                _R.KV_CACHE_FRAGMENTATION,
                _R.FLEET_KV_CACHE_FRAGMENTATION,
            ],
            action=FailureAction.REPORT,
        ),
    ),
    # The RL correctness canaries say a run's objective may be broken, not that a pod is: said
    # by default; a user rule (tried first) with action Suspend stops the run until resumed.
    (
        "rl-canaries",
        FailureRule(on_reasons=_RL_CANARIES, action=FailureAction.REPORT),
    ),
    # A slow verifier among fast peers restarts alone (bench/GOODPUT.md: only reported, it was
    # the operator's costliest class); softened to Report when the slow ones are not the few
    # (choose._soften): the load or the reward code, which no restart fixes, or no peer to tell.
    (
        "slow-verifier",
        FailureRule(
            roles=[RoleName.VERIFIER],
            on_reasons=[_R.VERIFIER_SLOW],
            action=FailureAction.RESTART_POD,
        ),
    ),
    # Host memory growth: measured on the simulator's growth model only (no real engine's trace
    # is long enough: bench/OPERATING-POINT.md), so said, not acted on.
    (
        "report-only",
        FailureRule(
            on_reasons=[_R.UNSCHEDULABLE, _R.ENGINE_MEMORY_GROWTH],
            action=FailureAction.REPORT,
        ),
    ),
    ("pod-failures", FailureRule(on_reasons=_POD_FAILURES, action=FailureAction.RESTART_POD)),
)
_FALLBACK = ("no-rule-matched", FailureRule(action=FailureAction.REPORT))


@dataclass(frozen=True, slots=True)
class Failure:
    """A finding or pod failure to decide on. `target` is the pod (None for role-wide ones);
    `message` is the evidence, one line; `among_fast_peers`: the detector judged most of the
    pod's peers fine in the same round (health.evaluation.AMONG_FAST_PEERS_EVIDENCE)."""

    reason: FailureReason
    role: RoleName
    target: str | None = None
    exit_code: int | None = None
    message: str = ""
    role_has_run: bool = True
    among_fast_peers: bool = False


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What the policy needs beyond the spec and the ledger.

    `last_restart_at`: restart times by target (pod name, or role name for role and gang
    restarts), merged with the ledger's recent records. `resumed_from_steps`: the step each gang
    restart resumed from, oldest first (None: from scratch). `next_resume_step`: the step a gang
    restart now would resume from; None: unknown, taken as the last resumed step.
    `cooldowns`: seconds per reason (see `cooldowns_from_health`).
    """

    last_restart_at: Mapping[str, datetime] = field(default_factory=dict)
    resumed_from_steps: Sequence[int | None] = ()
    next_resume_step: int | None = None
    cooldowns: Mapping[FailureReason, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do. `counts`: uses up the restart budget; `delay_seconds`: backoff to wait first;
    `rule`: the rule that matched, for explanations."""

    action: FailureAction
    reason: FailureReason
    role: RoleName
    target: str | None
    counts: bool
    delay_seconds: float
    message: str
    escalated_from: FailureAction | None = None
    rule: str = ""

    @property
    def restarts(self) -> bool:
        return self.action in RESTART_ACTIONS


def cooldowns_from_health(health: Health) -> dict[FailureReason, float]:
    """Per-reason cooldowns for metric findings, from the detectors' own time scales."""
    return {
        FailureReason.KV_CACHE_DRIFT: parse_duration(health.kv_drift.cooldown),
        FailureReason.KV_CACHE_FRAGMENTATION: parse_duration(health.kv_drift.cooldown),
        FailureReason.FLEET_KV_CACHE_FRAGMENTATION: parse_duration(health.kv_drift.cooldown),
        FailureReason.ENGINE_STALLED: parse_duration(health.engine_stall.timeout),
        # A leaked block shows at the next idle reading or wedge; a prefix baseline takes longer.
        FailureReason.KV_CACHE_LEAK: parse_duration(health.engine_stall.timeout),
        FailureReason.PREFIX_CACHE_COLLAPSE: parse_duration(health.kv_drift.cooldown),
        FailureReason.ENGINE_MEMORY_GROWTH: parse_duration(health.kv_drift.cooldown),
        FailureReason.TRAINER_STALLED: parse_duration(health.trainer_stall.startup_grace),
        FailureReason.VERIFIER_SLOW: parse_duration(health.verifier_latency.window),
    }


def rule_matches(rule: FailureRule, failure: Failure) -> bool:
    if rule.roles is not None and failure.role not in rule.roles:
        return False
    # A rule without roles restarts serving roles in turn; the trainer's ranks restart together.
    if rule.action == FailureAction.RESTART_ROLE_IN_TURN and failure.role == RoleName.TRAINER:
        return False
    if rule.on_reasons is not None and failure.reason not in rule.on_reasons:
        return False
    return rule.on_exit_codes is None or failure.exit_code in rule.on_exit_codes


def match_rule(failure: Failure, user_rules: Sequence[FailureRule]) -> tuple[str, FailureRule]:
    """The first matching rule and its name: user rules, then built-in ones, then Report."""
    named_user_rules = [(f"failurePolicy.rules[{i}]", r) for i, r in enumerate(user_rules)]
    built_in = [(f"built-in:{name}", rule) for name, rule in BUILT_IN_RULES]
    for name, rule in [*named_user_rules, *built_in]:
        if rule_matches(rule, failure):
            return name, rule
    return f"built-in:{_FALLBACK[0]}", _FALLBACK[1]
