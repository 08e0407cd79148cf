"""The failure policy: every rule path, the windowed budget, backoff, escalation, no-progress,
cooldowns, infrastructure restarts, and the bounded ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rljob.api.spec import FailurePolicy, Health
from rljob.api.status import MESSAGE_MAX_LENGTH, RestartRecord, RestartsStatus
from rljob.reconcile.policy import (
    Decision,
    Failure,
    PolicyContext,
    backoff_seconds,
    choose_action,
    cooldowns_from_health,
    record_restart,
)
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName

A = FailureAction
R = FailureReason
TRAINER, ROLLOUT, VERIFIER, REFERENCE = (
    RoleName.TRAINER,
    RoleName.ROLLOUT,
    RoleName.VERIFIER,
    RoleName.REFERENCE,
)
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
DEFAULT = FailurePolicy()
FLEET_IN_TURN = {"onReasons": ["FleetKVCacheFragmentation"], "action": "RestartRoleInTurn"}


def policy(**fields: Any) -> FailurePolicy:
    return FailurePolicy.model_validate(fields)


def failure(
    reason: FailureReason,
    role: RoleName = ROLLOUT,
    target: str | None = "pod-0",
    exit_code: int | None = None,
    **fields: Any,
) -> Failure:
    return Failure(reason, role, target, exit_code, fields.pop("message", "evidence"), **fields)


DEFAULT_CASES = [
    pytest.param(failure(R.NCCL_TIMEOUT, TRAINER, exit_code=1), A.RESTART_TRAINER_GANG, True,
                 id="trainer-nccl-timeout-gang"),
    pytest.param(failure(R.TRAINER_STALLED, TRAINER, None), A.RESTART_TRAINER_GANG, True,
                 id="trainer-stalled-gang"),
    pytest.param(failure(R.OOM_KILLED, TRAINER, exit_code=137), A.RESTART_TRAINER_GANG, True,
                 id="trainer-oom-gang"),
    pytest.param(failure(R.CONTAINER_FAILED, TRAINER, exit_code=1), A.RESTART_TRAINER_GANG, True,
                 id="trainer-failed-rank-gang"),
    pytest.param(failure(R.KV_CACHE_DRIFT), A.RESTART_POD, True, id="rollout-drift-pod"),
    pytest.param(failure(R.ENGINE_STALLED), A.RESTART_POD, True, id="rollout-stalled-pod"),
    pytest.param(failure(R.OOM_KILLED, exit_code=137), A.RESTART_POD, True, id="rollout-oom-pod"),
    pytest.param(failure(R.CRASH_LOOP, VERIFIER), A.RESTART_POD, True, id="verifier-crash-pod"),
    pytest.param(failure(R.CRASH_LOOP, REFERENCE), A.RESTART_POD, True, id="reference-crash-pod"),
    pytest.param(failure(R.VERIFIER_SLOW, VERIFIER), A.REPORT, False,
                 id="verifier-slow-without-fast-peers-reports"),
    pytest.param(failure(R.VERIFIER_SLOW, VERIFIER, among_fast_peers=True), A.RESTART_POD, True,
                 id="verifier-slow-among-fast-peers-restarts-alone"),
    pytest.param(failure(R.PREEMPTED), A.RESTART_POD, False, id="preempted-not-counted"),
    pytest.param(failure(R.EVICTED, REFERENCE), A.RESTART_POD, False, id="evicted-not-counted"),
    pytest.param(failure(R.NODE_LOST, TRAINER), A.RESTART_TRAINER_GANG, False,
                 id="trainer-node-lost-gang-not-counted"),
    pytest.param(failure(R.IMAGE_PULL_FAILED, role_has_run=False), A.FAIL_JOB, False,
                 id="image-pull-before-first-run-fails"),
    pytest.param(failure(R.IMAGE_PULL_FAILED, role_has_run=True), A.REPORT, False,
                 id="image-pull-after-running-reports"),
    pytest.param(failure(R.CONFIG_ERROR, TRAINER, role_has_run=False), A.FAIL_JOB, False,
                 id="config-error-before-first-run-fails"),
    pytest.param(failure(R.CONTAINER_FAILED, TRAINER, exit_code=93), A.FAIL_JOB, False,
                 id="exit-93-do-not-requeue-fails"),
    pytest.param(failure(R.NCCL_TIMEOUT, TRAINER, exit_code=93), A.FAIL_JOB, False,
                 id="exit-93-beats-nccl"),
    pytest.param(failure(R.UNSCHEDULABLE, TRAINER), A.REPORT, False, id="unschedulable-report"),
    pytest.param(failure(R.TRAINER_STALLED, ROLLOUT), A.REPORT, False, id="no-rule-matched"),
    pytest.param(failure(R.KV_CACHE_DRIFT, TRAINER, "t-0"), A.REPORT, False,
                 id="gang-engine-drift-reported"),
    pytest.param(failure(R.ENGINE_STALLED, TRAINER, "t-0"), A.REPORT, False,
                 id="gang-engine-stall-reported"),
    pytest.param(failure(R.KV_CACHE_FRAGMENTATION), A.REPORT, False,
                 id="engine-fragmentation-reported"),
    pytest.param(failure(R.FLEET_KV_CACHE_FRAGMENTATION), A.REPORT, False,
                 id="fleet-fragmentation-reported"),
    pytest.param(failure(R.KV_CACHE_FRAGMENTATION, REFERENCE), A.REPORT, False,
                 id="reference-fragmentation-reported"),
    pytest.param(failure(R.KV_CACHE_FRAGMENTATION, TRAINER, "t-0"), A.REPORT, False,
                 id="gang-engine-fragmentation-reported"),
    pytest.param(failure(R.FLEET_KV_CACHE_FRAGMENTATION, TRAINER, "t-0"), A.REPORT, False,
                 id="gang-fleet-fragmentation-reported"),
]  # fmt: skip


@pytest.mark.parametrize(("failed", "action", "counts"), DEFAULT_CASES)
def test_built_in_defaults(failed: Failure, action: FailureAction, counts: bool) -> None:
    decision = choose_action(failed, DEFAULT, RestartsStatus(), NOW)

    assert (decision.action, decision.counts) == (action, counts)
    assert decision.delay_seconds == 0
    assert decision.rule.startswith("built-in:")


@pytest.mark.parametrize(
    ("role", "rule", "says"),
    [
        pytest.param(ROLLOUT, "built-in:new-kv-findings", "a new detector reports by default",
                     id="serving-role"),
        pytest.param(TRAINER, "built-in:engines-in-gang", "a rule on role trainer may restart it",
                     id="engines-in-the-gang"),
    ],
)  # fmt: skip
def test_new_kv_findings_say_which_rule_reported_them(role: RoleName, rule: str, says: str) -> None:
    decision = choose_action(failure(R.FLEET_KV_CACHE_FRAGMENTATION, role), DEFAULT, None, NOW)

    assert (decision.action, decision.rule) == (A.REPORT, rule)
    assert says in decision.message


@pytest.mark.parametrize(
    ("among_fast_peers", "action", "says"),
    [
        pytest.param(True, A.RESTART_POD, "restart pod pod-0", id="among-fast-peers-restarts"),
        pytest.param(False, A.REPORT, "a restart would not help", id="the-load-reports"),
    ],
)
def test_a_slow_verifier_restarts_only_among_fast_peers(
    among_fast_peers: bool, action: FailureAction, says: str
) -> None:
    slow = failure(R.VERIFIER_SLOW, VERIFIER, among_fast_peers=among_fast_peers)

    decision = choose_action(slow, DEFAULT, None, NOW)

    assert (decision.action, decision.rule) == (action, "built-in:slow-verifier")
    assert says in decision.message


USER_RULES = [
    {"roles": ["rollout"], "onReasons": ["OOMKilled"], "action": "Ignore"},
    {"roles": ["verifier"], "onReasons": ["VerifierSlow"], "action": "RestartPod"},
    {"onExitCodes": [42], "action": "FailJob"},
    {"roles": ["trainer"], "onReasons": ["CrashLoop"], "action": "RestartPod"},
    {"roles": ["reference"], "onReasons": ["CrashLoop"], "action": "RestartRole"},
    {"roles": ["rollout"], "onReasons": ["Preempted"], "action": "RestartPod"},
    {"roles": ["trainer"], "onReasons": ["KVCacheDrift"], "action": "RestartTrainerGang"},
    {"onReasons": ["FleetKVCacheFragmentation"], "action": "RestartRoleInTurn"},
    {"roles": ["rollout"], "onReasons": ["KVCacheFragmentation"], "action": "RestartPod"},
]

USER_CASES = [
    pytest.param(failure(R.OOM_KILLED), A.IGNORE, "failurePolicy.rules[0]",
                 id="user-rule-first"),
    pytest.param(failure(R.OOM_KILLED, TRAINER), A.RESTART_TRAINER_GANG,
                 "built-in:trainer-failures", id="role-scoped-rule-skips-other-roles"),
    pytest.param(failure(R.VERIFIER_SLOW, VERIFIER), A.RESTART_POD, "failurePolicy.rules[1]",
                 id="restart-slow-verifiers"),
    pytest.param(failure(R.CONTAINER_FAILED, TRAINER, exit_code=42), A.FAIL_JOB,
                 "failurePolicy.rules[2]", id="exit-code-rule"),
    pytest.param(failure(R.CONTAINER_FAILED, TRAINER, exit_code=1), A.RESTART_TRAINER_GANG,
                 "built-in:trainer-failures", id="other-exit-code-falls-through"),
    pytest.param(failure(R.CRASH_LOOP, TRAINER), A.RESTART_TRAINER_GANG, "failurePolicy.rules[3]",
                 id="trainer-restart-pod-becomes-gang"),
    pytest.param(failure(R.CRASH_LOOP, REFERENCE), A.RESTART_ROLE, "failurePolicy.rules[4]",
                 id="restart-role"),
    pytest.param(failure(R.KV_CACHE_DRIFT, TRAINER, "t-0"), A.RESTART_TRAINER_GANG,
                 "failurePolicy.rules[6]", id="gang-engine-drift-restarts-the-gang-by-rule"),
    pytest.param(failure(R.ENGINE_STALLED, TRAINER, "t-0"), A.REPORT,
                 "built-in:engines-in-gang", id="gang-engine-stall-still-reported"),
    pytest.param(failure(R.FLEET_KV_CACHE_FRAGMENTATION), A.RESTART_ROLE_IN_TURN,
                 "failurePolicy.rules[7]", id="fleet-fragmentation-in-turn-by-rule"),
    pytest.param(failure(R.FLEET_KV_CACHE_FRAGMENTATION, VERIFIER), A.RESTART_ROLE_IN_TURN,
                 "failurePolicy.rules[7]", id="in-turn-rule-without-roles-any-serving-role"),
    pytest.param(failure(R.FLEET_KV_CACHE_FRAGMENTATION, TRAINER, "t-0"), A.REPORT,
                 "built-in:engines-in-gang", id="in-turn-rule-never-matches-the-trainer"),
    pytest.param(failure(R.KV_CACHE_FRAGMENTATION), A.RESTART_POD, "failurePolicy.rules[8]",
                 id="engine-fragmentation-restarts-the-pod-by-rule"),
    pytest.param(failure(R.KV_CACHE_FRAGMENTATION, REFERENCE), A.REPORT,
                 "built-in:new-kv-findings", id="other-roles-still-reported"),
]  # fmt: skip


@pytest.mark.parametrize(("failed", "action", "rule"), USER_CASES)
def test_user_rules_come_first(failed: Failure, action: FailureAction, rule: str) -> None:
    decision = choose_action(failed, policy(rules=USER_RULES), RestartsStatus(), NOW)

    assert (decision.action, decision.rule) == (action, rule)


def test_a_user_rule_for_infrastructure_counts_unless_it_says_otherwise() -> None:
    decision = choose_action(failure(R.PREEMPTED), policy(rules=USER_RULES), RestartsStatus(), NOW)

    assert decision.counts


def ledger(*ages_minutes: float, **fields: Any) -> RestartsStatus:
    return RestartsStatus(
        counted_at=[NOW - timedelta(minutes=m) for m in sorted(ages_minutes, reverse=True)],
        **fields,
    )


def test_an_exhausted_budget_fails_the_job() -> None:
    decision = choose_action(
        failure(R.KV_CACHE_DRIFT), policy(maxRestarts=3), ledger(50, 40, 30), NOW
    )

    assert decision.action == A.FAIL_JOB
    assert decision.escalated_from == A.RESTART_POD
    assert not decision.counts
    assert "restart budget exhausted: 3 of 3 restarts in 24h" in decision.message


def test_restarts_outside_the_window_do_not_use_the_budget() -> None:
    old = ledger(25 * 60, 26 * 60, 27 * 60)

    decision = choose_action(failure(R.KV_CACHE_DRIFT), policy(maxRestarts=3), old, NOW)

    assert decision.action == A.RESTART_POD
    assert decision.message.endswith("(1 of 3 restarts in 24h)")


def test_infrastructure_restarts_go_on_when_the_budget_is_exhausted() -> None:
    decision = choose_action(failure(R.NODE_LOST), policy(maxRestarts=1), ledger(5), NOW)

    assert (decision.action, decision.counts) == (A.RESTART_POD, False)
    assert decision.delay_seconds == 0
    assert "not counted towards maxRestarts" in decision.message


def test_zero_max_restarts_fails_on_the_first_counted_failure() -> None:
    decision = choose_action(failure(R.OOM_KILLED), policy(maxRestarts=0), RestartsStatus(), NOW)

    assert decision.action == A.FAIL_JOB


def test_backoff_doubles_from_the_second_restart_in_the_window() -> None:
    rules = policy(maxRestarts=20, backoff={"initial": "30s", "max": "5m"})
    status = RestartsStatus()
    delays = []
    for _ in range(8):
        decision = choose_action(failure(R.NCCL_TIMEOUT, TRAINER), rules, status, NOW)
        delays.append(decision.delay_seconds)
        status = record_restart(status, decision, NOW, rules)

    assert delays == [0, 30, 60, 120, 240, 300, 300, 300]


def test_backoff_counts_from_the_previous_counted_restart() -> None:
    rules = policy(backoff={"initial": "1m", "max": "30m"})

    soon = choose_action(failure(R.CRASH_LOOP), rules, ledger(1.5, 0.5), NOW)
    later = choose_action(failure(R.CRASH_LOOP), rules, ledger(20, 10), NOW)

    assert soon.delay_seconds == pytest.approx(90)
    assert "after 1m30s backoff" in soon.message
    assert later.delay_seconds == 0


@pytest.mark.parametrize(
    ("count", "expected"), [(0, 0), (1, 30), (2, 60), (3, 120), (10, 1800), (1000, 1800)]
)
def test_backoff_seconds(count: int, expected: float) -> None:
    assert backoff_seconds(count, 30, 1800) == expected


def records(*entries: tuple[RoleName, str | None, FailureAction, float]) -> list[RestartRecord]:
    return [
        RestartRecord(
            time=NOW - timedelta(minutes=age),
            role=role,
            pod=pod,
            reason=R.OOM_KILLED,
            action=action,
        )
        for role, pod, action, age in entries
    ]


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param(["pod-0", "pod-0", "pod-0"], id="same-pod"),
        # A Deployment replaces each deleted pod under a new name.
        pytest.param(["pod-a", "pod-b", "pod-c"], id="replacements-renamed"),
    ],
)
def test_pod_restarts_of_a_role_three_times_in_the_window_escalate_to_the_role(
    pods: list[str],
) -> None:
    history = RestartsStatus(
        recent=records(
            *[
                (ROLLOUT, pod, A.RESTART_POD, age)
                for pod, age in zip(pods, (90, 60, 30), strict=True)
            ]
        )
    )

    decision = choose_action(failure(R.OOM_KILLED, target="pod-d"), DEFAULT, history, NOW)

    assert decision.action == A.RESTART_ROLE
    assert decision.escalated_from == A.RESTART_POD
    expected = "rollout pods already restarted 3 times for OOMKilled in 24h: restart role rollout"
    assert expected in decision.message


def test_pod_restarts_of_other_roles_reasons_or_outside_the_window_do_not_escalate() -> None:
    history = RestartsStatus(
        recent=[
            *records(
                (VERIFIER, "pod-1", A.RESTART_POD, 30),
                (ROLLOUT, "pod-0", A.RESTART_POD, 25 * 60),
                (ROLLOUT, "pod-0", A.RESTART_POD, 10),
            ),
            RestartRecord(
                time=NOW, role=ROLLOUT, pod="pod-2", reason=R.CRASH_LOOP, action=A.RESTART_POD
            ),
        ]
    )

    assert choose_action(failure(R.OOM_KILLED), DEFAULT, history, NOW).action == A.RESTART_POD


def test_a_role_restarted_three_times_in_the_window_escalates_to_the_job() -> None:
    history = RestartsStatus(
        recent=records(
            *[(ROLLOUT, "pod-0", A.RESTART_POD, age) for age in (90, 60, 30)],
            *[(ROLLOUT, None, A.RESTART_ROLE, age) for age in (80, 50, 20)],
        )
    )

    decision = choose_action(failure(R.OOM_KILLED), DEFAULT, history, NOW)

    assert decision.action == A.FAIL_JOB
    assert decision.escalated_from == A.RESTART_POD
    assert "role rollout already restarted 3 times in 24h" in decision.message


def test_in_turn_restarts_neither_escalate_nor_count_as_role_restarts() -> None:
    history = RestartsStatus(
        recent=records(*[(ROLLOUT, None, A.RESTART_ROLE_IN_TURN, age) for age in (300, 200, 100)])
    )
    in_turn = policy(rules=[FLEET_IN_TURN])

    fleet = choose_action(failure(R.FLEET_KV_CACHE_FRAGMENTATION), in_turn, history, NOW)
    roll = policy(rules=[{"roles": ["rollout"], "onReasons": ["OOMKilled"],
                          "action": "RestartRole"}])  # fmt: skip
    role = choose_action(failure(R.OOM_KILLED), roll, history, NOW)

    assert fleet.action == A.RESTART_ROLE_IN_TURN
    assert fleet.counts, "one budget entry per in-turn restart"
    assert role.action == A.RESTART_ROLE, "in-turn restarts do not escalate a roll to FailJob"


def test_trainer_gang_restarts_do_not_escalate() -> None:
    history = RestartsStatus(
        recent=records(*[(TRAINER, None, A.RESTART_TRAINER_GANG, age) for age in (90, 60, 30)])
    )

    decision = choose_action(failure(R.NCCL_TIMEOUT, TRAINER), DEFAULT, history, NOW)

    assert decision.action == A.RESTART_TRAINER_GANG


NO_PROGRESS_CASES = [
    pytest.param((1200, 1200, 1200), 1200, A.FAIL_JOB, id="three-resumes-from-the-same-step"),
    pytest.param((1200, 1200, 1200), None, A.FAIL_JOB, id="next-step-unknown-taken-as-last"),
    pytest.param((1000, 1200, 1200), 1200, A.RESTART_TRAINER_GANG, id="two-resumes-allowed"),
    pytest.param((1200, 1200, 1200), 1300, A.RESTART_TRAINER_GANG, id="newer-checkpoint"),
    pytest.param((None, None, None), None, A.FAIL_JOB, id="three-restarts-from-scratch"),
    pytest.param((), None, A.RESTART_TRAINER_GANG, id="first-restart"),
]


@pytest.mark.parametrize(("steps", "next_step", "action"), NO_PROGRESS_CASES)
def test_no_progress_restarts_fail_the_job(
    steps: tuple[int | None, ...], next_step: int | None, action: FailureAction
) -> None:
    context = PolicyContext(resumed_from_steps=steps, next_resume_step=next_step)

    decision = choose_action(
        failure(R.NCCL_TIMEOUT, TRAINER), DEFAULT, RestartsStatus(), NOW, context
    )

    assert decision.action == action
    if action == A.FAIL_JOB:
        assert "no progress: the last 3 gang restarts all resumed from" in decision.message
        assert decision.escalated_from == A.RESTART_TRAINER_GANG


COOLDOWNS = {R.KV_CACHE_DRIFT: 3600.0, R.FLEET_KV_CACHE_FRAGMENTATION: 3600.0}
IN_TURN = policy(rules=[FLEET_IN_TURN])

COOLDOWN_CASES = [
    pytest.param(
        RestartsStatus(recent=records((ROLLOUT, "pod-0", A.RESTART_POD, 10))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.KV_CACHE_DRIFT,
        A.IGNORE,
        id="restarted-10m-ago-per-ledger",
    ),
    pytest.param(
        RestartsStatus(),
        PolicyContext(cooldowns=COOLDOWNS, last_restart_at={"pod-0": NOW - timedelta(minutes=5)}),
        R.KV_CACHE_DRIFT,
        A.IGNORE,
        id="restarted-5m-ago-per-context",
    ),
    pytest.param(
        RestartsStatus(recent=records((ROLLOUT, "pod-0", A.RESTART_POD, 120))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.KV_CACHE_DRIFT,
        A.RESTART_POD,
        id="cooldown-over",
    ),
    pytest.param(
        RestartsStatus(recent=records((ROLLOUT, "pod-1", A.RESTART_POD, 10))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.KV_CACHE_DRIFT,
        A.RESTART_POD,
        id="other-pod",
    ),
    pytest.param(
        RestartsStatus(recent=records((ROLLOUT, "pod-0", A.RESTART_POD, 10))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.OOM_KILLED,
        A.RESTART_POD,
        id="failures-without-cooldown",
    ),
    pytest.param(
        RestartsStatus(recent=records((ROLLOUT, None, A.RESTART_ROLE_IN_TURN, 30))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.FLEET_KV_CACHE_FRAGMENTATION,
        A.IGNORE,
        id="role-restarted-in-turn-30m-ago",
    ),
    pytest.param(
        RestartsStatus(recent=records((ROLLOUT, None, A.RESTART_ROLE_IN_TURN, 61))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.FLEET_KV_CACHE_FRAGMENTATION,
        A.RESTART_ROLE_IN_TURN,
        id="in-turn-cooldown-over",
    ),
    pytest.param(
        RestartsStatus(recent=records((VERIFIER, None, A.RESTART_ROLE_IN_TURN, 30))),
        PolicyContext(cooldowns=COOLDOWNS),
        R.FLEET_KV_CACHE_FRAGMENTATION,
        A.RESTART_ROLE_IN_TURN,
        id="other-role-restarted-in-turn",
    ),
]


@pytest.mark.parametrize(("history", "context", "reason", "action"), COOLDOWN_CASES)
def test_cooldowns_ignore_repeated_metric_findings(
    history: RestartsStatus, context: PolicyContext, reason: FailureReason, action: FailureAction
) -> None:
    rules = IN_TURN if reason == R.FLEET_KV_CACHE_FRAGMENTATION else DEFAULT
    decision = choose_action(failure(reason), rules, history, NOW, context)

    assert decision.action == action
    if action == A.IGNORE:
        assert "cooldown" in decision.message
        assert not decision.counts


def test_cooldowns_come_from_the_health_spec() -> None:
    assert cooldowns_from_health(Health()) == {
        R.KV_CACHE_DRIFT: 3600.0,
        R.KV_CACHE_FRAGMENTATION: 3600.0,
        R.FLEET_KV_CACHE_FRAGMENTATION: 3600.0,
        R.ENGINE_STALLED: 300.0,
        R.KV_CACHE_LEAK: 300.0,
        R.PREFIX_CACHE_COLLAPSE: 3600.0,
        R.ENGINE_MEMORY_GROWTH: 3600.0,
        R.TRAINER_STALLED: 1800.0,
        R.VERIFIER_SLOW: 600.0,
    }


def test_the_decision_message_tells_the_story() -> None:
    evidence = (
        "rollout-3 612 tok/s vs baseline 840 (-27%) and peers 835 over 30m while saturated, "
        "prefix hit rate 0.71 -> 0.42"
    )

    decision = choose_action(
        failure(R.KV_CACHE_DRIFT, target="rollout-3", message=evidence),
        DEFAULT,
        ledger(300, 200),
        NOW,
    )

    assert decision.message == (
        f"KVCacheDrift: {evidence}; restart pod rollout-3 (3 of 10 restarts in 24h)"
    )


def test_huge_untrusted_evidence_is_cut_and_the_decision_survives() -> None:
    decision = choose_action(
        failure(R.CRASH_LOOP, message="\x1b" + "x" * 10_000), DEFAULT, None, NOW
    )

    assert len(decision.message) <= MESSAGE_MAX_LENGTH
    assert decision.message.endswith("; restart pod pod-0 (1 of 10 restarts in 24h)")
    assert "\x1b" not in decision.message


def test_naive_ledger_times_are_read_as_utc() -> None:
    naive = RestartsStatus(counted_at=[datetime(2026, 5, 1, 11, 59, 30)])

    decision = choose_action(failure(R.CRASH_LOOP), DEFAULT, naive, NOW)

    assert decision.delay_seconds == 0  # first backoff step is 30s, 30s elapsed


def decision_for(action: FailureAction, counts: bool = True, target: str = "pod-0") -> Decision:
    return Decision(action, R.OOM_KILLED, ROLLOUT, target, counts, 0.0, "OOMKilled: x; restart")


def test_recording_a_restart_updates_the_ledger() -> None:
    before = ledger(25 * 60, 30, by_reason={"OOMKilled": 4}, total=5, counted=5)

    after = record_restart(before, decision_for(A.RESTART_POD), NOW, DEFAULT)

    assert after.total == 6
    assert after.counted == 6
    assert after.counted_at == [NOW - timedelta(minutes=30), NOW]
    assert after.by_reason == {"OOMKilled": 5}
    assert after.recent[-1].pod == "pod-0"
    assert after.recent[-1].action == A.RESTART_POD
    assert before.total == 5


def test_an_uncounted_restart_is_recorded_but_not_counted() -> None:
    after = record_restart(None, decision_for(A.RESTART_POD, counts=False), NOW, DEFAULT)

    assert (after.total, after.counted, after.counted_at) == (1, 0, [])
    assert after.recent[0].counted is False


@pytest.mark.parametrize("action", [A.FAIL_JOB, A.REPORT, A.IGNORE])
def test_decisions_that_restart_nothing_leave_the_ledger_alone(action: FailureAction) -> None:
    before = ledger(5)

    assert record_restart(before, decision_for(action), NOW, DEFAULT) is before


def test_the_ledger_stays_bounded() -> None:
    rules = policy(window="1h")
    status = RestartsStatus()
    for minute in range(300):
        at = NOW + timedelta(minutes=minute)
        status = record_restart(status, decision_for(A.RESTART_POD), at, rules)

    assert len(status.recent) == 20
    assert status.recent[-1].time == NOW + timedelta(minutes=299)
    assert len(status.counted_at) == 60
    assert status.total == status.counted == 300
    RestartsStatus.model_validate(status.model_dump(by_alias=True))


def test_a_gang_restart_record_names_no_pod() -> None:
    gang = Decision(A.RESTART_TRAINER_GANG, R.NCCL_TIMEOUT, TRAINER, "trainer-a1-0", True, 0, "")

    after = record_restart(None, gang, NOW, DEFAULT)

    assert after.recent[0].pod is None
    assert after.recent[0].role == TRAINER
