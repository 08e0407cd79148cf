"""Failure-policy rules refused by the model and by the CRD alike: RestartRoleInTurn names serving
roles only (the trainer's ranks restart as a gang)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.crd_emulator import rules_at
from tests.unit.api.verdicts import both_refusals, job, model_messages

ROLES = "spec.failurePolicy.rules[0].roles"
FLEET = ["FleetKVCacheFragmentation"]


def with_rule(**rule: Any) -> dict[str, Any]:
    return job(failurePolicy={"rules": [{"onReasons": FLEET, **rule}]})


@pytest.mark.parametrize(
    ("rule", "refused_at"),
    [
        pytest.param({"action": "RestartRoleInTurn"}, set(), id="in-turn-without-roles"),
        pytest.param({"roles": ["rollout", "verifier"], "action": "RestartRoleInTurn"}, set(),
                     id="in-turn-on-serving-roles"),
        pytest.param({"roles": ["trainer"], "action": "RestartRoleInTurn"}, {ROLES},
                     id="in-turn-on-the-trainer"),
        pytest.param({"roles": ["rollout", "trainer"], "action": "RestartRoleInTurn"}, {ROLES},
                     id="in-turn-listing-the-trainer-too"),
        pytest.param({"roles": ["trainer"], "action": "RestartTrainerGang"}, set(),
                     id="gang-restart-on-the-trainer"),
        pytest.param({"roles": ["trainer"], "onReasons": ["KVCacheFragmentation"],
                      "action": "Report"}, set(), id="report-on-the-trainer"),
    ],
)  # fmt: skip
def test_in_turn_restarts_name_serving_roles_only(
    rule: dict[str, Any], refused_at: set[str]
) -> None:
    assert both_refusals(with_rule(**rule)) == (refused_at, refused_at)


def test_the_refusal_says_what_to_use_for_the_trainer() -> None:
    (message,) = model_messages(with_rule(roles=["trainer"], action="RestartRoleInTurn"))

    assert "RestartTrainerGang" in message


def test_the_crd_carries_the_rule_naming_the_roles() -> None:
    (rule,) = [r for r in rules_at("spec.failurePolicy.rules.[]") if "InTurn" in r["rule"]]

    assert rule["fieldPath"] == ".roles"
