"""The MarkPolicyCurrent step's applier: one strategic merge of the pod's status setting the
rljob.io/policy-current condition True, saying the generation the engine reported."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rljob.api import parse_rljob
from rljob.reconcile.steps import MarkPolicyCurrent
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


async def test_the_gate_condition_is_set_true_with_the_generation() -> None:
    body = example_body()
    kube = _Kube()
    memory = JobMemory(("rl", body["metadata"]["name"]))
    ctx = Context(kube, None, body, parse_rljob(body), memory, NOW, lambda: True)  # type: ignore[arg-type]

    await APPLIERS[MarkPolicyCurrent](MarkPolicyCurrent("e-0", "uid-e-0", 12), ctx)

    assert kube.conditions == [
        (
            "rl",
            "e-0",
            {
                "type": "rljob.io/policy-current",
                "status": "True",
                "reason": "PolicyCurrent",
                "message": "engine reports policy generation 12",
                "lastTransitionTime": "2026-03-01T12:00:05Z",
            },
        )
    ]
