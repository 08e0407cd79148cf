"""Issue #16 on the bed: the operator diagnoses what bounds a running job's step from the live
series the simulator serves (the trainer's phase seconds as the SDK exports them, the engines'
requests and tokens, the verifiers' queue), writes status.bottleneck and says it in
`kubectl rljob diagnose`; and an RL correctness canary fires both the shipped alert in the bed's
Prometheus and the operator's finding, which a Suspend rule turns into a policy suspension."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.dev.prometheus import PrometheusServer
from rljob.dev.sim.launcher import Simulator
from rljob.dev.sim.models.concurrency import knee_truth
from rljob.dev.sim.profiles import EngineProfile, override
from rljob.kubectl.diagnose_view import render_diagnose
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    FAST_BACKOFF,
    apply_rljob,
    events,
    example,
    get_rljob,
    second_scale_health,
    wait_condition,
)

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
WINDOW = 20.0  # spec.health.bottleneck.window: the phase shares are judged over this long
# A coupled trainer waits tokens_per_step over its engines' tokens/s, plus its verifiers' delay.
COUPLED_TRAINER = {"couple_rollouts": True, "tokens_per_step": 16384.0, "step_seconds": 2.0}


# Engines following the rollout driver's requests in flight (rljob.dev.sim.models.concurrency).
DRIVEN = {"knee": 64}


def _job(*, verifier: bool = True, **health: Any) -> dict[str, Any]:
    roles: dict[str, Any] = {
        "rollout": {"engine": "vllm", "replicas": 2, "gpus": 1},
        "trainer": {"nodes": 1, "gpus": 8},
    }
    if verifier:
        roles["verifier"] = {"replicas": 1}
    checks = {"bottleneck": {"window": f"{WINDOW:.0f}s"}, **health}
    return example(
        roles=roles,
        health=second_scale_health({"direct": {}}, **checks),
        failurePolicy=FAST_BACKOFF,
    )


def _bottleneck(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = get_rljob(cluster, namespace, NAME).get("status", {})
    return found.get("bottleneck") or {}


def _role_becomes(cluster: Cluster, namespace: str, role: str, timeout: float) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        seen.update(found=_bottleneck(cluster, namespace))
        return seen["found"] if seen["found"].get("role") == role else None

    try:
        return wait_for(reached, timeout, f"status.bottleneck.role {role}", interval=0.5)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; status.bottleneck: {seen.get('found')}") from None


def test_a_verifier_slowdown_moves_the_bottleneck_from_rollout_to_verifier(
    cluster: Cluster, operator: Operator, namespace: str, simulator: Simulator
) -> None:
    client = simulator.client()
    client.set_profile(COUPLED_TRAINER, namespace=namespace, job=NAME, role="trainer")
    # The driver keeps more requests in flight than the KV cache holds (96 > 64): the engines
    # queue, and with verifiers that keep up (enough workers) they bound the step.
    client.set_profile(
        DRIVEN | {"concurrency": 96.0}, namespace=namespace, job=NAME, role="rollout"
    )
    keeping_up = {"workers": 8, "max_queue": 200}
    client.set_profile(keeping_up, namespace=namespace, job=NAME, role="verifier")
    apply_rljob(cluster, namespace, _job())
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    rollout = _role_becomes(cluster, namespace, "Rollout", 4 * WINDOW + 60)
    assert "add rollout engines" in rollout["advice"], rollout["advice"]
    # The verifier slows 10x: its queue grows (to 200 in about 12 s) and the rollout driver,
    # whose in-flight budget counts the samples waiting for their reward, leaves the engines
    # short of requests.
    slowed = {**keeping_up, "slowdown": 10.0}
    client.set_profile(slowed, namespace=namespace, job=NAME, role="verifier")
    starved = DRIVEN | {"concurrency": 16.0}
    client.set_profile(starved, namespace=namespace, job=NAME, role="rollout")
    bound = _role_becomes(cluster, namespace, "Verifier", 4 * WINDOW + 60)
    assert "queue" in bound["evidence"], bound["evidence"]
    assert "verifier" in bound["advice"].lower(), bound["advice"]
    screen = render_diagnose(get_rljob(cluster, namespace, NAME))
    assert "Verifier" in screen and bound["advice"][:40] in screen.replace("\n", " "), screen
    # The pass writes the status first and posts its Event after: wait for the Event.
    wait_for(lambda: _changed_to(cluster, namespace, "Verifier (was Rollout)"), 30, "the Event")


def _changed_to(cluster: Cluster, namespace: str, change: str) -> list[str]:
    return [
        e["message"]
        for e in events(cluster, namespace, "BottleneckChanged")
        if change in e["message"]
    ]


# A synchronous rollout far below its engines' knee: each batch's in-flight count decays from
# 16 to 0 (the tail), so the engines are seen at every concurrency up to 16, never near 64.
UNDER_DRIVEN = {
    "concurrency": 16.0,
    "knee": 64,
    "generation_length": 100.0,
    "sync_tail": True,
    "sync_idle": 3.0,
}


def test_an_under_driven_rollout_is_told_to_raise_its_concurrency_near_the_true_knee(
    cluster: Cluster, operator: Operator, namespace: str, simulator: Simulator
) -> None:
    truth = knee_truth(override(EngineProfile(), UNDER_DRIVEN))  # per engine
    expected = 2 * truth.recommended  # two engines, pooled
    client = simulator.client()
    client.set_profile(COUPLED_TRAINER, namespace=namespace, job=NAME, role="trainer")
    client.set_profile(UNDER_DRIVEN, namespace=namespace, job=NAME, role="rollout")
    apply_rljob(cluster, namespace, _job(verifier=False))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)

    def advised() -> dict[str, Any] | None:
        found = _bottleneck(cluster, namespace)
        recommended = found.get("recommendedConcurrency")
        curve = found.get("curve") or {}
        if found.get("role") != "RolloutConcurrency" or recommended is None:
            return None
        return found if curve.get("beyond") or curve.get("knee") is not None else None

    found = wait_for(advised, 360, "raise-concurrency advice with a recommended value")
    recommended = found["recommendedConcurrency"]
    print(f"recommended {recommended} in flight against the true {expected:.1f}")  # -rP shows it
    assert abs(recommended - expected) <= 0.15 * expected, (recommended, expected, found)
    assert str(recommended) in found["advice"], found["advice"]
    screen = render_diagnose(get_rljob(cluster, namespace, NAME))
    assert "RolloutConcurrency" in screen and str(recommended) in screen, screen


def test_reward_hacking_fires_the_alert_and_a_suspend_rule_suspends_the_job(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    """RewardHackingSuspected at second scale (the shipped rule's 2h -> 2m, for 30m -> 30s;
    the slope stays per hour, so the trace climbs 6 an hour while the eval reward is flat)."""
    client = simulator.client()
    hacking = {"reward_hacking": True, "reward_slope_per_hour": 6.0, "eval_every": 2}
    client.set_profile(hacking, namespace=namespace, job=NAME, role="trainer")
    body = _job(verifier=False, canaries={"rewardHacking": {"window": "2m"}})
    suspend = {"onReasons": ["RewardHackingSuspected"], "action": "Suspend"}
    body["spec"]["failurePolicy"] = {**FAST_BACKOFF, "rules": [suspend]}
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)

    def firing() -> bool:
        return any(
            a["labels"].get("alertname") == "RewardHackingSuspected"
            and a["labels"].get("namespace") == namespace
            and a["state"] == "firing"
            for a in prometheus.alerts()
        )

    wait_for(firing, 300, "RewardHackingSuspected firing in the bed's Prometheus", interval=1.0)
    job = wait_condition(cluster, namespace, NAME, "Suspended", timeout=120)
    assert job["status"]["phase"] == "Suspended"
    assert job["status"]["suspension"]["reason"] == "RewardHackingSuspected"
    assert job["spec"].get("suspend") is not True  # spec.suspend stays the user's
    said = [e["message"] for e in events(cluster, namespace, "PolicySuspended")]
    assert said and "RewardHackingSuspected" in said[0], said
