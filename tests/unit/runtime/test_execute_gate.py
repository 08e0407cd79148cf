"""The SetPolicyCurrent step's applier: one strategic merge of the pod's status setting the
rljob.io/policy-current condition True (saying the generation the engine reported) or False
(saying why: the engine drains, or its container restarted)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from rljob.api import parse_rljob
from rljob.reconcile.steps import SetPolicyCurrent
from rljob.runtime.execute import APPLIERS, Context
from rljob.runtime.memory import JobMemory
from tests.unit.reconcile.world import example_body

NOW = dt.datetime(2026, 3, 1, 12, 0, 5, tzinfo=dt.UTC)


class _Kube:
    def __init__(self) -> None:
        self.conditions: list[tuple[str, str, dict[str, Any]]] = []

    async def set_pod_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> bool:
        self.conditions.append((namespace, name, condition))
        return True


@pytest.mark.parametrize(
    ("step", "status", "reason", "message"),
    [
        pytest.param(SetPolicyCurrent("e-0", "uid-e-0", True, generation=12), "True",
                     "PolicyCurrent", "engine reports policy generation 12", id="opens"),
        pytest.param(SetPolicyCurrent("e-0", "uid-e-0", False, reason="Draining"), "False",
                     "Draining", "engine draining before its replacement: no new request",
                     id="closes-on-a-drain"),
        pytest.param(SetPolicyCurrent("e-0", "uid-e-0", False, reason="ContainerRestarted"),
                     "False", "ContainerRestarted",
                     "engine container restarted: its weights must be pushed again",
                     id="closes-on-a-restart"),
    ],
)  # fmt: skip
async def test_the_gate_condition_is_patched(
    step: SetPolicyCurrent, status: str, reason: str, message: str
) -> None:
    body = example_body()
    kube = _Kube()
    memory = JobMemory(("rl", body["metadata"]["name"]))
    ctx = Context(kube, None, body, parse_rljob(body), memory, NOW, lambda: True)  # type: ignore[arg-type]

    await APPLIERS[SetPolicyCurrent](step, ctx)

    condition = {
        "type": "rljob.io/policy-current",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-03-01T12:00:05Z",
    }
    assert kube.conditions == [("rl", "e-0", condition)]
