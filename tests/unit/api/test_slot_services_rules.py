"""spec.roles.rollout.slotServices: off by default; on only for SGLang engines behind the gate
whose generation the operator reads from the engine (a slot is handed over once the copied
weights show). The model and the CRD refuse the same bodies at the same field."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import parse_rljob
from tests.unit.api.verdicts import both_refusals, job, model_messages

FIELD = "spec.roles.rollout.slotServices"
READY = {"engine": "sglang", "weightSync": "Gated", "generationFrom": "engine"}


def rollout(**fields: Any) -> dict[str, Any]:
    return job(roles={"rollout": {"replicas": 2, **fields}, "trainer": {"nodes": 2}})


@pytest.mark.parametrize(
    ("body", "refused_at", "told"),
    [
        pytest.param(rollout(**READY, slotServices=True), set(), "", id="sglang-gated-engine"),
        pytest.param(rollout(slotServices=False), set(), "", id="off"),
        pytest.param(rollout(**{**READY, "engine": "vllm"}, slotServices=True), {FIELD},
                     "engine sglang", id="vllm"),
        pytest.param(rollout(**{**READY, "weightSync": "Ungated"}, slotServices=True), {FIELD},
                     "weightSync Gated", id="ungated"),
        pytest.param(rollout(**{**READY, "generationFrom": "metrics"}, slotServices=True),
                     {FIELD}, "generationFrom engine", id="generation-from-metrics"),
    ],
)  # fmt: skip
def test_slot_services(body: dict[str, Any], refused_at: set[str], told: str) -> None:
    assert both_refusals(body) == (refused_at, refused_at)
    assert not told or any(told in text for text in model_messages(body))


def test_off_by_default() -> None:
    role = parse_rljob(rollout(**READY)).spec.roles.rollout
    assert role is not None and role.slot_services is False
