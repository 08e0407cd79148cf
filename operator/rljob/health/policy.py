"""The failure policy: what to do about one failure or finding (DESIGN sections 5 and 6). Pure.

Order of decisions, each able to end the story:
1. The first matching rule, user rules before the built-in ones; a RestartPod or RestartRole for
   the trainer becomes RestartTrainerGang (its ranks cannot restart alone).
2. Cooldown: a metric finding on a target restarted less than its cooldown ago is ignored; the
   restart has not had time to show its effect yet.
3. Escalation pod -> role -> job: a pod already restarted ESCALATE_POD_AFTER times within the
   window gets its role restarted instead; a role already restarted ESCALATE_ROLE_AFTER times
   within the window fails the job. Trainer gang restarts do not escalate: `noProgressRestarts`
   and the budget bound them.
4. No progress: `noProgressRestarts` gang restarts in a row that resumed from the same step fail
   the job instead of a further one from that step.
5. Budget: `maxRestarts` counted restarts within `window` (from `status.restarts.countedAt`);
   one more fails the job. Infrastructure reasons do not count by default.
6. Backoff: none for the first counted restart in the window, then initial * 2^(n-1) capped at
   max, counted from the previous counted restart (a failure long after it does not wait).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from rljob.api.durations import parse_duration
from rljob.api.enums import FailureAction, FailureReason, RoleName
from rljob.api.spec import FailurePolicy, FailureRule, Health
from rljob.api.status import (
    MAX_COUNTED_AT,
    MAX_RECENT_RESTARTS,
    MESSAGE_MAX_LENGTH,
    RestartRecord,
    RestartsStatus,
)
from rljob.health.evaluation import format_duration
from rljob.health.termination import sanitize_message

ESCALATE_POD_AFTER = 3
ESCALATE_ROLE_AFTER = 3
# Nvidia Resiliency Extension's "do not requeue" exit code.
EXIT_DO_NOT_REQUEUE = 93

RESTART_ACTIONS = frozenset(
    {FailureAction.RESTART_POD, FailureAction.RESTART_ROLE, FailureAction.RESTART_TRAINER_GANG}
)
_R = FailureReason
_TRAINER_FAILURES = [
    _R.NCCL_TIMEOUT,
    _R.TRAINER_STALLED,
    _R.OOM_KILLED,
    _R.CRASH_LOOP,
    _R.CONTAINER_FAILED,
]
_POD_FAILURES = [
    _R.KV_CACHE_DRIFT,
    _R.ENGINE_STALLED,
    _R.OOM_KILLED,
    _R.CRASH_LOOP,
    _R.CONTAINER_FAILED,
    _R.NCCL_TIMEOUT,
]
_IMAGE_OR_CONFIG = frozenset({_R.IMAGE_PULL_FAILED, _R.CONFIG_ERROR})

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
    (
        "report-only",
        FailureRule(on_reasons=[_R.VERIFIER_SLOW, _R.UNSCHEDULABLE], action=FailureAction.REPORT),
    ),
    ("pod-failures", FailureRule(on_reasons=_POD_FAILURES, action=FailureAction.RESTART_POD)),
)
_FALLBACK = ("no-rule-matched", FailureRule(action=FailureAction.REPORT))


@dataclass(frozen=True, slots=True)
class Failure:
    """A finding or pod failure to decide on. `target` is the pod (None for role-wide ones);
    `message` is the evidence, one line."""

    reason: FailureReason
    role: RoleName
    target: str | None = None
    exit_code: int | None = None
    message: str = ""
    role_has_run: bool = True


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
        FailureReason.ENGINE_STALLED: parse_duration(health.engine_stall.timeout),
        FailureReason.TRAINER_STALLED: parse_duration(health.trainer_stall.startup_grace),
        FailureReason.VERIFIER_SLOW: parse_duration(health.verifier_latency.window),
    }


def rule_matches(rule: FailureRule, failure: Failure) -> bool:
    if rule.roles is not None and failure.role not in rule.roles:
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


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class _History:
    now: datetime
    window: float
    counted_at: list[datetime]
    recent: list[RestartRecord]

    @classmethod
    def of(cls, ledger: RestartsStatus, now: datetime, window: float) -> _History:
        since = now - timedelta(seconds=window)
        return cls(
            now=now,
            window=window,
            counted_at=sorted(t for t in map(_utc, ledger.counted_at) if t > since),
            recent=[r for r in ledger.recent if _utc(r.time) > since],
        )

    def pod_restarts(self, role: RoleName, pod: str) -> int:
        return sum(
            1
            for r in self.recent
            if r.action == FailureAction.RESTART_POD and r.role == role and r.pod == pod
        )

    def role_restarts(self, role: RoleName) -> int:
        return sum(
            1 for r in self.recent if r.action == FailureAction.RESTART_ROLE and r.role == role
        )

    def last_restart(self, key: str, extra: Mapping[str, datetime]) -> datetime | None:
        times = [_utc(r.time) for r in self.recent if _record_key(r) == key]
        if key in extra:
            times.append(_utc(extra[key]))
        return max(times, default=None)


def _record_key(record: RestartRecord) -> str:
    if record.action == FailureAction.RESTART_POD and record.pod:
        return record.pod
    return record.role.value


@dataclass(frozen=True, slots=True)
class _Plan:
    failure: Failure
    action: FailureAction
    counts: bool
    rule: str
    escalated_from: FailureAction | None = None
    note: str = ""

    def escalate(self, action: FailureAction, note: str) -> _Plan:
        return replace(
            self, action=action, escalated_from=self.escalated_from or self.action, note=note
        )


def decide(
    failure: Failure,
    policy: FailurePolicy,
    ledger: RestartsStatus | None,
    now: datetime,
    context: PolicyContext | None = None,
) -> Decision:
    """The action for `failure` under `policy`, given the restart ledger and context at `now`."""
    context = context or PolicyContext()
    now = _utc(now)
    rule_name, rule = match_rule(failure, policy.rules)
    action = _for_role(_soften(rule.action, failure, rule_name), failure.role)
    plan = _Plan(failure, action, rule.counts_towards_max and action in RESTART_ACTIONS, rule_name)
    if action not in RESTART_ACTIONS:
        return _decision(plan, 0.0, "")
    window = parse_duration(policy.window)
    history = _History.of(ledger or RestartsStatus(), now, window)
    cooled = _cooldown(plan, history, context)
    if cooled is not None:
        return cooled
    plan = _escalate(plan, history)
    plan = _check_progress(plan, policy, context)
    plan = _check_budget(plan, policy, history)
    if plan.action not in RESTART_ACTIONS:
        return _decision(plan, 0.0, "")
    delay = _backoff(plan, policy, history)
    return _decision(plan, delay, _budget_note(plan, policy, history, delay))


def _soften(action: FailureAction, failure: Failure, rule_name: str) -> FailureAction:
    built_in_fail = rule_name == "built-in:image-or-config" and action == FailureAction.FAIL_JOB
    if built_in_fail and failure.role_has_run:
        return FailureAction.REPORT
    return action


def _for_role(action: FailureAction, role: RoleName) -> FailureAction:
    trainer_restart = action in (FailureAction.RESTART_POD, FailureAction.RESTART_ROLE)
    if role == RoleName.TRAINER and trainer_restart:
        return FailureAction.RESTART_TRAINER_GANG
    return action


def _target_key(plan: _Plan) -> str:
    if plan.action == FailureAction.RESTART_POD and plan.failure.target:
        return plan.failure.target
    return plan.failure.role.value


def _cooldown(plan: _Plan, history: _History, context: PolicyContext) -> Decision | None:
    cooldown = context.cooldowns.get(plan.failure.reason)
    if cooldown is None:
        return None
    key = _target_key(plan)
    last = history.last_restart(key, context.last_restart_at)
    if last is None or (history.now - last).total_seconds() >= cooldown:
        return None
    since = format_duration((history.now - last).total_seconds())
    note = (
        f"ignored: {key} was restarted {since} ago, within its {format_duration(cooldown)} cooldown"
    )
    ignored = replace(plan, action=FailureAction.IGNORE, counts=False)
    return _decision(ignored, 0.0, "", override=note)


def _escalate(plan: _Plan, history: _History) -> _Plan:
    failure = plan.failure
    window = format_duration(history.window)
    if plan.action == FailureAction.RESTART_POD and failure.target:
        pod_restarts = history.pod_restarts(failure.role, failure.target)
        if pod_restarts >= ESCALATE_POD_AFTER:
            note = f"pod {failure.target} already restarted {pod_restarts} times in {window}"
            plan = plan.escalate(FailureAction.RESTART_ROLE, note)
    if plan.action == FailureAction.RESTART_ROLE:
        role_restarts = history.role_restarts(failure.role)
        if role_restarts >= ESCALATE_ROLE_AFTER:
            note = f"role {failure.role} already restarted {role_restarts} times in {window}"
            plan = replace(plan.escalate(FailureAction.FAIL_JOB, note), counts=False)
    return plan


def _trailing_run(steps: Sequence[int | None], step: int | None) -> int:
    run = 0
    for resumed in reversed(steps):
        if resumed != step:
            break
        run += 1
    return run


def _check_progress(plan: _Plan, policy: FailurePolicy, context: PolicyContext) -> _Plan:
    steps = context.resumed_from_steps
    if plan.action != FailureAction.RESTART_TRAINER_GANG or not steps:
        return plan
    step = context.next_resume_step if context.next_resume_step is not None else steps[-1]
    run = _trailing_run(steps, step)
    if run < policy.no_progress_restarts:
        return plan
    where = f"step {step}" if step is not None else "scratch"
    note = f"no progress: the last {run} gang restarts all resumed from {where}"
    return replace(plan.escalate(FailureAction.FAIL_JOB, note), counts=False)


def _check_budget(plan: _Plan, policy: FailurePolicy, history: _History) -> _Plan:
    used = len(history.counted_at)
    if not plan.counts or plan.action not in RESTART_ACTIONS or used < policy.max_restarts:
        return plan
    note = (
        f"restart budget exhausted: {used} of {policy.max_restarts} restarts in "
        f"{format_duration(history.window)}"
    )
    return replace(plan.escalate(FailureAction.FAIL_JOB, note), counts=False)


def backoff_seconds(counted_in_window: int, initial: float, maximum: float) -> float:
    """The backoff before a restart with `counted_in_window` counted restarts before it."""
    if counted_in_window <= 0:
        return 0.0
    return min(initial * 2.0 ** min(counted_in_window - 1, 64), maximum)


def _backoff(plan: _Plan, policy: FailurePolicy, history: _History) -> float:
    if not plan.counts or not history.counted_at:
        return 0.0
    backoff = backoff_seconds(
        len(history.counted_at),
        parse_duration(policy.backoff.initial),
        parse_duration(policy.backoff.max),
    )
    elapsed = (history.now - history.counted_at[-1]).total_seconds()
    return max(0.0, backoff - elapsed)


def _budget_note(plan: _Plan, policy: FailurePolicy, history: _History, delay: float) -> str:
    if not plan.counts:
        return " (not counted towards maxRestarts)"
    used = len(history.counted_at) + 1
    wait = f" after {format_duration(delay)} backoff" if delay > 0 else ""
    return f"{wait} ({used} of {policy.max_restarts} restarts in {format_duration(history.window)})"


def _phrase(plan: _Plan) -> str:
    failure = plan.failure
    match plan.action:
        case FailureAction.RESTART_POD:
            return f"restart pod {failure.target}" if failure.target else "restart pod"
        case FailureAction.RESTART_ROLE:
            return f"restart role {failure.role}"
        case FailureAction.RESTART_TRAINER_GANG:
            return "gang-restart the trainer from its latest checkpoint"
        case FailureAction.FAIL_JOB:
            return "fail the job"
        case FailureAction.REPORT:
            return "report"
        case _:
            return "ignore"


def _decision(plan: _Plan, delay: float, suffix: str, override: str = "") -> Decision:
    failure = plan.failure
    what = override or _phrase(plan) + suffix
    if plan.note and not override:
        what = f"{plan.note}: {what}"
    prefix = f"{failure.reason}: "
    tail = f"; {what}"
    room = max(0, MESSAGE_MAX_LENGTH - len(prefix) - len(tail))
    evidence = sanitize_message(failure.message, MESSAGE_MAX_LENGTH)
    if len(evidence) > room:
        evidence = evidence[: max(0, room - 3)] + "..."
    message = (prefix + (evidence or "no evidence") + tail)[:MESSAGE_MAX_LENGTH]
    return Decision(
        action=plan.action,
        reason=failure.reason,
        role=failure.role,
        target=failure.target,
        counts=plan.counts and plan.action in RESTART_ACTIONS,
        delay_seconds=delay,
        message=message,
        escalated_from=plan.escalated_from,
        rule=plan.rule,
    )


def record_restart(
    ledger: RestartsStatus | None, decision: Decision, now: datetime, policy: FailurePolicy
) -> RestartsStatus:
    """The ledger after carrying out `decision` at `now`; unchanged unless it restarts. Bounded:
    countedAt keeps the window (at most MAX_COUNTED_AT), recent the newest MAX_RECENT_RESTARTS."""
    ledger = ledger or RestartsStatus()
    if not decision.restarts:
        return ledger
    now = _utc(now)
    since = now - timedelta(seconds=parse_duration(policy.window))
    counted_at = sorted(t for t in map(_utc, ledger.counted_at) if t > since)
    if decision.counts:
        counted_at.append(now)
    by_reason = dict(ledger.by_reason)
    by_reason[decision.reason.value] = by_reason.get(decision.reason.value, 0) + 1
    return RestartsStatus(
        total=ledger.total + 1,
        counted=ledger.counted + (1 if decision.counts else 0),
        counted_at=counted_at[-MAX_COUNTED_AT:],
        by_reason=by_reason,
        recent=_append_bounded(ledger.recent, _record(decision, now), MAX_RECENT_RESTARTS),
    )


def _record(decision: Decision, now: datetime) -> RestartRecord:
    pod = decision.target if decision.action == FailureAction.RESTART_POD else None
    return RestartRecord(
        time=now,
        role=decision.role,
        pod=pod,
        reason=decision.reason,
        action=decision.action,
        counted=decision.counts,
        message=decision.message,
    )


def _append_bounded(
    records: Iterable[RestartRecord], record: RestartRecord, limit: int
) -> list[RestartRecord]:
    return [*records, record][-limit:]
