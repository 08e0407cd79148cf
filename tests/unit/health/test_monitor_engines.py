"""The rollout engines' readings for drains and the policy-current gate (issue #17): the optional
generation signal in every rollout engine profile and in the queries, the readings a round's
answers give (present, missing, garbage), and the rule that wakes a Gated job."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from rljob.adapters.metrics.promql import range_selector, series_selector
from rljob.api.spec import GangEngines, RolloutRole
from rljob.health.monitor import ROLLOUT, backfill_queries, pods_by_role, round_queries
from rljob.health.monitor_answers import Answers, evaluate, feed, job_error
from rljob.health.monitor_engines import (
    MAX_GENERATION,
    EngineGauges,
    engine_gauges,
    readings_moved,
)
from rljob.health.profiles import (
    ENGINE_POLICY_GENERATION,
    OPTIONAL_ENGINE_SIGNALS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    SGLANG,
    VLLM,
    EngineMetrics,
    Series,
    Signal,
    engine_metrics,
)
from rljob.health.profiles.workloads import ray_exported
from tests.unit.health.test_monitor import PROM, Pod, make_job, monitor_of

GENERATION_METRIC = "rljob_engine_policy_generation"
STALE = 15.0


def series(points: list[tuple[float, float]], **labels: str) -> Series:
    return Series(tuple(sorted(labels.items())), tuple(points))


# ------------------------------------------------------------------ the profiles


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="vllm"),
        pytest.param({"engine": "sglang"}, id="sglang"),
        pytest.param(
            {
                "engine": "custom",
                "metricNames": {
                    "generationTokensTotal": "t_total",
                    "requestsRunning": "r",
                    "requestsWaiting": "w",
                },
            },
            id="custom",
        ),
        pytest.param({"metricNames": {"requestsRunning": "my_running"}}, id="vllm-renamed"),
    ],
)
def test_every_rollout_engine_profile_asks_for_the_generation_gauge(spec: dict[str, Any]) -> None:
    signals = engine_metrics(RolloutRole.model_validate(spec)).signals()
    assert signals[ENGINE_POLICY_GENERATION] == Signal(ENGINE_POLICY_GENERATION, GENERATION_METRIC)
    assert ENGINE_POLICY_GENERATION in OPTIONAL_ENGINE_SIGNALS


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="through-ray"),
        pytest.param({"exporter": "engine", "port": 8000}, id="own-page"),
    ],
)
def test_the_trainers_colocated_engines_are_not_asked_for_it(spec: dict[str, Any]) -> None:
    role = GangEngines.model_validate(spec)
    through_ray = role.exporter.value == "ray"
    profile = engine_metrics(role, through_ray=through_ray)
    assert profile.policy_generation is None
    assert ENGINE_POLICY_GENERATION not in profile.signals()
    assert ray_exported(VLLM).policy_generation is None


# ------------------------------------------------------------------ one pod's reading

GARBAGE = [math.nan, math.inf, -1.0, 2.5, float(MAX_GENERATION * 2)]


@pytest.mark.parametrize(
    ("profile", "by_signal", "expected"),
    [
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [series([(10.0, 3.0), (20.0, 0.0)], engine="0")],
                ENGINE_POLICY_GENERATION: [series([(10.0, 6.0), (20.0, 7.0)])],
            },
            EngineGauges(20.0, 0.0, 7),
            id="present-newest-sample",
        ),
        pytest.param(
            VLLM,
            {REQUESTS_RUNNING: [series([(20.0, 4.0)], engine="0")]},
            EngineGauges(20.0, 4.0, None),
            id="no-generation-gauge",
        ),
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [series([(20.0, 0.0)], engine="0")],
                REQUESTS_WAITING: [series([(20.0, 3.0)], engine="0")],
            },
            EngineGauges(20.0, 3.0, None),
            id="none-running-three-queued-is-not-drained",
        ),
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [series([(20.0, 2.0)], engine="0")],
                REQUESTS_WAITING: [series([(20.0, math.nan)], engine="0")],
            },
            EngineGauges(20.0, None, None),
            id="garbage-queue-is-no-reading",
        ),
        pytest.param(
            VLLM,
            {ENGINE_POLICY_GENERATION: [series([(20.0, 7.0)])]},
            EngineGauges(20.0, None, 7),
            id="no-running-gauge",
        ),
        pytest.param(VLLM, {}, None, id="nothing"),
        pytest.param(
            VLLM,
            {REQUESTS_RUNNING: [series([], engine="0")], ENGINE_POLICY_GENERATION: []},
            None,
            id="no-points",
        ),
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [
                    series([(20.0, 2.0)], engine="0"),
                    series([(20.0, 3.0)], engine="1"),
                ],
                ENGINE_POLICY_GENERATION: [
                    series([(20.0, 7.0)], engine="0"),
                    series([(20.0, 6.0)], engine="1"),
                ],
            },
            EngineGauges(20.0, 5.0, 6),
            id="data-parallel-engines-summed-lowest-generation",
        ),
        pytest.param(
            SGLANG,
            {
                REQUESTS_RUNNING: [
                    series([(20.0, 2.0)], dp_rank="0", job="a"),
                    series([(20.0, 2.0)], dp_rank="0", job="b"),
                ]
            },
            EngineGauges(20.0, 2.0, None),
            id="a-duplicated-scrape-is-not-doubled",
        ),
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [series([(100.0, 0.0)], engine="0")],
                ENGINE_POLICY_GENERATION: [series([(50.0, 7.0)])],
            },
            EngineGauges(100.0, 0.0, None),
            id="a-stale-generation-is-none",
        ),
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [series([(20.0, 0.0)], engine="0")],
                ENGINE_POLICY_GENERATION: [series([(30.0, 8.0)])],
            },
            EngineGauges(20.0, 0.0, None),
            id="the-time-is-the-running-samples",
        ),
        *(
            pytest.param(
                VLLM,
                {
                    REQUESTS_RUNNING: [series([(20.0, bad)], engine="0")],
                    ENGINE_POLICY_GENERATION: [series([(20.0, bad)])],
                },
                EngineGauges(20.0, bad if math.isfinite(bad) and bad >= 0 else None, None),
                id=f"garbage-{bad}",
            )
            for bad in GARBAGE
        ),
        pytest.param(
            VLLM,
            {
                REQUESTS_RUNNING: [
                    series([(20.0, 2.0)], engine="0"),
                    series([(20.0, -1.0)], engine="1"),
                ],
                ENGINE_POLICY_GENERATION: [
                    series([(20.0, 7.0)], engine="0"),
                    series([(20.0, 7.5)], engine="1"),
                ],
            },
            EngineGauges(20.0, None, None),
            id="one-garbage-engine-spoils-the-pod",
        ),
    ],
)
def test_a_pods_reading(
    profile: EngineMetrics, by_signal: dict[str, list[Series]], expected: EngineGauges | None
) -> None:
    assert engine_gauges(profile, by_signal, STALE) == expected


# ------------------------------------------------------------------ from a round's answers


def rollout_answers(
    pods: dict[str, tuple[float, float | None, float | None]],
    *,
    generation: bool = True,
    generation_failed: bool = False,
) -> Answers:
    """Answers to every vLLM signal for ns1 pods: (t, running, generation) each; the
    generation signal answered, unanswered or failed."""
    signals = VLLM.signals()
    data: dict[Signal, dict[tuple[str, str], list[Series]]] = {s: {} for s in signals.values()}
    failed: dict[Signal, str] = {}
    for pod, (t, running, served) in pods.items():
        key = ("ns1", pod)
        data[signals["generation_tokens"]][key] = [series([(t, 100.0 * t)], engine="0")]
        data[signals["requests_waiting"]][key] = [series([(t, 0.0)], engine="0")]
        if running is not None:
            data[signals[REQUESTS_RUNNING]][key] = [series([(t, running)], engine="0")]
        if served is not None:
            data[signals[ENGINE_POLICY_GENERATION]][key] = [series([(t, served)])]
    wanted = signals[ENGINE_POLICY_GENERATION]
    if generation_failed:
        del data[wanted]
        failed[wanted] = "HTTP 422: bad query"
    elif not generation:
        del data[wanted]
    return Answers(data, failed)


PODS = [Pod("j-rollout-0", ROLLOUT), Pod("j-rollout-1", ROLLOUT)]


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        pytest.param(
            rollout_answers({"j-rollout-0": (10.0, 2.0, 7.0), "j-rollout-1": (10.0, 0.0, 6.0)}),
            {"j-rollout-0": EngineGauges(10.0, 2.0, 7), "j-rollout-1": EngineGauges(10.0, 0.0, 6)},
            id="present",
        ),
        pytest.param(
            rollout_answers({"j-rollout-0": (10.0, 2.0, None)}),
            {"j-rollout-0": EngineGauges(10.0, 2.0, None)},
            id="one-pod-missing-no-gauge-on-the-other",
        ),
        pytest.param(
            rollout_answers({"j-rollout-0": (10.0, 2.0, 7.0)}, generation=False),
            {"j-rollout-0": EngineGauges(10.0, 2.0, None)},
            id="generation-not-answered",
        ),
        pytest.param(
            rollout_answers({"j-rollout-0": (10.0, 2.0, 7.0)}, generation_failed=True),
            {"j-rollout-0": EngineGauges(10.0, 2.0, None)},
            id="generation-failed",
        ),
        pytest.param(
            rollout_answers({"j-rollout-0": (10.0, -3.0, math.nan), "j-rollout-1": (10.0, 1, -2)}),
            {
                "j-rollout-0": EngineGauges(10.0, None, None),
                "j-rollout-1": EngineGauges(10.0, 1.0, None),
            },
            id="garbage",
        ),
    ],
)
def test_a_round_keeps_each_rollout_pods_reading_and_its_detectors_do_not_need_it(
    answers: Answers, expected: dict[str, EngineGauges]
) -> None:
    monitor = monitor_of(make_job("j"), PODS)
    targets = monitor.targets()
    evaluations = evaluate(monitor, targets, answers, None, 10.0)
    assert monitor.engine_gauges == expected
    problems = [e.evidence.get("source_error") for e in evaluations if e.target in targets.rollout]
    assert problems and not any(problems), "the optional gauge never makes data insufficient"
    failed = ENGINE_POLICY_GENERATION in {s.name for s in answers.failed}
    assert job_error(monitor, targets, answers, None) == ("HTTP 422: bad query" if failed else None)


def test_a_newer_reading_replaces_an_older_one_never_the_reverse_and_pods_that_left_drop() -> None:
    job = make_job("j")
    monitor = monitor_of(job, PODS)
    targets = monitor.targets()
    feed(monitor, targets, rollout_answers({"j-rollout-0": (20.0, 0.0, 7.0)}))
    feed(monitor, targets, rollout_answers({"j-rollout-0": (10.0, 5.0, 6.0)}))  # a late backfill
    assert monitor.engine_gauges == {"j-rollout-0": EngineGauges(20.0, 0.0, 7)}
    evaluate(monitor, targets, rollout_answers({"j-rollout-0": (30.0, 1.0, 8.0)}), "down", 30.0)
    assert monitor.engine_gauges["j-rollout-0"].t == 20.0, "a failed source reads nothing"
    monitor.update(job, pods_by_role([Pod("j-rollout-1", ROLLOUT)]), 40.0, PROM)
    assert monitor.engine_gauges == {}


@pytest.mark.parametrize(
    ("weight_sync", "gated"),
    [pytest.param(None, False, id="default"), ("Ungated", False), ("Gated", True)],
)
def test_the_monitor_knows_whether_the_job_is_gated(weight_sync: str | None, gated: bool) -> None:
    job = make_job("j")
    if weight_sync is not None:
        rollout = job.spec.roles.rollout
        assert rollout is not None
        spec = rollout.model_copy(update={"weight_sync": weight_sync})
        roles = job.spec.roles.model_copy(update={"rollout": spec})
        job = job.model_copy(update={"spec": job.spec.model_copy(update={"roles": roles})})
    assert monitor_of(job, PODS).weight_gated is gated


# ------------------------------------------------------------------ the queries


def test_the_queries_ask_each_rollout_pod_for_its_generation_in_its_namespace() -> None:
    a = monitor_of(make_job("a"), [Pod("a-rollout-0", ROLLOUT), Pod("a-trainer-0", "trainer")])
    b = monitor_of(make_job("b", namespace="ns2"), [Pod("b-rollout-0", ROLLOUT)])
    jobs = [a, b]
    targets = {job.uid: job.targets() for job in jobs}
    generation = VLLM.signals()[ENGINE_POLICY_GENERATION]
    queries = round_queries(jobs, targets)
    assert queries[generation] == {"ns1": {"a-rollout-0"}, "ns2": {"b-rollout-0"}}
    span, history = backfill_queries(jobs, targets)[ROLLOUT]
    assert history[generation] == queries[generation] and span > 0
    assert series_selector(generation, {"ns1": {"a-rollout-0"}}) == (
        '{__name__="rljob_engine_policy_generation", namespace=~"ns1", pod=~"a-rollout-0"}'
    )
    assert range_selector(generation, {"ns2": {"b-rollout-0"}}, 35.0).endswith(
        'namespace=~"ns2", pod=~"b-rollout-0"}[35000ms]'
    )


# ------------------------------------------------------------------ the wake rule


@dataclass(frozen=True)
class Reading:
    pod: str
    running: float | None = None
    generation: int | None = None


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        pytest.param([Reading("a", 3.0, 7)], [Reading("a", 3.0, 7)], False, id="unchanged"),
        pytest.param([Reading("a", 3.0, 7)], [Reading("a", 1.0, 7)], False, id="fewer-running"),
        pytest.param([Reading("a", 3.0, 7)], [Reading("a", 0.0, 7)], True, id="running-reached-0"),
        pytest.param([Reading("a", 0.0, 7)], [Reading("a", 0.0, 7)], False, id="still-0"),
        pytest.param([Reading("a", None, 7)], [Reading("a", 0.0, 7)], True, id="unknown-then-0"),
        pytest.param([], [Reading("a", 0.0)], True, id="first-reading-0"),
        pytest.param([], [Reading("a", 2.0)], False, id="first-reading-busy"),
        pytest.param([Reading("a", 3.0, 7)], [Reading("a", 3.0, 8)], True, id="generation-moved"),
        pytest.param([Reading("a", 3.0)], [Reading("a", 3.0, 8)], True, id="generation-appeared"),
        pytest.param([Reading("a", 3.0, 7)], [Reading("a", 3.0)], False, id="generation-gone"),
        pytest.param([], [Reading("b", 3.0, 1)], True, id="newcomer-reports-a-generation"),
        pytest.param([Reading("a", 0.0, 7)], [], False, id="pod-left"),
    ],
)
def test_the_wake_rule(before: list[Reading], after: list[Reading], moved: bool) -> None:
    assert readings_moved(before, after) is moved
