"""Issue #13: the detectors on engines as upstream ships them, on the bed (real control plane,
real Prometheus, the simulator serving each engine version's page; docs/engine-fidelity.md).

- an SGLang decode tail that finishes no request for minutes is no EngineStalled;
- a paused SGLang (weight sync: gauges frozen, num_paused_reqs zeroed) is neither stalled nor
  drifting;
- an older vLLM without the sleep gauge is judged through its generate/train cycles;
- a drifting SGLang engine is still caught and restarted alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rljob.dev.prometheus import PrometheusServer
from rljob.dev.scrape import metric_values
from rljob.dev.sim.launcher import Simulator
from tests.helpers import quiet_for, wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    DRIFT_WARMUP,
    DRIFT_WINDOW,
    FAST_BACKOFF,
    apply_rljob,
    example,
    get_rljob,
    pod_uids,
    second_scale_health,
    wait_condition,
)

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
WINDOW, WARMUP = DRIFT_WINDOW, DRIFT_WARMUP
STALL_TIMEOUT = 15.0


def _job(prometheus_url: str, engine: str, sim_profile: dict[str, Any]) -> dict[str, Any]:
    rollout = {
        "engine": engine,
        "replicas": 4,
        "gpus": 1,
        "env": [{"name": "RLJOB_SIM_PROFILE", "value": json.dumps(sim_profile)}],
    }
    return example(
        roles={"rollout": rollout, "trainer": {"nodes": 1, "gpus": 8}},
        health=second_scale_health(
            {"prometheus": {"url": prometheus_url}},
            engineStall={"timeout": f"{STALL_TIMEOUT:.0f}s"},
        ),
        failurePolicy=FAST_BACKOFF,
    )


def _evaluations(operator: Operator, detector: str, outcome: str) -> float:
    matchers = (f'detector="{detector}"', f'outcome="{outcome}"')
    return sum(metric_values(operator.metrics_url, "rljob_detector_evaluations_total", *matchers))


def _running(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, str]:
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    return pod_uids(cluster, namespace, NAME, "rollout")


def _nothing_restarted(cluster: Cluster, namespace: str, engines: dict[str, str]) -> None:
    assert pod_uids(cluster, namespace, NAME, "rollout") == engines
    assert get_rljob(cluster, namespace, NAME)["status"]["restarts"]["total"] == 0


SGLANG_VERSIONS = ["realtime", "no-realtime"]


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_an_sglang_decode_tail_that_finishes_nothing_is_no_stall(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
    version: str,
) -> None:
    """Requests run and decode, but none finishes within the test: the completion counter is
    flat for 3 stall timeouts (SGLang counts tokens at finish)."""
    profile = {"exporter": "sglang", "version": version, "finish_every": 3600}
    engines = _running(cluster, namespace, _job(prometheus.url, "sglang", profile))
    before = _evaluations(operator, "engine_stall", "finding")
    quiet_for(3 * STALL_TIMEOUT)
    assert _evaluations(operator, "engine_stall", "finding") == before
    _nothing_restarted(cluster, namespace, engines)


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_a_paused_sglang_is_neither_stalled_nor_drifting(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
    version: str,
) -> None:
    profile = {"exporter": "sglang", "version": version}
    engines = _running(cluster, namespace, _job(prometheus.url, "sglang", profile))
    simulator.client().inject("pause", namespace=namespace, job=NAME, role="rollout", on=True)
    quiet_for(max(3 * STALL_TIMEOUT, 2 * WINDOW))
    _nothing_restarted(cluster, namespace, engines)


def test_an_older_vllm_without_the_sleep_gauge_is_judged_through_its_cycles(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    """vLLM 0.10 has no vllm:engine_sleep_state: the idle train phases are left out, and the
    generate phases are judged healthy (not insufficient data forever)."""
    cycle = {"generate": 30, "drain": 3, "train": 8, "weight_sync": 2}
    profile = {"version": "0.10", "cycle": cycle}
    engines = _running(cluster, namespace, _job(prometheus.url, "vllm", profile))
    before = _evaluations(operator, "kv_drift", "healthy")
    wait_for(
        lambda: _evaluations(operator, "kv_drift", "healthy") > before,
        WARMUP + 6 * WINDOW,
        "a healthy drift verdict on vLLM 0.10",
        interval=1,
    )
    _nothing_restarted(cluster, namespace, engines)


def test_a_drifting_sglang_engine_is_restarted_alone(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    profile = {"exporter": "sglang", "version": "realtime"}
    engines = _running(cluster, namespace, _job(prometheus.url, "sglang", profile))
    victim = sorted(engines)[0]
    matchers = ('detector="kv_drift"', f'namespace="{namespace}"')
    wait_for(
        lambda: metric_values(operator.metrics_url, "rljob_detector_value", *matchers),
        WARMUP + 60,
        "drift baselines",
    )
    simulator.client().inject("drift", namespace=namespace, pod=victim, drop=0.3)
    wait_for(
        lambda: victim not in pod_uids(cluster, namespace, NAME, "rollout"),
        3 * WINDOW + 60,
        f"{victim} restarted for KVCacheDrift",
        interval=1,
    )
    survivors = {name: uid for name, uid in engines.items() if name != victim}
    now = pod_uids(cluster, namespace, NAME, "rollout")
    assert {name: now.get(name) for name in survivors} == survivors
    restarts = get_rljob(cluster, namespace, NAME)["status"]["restarts"]
    assert restarts["byReason"] == {"KVCacheDrift": 1}
