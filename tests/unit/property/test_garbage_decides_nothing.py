"""Garbage and missing metrics decide nothing: a job runs healthy, then its metrics source
starts answering garbage (NaN, infinities, negative or decreasing counters, huge numbers, bad
timestamps, non-numeric values, missing, duplicated, stale or foreign series, failed queries)
for some pods and signals, and no detector finds anything: every evaluation is healthy or
insufficient data, so the failure policy never gets a finding to restart for.

The pipeline is the health scheduler's, minus its I/O: Prometheus answers (JSON, as sent) ->
parse_matrix -> the profiles' samples and readings -> the detectors, one round per interval,
a role fed nothing in a round where one of its queries failed. Control tests run the same
pipeline on clean data with a real fault, to show that it does find things."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rljob.adapters.metrics import Rejects, SourceError, parse_matrix
from rljob.health import (
    DriftConfig,
    EngineStallConfig,
    EngineStallDetector,
    Evaluation,
    KVDriftDetector,
    TrainerStallConfig,
    TrainerStallDetector,
    VerifierLatencyConfig,
    VerifierLatencyDetector,
)
from rljob.health.profiles import (
    TRAINER,
    TRAINER_HEARTBEAT,
    VERIFIER,
    VLLM,
    Series,
    Signal,
    TrainerReading,
    engine_samples,
    trainer_reading,
    trainer_signals,
    verifier_samples,
)
from rljob.vocabulary.enums import FailureReason
from tests.unit.property.strategies import FEW, GARBAGE_VALUES, HUGE_INT

NAMESPACE = "ns"
ENGINES = ("rollout-0", "rollout-1", "rollout-2", "rollout-3")
TRAINERS = ("trainer-0", "trainer-1")
VERIFIERS = ("verifier-0",)
INTERVAL = 10.0
STALENESS = 15.0  # the scheduler's MIN_STALENESS, above the interval
SCRAPES_PER_ANSWER = 3  # a range vector over the last few scrapes, overlapping the last answer
HEALTHY_ROUNDS = 16  # past drift warm-up (30 s) plus a covered window (60 s)
FAULT_ROUNDS = 16  # past every timeout and window

DRIFT = DriftConfig(threshold=0.2, window=60, warmup=30, cooldown=600, interval=INTERVAL)
ENGINE_STALL = EngineStallConfig(timeout=30, interval=INTERVAL)
TRAINER_STALL = TrainerStallConfig(timeout=30, startup_grace=0)
VERIFIER_LATENCY = VerifierLatencyConfig(p99=1.0, window=60, interval=INTERVAL)

Labels = dict[str, str]
Exported = list[tuple[Labels, Callable[[float], float]]]  # the series of one pod and signal


@dataclass(frozen=True)
class Workload:
    """What the pods export, healthy unless a real fault is set (for the control tests)."""

    flat_engine: str | None = None  # its token counter stops at REAL_FAULT_AT
    slow_engine: str | None = None  # its throughput halves at REAL_FAULT_AT
    frozen_heartbeat: bool = False  # every rank's heartbeat stops at REAL_FAULT_AT
    slow_verifier: bool = False  # every request takes over 10 s from REAL_FAULT_AT
    partial_histogram: bool = False  # the buckets under 10 s read NaN from REAL_FAULT_AT

    def engine(self, signal: str, pod: str) -> Exported:
        offset = float(ENGINES.index(pod)) * 1e5

        def tokens(s: float) -> float:
            after = 0.0 if pod == self.flat_engine else 0.5 if pod == self.slow_engine else 1.0
            return offset + 1000 * min(s, REAL_FAULT_AT) + 1000 * after * max(0, s - REAL_FAULT_AT)

        engine = {"engine": "0"}
        series: dict[str, Exported] = {
            "generation_tokens": [(engine, tokens)],
            "requests_running": [(engine, lambda s: 8.0)],
            "requests_waiting": [(engine, lambda s: 4.0)],
            "kv_cache_usage": [(engine, lambda s: 0.5)],
            "prefix_cache_hits": [(engine, lambda s: 600 * s)],
            "prefix_cache_queries": [(engine, lambda s: 1000 * s)],
            "preemptions": [(engine, lambda s: 0.0)],
            "sleep_state": [({**engine, "sleep_state": "awake"}, lambda s: 1.0)],
        }
        return series.get(signal, [])

    def trainer(self, signal: str, pod: str) -> Exported:
        def heartbeat(s: float) -> float:
            return min(s, REAL_FAULT_AT) - 1 if self.frozen_heartbeat else s - 1

        series: dict[str, Exported] = {
            "trainer_heartbeat": [({}, heartbeat)],
            "trainer_step": [({}, lambda s: s // 10)],
            "trainer_phase": [({"phase": "train"}, lambda s: 1.0)],
            "policy_generation": [({}, lambda s: 1.0)],
        }
        return series.get(signal, [])

    def verifier(self, signal: str, pod: str) -> Exported:
        def count(bound: float) -> Callable[[float], float]:
            def cumulative(s: float) -> float:
                if self.partial_histogram and bound < 10 and s >= REAL_FAULT_AT:
                    return math.nan
                fast = 100 * min(s, REAL_FAULT_AT) if self.slow_verifier else 100 * s
                slow = 100 * max(0.0, s - REAL_FAULT_AT) if self.slow_verifier else 0.0
                return fast + (slow if math.isinf(bound) else 0.0)

            return cumulative

        bounds = (0.1, 1.0, 10.0, math.inf)
        series: dict[str, Exported] = {
            "verifier_buckets": [({"le": _le(b)}, count(b)) for b in bounds],
            "verifier_errors": [({}, lambda s: 0.0)],
        }
        return series.get(signal, [])


REAL_FAULT_AT = HEALTHY_ROUNDS * INTERVAL


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


# ------------------------------------------------------------------ garbage

VALUE_FAULTS = ("nan", "infinite", "negative", "non_numeric", "huge")
SERIES_FAULTS = (
    "bad_timestamp",
    "decreasing",
    "missing",
    "conflicting_duplicate",
    "unrequested",
    "missing_labels",
    "stale",
    "source_error",
)
FAULT_KINDS = VALUE_FAULTS + SERIES_FAULTS
# Timestamps as values: one going back is a stale heartbeat (a real signal), not garbage.
NOT_DECREASING = {TRAINER_HEARTBEAT}


@dataclass(frozen=True)
class Fault:
    """From round `start` on, the series of `signals` of `pod` come back as `kind` of
    garbage (`value` where a garbage value is needed)."""

    kind: str
    pod: str
    signals: frozenset[str]
    start: int
    value: Any = "NaN"

    @property
    def start_time(self) -> float:
        return self.start * INTERVAL


ROLES: dict[str, tuple[tuple[str, ...], Mapping[str, Signal]]] = {
    "rollout": (ENGINES, VLLM.signals()),
    "trainer": (TRAINERS, TRAINER.signals()),
    "verifier": (VERIFIERS, VERIFIER.signals()),
}


@st.composite
def faults(draw: st.DrawFn) -> Fault:
    role = draw(st.sampled_from(list(ROLES)))
    pods, signals = ROLES[role]
    names = sorted(signals)
    chosen = draw(st.one_of(st.just(frozenset(names)), st.sets(st.sampled_from(names), min_size=1)))
    kind = draw(st.sampled_from(FAULT_KINDS))
    if kind == "decreasing":
        chosen = frozenset(chosen - NOT_DECREASING)
    value = {
        "nan": "NaN",
        "infinite": draw(st.sampled_from(["+Inf", "-Inf"])),
        "negative": draw(st.sampled_from(["-1", "-1e300"])),
        "non_numeric": draw(st.sampled_from(["abc", "", None, True, [], {}, "0x10"])),
        "huge": draw(st.sampled_from([HUGE_INT, "1e400", 1e300])),
        "bad_timestamp": draw(st.sampled_from(GARBAGE_VALUES)),
    }.get(kind, "NaN")
    start = draw(st.integers(HEALTHY_ROUNDS // 2, HEALTHY_ROUNDS))
    return Fault(kind, draw(st.sampled_from(pods)), frozenset(chosen), start, value)


def _points(values: Callable[[float], float], times: list[float]) -> list[list[Any]]:
    return [[s, repr(values(s))] for s in times]


def _scrape_times(round_: int, until: float | None = None) -> list[float]:
    now = round_ * INTERVAL if until is None else until
    return [
        now - k * INTERVAL for k in reversed(range(SCRAPES_PER_ANSWER)) if now - k * INTERVAL > 0
    ]


def _items(
    signal: Signal,
    pod: str,
    labels: Labels,
    values: Callable[[float], float],
    round_: int,
    fault: Fault | None,
) -> list[dict[str, Any]]:
    """The result items of one series of one pod in one round's answer."""
    metric = {"__name__": signal.metric, "namespace": NAMESPACE, "pod": pod, **labels}
    times = _scrape_times(round_)
    if fault is None or round_ < fault.start:
        return [{"metric": metric, "values": _points(values, times)}]
    kind, start = fault.kind, fault.start_time
    healthy = [[s, repr(values(s))] for s in times if s < start]
    broken = [s for s in times if s >= start]
    if kind in VALUE_FAULTS:
        return [{"metric": metric, "values": healthy + [[s, fault.value] for s in broken]}]
    if kind == "bad_timestamp":
        return [{"metric": metric, "values": healthy + [[fault.value, "1"] for _ in broken]}]
    if kind == "decreasing":
        last = values(start - INTERVAL)  # each point lower than the one before
        falling = [[s, repr(last - 1e3 * (s - start + INTERVAL))] for s in broken]
        return [{"metric": metric, "values": healthy + falling}]
    if kind == "missing":
        return []
    if kind == "conflicting_duplicate":
        frozen = [[s, repr(values(start))] for s in times]
        real = _points(values, times)
        return [{"metric": metric, "values": frozen}, {"metric": metric, "values": real}]
    if kind == "unrequested":
        return [{"metric": {**metric, "pod": "stranger"}, "values": _points(values, times)}]
    if kind == "missing_labels":
        return [
            {
                "metric": {k: v for k, v in metric.items() if k != "pod"},
                "values": _points(values, times),
            }
        ]
    assert kind == "stale"
    return [{"metric": metric, "values": _points(values, _scrape_times(0, until=start - INTERVAL))}]


def answer(
    signal: Signal,
    pods: tuple[str, ...],
    exported: Callable[[str, str], Exported],
    round_: int,
    faults_now: list[Fault],
) -> object:
    """One round's Prometheus answer for one signal, as it comes off the wire."""
    by_pod = {f.pod: f for f in faults_now if signal.name in f.signals and round_ >= f.start}
    if any(f.kind == "source_error" for f in by_pod.values()):
        return {"status": "error", "errorType": "timeout", "error": "query timed out"}
    result = [
        item
        for pod in pods
        for labels, values in exported(signal.name, pod)
        for item in _items(signal, pod, labels, values, round_, by_pod.get(pod))
    ]
    wire = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
    return json.loads(wire)


# ------------------------------------------------------------------ the pipeline


@dataclass
class Job:
    """One job's detectors and what the scheduler remembers between rounds."""

    drift: KVDriftDetector = field(default_factory=lambda: KVDriftDetector(DRIFT))
    engine_stall: EngineStallDetector = field(
        default_factory=lambda: EngineStallDetector(ENGINE_STALL)
    )
    trainer: TrainerStallDetector = field(
        default_factory=lambda: TrainerStallDetector(TRAINER_STALL)
    )
    verifier: VerifierLatencyDetector = field(
        default_factory=lambda: VerifierLatencyDetector(VERIFIER_LATENCY)
    )
    fed: dict[str, float] = field(default_factory=dict)
    readings: dict[str, TrainerReading] = field(default_factory=dict)


def collect(
    role: str, workload: Workload, round_: int, faults_now: list[Fault]
) -> dict[str, dict[tuple[str, str], list[Series]]] | None:
    """Each signal's parsed answer; None when one of the role's queries failed."""
    pods, signals = ROLES[role]
    exported = getattr(workload, "engine" if role == "rollout" else role)
    collected = {}
    for name, signal in signals.items():
        try:
            collected[name] = parse_matrix(
                answer(signal, pods, exported, round_, faults_now),
                {NAMESPACE: set(pods)},
                Rejects("prometheus"),
            )
        except SourceError:
            return None
    return collected


def _pod(
    collected: Mapping[str, Mapping[tuple[str, str], list[Series]]], pod: str
) -> dict[str, list[Series]]:
    return {name: list(data.get((NAMESPACE, pod), [])) for name, data in collected.items()}


def _feed(
    job: Job,
    pods: tuple[str, ...],
    collected: Mapping[str, Mapping[tuple[str, str], list[Series]]],
    samples_of: Callable[..., Sequence[Any]],
    observers: Sequence[Callable[[str, Any], None]],
) -> None:
    """Each pod's new samples (after the last fed, thinned as the detectors would) to the
    role's detectors."""
    for pod in pods:
        samples = samples_of(
            _pod(collected, pod),
            STALENESS,
            after=job.fed.get(pod, -math.inf),
            min_spacing=INTERVAL * 0.8,
        )
        for sample in samples:
            for observe in observers:
                observe(pod, sample)
        if samples:
            job.fed[pod] = samples[-1].t


def run_round(
    job: Job, workload: Workload, round_: int, faults_now: list[Fault]
) -> list[Evaluation]:
    now = round_ * INTERVAL
    evaluations: list[Evaluation] = []
    rollout = collect("rollout", workload, round_, faults_now)
    if rollout is not None:
        observers = (job.drift.observe, job.engine_stall.observe)
        _feed(job, ENGINES, rollout, partial(engine_samples, VLLM), observers)
        evaluations += job.drift.evaluate(now) + job.engine_stall.evaluate(now)
    trainer = collect("trainer", workload, round_, faults_now)
    if trainer is not None:
        for pod in TRAINERS:
            reading = trainer_reading(TRAINER, _pod(trainer, pod))
            known = job.readings.get(pod)
            if reading is not None and (known is None or reading.t >= known.t):
                job.readings[pod] = reading
        signals = trainer_signals(job.readings.values(), pods_running=True, attempt_started_at=0.0)
        evaluations.append(job.trainer.evaluate(signals, now))
    verifier = collect("verifier", workload, round_, faults_now)
    if verifier is not None:
        _feed(
            job, VERIFIERS, verifier, partial(verifier_samples, VERIFIER), (job.verifier.observe,)
        )
        evaluations += job.verifier.evaluate(now)
    return evaluations


def run_job(workload: Workload, faults_now: Sequence[Fault] = ()) -> list[list[Evaluation]]:
    """Each round's evaluations."""
    job = Job()
    rounds = range(1, HEALTHY_ROUNDS + FAULT_ROUNDS + 1)
    return [run_round(job, workload, round_, list(faults_now)) for round_ in rounds]


# ------------------------------------------------------------------ properties


@FEW
@given(st.lists(faults(), min_size=1, max_size=4))
def test_garbage_and_missing_metrics_never_make_a_finding(faults_now: list[Fault]) -> None:
    rounds = run_job(Workload(), faults_now)

    findings = [e for evaluations in rounds for e in evaluations if e.is_finding]
    assert findings == [], findings[0].message


def test_the_healthy_job_is_judged_healthy() -> None:
    """Without garbage every detector has data and says healthy: the property above is not
    vacuous (insufficient data all along)."""
    last_round = run_job(Workload())[-1]

    assert {(e.detector, e.outcome) for e in last_round} == {
        ("kv_drift", "healthy"),
        ("engine_stall", "healthy"),
        ("trainer_stall", "healthy"),
        ("verifier_latency", "healthy"),
    }


@pytest.mark.parametrize(
    ("workload", "reason"),
    [
        pytest.param(
            Workload(flat_engine="rollout-1"), FailureReason.ENGINE_STALLED, id="engine-stall"
        ),
        pytest.param(
            Workload(slow_engine="rollout-2"), FailureReason.KV_CACHE_DRIFT, id="kv-drift"
        ),
        pytest.param(
            Workload(frozen_heartbeat=True), FailureReason.TRAINER_STALLED, id="trainer-stall"
        ),
        pytest.param(Workload(slow_verifier=True), FailureReason.VERIFIER_SLOW, id="verifier-slow"),
    ],
)
def test_a_real_fault_in_clean_data_is_found(workload: Workload, reason: FailureReason) -> None:
    found = {e.reason for evaluations in run_job(workload) for e in evaluations if e.is_finding}

    assert reason in found


def test_a_histogram_missing_its_low_buckets_is_not_slowness() -> None:
    rounds = run_job(Workload(partial_histogram=True))

    assert [e.message for evaluations in rounds for e in evaluations if e.is_finding] == []
