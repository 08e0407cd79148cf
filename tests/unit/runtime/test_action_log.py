"""The operator's log line for each step that changes the world: what it did and to what; a
test's crash point and Events (their own record) say nothing."""

from __future__ import annotations

from typing import Any

import pytest

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
from rljob.runtime.execute import step_fields

SERVICE = {"kind": "Service", "metadata": {"name": "grpo-rollout"}}


@pytest.mark.parametrize(
    ("step", "said"),
    [
        pytest.param(
            ApplyChild(SERVICE, new=True),
            {"step": "create Service", "object": "grpo-rollout"},
            id="a-new-child",
        ),
        pytest.param(
            ApplyChild(SERVICE),
            {"step": "update Service", "object": "grpo-rollout"},
            id="a-changed-child",
        ),
        pytest.param(
            DeleteObject("Pod", "grpo-rollout-x", "uid-1"),
            {"step": "delete Pod", "object": "grpo-rollout-x"},
            id="a-delete",
        ),
        pytest.param(
            RollDeployment("grpo-rollout", "role-rollout-1"),
            {"step": "roll Deployment", "object": "grpo-rollout", "nonce": "role-rollout-1"},
            id="a-roll",
        ),
        pytest.param(
            SetPolicyCurrent("grpo-rollout-x", "uid-1", False, reason="Draining"),
            {
                "step": "set policy-current",
                "object": "grpo-rollout-x",
                "current": False,
                "why": "Draining",
            },
            id="a-gate",
        ),
        pytest.param(
            ApplyRetention(RetentionPlan()),
            {"step": "apply retention", "versions": 0},
            id="retention",
        ),
        pytest.param(
            DeleteRLJob(), {"step": "delete RLJob (ttlSecondsAfterFinished)"}, id="the-ttl"
        ),
        pytest.param(CrashPoint("before-delete"), None, id="a-test-crash-point"),
        pytest.param(PostEvent(EventSpec("Normal", "Created", "x")), None, id="an-event"),
    ],
)
def test_each_world_changing_step_is_said(step: Step, said: dict[str, Any] | None) -> None:
    assert step_fields(step) == said
