"""Issue #14 section 2 on the bed: a Ray-launched trainer gang whose pods run two vLLM engines
each (the simulator serves them as Ray's metrics agent would, on the ray launcher's metrics
export port), no rollout role, health read by direct scraping as the chart's default install
does. A drifting engine inside the gang is reported, naming its pod, and nothing restarts;
once a rule on role trainer asks for it, the same finding restarts the gang."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rljob.dev.scrape import metric_values
from rljob.dev.sim.launcher import Simulator
from tests.helpers import quiet_for, wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    DRIFT_WARMUP,
    DRIFT_WINDOW,
    FAST_BACKOFF,
    JOBS,
    apply_rljob,
    children,
    events,
    example,
    get_rljob,
    patch_spec,
    second_scale_health,
    wait_condition,
)

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
WINDOW, WARMUP = DRIFT_WINDOW, DRIFT_WARMUP
GANG_RULE = {"roles": ["trainer"], "onReasons": ["KVCacheDrift"], "action": "RestartTrainerGang"}


def _colocated_job() -> dict[str, Any]:
    trainer = {
        "nodes": 2,
        "gpus": 8,
        "launcher": "ray",
        "command": ["python3", "-m", "verl.trainer.main_ppo"],
        "engines": {"engine": "vllm"},
        "env": [{"name": "RLJOB_SIM_PROFILE", "value": json.dumps({"colocated_engines": 2})}],
    }
    return example(
        roles={"trainer": trainer},
        health=second_scale_health({"direct": {}}),
        failurePolicy=FAST_BACKOFF,
    )


def _drift_value(operator: Operator, namespace: str) -> float | None:
    matchers = ('detector="kv_drift"', f'namespace="{namespace}"')
    found = metric_values(operator.metrics_url, "rljob_detector_value", *matchers)
    return found[0] if found else None


def _attempt(cluster: Cluster, namespace: str) -> int:
    return int(get_rljob(cluster, namespace, NAME)["status"].get("attempt", 0))


def test_a_drifting_engine_inside_the_gang_is_reported_then_restarts_the_gang_by_rule(
    cluster: Cluster, operator: Operator, namespace: str, simulator: Simulator
) -> None:
    apply_rljob(cluster, namespace, _colocated_job())
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    assert not children(cluster, namespace, "/apis/apps/v1/namespaces/{ns}/deployments", NAME)
    (trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    pods = sorted(simulator.client().workloads(namespace=namespace, role="trainer"), key=str)
    assert all(len(p["engines"]) == 2 for p in pods), "each gang pod runs two engines"
    victim = sorted(p["pod"] for p in pods)[1]
    wait_for(lambda: _drift_value(operator, namespace) is not None, WARMUP + 60, "drift baselines")
    simulator.client().inject("drift", namespace=namespace, pod=victim, drop=0.5)

    reported = wait_for(
        lambda: [
            e["message"]
            for e in events(cluster, namespace, "KVCacheDrift")
            if victim in e["message"]
        ],
        3 * WINDOW + 30,
        f"a KVCacheDrift report naming {victim}",
    )
    assert "a rule on role trainer may restart it" in reported[0], reported
    quiet_for(WINDOW)
    (same,) = children(cluster, namespace, JOBS, NAME, "trainer")
    assert same["metadata"]["uid"] == trainer["metadata"]["uid"]
    assert _attempt(cluster, namespace) == 1

    patch_spec(cluster, namespace, NAME, {"failurePolicy": {"rules": [GANG_RULE]}})
    wait_for(lambda: _attempt(cluster, namespace) == 2, 2 * WINDOW + 30, "the gang restarted")
    restarts = get_rljob(cluster, namespace, NAME)["status"]["restarts"]
    assert restarts["byReason"] == {"KVCacheDrift": 1}
