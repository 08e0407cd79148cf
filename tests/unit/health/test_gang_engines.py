"""Engines colocated inside the trainer gang (spec.roles.trainer.engines): their metric names as
Ray's metrics agent exports them, the signals a job without a rollout role asks for, and their
findings attributed to the trainer pod that exports them, apart from the rollout engines."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import RLJob, parse_rljob
from rljob.api.roles import GangEngines
from rljob.health import FINDING, INSUFFICIENT_DATA, Evaluation
from rljob.health.engine_group import GANG_ENGINES
from rljob.health.job_diagnosis import DIAGNOSIS_ROLE
from rljob.health.monitor import ROLLOUT, TRAINER_ROLE
from rljob.health.monitor_answers import Answers, evaluate
from rljob.health.profiles import VLLM, Series, Signal, engine_metrics
from rljob.health.profiles.workloads import ray_exported
from tests.unit.health.test_monitor import Pod, monitor_of

THROUGH_RAY = ray_exported(VLLM)


@pytest.mark.parametrize(
    ("field", "exported"),
    [
        pytest.param("generation_tokens_total", "ray_vllm_generation_tokens_total", id="tokens"),
        pytest.param("requests_running", "ray_vllm_num_requests_running", id="running"),
        pytest.param("requests_waiting", "ray_vllm_num_requests_waiting", id="waiting"),
        pytest.param("kv_cache_usage", "ray_vllm_kv_cache_usage_perc", id="kv-usage"),
        pytest.param("prefix_cache_hits_total", "ray_vllm_prefix_cache_hits_total", id="hits"),
        pytest.param("preemptions_total", "ray_vllm_num_preemptions_total", id="preemptions"),
        pytest.param("engine_label", "WorkerId", id="engines-told-apart-by-worker"),
    ],
)
def test_vllm_names_as_rays_metrics_agent_exports_them(field: str, exported: str) -> None:
    assert getattr(THROUGH_RAY, field) == exported


def test_older_names_and_the_sleep_gauge_are_renamed_too_and_overrides_are_as_scraped() -> None:
    assert "ray_vllm_gpu_cache_usage_perc" in dict(THROUGH_RAY.legacy).values()
    assert THROUGH_RAY.sleep is not None
    assert THROUGH_RAY.sleep.metric == "ray_vllm_engine_sleep_state"
    assert VLLM.sleep is not None and THROUGH_RAY.sleep.matcher == VLLM.sleep.matcher
    engines = GangEngines.model_validate({"metricNames": {"requestsRunning": "my_running"}})
    profile = engine_metrics(engines, through_ray=True)
    assert profile.requests_running == "my_running"
    assert profile.generation_tokens_total == "ray_vllm_generation_tokens_total"


def colocated_job(name: str = "verl", *, rollout: bool = False, **engines: Any) -> RLJob:
    roles: dict[str, Any] = {
        "trainer": {
            "nodes": 2,
            "launcher": "ray",
            "command": ["python3", "-m", "verl.trainer.main_ppo"],
            "engines": engines,
        }
    }
    if rollout:
        roles["rollout"] = {"replicas": 1}
    spec = {
        "image": "img",
        "roles": roles,
        "health": {"interval": "5s", "engineStall": {"timeout": "15s"}},
    }
    return parse_rljob(
        {
            "apiVersion": "rljob.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": name, "namespace": "ns1", "uid": f"uid-{name}"},
            "spec": spec,
        }
    )


GANG = [
    Pod("verl-trainer-a1-0", TRAINER_ROLE, attempt=1),
    Pod("verl-trainer-a1-1", TRAINER_ROLE, attempt=1),
]


def test_a_job_without_rollout_asks_for_the_gang_pods_engine_signals_by_rays_names() -> None:
    monitor = monitor_of(colocated_job(), GANG)
    queries = monitor.role_queries(monitor.targets())
    assert set(queries) == {TRAINER_ROLE, GANG_ENGINES, DIAGNOSIS_ROLE}
    gang = queries[GANG_ENGINES]
    assert {s.metric for s in gang} >= {"ray_vllm_generation_tokens_total"}
    assert all(pods == {p.name for p in GANG} for pods in gang.values())


def test_trainer_pods_are_no_engines_unless_the_trainer_says_so() -> None:
    job = colocated_job()
    trainer = job.spec.roles.trainer.model_copy(update={"engines": None})
    roles = job.spec.roles.model_copy(update={"trainer": trainer})
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"roles": roles})})
    monitor = monitor_of(job, GANG)
    assert set(monitor.role_queries(monitor.targets())) == {TRAINER_ROLE, DIAGNOSIS_ROLE}


def engine_answers(t: float, tokens: dict[str, float], running: float = 4.0) -> Answers:
    """One round's answers: each gang pod's two engines (actors), told apart by WorkerId."""
    signals = THROUGH_RAY.signals()
    data: dict[Signal, dict[tuple[str, str], list[Series]]] = {s: {} for s in signals.values()}

    def put(name: str, pod: str, value: float) -> None:
        series = [
            Series((("WorkerId", worker), ("engine", "0")), ((t, value / 2),))
            for worker in ("w1", "w2")
        ]
        data[signals[name]][("ns1", pod)] = series

    for pod, total in tokens.items():
        put("generation_tokens", pod, total)
        put("requests_running", pod, running)
        put("requests_waiting", pod, 0.0)
    return Answers(data, {})


def gang_findings(evaluations: list[Evaluation], detector: str) -> dict[str, str]:
    return {e.target: e.outcome for e in evaluations if e.detector == detector}


def test_a_gang_engine_that_stops_generating_is_found_stalled_on_its_own_pod() -> None:
    monitor = monitor_of(colocated_job(), GANG)
    healthy, stuck = (p.name for p in GANG)
    outcomes: dict[str, str] = {}
    for step in range(8):
        t = 10.0 + 5.0 * step
        tokens = {healthy: 1000.0 * step, stuck: 1000.0 * min(step, 2)}
        evaluations = evaluate(monitor, monitor.targets(), engine_answers(t, tokens), None, t)
        outcomes = gang_findings(evaluations, "engine_stall")
    assert outcomes[stuck] == FINDING
    assert outcomes[healthy] != FINDING


def test_gang_engines_are_judged_apart_from_the_rollout_engines() -> None:
    monitor = monitor_of(colocated_job(rollout=True), [*GANG, Pod("verl-rollout-0", ROLLOUT)])
    evaluations = evaluate(monitor, monitor.targets(), Answers({}, {}), None, 10.0)
    rollout = gang_findings(evaluations, "kv_drift")
    assert rollout == dict.fromkeys([*(p.name for p in GANG), "verl-rollout-0"], INSUFFICIENT_DATA)
    assert (
        monitor.gang.drift.role.value == "trainer" and monitor.rollout.drift.role.value == "rollout"
    )
    assert monitor.gang.pods == tuple(p.name for p in GANG)
    assert monitor.rollout.pods == ("verl-rollout-0",)
