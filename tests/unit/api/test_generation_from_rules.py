"""spec.roles.rollout.generationFrom: metrics by default, engine for vLLM and SGLang (whose weight
version the operator knows how to read), never engine for a custom engine. The model and the CRD
refuse the same bodies at the same field."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import GenerationFrom, parse_rljob
from tests.unit.api.verdicts import both_refusals, job, model_messages

FIELD = "spec.roles.rollout.generationFrom"
CUSTOM_NAMES = {
    "generationTokensTotal": "my_tokens_total",
    "requestsRunning": "my_running",
    "requestsWaiting": "my_waiting",
}


def rollout(**fields: Any) -> dict[str, Any]:
    return job(roles={"rollout": {"replicas": 2, "weightSync": "Gated", **fields},
                      "trainer": {"nodes": 2}})  # fmt: skip


@pytest.mark.parametrize(
    ("body", "refused_at"),
    [
        pytest.param(rollout(), set(), id="metrics-by-default"),
        pytest.param(rollout(generationFrom="engine"), set(), id="vllm-engine"),
        pytest.param(rollout(engine="sglang", generationFrom="engine"), set(), id="sglang-engine"),
        pytest.param(rollout(engine="custom", metricNames=CUSTOM_NAMES), set(),
                     id="custom-from-metrics"),
        pytest.param(rollout(engine="custom", metricNames=CUSTOM_NAMES, generationFrom="engine"),
                     {FIELD}, id="custom-from-its-engine"),
        pytest.param(rollout(generationFrom="http"), {FIELD}, id="an-unknown-value"),
    ],
)  # fmt: skip
def test_generation_from(body: dict[str, Any], refused_at: set[str]) -> None:
    assert both_refusals(body) == (refused_at, refused_at)


def test_a_custom_engine_is_told_to_use_its_metrics() -> None:
    body = rollout(engine="custom", metricNames=CUSTOM_NAMES, generationFrom="engine")
    assert any("generationFrom metrics" in text for text in model_messages(body))


def test_the_default_is_metrics() -> None:
    role = parse_rljob(rollout()).spec.roles.rollout
    assert role is not None and role.generation_from == GenerationFrom.METRICS
