"""The operator's log line for each step that changes the world: what it did and to what; a
test's crash point and Events (their own record) say nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from rljob.api import ActionKind, FailureReason, InFlightAction
from rljob.checkpoints.retention import RetentionPlan
from rljob.reconcile.events import EventSpec
from rljob.reconcile.steps import (
    ApplyChild,
    ApplyRetention,
    CrashPoint,
    DeleteObject,
    DeleteRLJob,
    PostEvent,
    RollDeployment,
    SetPolicyCurrent,
    Step,
)
from rljob.runtime.execute import step_fields, with_action

SERVICE = {"kind": "Service", "metadata": {"name": "grpo-rollout"}}


def said(action: str, reason: str, *objects: str) -> dict[str, Any]:
    return {"action": action, "reason": reason, "objects": list(objects)}


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        pytest.param(
            ApplyChild(SERVICE, new=True),
            said("create Service", "Created", "grpo-rollout"),
            id="a-new-child",
        ),
        pytest.param(
            ApplyChild(SERVICE),
            said("update Service", "Updated", "grpo-rollout"),
            id="a-changed-child",
        ),
        pytest.param(
            DeleteObject("Pod", "grpo-rollout-x", "uid-1"),
            said("delete Pod", "Deleted", "grpo-rollout-x"),
            id="a-delete",
        ),
        pytest.param(
            RollDeployment("grpo-rollout", "role-rollout-1"),
            said("roll Deployment", "RoleRestarted", "grpo-rollout"),
            id="a-roll",
        ),
        pytest.param(
            SetPolicyCurrent("grpo-rollout-x", "uid-1", False, reason="Draining"),
            said("set policy-current False", "Draining", "grpo-rollout-x"),
            id="a-gate",
        ),
        pytest.param(
            ApplyRetention(RetentionPlan()),
            said("delete checkpoint versions", "Retention"),
            id="retention",
        ),
        pytest.param(DeleteRLJob(), said("delete RLJob", "TTLExpired"), id="the-ttl"),
        pytest.param(CrashPoint("before-delete"), None, id="a-test-crash-point"),
        pytest.param(PostEvent(EventSpec("Normal", "Created", "x")), None, id="an-event"),
    ],
)
def test_each_world_changing_step_is_said(step: Step, expected: dict[str, Any] | None) -> None:
    assert step_fields(step) == expected


def test_a_step_of_a_journaled_action_says_its_event_reason_and_cause() -> None:
    action = InFlightAction(
        id="drift-1",
        kind=ActionKind.RESTART_POD,
        reason=FailureReason.KV_CACHE_DRIFT,
        step="deleting",
        started_at=dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
    )
    plain = said("delete Pod", "Deleted", "grpo-rollout-x")
    assert with_action(plain, None) == plain
    assert with_action(plain, action) == {
        **plain,
        "reason": "PodRestarted",
        "cause": "KVCacheDrift",
        "action_id": "drift-1",
    }
