"""The health scheduler with a fake metrics source (no I/O): simulated engines, trainers and
verifiers from rljob.dev.traces scraped on a grid, a fake clock, and a recorder of the
evaluations handed to the caller."""

from __future__ import annotations

import asyncio
import gc
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from rljob.adapters.metrics import (
    Collected,
    PodKey,
    Queries,
    SignalData,
    SourceKey,
    SourceKind,
    SourceUnavailable,
)
from rljob.api import RLJob, parse_rljob
from rljob.dev.traces import (
    EngineProfile,
    SimulatedEngine,
    SimulatedTrainer,
    SimulatedVerifier,
    TrainerProfile,
    VerifierProfile,
)
from rljob.health import INSUFFICIENT_DATA, EngineSample, Evaluation
from rljob.health.monitor import JobKey, next_slot
from rljob.health.monitor_engines import EngineGauges
from rljob.health.profiles import (
    GENERATION_TOKENS,
    KV_CACHE_USAGE,
    PREEMPTIONS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    SLEEP_STATE,
    TRAINER_HEARTBEAT,
    TRAINER_PHASE,
    TRAINER_STEP,
    VERIFIER_BUCKETS,
    VERIFIER_ERRORS,
    VLLM,
    Series,
    Signal,
)
from rljob.runtime import health_loop
from rljob.runtime.health_loop import BACKFILL_BATCH_JOBS, HealthScheduler
from rljob.vocabulary.enums import FailureReason

PROM = "http://prom:9090"
ENGINE_VALUES: dict[str, Callable[[EngineSample], float | None]] = {
    GENERATION_TOKENS: lambda s: s.generated_tokens_total,
    REQUESTS_RUNNING: lambda s: s.running,
    REQUESTS_WAITING: lambda s: s.waiting,
    KV_CACHE_USAGE: lambda s: s.kv_usage,
    PREFIX_CACHE_HITS: lambda s: s.prefix_hits_total,
    PREFIX_CACHE_QUERIES: lambda s: s.prefix_queries_total,
    PREEMPTIONS: lambda s: s.preemptions_total,
    SLEEP_STATE: lambda s: 0.0 if s.sleeping else 1.0,
}
PHASES = ("waiting_for_rollouts", "train", "checkpointing")


class World:
    """Simulated pods scraped every `scrape` seconds, and the clock."""

    def __init__(self, scrape: float = 1.0) -> None:
        self.now = 0.0
        self.scrape = scrape
        self.engines: dict[PodKey, SimulatedEngine] = {}
        self.trainers: dict[PodKey, SimulatedTrainer] = {}
        self.verifiers: dict[PodKey, SimulatedVerifier] = {}
        self._engine_samples: dict[PodKey, list[EngineSample]] = {}
        self._verifier_samples: dict[PodKey, list[Any]] = {}

    def clock(self) -> float:
        return self.now

    def _grid(self, start: float, end: float) -> list[float]:
        first = max(0, math.floor(start / self.scrape) + 1)
        last = math.floor(end / self.scrape + 1e-9)
        return [k * self.scrape for k in range(first, last + 1)]

    def _cached(
        self, cache: dict[PodKey, list[Any]], sim: Any, pod: PodKey, end: float
    ) -> list[Any]:
        samples = cache.setdefault(pod, [])
        next_t = samples[-1].t + self.scrape if samples else 0.0
        while next_t <= end + 1e-9:
            samples.append(sim.sample(next_t))
            next_t += self.scrape
        return samples

    def series(self, signal: Signal, pod: PodKey, start: float, end: float) -> list[Series]:
        if pod in self.engines and signal.name in ENGINE_VALUES:
            value = ENGINE_VALUES[signal.name]
            samples = self._cached(self._engine_samples, self.engines[pod], pod, end)
            points = [
                (s.t, v) for s in samples if start < s.t <= end and (v := value(s)) is not None
            ]
            return [Series((("engine", "0"),), tuple(points))] if points else []
        if pod in self.trainers:
            return self._trainer(signal, self.trainers[pod], start, end)
        if pod in self.verifiers and signal.name in (VERIFIER_BUCKETS, VERIFIER_ERRORS):
            snaps = self._cached(self._verifier_samples, self.verifiers[pod], pod, end)
            window = [s for s in snaps if start < s.t <= end]
            if signal.name == VERIFIER_ERRORS:
                return [Series((), tuple((s.t, s.errors_total or 0.0) for s in window))]
            bounds = [bound for bound, _ in window[0].buckets] if window else []
            return [
                Series(
                    (("le", "+Inf" if math.isinf(b) else repr(b)),),
                    tuple((s.t, dict(s.buckets)[b]) for s in window),
                )
                for b in bounds
            ]
        return []

    def _trainer(
        self, signal: Signal, trainer: SimulatedTrainer, start: float, end: float
    ) -> list[Series]:
        times = self._grid(start, end)
        states = [(t, trainer.state(t)) for t in times]
        if signal.name == TRAINER_HEARTBEAT:
            return [Series((), tuple((t, s.heartbeat_at) for t, s in states))]
        if signal.name == TRAINER_STEP:
            return [Series((), tuple((t, float(s.step)) for t, s in states))]
        if signal.name == TRAINER_PHASE:
            return [
                Series((("phase", phase),), tuple((t, float(s.phase == phase)) for t, s in states))
                for phase in PHASES
            ]
        return []


def copy(queries: Queries) -> dict[Signal, dict[str, set[str]]]:
    return {signal: {ns: set(pods) for ns, pods in q.items()} for signal, q in queries.items()}


@dataclass
class FakeSource:
    world: World
    kind: SourceKind = "prometheus"
    supports_history: bool = True
    down: bool = False
    calls: list[tuple[str, dict[Signal, dict[str, set[str]]]]] = field(default_factory=list)
    closed: bool = False

    def _answer(self, queries: Queries, start: float, end: float) -> Collected:
        collected: Collected = {}
        for signal, selectors in queries.items():
            if self.down:
                collected[signal] = SourceUnavailable("connection refused")
                continue
            data: SignalData = {}
            for namespace, pods in selectors.items():
                for pod in pods:
                    found = self.world.series(signal, (namespace, pod), start, end)
                    if found:
                        data[namespace, pod] = found
            collected[signal] = data
        return collected

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        self.calls.append(
            ("collect", {s: {n: set(p) for n, p in q.items()} for s, q in queries.items()})
        )
        return self._answer(queries, at - lookback, at)

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        self.calls.append(
            ("history", {s: {n: set(p) for n, p in q.items()} for s, q in queries.items()})
        )
        return self._answer(queries, start, end)

    async def close(self) -> None:
        self.closed = True

    def collects(self) -> int:
        return sum(1 for kind, _ in self.calls if kind == "collect")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[float, JobKey, list[Evaluation]]] = []
        self.clock: Callable[[], float] = lambda: 0.0

    async def __call__(self, key: JobKey, evaluations: list[Evaluation]) -> None:
        self.calls.append((self.clock(), key, evaluations))

    def for_job(self, key: JobKey) -> list[tuple[float, list[Evaluation]]]:
        return [(t, evaluations) for t, k, evaluations in self.calls if k == key]

    def findings(self) -> list[tuple[float, JobKey, Evaluation]]:
        return [(t, k, e) for t, k, evals in self.calls for e in evals if e.is_finding]


@dataclass(frozen=True)
class Pod:
    name: str
    role: str
    phase: str = "Running"
    ready: bool = True
    attempt: int | None = None


def make_job(
    name: str,
    namespace: str = "ns1",
    *,
    uid: str | None = None,
    interval: str = "5s",
    url: str | None = PROM,
    rollout: int = 4,
    verifier: bool = False,
    **health: Any,
) -> RLJob:
    roles: dict[str, Any] = {"rollout": {"replicas": rollout}, "trainer": {"nodes": 1}}
    if verifier:
        roles["verifier"] = {"replicas": 1}
    spec_health: dict[str, Any] = {"interval": interval, **health}
    if url is not None:
        spec_health["source"] = {"prometheus": {"url": url}}
    body = {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": {"image": "img", "roles": roles, "health": spec_health},
    }
    return parse_rljob(body)


def rollout_pods(job: RLJob, count: int) -> list[Pod]:
    return [Pod(f"{job.metadata.name}-rollout-{i}", "rollout") for i in range(count)]


class Bed:
    """A scheduler over a world with a fake source per source key."""

    def __init__(self, scrape: float = 1.0, history: bool = True, **options: Any) -> None:
        self.world = World(scrape)
        self.history = history
        self.sources: dict[SourceKey, FakeSource] = {}
        self.recorder = Recorder()
        self.recorder.clock = self.world.clock
        self.scheduler = HealthScheduler(
            self.factory, self.recorder, clock=self.world.clock, **options
        )

    def factory(self, key: SourceKey) -> FakeSource:
        source = self.sources[key] = FakeSource(self.world, supports_history=self.history)
        return source

    def source(self, url: str = PROM) -> FakeSource:
        return self.sources[SourceKey("prometheus", url=url)]

    def add_engines(
        self, job: RLJob, profiles: dict[int, EngineProfile] | None = None, count: int = 4
    ) -> list[Pod]:
        pods = rollout_pods(job, count)
        for index, pod in enumerate(pods):
            profile = (profiles or {}).get(index, EngineProfile())
            key = (job.metadata.namespace or "", pod.name)
            self.world.engines[key] = SimulatedEngine(profile, seed=pod.name)
        return pods

    async def run_until(self, end: float, step: float = 1.0) -> None:
        while self.world.now + step <= end + 1e-9:
            self.world.now += step
            await self.scheduler.tick()


def evaluations_total(detector: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "rljob_detector_evaluations_total", {"detector": detector, "outcome": outcome}
    )
    return value or 0.0


def insufficient_total() -> float:
    detectors = ("kv_drift", "engine_stall", "trainer_stall", "verifier_latency")
    return sum(evaluations_total(detector, INSUFFICIENT_DATA) for detector in detectors)


# ------------------------------------------------------------------ tests


def test_next_slot_is_on_the_interval_grid() -> None:
    assert next_slot(0.0, 5.0) == 5.0
    assert next_slot(12.3, 5.0) == 15.0
    assert next_slot(15.0, 5.0) == 20.0


async def test_each_job_is_due_at_its_own_interval() -> None:
    bed = Bed()
    fast, slow = make_job("fast", interval="10s"), make_job("slow", interval="30s")
    for job in (fast, slow):
        bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    await bed.scheduler.tick()  # t=0: both are new, so due at once
    await bed.run_until(60)
    times = {
        key: [t for t, _ in bed.recorder.for_job(key)] for key in (("ns1", "fast"), ("ns1", "slow"))
    }
    assert times["ns1", "fast"] == [0, 10, 20, 30, 40, 50, 60]
    assert times["ns1", "slow"] == [0, 30, 60]


async def test_one_query_per_signal_for_all_due_jobs_of_a_source() -> None:
    bed = Bed()
    jobs = [make_job(f"job{i}", namespace=f"ns{i % 2}") for i in range(3)]
    other = make_job("elsewhere", url="http://other-prom:9090")
    for job in [*jobs, other]:
        bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=2)})
    await bed.scheduler.tick()
    shared = bed.source()
    assert len(bed.sources) == 2
    kinds = [kind for kind, _ in shared.calls]
    assert kinds == ["history", "collect"]  # the new jobs' backfill, then the round
    _, queries = shared.calls[1]
    metrics = [signal.metric for signal in queries]
    # Every vLLM signal once, the pre-0.9 names too (a pod reads whichever its engine exports).
    assert len(metrics) == len(set(metrics)) == len(VLLM.signals())
    for selectors in queries.values():
        assert selectors == {
            "ns0": {"job0-rollout-0", "job0-rollout-1", "job2-rollout-0", "job2-rollout-1"},
            "ns1": {"job1-rollout-0", "job1-rollout-1"},
        }
    # Every later round: still one collect per source per tick for all three jobs.
    await bed.run_until(20)
    assert shared.collects() == 5  # t=0, 5, 10, 15, 20
    assert bed.source("http://other-prom:9090").collects() == 5
    assert len(bed.recorder.calls) == 4 * 5


async def test_the_collector_waits_while_a_round_runs() -> None:
    bed = Bed()
    job = make_job("job")
    bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    await bed.scheduler.tick()
    source, seen = bed.source(), []
    answer = source.collect

    async def collect(queries: Queries, *, lookback: float, at: float) -> Collected:
        seen.append(gc.isenabled())
        return await answer(queries, lookback=lookback, at=at)

    source.collect = collect  # type: ignore[method-assign]
    await bed.run_until(5)
    assert seen == [False]
    assert gc.isenabled()


async def test_signals_go_only_to_pods_of_the_roles_that_need_them() -> None:
    bed = Bed()
    job = make_job("mixed", verifier=True)
    pods = {
        "rollout": bed.add_engines(job, count=1),
        "trainer": [Pod("mixed-trainer-0", "trainer", attempt=1)],
        "verifier": [Pod("mixed-verifier-0", "verifier")],
    }
    bed.scheduler.register(job, pods)
    await bed.scheduler.tick()
    _, queries = bed.source().calls[-1]
    by_metric = {signal.metric: selectors["ns1"] for signal, selectors in queries.items()}
    assert by_metric["vllm:generation_tokens_total"] == {"mixed-rollout-0"}
    assert by_metric["rljob_trainer_heartbeat_timestamp_seconds"] == {"mixed-trainer-0"}
    assert by_metric["rljob_verifier_request_duration_seconds_bucket"] == {"mixed-verifier-0"}


async def test_drift_finding_reaches_on_evaluations() -> None:
    bed = Bed()
    job = make_job("drifty", kvDrift={"window": "2m", "warmup": "1m", "threshold": 0.2})
    pods = bed.add_engines(job, {3: EngineProfile(drop=0.4, drop_at=300.0)})
    bed.scheduler.register(job, {"rollout": pods})
    before = evaluations_total("kv_drift", "finding")
    await bed.run_until(600)
    findings = bed.recorder.findings()
    assert findings, "the drifting engine was never reported"
    assert {(k, e.target, e.reason) for _, k, e in findings} == {
        (("ns1", "drifty"), "drifty-rollout-3", FailureReason.KV_CACHE_DRIFT)
    }
    first = findings[0]
    assert 300 < first[0] <= 300 + 2 * 120  # within two windows of the drop
    assert first[2].evidence["change"] == pytest.approx(-0.4, abs=0.08)
    assert evaluations_total("kv_drift", "finding") - before == len(findings)
    labels = {"namespace": "ns1", "job": "drifty", "detector": "kv_drift"}
    value = REGISTRY.get_sample_value("rljob_detector_value", labels)
    assert value is not None and value < -0.3
    # Every engine past its warm-up got a verdict, the drifting one a finding.
    assert REGISTRY.get_sample_value("rljob_detector_targets_judged", labels) == len(pods)


async def test_source_down_makes_every_evaluation_insufficient() -> None:
    bed = Bed()
    job = make_job("dark", kvDrift={"window": "2m", "warmup": "1m"}, verifier=True)
    pods = {
        "rollout": bed.add_engines(job, {3: EngineProfile(drop=0.5, drop_at=200.0)}),
        "trainer": [Pod("dark-trainer-0", "trainer", attempt=1)],
        "verifier": [Pod("dark-verifier-0", "verifier")],
    }
    bed.world.trainers["ns1", "dark-trainer-0"] = SimulatedTrainer(TrainerProfile())
    bed.world.verifiers["ns1", "dark-verifier-0"] = SimulatedVerifier(VerifierProfile())
    bed.scheduler.register(job, pods)
    assert bed.scheduler.judging(("ns1", "dark")) is None  # no round yet
    await bed.run_until(190)
    assert bed.scheduler.source_error(("ns1", "dark")) is None
    bed.source().down = True
    before = sum(
        evaluations_total(d, INSUFFICIENT_DATA)
        for d in ("kv_drift", "engine_stall", "trainer_stall", "verifier_latency")
    )
    bed.recorder.calls.clear()
    await bed.run_until(600)  # the drift would be found by now
    assert bed.recorder.findings() == []
    rounds = bed.recorder.for_job(("ns1", "dark"))
    assert len(rounds) == 82
    for _, evaluations in rounds:
        assert len(evaluations) == 4 * 6 + 1 + 1 + 2  # engines, trainer, verifier, canaries
        assert {e.outcome for e in evaluations} == {INSUFFICIENT_DATA}
        assert all("connection refused" in e.message for e in evaluations)
        assert all("source_error" in e.evidence for e in evaluations)
    after = sum(
        evaluations_total(d, INSUFFICIENT_DATA)
        for d in ("kv_drift", "engine_stall", "trainer_stall", "verifier_latency")
    )
    assert after - before == 82 * 10
    error = bed.scheduler.source_error(("ns1", "dark"))
    assert error is not None and "connection refused" in error
    # The detectors judged before the outage keep their place: a round without data writes
    # nothing (the condition says SourceUnavailable meanwhile).
    assert set(bed.scheduler.judging(("ns1", "dark")) or ()) >= {"kv_drift", "engine_stall"}
    # Back up: findings resume.
    bed.source().down = False
    await bed.run_until(900)
    assert bed.scheduler.source_error(("ns1", "dark")) is None
    judged = bed.scheduler.judging(("ns1", "dark"))
    assert judged is not None
    assert {"kv_drift", "engine_stall", "trainer_stall"} <= set(judged)
    assert {e.target for _, _, e in bed.recorder.findings()} == {"dark-rollout-3"}


async def test_backfill_resumes_detection_after_an_operator_restart() -> None:
    """The operator restarts 60 s after an engine started to drift: the backfilled baseline
    predates the drop, so the drift is found; without history it never is (the new baseline
    would be the degraded throughput)."""
    found: dict[bool, list[float]] = {}
    for history in (True, False):
        bed = Bed(history=history)
        job = make_job("resumed", kvDrift={"window": "2m", "warmup": "1m"})
        pods = bed.add_engines(job, {3: EngineProfile(drop=0.4, drop_at=440.0)})
        bed.world.now = 500.0
        bed.scheduler.register(job, {"rollout": pods})
        await bed.scheduler.tick()
        first = bed.recorder.for_job(("ns1", "resumed"))[0][1]
        warming = [e for e in first if e.detector == "kv_drift" and "warming up" in e.message]
        assert bool(warming) is not history
        await bed.run_until(700)
        found[history] = [t for t, _, e in bed.recorder.findings() if e.target.endswith("-3")]
        assert sum(1 for kind, _ in bed.source().calls if kind == "history") == int(history)
    assert found[True] and found[True][0] <= 440 + 2 * 120
    assert found[False] == []


async def test_a_restart_backfills_its_jobs_in_batches() -> None:
    bed = Bed()
    jobs = [make_job(f"job{i:02d}") for i in range(2 * BACKFILL_BATCH_JOBS + 1)]
    for job in jobs:
        bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    await bed.scheduler.tick()
    backfills = [queries for kind, queries in bed.source().calls if kind == "history"]
    asked = [set().union(*next(iter(queries.values())).values()) for queries in backfills]
    assert [len(pods) for pods in asked] == [BACKFILL_BATCH_JOBS, BACKFILL_BATCH_JOBS, 1]
    assert set().union(*asked) == {f"job{i:02d}-rollout-0" for i in range(len(jobs))}
    assert bed.source().collects() == 1  # then one round for all of them


async def test_note_restart_starts_the_engine_over() -> None:
    bed = Bed()
    job = make_job("restarted", kvDrift={"window": "2m", "warmup": "1m"})
    pods = bed.add_engines(job, {3: EngineProfile(drop=0.4, drop_at=100.0)})
    bed.scheduler.register(job, {"rollout": pods})
    await bed.run_until(400)
    assert bed.recorder.findings()
    bed.scheduler.note_restart(("ns1", "restarted"), "rollout", "restarted-rollout-3", 400.0)
    bed.recorder.calls.clear()
    await bed.run_until(450)
    assert bed.recorder.findings() == []
    last = bed.recorder.for_job(("ns1", "restarted"))[-1][1]
    drift = next(e for e in last if e.detector == "kv_drift" and e.target == "restarted-rollout-3")
    assert drift.outcome == INSUFFICIENT_DATA
    assert "warming up" in drift.message


async def test_trainer_stall_is_found_from_a_frozen_heartbeat() -> None:
    bed = Bed()
    job = make_job("hung", rollout=1, trainerStall={"timeout": "30s", "startupGrace": "10s"})
    trainer = Pod("hung-trainer-0", "trainer", attempt=1)
    profile = TrainerProfile(wait_for_rollouts=5, step_seconds=5, checkpoint_every=100, hang_at=67)
    bed.world.trainers["ns1", trainer.name] = SimulatedTrainer(profile)
    bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1), "trainer": [trainer]})
    await bed.run_until(90)
    assert bed.recorder.findings() == []
    await bed.run_until(130)
    findings = bed.recorder.findings()
    assert findings
    assert {e.reason for _, _, e in findings} == {FailureReason.TRAINER_STALLED}
    assert findings[0][0] >= 65 + 30


async def test_pods_that_left_are_forgotten_and_new_pods_are_reported_missing() -> None:
    bed = Bed()
    job = make_job("churn")
    pods = bed.add_engines(job, count=2)
    bed.scheduler.register(job, {"rollout": pods})
    await bed.run_until(10)
    replacement = Pod("churn-rollout-9", "rollout")  # no metrics yet
    bed.scheduler.register(
        job, {"rollout": [pods[0], replacement, Pod("churn-rollout-1", "rollout", phase="Pending")]}
    )
    await bed.run_until(15)
    last = bed.recorder.for_job(("ns1", "churn"))[-1][1]
    targets = Counter(e.target for e in last)
    assert targets == {"churn-rollout-0": 6, "churn-rollout-9": 6}  # six engine detectors
    missing = [e for e in last if e.target == "churn-rollout-9"]
    assert all(
        e.outcome == INSUFFICIENT_DATA and "no vllm:generation_tokens_total" in e.message
        for e in missing
    )


async def test_forget_and_replace_by_uid() -> None:
    bed = Bed()
    job = make_job("gone")
    bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    await bed.run_until(5)
    assert len(bed.scheduler) == 1
    bed.scheduler.forget(("ns1", "gone"))
    bed.recorder.calls.clear()
    await bed.run_until(20)
    assert bed.recorder.calls == []
    assert len(bed.scheduler) == 0
    assert bed.source().closed  # no job uses it any more
    assert (
        REGISTRY.get_sample_value(
            "rljob_detector_value", {"namespace": "ns1", "job": "gone", "detector": "engine_stall"}
        )
        is None
    )
    first = make_job("same", uid="one")
    bed.scheduler.register(first, {"rollout": bed.add_engines(first, count=1)})
    second = make_job("same", uid="two")
    bed.scheduler.register(second, {"rollout": bed.add_engines(second, count=1)})
    assert len(bed.scheduler) == 1


async def test_jobs_without_a_source_or_pods() -> None:
    bed = Bed()
    sourceless = make_job("nosource", url=None)
    bed.scheduler.register(sourceless, {"rollout": rollout_pods(sourceless, 1)})
    idle = make_job("idle")
    bed.scheduler.register(idle, {"rollout": []})
    await bed.scheduler.tick()
    ((_, key, evaluations),) = bed.recorder.calls
    assert key == ("ns1", "nosource")
    assert {e.outcome for e in evaluations} == {INSUFFICIENT_DATA}
    assert "no metrics source" in evaluations[0].message
    # With an operator default the same job is queried there.
    default = SourceKey("prometheus", url="http://default:9090")
    bed2 = Bed(default_source=default)
    bed2.scheduler.register(sourceless, {"rollout": bed2.add_engines(sourceless, count=1)})
    await bed2.scheduler.tick()
    assert list(bed2.sources) == [default]


async def test_a_source_no_job_uses_any_more_is_closed_and_one_in_use_is_kept() -> None:
    """The unused-source check runs when a job leaves a source (moved or forgotten), not
    every tick over every job."""
    bed = Bed()
    other = "http://other-prom:9090"
    moving, staying = make_job("moving"), make_job("staying", url=other)
    for job in (moving, staying):
        bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    await bed.run_until(5)
    first = bed.source()
    moved = make_job("moving", url=other)
    bed.scheduler.register(moved, {"rollout": rollout_pods(moved, 1)})
    await bed.run_until(10)
    assert first.closed and not bed.source(other).closed  # "staying" and "moving" read it
    bed.scheduler.forget(("ns1", "moving"))
    await bed.run_until(15)
    assert not bed.source(other).closed
    bed.scheduler.forget(("ns1", "staying"))
    await bed.run_until(20)
    assert bed.source(other).closed


async def test_a_failing_callback_or_factory_does_not_stop_the_scheduler() -> None:
    bed = Bed()
    calls = 0

    async def explode(key: JobKey, evaluations: list[Evaluation]) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    def broken_factory(key: SourceKey) -> FakeSource:
        raise RuntimeError("no client")

    scheduler = HealthScheduler(broken_factory, explode, clock=bed.world.clock)
    job = make_job("fragile")
    scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    for t in range(0, 11):
        bed.world.now = float(t)
        await scheduler.tick()
    assert calls == 3
    assert scheduler.source_error(("ns1", "fragile")) == "no client"


async def test_run_loop_polls_and_closes_its_sources() -> None:
    bed = Bed(tick=0.01)
    job = make_job("looped", interval="1s")
    bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    task = asyncio.create_task(bed.scheduler.run())
    for _ in range(200):
        await asyncio.sleep(0.01)
        bed.world.now += 0.5
        if len(bed.recorder.calls) >= 3:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(bed.recorder.calls) >= 3
    assert bed.source().closed


@dataclass
class GatedSource(FakeSource):
    """A source whose instant queries wait until the gate opens; `waiting` says one does."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        self.waiting.set()
        await self.gate.wait()
        self.waiting.clear()
        return await super().collect(queries, lookback=lookback, at=at)

    async def round(self, tick: asyncio.Task[None]) -> None:
        """Lets the round that `tick` started through, once it waits here."""
        await asyncio.wait_for(self.waiting.wait(), 5)
        self.gate.set()
        await tick
        self.gate.clear()


async def test_forget_leaves_nothing_of_the_job_even_while_its_round_runs() -> None:
    world, recorder = World(), Recorder()
    made = [GatedSource(world, down=True), GatedSource(world)]
    first, second = made

    def factory(key: SourceKey) -> GatedSource:
        return made.pop(0)

    scheduler = HealthScheduler(factory, recorder, clock=world.clock)
    job, key = make_job("brief", verifier=True), ("ns1", "brief")
    pods = {
        "rollout": rollout_pods(job, 1),
        "trainer": [Pod("brief-trainer-0", "trainer", attempt=1)],
        "verifier": [Pod("brief-verifier-0", "verifier")],
    }
    scheduler.register(job, pods)
    await first.round(asyncio.create_task(scheduler.tick()))
    assert scheduler.source_error(key) is not None
    assert scheduler.job_keys() == {key}
    world.now = 5.0
    in_flight = asyncio.create_task(scheduler.tick())
    await asyncio.wait_for(first.waiting.wait(), 5)
    recorder.calls.clear()
    scheduler.forget(key)  # deleted while its round waits for the source
    assert scheduler.job_keys() == set() and len(scheduler) == 0
    await first.round(in_flight)
    assert recorder.calls == [] and scheduler.job_keys() == set()
    assert scheduler.source_error(key) is None and first.closed
    for detector in ("kv_drift", "engine_stall", "trainer_stall", "verifier_latency"):
        labels = {"namespace": "ns1", "job": "brief", "detector": detector}
        assert REGISTRY.get_sample_value("rljob_detector_value", labels) is None
        assert REGISTRY.get_sample_value("rljob_detector_targets_judged", labels) is None
    # Registered again, it starts over: due at once, backfilled again.
    scheduler.register(job, pods)
    await second.round(asyncio.create_task(scheduler.tick()))
    # One per role (rollout, trainer, verifier, diagnosis).
    assert [kind for kind, _ in second.calls] == ["history"] * 4 + ["collect"]
    assert [k for _, k, _ in recorder.calls] == [key]


async def test_a_detector_defect_costs_its_job_the_round_not_the_other_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rljob.health.monitor_answers import evaluate as real
    from rljob.runtime import health_loop

    def broken_for_one(monitor: Any, *args: Any) -> list[Evaluation]:
        if monitor.key[1] == "broken":
            raise ZeroDivisionError("a detector's defect")
        return real(monitor, *args)

    monkeypatch.setattr(health_loop, "evaluate", broken_for_one)
    bed = Bed()
    for name in ("broken", "sound"):
        job = make_job(name)
        bed.scheduler.register(job, {"rollout": bed.add_engines(job, count=1)})
    await bed.run_until(10)
    assert len(bed.recorder.for_job(("ns1", "sound"))) == 3  # t=0, 5, 10
    assert bed.recorder.for_job(("ns1", "broken")) == []


# ------------------------------------------------------------------ generationFrom engine


@dataclass(frozen=True)
class EnginePod:
    name: str
    role: str
    ip: str
    phase: str = "Running"
    ready: bool = True


@dataclass
class FakeVersions:
    """Engines' own weight versions by base URL; what was read, and at most how many at once."""

    versions: dict[str, int | None] = field(default_factory=dict)
    reads: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    running: int = 0
    most: int = 0
    closed: bool = False

    async def read(self, base_url: str, paths: Any) -> int | None:
        self.reads.append((base_url, tuple(paths)))
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0)  # a GET yields to the loop: the others start meanwhile
        self.running -= 1
        return self.versions.get(base_url)

    async def close(self) -> None:
        self.closed = True


def engine_job(
    name: str, *, engine: str = "sglang", generation_from: str = "engine", url: str | None = PROM
) -> RLJob:
    body = make_job(name, url=url).model_dump(mode="json", by_alias=True, exclude_none=True)
    body["spec"]["roles"]["rollout"].update(
        engine=engine, weightSync="Gated", generationFrom=generation_from
    )
    return parse_rljob(body)


def engine_pods(job: RLJob, count: int) -> list[EnginePod]:
    return [
        EnginePod(f"{job.metadata.name}-rollout-{i}", "rollout", f"10.0.0.{i}")
        for i in range(count)
    ]


class GaugesSeen:
    """The on_evaluations callback: the job's engine readings as the passes would take them."""

    def __init__(self) -> None:
        self.scheduler: HealthScheduler | None = None
        self.seen: list[dict[str, EngineGauges]] = []

    async def __call__(self, key: JobKey, evaluations: list[Evaluation]) -> None:
        assert self.scheduler is not None
        self.seen.append(dict(self.scheduler.engine_gauges(key)))


def versions_bed(versions: FakeVersions) -> tuple[Bed, GaugesSeen]:
    bed = Bed()
    seen = GaugesSeen()
    bed.scheduler = seen.scheduler = HealthScheduler(
        bed.factory, seen, clock=bed.world.clock, weight_versions=versions
    )
    return bed, seen


@pytest.mark.parametrize(
    ("engine", "port", "paths"),
    [
        pytest.param("sglang", 30000, ("/model_info", "/get_weight_version"), id="sglang"),
        pytest.param("vllm", 8000, ("/weight_info",), id="vllm"),
    ],
)
async def test_an_engine_s_own_weight_version_is_its_generation(
    engine: str, port: int, paths: tuple[str, ...]
) -> None:
    versions = FakeVersions({f"http://10.0.0.0:{port}": 7, f"http://10.0.0.1:{port}": None})
    bed, seen = versions_bed(versions)
    job = engine_job("engines", engine=engine)
    pods = engine_pods(job, 2)
    for pod in pods:  # the source's running counts for the same pods
        bed.world.engines["ns1", pod.name] = SimulatedEngine(EngineProfile(), seed=pod.name)
    bed.scheduler.register(job, {"rollout": pods})
    bed.world.now = 10.0

    await bed.scheduler.tick()

    assert sorted(versions.reads) == [(f"http://10.0.0.{i}:{port}", paths) for i in range(2)]
    (gauges,) = seen.seen  # merged before the evaluations were handed on
    read = gauges["engines-rollout-0"]
    assert (read.generation, read.t) == (7, 10.0)
    assert read.running is not None, "the source's running count is kept"
    assert gauges["engines-rollout-1"].generation is None, "no version: none merged"

    versions.versions[f"http://10.0.0.0:{port}"] = None  # its next read fails (a timeout)
    bed.world.now = 15.0
    await bed.scheduler.tick()
    later = seen.seen[-1]["engines-rollout-0"]
    assert later.generation == 7, "a failed read keeps the engine's last version"


class HungVersions(FakeVersions):
    """An engine that never answers its weight version."""

    async def read(self, base_url: str, paths: Any) -> int | None:
        await asyncio.Event().wait()
        return None


async def test_hung_engines_cost_their_round_at_most_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(health_loop, "GENERATION_DEADLINE", 0.05)
    bed, seen = versions_bed(HungVersions())
    job = engine_job("hung")
    bed.scheduler.register(job, {"rollout": engine_pods(job, 2)})
    bed.world.now = 1.0
    await asyncio.wait_for(bed.scheduler.tick(), 5)
    assert seen.seen, "the round went on to the evaluations without the versions"


@pytest.mark.parametrize(
    ("job", "reads"),
    [
        pytest.param(
            engine_job("opted", generation_from="metrics"), 0, id="generation-from-metrics"
        ),
        pytest.param(make_job("ungated"), 0, id="an-ungated-job"),
        pytest.param(engine_job("opted"), 3, id="generation-from-engine"),
    ],
)
async def test_only_jobs_that_opt_in_are_read(job: RLJob, reads: int) -> None:
    versions = FakeVersions()
    bed, _ = versions_bed(versions)
    bed.scheduler.register(job, {"rollout": engine_pods(job, 3)})
    await bed.run_until(10)
    assert len(versions.reads) == reads * 3  # rounds at t=1, 5 and 10


async def test_without_a_metrics_source_the_reading_is_the_generation_alone() -> None:
    versions = FakeVersions({"http://10.0.0.0:30000": 4})
    bed, seen = versions_bed(versions)
    job = engine_job("sourceless", url=None)
    bed.scheduler.register(job, {"rollout": engine_pods(job, 1)})
    bed.world.now = 3.0

    await bed.scheduler.tick()

    assert seen.seen == [{"sourceless-rollout-0": EngineGauges(3.0, None, 4)}]


async def test_reads_are_bounded_and_a_job_s_pods_follow_register() -> None:
    versions = FakeVersions()
    bed, _ = versions_bed(versions)
    job = engine_job("wide", url=None)
    pods = engine_pods(job, 40)
    bed.scheduler.register(job, {"rollout": pods})
    await bed.scheduler.tick()
    assert len(versions.reads) == 40 and versions.most == 16

    versions.reads.clear()
    gone = EnginePod(pods[0].name, "rollout", "")  # no IP: nothing to read
    bed.scheduler.register(job, {"rollout": [gone, pods[1]]})
    bed.world.now = 5.0
    await bed.scheduler.tick()
    assert versions.reads == [("http://10.0.0.1:30000", ("/model_info", "/get_weight_version"))]

    bed.scheduler.forget(("ns1", "wide"))
    await bed.scheduler.close()
    assert versions.closed
