"""The failure policy's decision for one failure: rule, cooldown, escalation, progress, budget
and backoff, in the order the rules module's docstring gives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from rljob.api.durations import parse_duration
from rljob.api.spec import FailurePolicy
from rljob.api.status import MESSAGE_MAX_LENGTH, RestartsStatus
from rljob.health.evaluation import format_duration
from rljob.health.termination import sanitize_message
from rljob.reconcile.policy.ledger import History, backoff_seconds, utc
from rljob.reconcile.policy.rules import (
    ESCALATE_POD_AFTER,
    ESCALATE_ROLE_AFTER,
    RESTART_ACTIONS,
    Decision,
    Failure,
    PolicyContext,
    match_rule,
)
from rljob.vocabulary.enums import TRAINER_RESTART_ACTIONS, FailureAction, RoleName

SLOW_VERIFIER_RULE = "built-in:slow-verifier"


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


def choose_action(
    failure: Failure,
    policy: FailurePolicy,
    ledger: RestartsStatus | None,
    now: datetime,
    context: PolicyContext | None = None,
) -> Decision:
    """The action for `failure` under `policy`, given the restart ledger and context at `now`."""
    context = context or PolicyContext()
    now = utc(now)
    rule_name, rule = match_rule(failure, policy.rules)
    action = _for_role(_soften(rule.action, failure, rule_name), failure.role)
    plan = _Plan(failure, action, rule.counts_towards_max and action in RESTART_ACTIONS, rule_name)
    if action not in RESTART_ACTIONS:
        return _decision(plan, 0.0, "")
    window = parse_duration(policy.window)
    history = History.of(ledger or RestartsStatus(), now, window)
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
    if rule_name == SLOW_VERIFIER_RULE and not failure.among_fast_peers:
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


def _cooldown(plan: _Plan, history: History, context: PolicyContext) -> Decision | None:
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


def _escalate(plan: _Plan, history: History) -> _Plan:
    failure = plan.failure
    window = format_duration(history.window)
    if plan.action == FailureAction.RESTART_POD and failure.target:
        pod_restarts = history.pod_restarts(failure.role, failure.reason)
        if pod_restarts >= ESCALATE_POD_AFTER:
            note = (
                f"{failure.role} pods already restarted {pod_restarts} times for "
                f"{failure.reason} in {window}"
            )
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
    if plan.action not in TRAINER_RESTART_ACTIONS or not steps:
        return plan
    step = context.next_resume_step if context.next_resume_step is not None else steps[-1]
    run = _trailing_run(steps, step)
    if run < policy.no_progress_restarts:
        return plan
    where = f"step {step}" if step is not None else "scratch"
    note = f"no progress: the last {run} gang restarts all resumed from {where}"
    return replace(plan.escalate(FailureAction.FAIL_JOB, note), counts=False)


def _check_budget(plan: _Plan, policy: FailurePolicy, history: History) -> _Plan:
    used = len(history.counted_at)
    if not plan.counts or plan.action not in RESTART_ACTIONS or used < policy.max_restarts:
        return plan
    note = (
        f"restart budget exhausted: {used} of {policy.max_restarts} restarts in "
        f"{format_duration(history.window)}"
    )
    return replace(plan.escalate(FailureAction.FAIL_JOB, note), counts=False)


def _backoff(plan: _Plan, policy: FailurePolicy, history: History) -> float:
    if not plan.counts or not history.counted_at:
        return 0.0
    backoff = backoff_seconds(
        len(history.counted_at),
        parse_duration(policy.backoff.initial),
        parse_duration(policy.backoff.max),
    )
    elapsed = (history.now - history.counted_at[-1]).total_seconds()
    return max(0.0, backoff - elapsed)


def _budget_note(plan: _Plan, policy: FailurePolicy, history: History, delay: float) -> str:
    if not plan.counts:
        return " (not counted towards maxRestarts)"
    used = len(history.counted_at) + 1
    wait = f" after {format_duration(delay)} backoff" if delay > 0 else ""
    return f"{wait} ({used} of {policy.max_restarts} restarts in {format_duration(history.window)})"


# What a decision says it does, for the actions whose words do not name the target.
_PHRASES = {
    FailureAction.RESTART_TRAINER_GANG: "gang-restart the trainer from its latest checkpoint",
    FailureAction.RESTART_JOB: (
        "restart the whole job: the trainer gang from its latest checkpoint and every serving "
        "role rolled"
    ),
    FailureAction.FAIL_JOB: "fail the job",
    FailureAction.SUSPEND: (
        "suspend the job until rljob.io/resume-request (not counted as a restart)"
    ),
    FailureAction.REPORT: "report",
}
# A built-in rule that reports says why, and what a user rule may do instead.
_REPORT_PHRASES = {
    "built-in:engines-in-gang": (
        "report (an engine in the trainer gang; a rule on role trainer may restart it)"
    ),
    "built-in:new-kv-findings": (
        "report (a new detector reports by default; a rule may restart on it)"
    ),
    SLOW_VERIFIER_RULE: (
        "report (not one slow verifier among fast ones: a restart would not help, or no peer "
        "tells; a user rule may restart it)"
    ),
    "built-in:rl-canaries": "report (an RL canary; a user rule with action Suspend stops the run)",
}


def _phrase(plan: _Plan) -> str:
    failure = plan.failure
    match plan.action:
        case FailureAction.RESTART_POD:
            return f"restart pod {failure.target}" if failure.target else "restart pod"
        case FailureAction.RESTART_ROLE:
            return f"restart role {failure.role}"
        case FailureAction.RESTART_ROLE_IN_TURN:
            return f"restart role {failure.role} in turn, oldest pod first"
        case FailureAction.REPORT if plan.rule in _REPORT_PHRASES:
            return _REPORT_PHRASES[plan.rule]
    return _PHRASES.get(plan.action, "ignore")


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
