"""A job's health monitor without a loop: which pods it watches and asks for, when it is due,
when its backfill is done, and how one round's answers become its evaluations."""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rljob.api import RLJob, parse_rljob
from rljob.health import INSUFFICIENT_DATA, Evaluation
from rljob.health.evaluation import TRAINER_STEP_EVIDENCE, insufficient
from rljob.health.job_diagnosis import DIAGNOSIS_ROLE
from rljob.health.monitor import (
    BACKFILL_ATTEMPTS,
    LOOKBACK_SLACK,
    MAX_LOOKBACK,
    ROLLOUT,
    TRAINER_ROLE,
    JobMonitor,
    PodLike,
    backfill_queries,
    due_by_source,
    lookback,
    pods_by_role,
    round_queries,
)
from rljob.health.monitor_answers import (
    Answers,
    detector_values,
    evaluate,
    failure,
    feed,
    job_error,
)
from rljob.health.profiles import TRAINER, VLLM, Series, Signal
from rljob.reconcile.in_turn import oldest_first
from rljob.reconcile.observed import ObservedPod


@dataclass(frozen=True)
class Source:
    url: str

    def describe(self) -> str:
        return self.url


@dataclass(frozen=True)
class Pod:
    name: str
    role: str
    phase: str = "Running"
    ready: bool = True
    attempt: int | None = None


PROM = Source("http://prom:9090")


def make_job(name: str, namespace: str = "ns1", interval: str = "5s", **health: Any) -> RLJob:
    body = {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "image": "img",
            "roles": {"rollout": {"replicas": 2}, "trainer": {"nodes": 1}},
            "health": {"interval": interval, **health},
        },
    }
    return parse_rljob(body)


def monitor_of(
    job: RLJob, pods: Sequence[PodLike], now: float = 0.0, source: Source | None = PROM
) -> JobMonitor[Source]:
    namespace = job.metadata.namespace or ""
    monitor: JobMonitor[Source] = JobMonitor(
        f"uid-{job.metadata.name}", (namespace, job.metadata.name), job, now
    )
    monitor.update(job, pods_by_role(pods), now, source)
    return monitor


def test_failure_names_the_first_signal_that_failed_or_was_not_answered() -> None:
    a, b, c = Signal("a", "metric_a"), Signal("b", "metric_b"), Signal("c", "metric_c")
    answers = Answers({a: {}}, {c: "HTTP 500: down"})
    assert failure([a], answers) is None
    assert failure([a, b, c], answers) == "no answer for metric_b"
    assert failure([a, c, b], answers) == "HTTP 500: down"
    assert answers.answered and not Answers({}, {c: "down"}).answered


def test_detector_values_combine_targets_per_detector() -> None:
    def valued(detector: str, key: str, value: float) -> Evaluation:
        return insufficient(detector, "pod", "", {key: value})

    values = detector_values(
        [
            valued("kv_drift", "change", -0.1),
            valued("kv_drift", "change", -0.4),
            valued("engine_stall", "flat_seconds", 3.0),
            valued("engine_stall", "flat_seconds", 30.0),
            valued("trainer_stall", "stale_seconds", math.inf),
            valued("container_restarts", "count", 2.0),
        ]
    )
    assert values == {"kv_drift": -0.4, "engine_stall": 30.0}


@pytest.mark.parametrize(
    ("answered", "asked", "pending_after"),
    [(True, True, [False]), (False, False, [False]), (False, True, [True, True, False])],
)
def test_backfill_is_tried_again_only_when_asked_and_nothing_answered(
    answered: bool, asked: bool, pending_after: list[bool]
) -> None:
    monitor = monitor_of(make_job("j"), [Pod("j-rollout-0", ROLLOUT)])
    pending = []
    for _ in range(BACKFILL_ATTEMPTS):
        if not monitor.backfill_pending:
            break
        monitor.note_backfill(answered=answered, asked=asked)
        pending.append(monitor.backfill_pending)
    assert pending == pending_after


def test_due_jobs_are_grouped_by_source_and_idle_jobs_move_to_their_next_slot() -> None:
    other = Source("http://other:9090")
    a = monitor_of(make_job("a"), [Pod("a-rollout-0", ROLLOUT)])
    b = monitor_of(make_job("b"), [Pod("b-rollout-0", ROLLOUT)], source=other)
    c = monitor_of(make_job("c"), [Pod("c-rollout-0", ROLLOUT)], source=None)
    idle = monitor_of(make_job("idle"), [])
    later = monitor_of(make_job("later"), [Pod("later-rollout-0", ROLLOUT)])
    later.next_due = 10.0
    groups = due_by_source([a, b, c, idle, later], now=3.0)
    assert groups == {PROM: [a], other: [b], None: [c]}
    assert idle.next_due == 5.0 and a.next_due == 0.0  # the loop moves the jobs it starts
    a.schedule_next(3.0)
    assert a.next_due == 5.0


def test_lookback_covers_each_jobs_time_since_its_last_round_within_bounds() -> None:
    fresh = monitor_of(make_job("fresh", interval="10s"), [])
    polled = monitor_of(make_job("polled", interval="5s"), [])
    polled.last_polled = 97.0
    assert lookback([polled], 100.0) == 5.0 + LOOKBACK_SLACK  # at least one interval
    assert lookback([fresh, polled], 100.0) == 20.0 + LOOKBACK_SLACK  # first round: two
    polled.last_polled = -5000.0
    assert lookback([polled], 100.0) == MAX_LOOKBACK + LOOKBACK_SLACK


def test_queries_merge_the_jobs_pods_by_namespace_and_backfill_takes_the_longest_span() -> None:
    short = monitor_of(
        make_job("short", kvDrift={"window": "2m", "warmup": "1m"}),
        [Pod("short-rollout-0", ROLLOUT), Pod("short-trainer-0", TRAINER_ROLE, attempt=1)],
    )
    long = monitor_of(
        make_job("long", namespace="ns2", kvDrift={"window": "10m", "warmup": "1m"}),
        [Pod("long-rollout-0", ROLLOUT)],
    )
    jobs = [short, long]
    targets = {job.uid: job.targets() for job in jobs}
    tokens = VLLM.signals()["generation_tokens"]
    queries = round_queries(jobs, targets)
    assert queries[tokens] == {"ns1": {"short-rollout-0"}, "ns2": {"long-rollout-0"}}
    heartbeat = TRAINER.signals()["trainer_heartbeat"]
    assert queries[heartbeat] == {"ns1": {"short-trainer-0"}}
    by_role = backfill_queries(jobs, targets)
    assert set(by_role) == {ROLLOUT, TRAINER_ROLE, DIAGNOSIS_ROLE}
    span, rollout = by_role[ROLLOUT]
    assert span == 660.0 + 2 * 5.0
    assert rollout[tokens] == queries[tokens]


def test_update_watches_running_pods_only_and_forgets_those_that_left() -> None:
    job = make_job("churn")
    monitor = monitor_of(
        job,
        [
            Pod("churn-rollout-0", ROLLOUT),
            Pod("churn-rollout-1", ROLLOUT),
            Pod("churn-rollout-2", ROLLOUT, phase="Pending"),
        ],
    )
    assert monitor.rollout_pods == ("churn-rollout-0", "churn-rollout-1")
    monitor.fed[ROLLOUT, "churn-rollout-1"] = 4.0
    monitor.rollout.seen.add("churn-rollout-1")
    monitor.update(job, pods_by_role([Pod("churn-rollout-0", ROLLOUT)]), 5.0, PROM)
    assert list(monitor.rollout_pods) == ["churn-rollout-0"]
    assert monitor.fed == {} and monitor.rollout.seen == set()


def observed_pod(name: str, created: datetime | None) -> ObservedPod:
    return ObservedPod(
        name=name, uid=name, role=ROLLOUT, attempt=None, node="n", phase="Running", ready=True,
        restart_count=0, unschedulable_message="", exit_code=None, reason="", message="",
        completion_index=None, deleting=False, created_at=created,
    )  # fmt: skip


def test_the_engines_are_named_in_turn_in_the_order_the_in_turn_restart_takes_them() -> None:
    """A finding naming engines in turn says what the operator will do: creation time (whole
    seconds, so a replacement can share one with an original), then name, unknown last."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    pods = [
        observed_pod("e-a", at + timedelta(seconds=5)),
        observed_pod("e-b", None),
        observed_pod("e-c", at),
        observed_pod("e-d", at + timedelta(seconds=5)),
    ]
    monitor = monitor_of(make_job("turns"), pods)

    assert monitor.rollout.turn_order == ("e-c", "e-a", "e-d", "e-b")
    assert monitor.rollout.turn_order == tuple(p.name for p in oldest_first(pods))
    assert monitor.rollout_pods == ("e-a", "e-b", "e-c", "e-d"), "queries stay by name"


def trainer_answers(pod: str, t: float, step: float) -> Answers:
    signals = TRAINER.signals()
    data: dict[Signal, dict[tuple[str, str], list[Series]]] = {s: {} for s in signals.values()}
    data[signals["trainer_heartbeat"]] = {("ns1", pod): [Series((), ((t, t),))]}
    data[signals["trainer_step"]] = {("ns1", pod): [Series((), ((t, step),))]}
    failed = {signal: "HTTP 500: down" for signal in VLLM.signals().values()}
    return Answers(data, failed)


def test_a_failed_signal_feeds_nothing_of_its_role_and_the_other_roles_go_on() -> None:
    trainer = Pod("mixed-trainer-0", TRAINER_ROLE, attempt=1)
    monitor = monitor_of(make_job("mixed"), [Pod("mixed-rollout-0", ROLLOUT), trainer])
    targets = monitor.targets()
    answers = trainer_answers(trainer.name, 10.0, 7.0)
    assert feed(monitor, targets, answers) == {ROLLOUT: "HTTP 500: down"}
    assert monitor.rollout.seen == set()
    assert monitor.trainer_readings[trainer.name].step == 7.0
    evaluations = evaluate(monitor, targets, answers, None, 10.0)
    rollout = [e for e in evaluations if e.target == "mixed-rollout-0"]
    assert {e.detector for e in rollout} == {
        "kv_drift",
        "kv_fragmentation",
        "engine_stall",
        "kv_leak",
        "prefix_collapse",
        "memory_growth",
    }
    why = "metrics source http://prom:9090: HTTP 500: down"
    assert {(e.outcome, e.evidence["source_error"]) for e in rollout} == {(INSUFFICIENT_DATA, why)}
    (trained,) = [e for e in evaluations if e.detector == "trainer_stall"]
    assert trained.evidence[TRAINER_STEP_EVIDENCE] == 7.0
    assert job_error(monitor, targets, answers, None) == "HTTP 500: down"
    assert job_error(monitor, targets, answers, "unreachable") == "unreachable"


def test_a_source_error_makes_every_evaluation_insufficient_and_feeds_nothing() -> None:
    trainer = Pod("dark-trainer-0", TRAINER_ROLE, attempt=1)
    monitor = monitor_of(make_job("dark"), [Pod("dark-rollout-0", ROLLOUT), trainer])
    answers = trainer_answers(trainer.name, 10.0, 7.0)
    evaluations = evaluate(monitor, monitor.targets(), answers, "connection refused", 10.0)
    # Six engine detectors on the rollout pod, the trainer stall detector and two canaries.
    assert len(evaluations) == 9
    assert {e.outcome for e in evaluations} == {INSUFFICIENT_DATA}
    assert all("connection refused" in e.message for e in evaluations)
    assert monitor.trainer_readings == {}


def test_a_new_attempt_or_a_gang_restart_drops_the_trainer_readings() -> None:
    job = make_job("gang")
    monitor = monitor_of(job, [Pod("gang-trainer-0", TRAINER_ROLE, attempt=1)])
    feed(monitor, monitor.targets(), trainer_answers("gang-trainer-0", 10.0, 3.0))
    assert monitor.trainer_readings
    monitor.note_restart(TRAINER_ROLE, None, 11.0)
    assert monitor.trainer_readings == {}
    feed(monitor, monitor.targets(), trainer_answers("gang-trainer-0", 12.0, 4.0))
    monitor.update(job, pods_by_role([Pod("gang-trainer-0", TRAINER_ROLE, attempt=2)]), 13.0, PROM)
    assert monitor.attempt == 2 and monitor.trainer_readings == {}


@pytest.mark.parametrize("module", ["monitor", "monitor_answers"])
def test_the_monitor_imports_no_layer_above_health(module: str) -> None:
    path = Path(__file__).parents[3] / "operator" / "rljob" / "health" / f"{module}.py"
    imported = {
        node.module
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    above = ("rljob.adapters", "rljob.runtime", "rljob.observability", "rljob.controller")
    assert not {name for name in imported if name.startswith(above)}
