"""The built-in policy for the causes named from an engine's page (issue 32): KVCacheLeak and
PrefixCacheCollapse restart a serving engine (measured in bench/OPERATING-POINT.md) and are
reported inside the trainer gang; a user rule can make them report; each has its cooldown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rljob.api.spec import FailurePolicy, Health
from rljob.reconcile.policy import Failure, choose_action, cooldowns_from_health
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LEAK, COLLAPSE = FailureReason.KV_CACHE_LEAK, FailureReason.PREFIX_CACHE_COLLAPSE
MEMORY = FailureReason.ENGINE_MEMORY_GROWTH


@pytest.mark.parametrize(
    ("reason", "role", "action", "rule"),
    [
        pytest.param(LEAK, RoleName.ROLLOUT, FailureAction.RESTART_POD, "built-in:pod-failures",
                     id="rollout-leak-restarts-the-engine"),
        pytest.param(COLLAPSE, RoleName.ROLLOUT, FailureAction.RESTART_POD,
                     "built-in:pod-failures", id="rollout-collapse-restarts-the-engine"),
        pytest.param(LEAK, RoleName.REFERENCE, FailureAction.RESTART_POD, "built-in:pod-failures",
                     id="reference-engine-leak-restarts-it"),
        pytest.param(LEAK, RoleName.TRAINER, FailureAction.REPORT, "built-in:engines-in-gang",
                     id="gang-engine-leak-reported"),
        pytest.param(MEMORY, RoleName.ROLLOUT, FailureAction.REPORT, "built-in:report-only",
                     id="rollout-memory-growth-reported-simulated-evidence-only"),
        pytest.param(MEMORY, RoleName.TRAINER, FailureAction.REPORT, "built-in:engines-in-gang",
                     id="gang-engine-memory-growth-reported"),
        pytest.param(COLLAPSE, RoleName.TRAINER, FailureAction.REPORT,
                     "built-in:engines-in-gang", id="gang-engine-collapse-reported"),
    ],
)  # fmt: skip
def test_engine_causes_by_default(
    reason: FailureReason, role: RoleName, action: FailureAction, rule: str
) -> None:
    decision = choose_action(Failure(reason, role, "pod-0"), FailurePolicy(), None, NOW)

    assert (decision.action, decision.rule) == (action, rule)


def test_a_user_rule_can_make_them_report() -> None:
    policy = FailurePolicy.model_validate(
        {"rules": [{"onReasons": ["KVCacheLeak", "PrefixCacheCollapse"], "action": "Report"}]}
    )

    for reason in (LEAK, COLLAPSE):
        decision = choose_action(Failure(reason, RoleName.ROLLOUT, "pod-0"), policy, None, NOW)
        assert decision.action == FailureAction.REPORT


def test_their_cooldowns_come_from_the_detectors_time_scales() -> None:
    health = Health.model_validate(
        {"engineStall": {"timeout": "7m"}, "kvDrift": {"cooldown": "2h"}}
    )

    cooldowns = cooldowns_from_health(health)

    assert (cooldowns[LEAK], cooldowns[COLLAPSE]) == (420.0, 7200.0)
