"""The diagnosis through a job's monitor: the diagnosis series a round answers reach the
bottleneck and the canaries, and a failing diagnosis query blinds nothing else."""

from __future__ import annotations

from rljob.health import INSUFFICIENT_DATA
from rljob.health.job_diagnosis import DIAGNOSIS_ROLE
from rljob.health.monitor import ROLLOUT, TRAINER_ROLE
from rljob.health.monitor_answers import Answers, evaluate, job_error
from rljob.health.profiles import TRAINER, VLLM, Series, Signal
from rljob.health.profiles.diagnosis import DIAGNOSIS, PHASE_SECONDS, REWARD_TRAIN
from rljob.vocabulary.enums import BottleneckRole
from tests.unit.health.test_monitor import Pod, make_job, monitor_of

TRAINER_POD = Pod("j-trainer-0", TRAINER_ROLE, attempt=1)
ENGINES = [Pod("j-rollout-0", ROLLOUT), Pod("j-rollout-1", ROLLOUT)]
PODS = [*ENGINES, TRAINER_POD]
INTERVAL = 5.0


def one(value: float, t: float, *labels: tuple[str, str]) -> list[Series]:
    return [Series(tuple(labels), ((t, value),))]


def round_answers(t: float, waited: float, trained: float) -> Answers:
    """Engines idle with few requests, and the trainer's phase seconds at `t`."""
    data: dict[Signal, dict[tuple[str, str], list[Series]]] = {}
    for pod in ENGINES:
        key = ("ns1", pod.name)
        for name, value in (
            ("generation_tokens", 100.0 * t),
            ("requests_running", 2.0),
            ("requests_waiting", 0.0),
            ("kv_cache_usage", 0.1),
        ):
            data.setdefault(VLLM.signals()[name], {})[key] = one(value, t)
    trainer = ("ns1", TRAINER_POD.name)
    for signal in TRAINER.signals().values():
        data.setdefault(signal, {})
    for signal in VLLM.signals().values():
        data.setdefault(signal, {})
    data.setdefault(TRAINER.signals()["trainer_heartbeat"], {})[trainer] = one(t, t)
    data.setdefault(TRAINER.signals()["trainer_step"], {})[trainer] = one(t // 10, t)
    phases = DIAGNOSIS.trainer_signals()[PHASE_SECONDS]
    data[phases] = {
        trainer: [
            *one(waited, t, ("phase", "waiting_for_rollouts")),
            *one(trained, t, ("phase", "training")),
        ]
    }
    return Answers(data, {})


def test_a_trainer_waiting_on_idle_engines_is_diagnosed_from_one_rounds_series() -> None:
    monitor = monitor_of(make_job("j", interval="5s", bottleneck={"window": "1m"}), PODS)
    for i in range(1, 40):
        t = i * INTERVAL
        evaluate(monitor, monitor.targets(), round_answers(t, 0.8 * t, 0.2 * t), None, t)
    bottleneck = monitor.diagnosis.bottleneck
    assert bottleneck is not None
    assert bottleneck.role == BottleneckRole.ROLLOUT_CONCURRENCY
    shares = {p.phase: p.share for p in bottleneck.phases}
    assert abs(shares["waiting_for_rollouts"] - 0.8) < 0.05
    assert {e.pod for e in bottleneck.engines} == {p.name for p in ENGINES}


def test_a_failed_diagnosis_query_blinds_no_other_detector() -> None:
    monitor = monitor_of(make_job("j"), PODS)
    answers = round_answers(10.0, 8.0, 2.0)
    broken = DIAGNOSIS.trainer_signals()[REWARD_TRAIN]
    answers = Answers(answers.data, {broken: "HTTP 422: bad query"})
    evaluations = evaluate(monitor, monitor.targets(), answers, None, 10.0)
    stall = [e for e in evaluations if e.detector == "trainer_stall"]
    assert stall and stall[0].outcome != INSUFFICIENT_DATA
    canaries = [e for e in evaluations if e.detector in ("reward_hacking", "throughput_regression")]
    assert {e.outcome for e in canaries} == {INSUFFICIENT_DATA}
    assert all("HTTP 422" in e.message for e in canaries)
    assert job_error(monitor, monitor.targets(), answers, None) == "HTTP 422: bad query"


def test_diagnosis_series_nobody_exports_are_no_source_error() -> None:
    monitor = monitor_of(make_job("j"), PODS)
    answers = round_answers(10.0, 8.0, 2.0)
    wanted = dict(monitor.role_queries(monitor.targets()))
    diagnosis_only = set(wanted.pop(DIAGNOSIS_ROLE)) - {s for w in wanted.values() for s in w}
    assert {s.metric for s in diagnosis_only} >= {"rljob_trainer_phase_seconds_total"}
    partial = Answers({s: v for s, v in answers.data.items() if s not in diagnosis_only}, {})
    assert job_error(monitor, monitor.targets(), partial, None) is None
