"""The failure policy's Suspend and the rljob.io/resume-request resume, decided pass by pass:
kept in status (spec.suspend stays the user's), the pods stopped as for spec.suspend, never a
restart, applied once, ended once per nonce."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rljob.api import ConditionType, FailureAction, FailureReason, JobPhase, RoleName
from rljob.api.spec import FailurePolicy
from rljob.health.evaluation import finding
from rljob.reconcile.attempt_start import attempt_to_start
from rljob.reconcile.conditions import find
from rljob.reconcile.decide import Decision
from rljob.reconcile.lifecycle import SUSPENDED_END
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.policy import Failure, choose_action
from rljob.reconcile.steps import DeleteObject, PostEvent
from tests.unit.reconcile.test_decide import decide_now
from tests.unit.reconcile.test_decide import running_world as running_decided_world
from tests.unit.reconcile.world import T0, World

REWARD_HACKING = FailureReason.REWARD_HACKING_SUSPECTED
EVIDENCE = "train reward +0.08/h over 2h while eval reward +0.001/h"
SUSPEND_RULE = {"onReasons": ["RewardHackingSuspected"], "action": "Suspend"}


def running_world(*rules: dict[str, Any]) -> World:
    """Without checkpoints, so that attempts start without the store's answer."""
    return running_decided_world(checkpoint=None, failurePolicy={"rules": list(rules)})


def canary(reason: FailureReason = REWARD_HACKING) -> Any:
    return finding("rl_canaries", "trainer", reason, EVIDENCE, {})


def carry_out(w: World, decision: Decision) -> None:
    """The journal write landed and the steps ran: deleted children start going, applied ones
    exist."""
    w.body["status"] = decision.plan.status.model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    for doomed in decision.plan.delete:
        key = (doomed.kind, doomed.name)
        w.children[key] = dataclasses.replace(w.children[key], deleting=True)
    for child in decision.plan.apply:
        w._apply(child.kind, child.name, child.role, child.spec_hash, child.body)
    w.advance(1)


def request_resume(w: World, nonce: str) -> None:
    w.body["metadata"].setdefault("annotations", {})["rljob.io/resume-request"] = nonce


def suspended_by_policy(w: World) -> Decision:
    decision = decide_now(w, findings=(canary(),))
    carry_out(w, decision)
    w.gone()
    return decision


def test_a_suspend_rule_stops_every_pod_in_the_pass_that_journals_it() -> None:
    w = running_world(SUSPEND_RULE)

    decision = decide_now(w, findings=(canary(),))

    status = decision.plan.status
    assert status.suspension is not None
    assert (status.suspension.reason, status.suspension.rule) == (
        REWARD_HACKING,
        "failurePolicy.rules[0]",
    )
    assert EVIDENCE in status.suspension.message
    assert status.phase == JobPhase.SUSPENDED
    condition = find(status.conditions, ConditionType.SUSPENDED.value)
    assert condition is not None and condition.status == "True"
    assert condition.reason == "RewardHackingSuspected"
    assert "rljob.io/resume-request" in condition.message and EVIDENCE in condition.message
    assert decision.consumed == "finding"
    assert w.job.spec.suspend is False, "spec.suspend stays the user's"
    assert status.restarts is not None and status.restarts.total == 0, "no restart"
    (record,) = status.attempts
    assert record.end_reason == SUSPENDED_END
    deleted = {s.name for s in decision.steps if isinstance(s, DeleteObject)}
    assert trainer_job_name(w.name, 1) in deleted
    scaled = {c.name: c.body["spec"]["replicas"] for c in decision.plan.apply}
    assert scaled and set(scaled.values()) == {0}, "every Deployment scaled to 0"
    first = decision.steps[0]
    assert isinstance(first, PostEvent), "said before the pods go"
    assert (first.event.type, first.event.reason) == ("Warning", "PolicySuspended")
    assert "failurePolicy.rules[0]" in first.event.message and EVIDENCE in first.event.message
    assert first.name == f"{w.name}.suspended-{int(status.suspension.suspended_at.timestamp())}"
    assert not [e for e in decision.events if e.reason == "Suspended"], "one Event, the policy's"


@pytest.mark.parametrize(
    "reason",
    [
        pytest.param(REWARD_HACKING, id="reward-hacking"),
        pytest.param(FailureReason.THROUGHPUT_REGRESSION, id="throughput-regression"),
    ],
)
def test_the_rl_canaries_report_by_default(reason: FailureReason) -> None:
    w = running_world()

    decision = decide_now(w, findings=(canary(reason),))

    assert decision.plan.status.suspension is None
    assert decision.plan.status.phase == JobPhase.RUNNING
    (said,) = [event for _, event in decision.reports if event.reason == reason.value]
    assert "a user rule with action Suspend stops the run" in said.message


def test_a_user_rule_wins_over_the_built_in_rl_canaries_rule() -> None:
    policy = FailurePolicy.model_validate({"rules": [SUSPEND_RULE]})
    failure = Failure(REWARD_HACKING, RoleName.TRAINER, message=EVIDENCE)

    chosen = choose_action(failure, policy, None, T0)
    default = choose_action(failure, FailurePolicy(), None, T0)

    assert (chosen.action, chosen.rule, chosen.counts) == (
        FailureAction.SUSPEND,
        "failurePolicy.rules[0]",
        False,
    )
    assert not chosen.restarts
    assert (default.action, default.rule) == (FailureAction.REPORT, "built-in:rl-canaries")


def test_a_second_finding_while_suspended_does_nothing() -> None:
    w = running_world(SUSPEND_RULE, {"onReasons": ["ThroughputRegression"], "action": "Suspend"})
    first = suspended_by_policy(w)
    w.advance(60)

    again = decide_now(w, findings=(canary(FailureReason.THROUGHPUT_REGRESSION),))

    assert again.plan.status.suspension == first.plan.status.suspension
    assert not again.watch, "a suspended job is not watched"
    assert again.consumed == ""


def test_suspend_waits_for_a_gang_restart_in_flight() -> None:
    w = running_world(SUSPEND_RULE)
    w.fail_rank(1, 0, exit_code=1, reason="Error", message="NCCL watchdog timeout")
    w.finish_job(1, failed=True)
    carry_out(w, decide_now(w))
    assert w.job.status.in_flight is not None

    waiting = decide_now(w, findings=(canary(),))

    assert waiting.plan.status.suspension is None, "the gang restart completes first"
    assert waiting.consumed == "", "the finding stays pending"


def test_a_trainer_failure_the_policy_suspends_on_is_not_a_job_failure() -> None:
    w = running_world({"onReasons": ["ContainerFailed"], "action": "Suspend"})
    w.fail_rank(1, 0, exit_code=3, reason="Error", message="reward model diverged")
    w.finish_job(1, failed=True)

    decision = decide_now(w)

    status = decision.plan.status
    assert status.suspension is not None and status.phase == JobPhase.SUSPENDED
    assert status.restarts is not None and status.restarts.total == 0
    assert [r.end_reason for r in status.attempts] == [SUSPENDED_END]
    carry_out(w, decision)
    assert decide_now(w).plan.status.phase == JobPhase.SUSPENDED, "the failed Job is not reread"


def test_a_resume_request_ends_the_suspension_and_starts_the_next_attempt() -> None:
    w = running_world(SUSPEND_RULE)
    suspended_by_policy(w)
    request_resume(w, "1700000000")

    decision = decide_now(w)

    status = decision.plan.status
    assert status.suspension is None
    assert status.last_resume_request is not None
    assert (status.last_resume_request.id, status.last_resume_request.resumed) == (
        "1700000000",
        True,
    )
    assert status.attempt == 2
    assert any(child.kind == "Job" for child in decision.plan.apply), "attempt 2 starts"
    (resumed,) = [e for e in decision.events if e.reason == "Resumed"]
    assert "resume-request=1700000000 ended the policy's suspension" in resumed.message
    assert status.restarts is not None and status.restarts.total == 0
    carry_out(w, decision)
    assert decide_now(w).plan.status.last_resume_request == status.last_resume_request, "once"


def test_a_nonce_handled_while_not_suspended_never_ends_a_later_suspension() -> None:
    w = running_world(SUSPEND_RULE)
    request_resume(w, "early")
    early = decide_now(w)
    carry_out(w, early)
    assert early.plan.status.last_resume_request is not None
    assert early.plan.status.last_resume_request.resumed is False
    (said,) = [e for _, e in early.reports if e.reason == "ResumeRequested"]
    assert "had not suspended" in said.message

    suspended_by_policy(w)
    later = decide_now(w)

    assert later.plan.status.suspension is not None
    assert later.plan.status.phase == JobPhase.SUSPENDED


def test_spec_suspend_keeps_the_job_suspended_when_the_policy_is_resumed() -> None:
    w = running_world(SUSPEND_RULE)
    suspended_by_policy(w)
    w.edit(suspend=True)
    request_resume(w, "n1")

    decision = decide_now(w)

    status = decision.plan.status
    assert status.suspension is None and status.phase == JobPhase.SUSPENDED
    condition = find(status.conditions, ConditionType.SUSPENDED.value)
    assert condition is not None and condition.reason == "Suspended"
    assert "spec.suspend is true" in condition.message
    (said,) = [e for _, e in decision.reports if e.reason == "ResumeRequested"]
    assert "stays suspended" in said.message
    assert not any(child.kind == "Job" for child in decision.plan.apply)


def test_the_suspended_condition_says_which_suspension_holds() -> None:
    w = running_world(SUSPEND_RULE)
    w.edit(suspend=True)
    by_user = decide_now(w)
    carry_out(w, by_user)
    w.gone()
    w.edit(suspend=False)
    by_policy = decide_now(w, findings=(canary(),))
    carry_out(w, by_policy)

    user = find(by_user.plan.status.conditions, ConditionType.SUSPENDED.value)
    policy = find(by_policy.plan.status.conditions, ConditionType.SUSPENDED.value)
    assert user is not None and (user.reason, "policy" in user.message) == ("Suspended", False)
    assert policy is not None and policy.reason == "RewardHackingSuspected"
    assert "suspended by the failure policy (rule failurePolicy.rules[0])" in policy.message


def test_the_store_is_read_for_the_attempt_a_pending_resume_starts() -> None:
    w = running_world(SUSPEND_RULE)
    suspended_by_policy(w)
    assert attempt_to_start(w.job, w.observed, w.now) is None
    request_resume(w, "n1")

    assert attempt_to_start(w.job, w.observed, w.now) == 2


@pytest.mark.parametrize(
    "written",
    [
        pytest.param("resume now", id="a-space"),
        pytest.param("x" * 65, id="too-long"),
        pytest.param("", id="empty"),
    ],
)
def test_a_malformed_nonce_is_said_and_changes_nothing(written: str) -> None:
    w = running_world(SUSPEND_RULE)
    suspended_by_policy(w)
    request_resume(w, written)

    decision = decide_now(w)

    assert decision.plan.status.suspension is not None, "still suspended"
    assert decision.plan.status.last_resume_request is None, "nothing handled"
    (said,) = [e for _, e in decision.reports if e.reason == "ResumeRequested"]
    assert said.type == "Warning" and "is not a nonce" in said.message


def test_a_nonce_set_back_by_a_gitops_resync_never_ends_a_later_suspension() -> None:
    """An older manifest re-applied puts back a nonce handled before the last: not a request."""
    w = running_world(SUSPEND_RULE)
    for nonce in ("first", "second"):
        request_resume(w, nonce)
        carry_out(w, decide_now(w))
    suspended_by_policy(w)
    request_resume(w, "first")

    decision = decide_now(w)

    assert decision.plan.status.suspension is not None
    handled = decision.plan.status.last_resume_request
    assert handled is not None and (handled.id, handled.earlier) == ("second", ["first"])
