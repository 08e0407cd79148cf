"""EngineMemoryGrowth: a serving engine's host memory rising steadily over its lower envelope
(the minimum of each 10-minute bucket) by max(25 % of its baseline, 2 GiB); sleep and wake,
one-off steps, load swings and the warm-up give no finding, a restart starts it over, and an
engine without a memory signal is insufficient data, for this detector only."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from rljob.api.roles import GangEngines
from rljob.api.spec import Health, RolloutRole
from rljob.health.causes import MemoryGrowthConfig, MemoryGrowthDetector
from rljob.health.evaluation import FINDING, HEALTHY, INSUFFICIENT_DATA, MEMORY_GROWTH, Evaluation
from rljob.health.monitor import ROLLOUT
from rljob.health.monitor_answers import Answers, evaluate, job_error
from rljob.health.profiles import (
    MEMORY_WORKING_SET,
    OPTIONAL_ENGINE_SIGNALS,
    PROCESS_TREE_RSS,
    SGLANG,
    VLLM,
    Series,
    Signal,
    engine_metrics,
    engine_samples,
)
from rljob.health.samples import PROCESS_TREE_MEMORY, WORKING_SET_MEMORY, EngineSample
from rljob.vocabulary.enums import FailureReason
from tests.unit.health.test_monitor import Pod, make_job, monitor_of

GIB = float(1 << 30)
HOUR = 3600.0
INTERVAL = 30.0
CONFIG = MemoryGrowthConfig(interval=INTERVAL)
POD = "rollout-0"
BASE = 40 * GIB  # an 8B model server's host memory
WEIGHTS = 16.06e9  # Llama-3.1-8B in BF16, copied to host by sleep level 1
ONSET = 2 * HOUR

Memory = Callable[[float], float]


def sample(
    t: float,
    memory: float | None,
    *,
    sleeping: bool | None = False,
    running: float = 32.0,
    tokens: float | None = None,
    signal: str = WORKING_SET_MEMORY,
) -> EngineSample:
    return EngineSample(
        t,
        generated_tokens_total=100.0 * t if tokens is None else tokens,
        running=running,
        waiting=0.0,
        sleeping=sleeping,
        memory_bytes=memory,
        memory_signal=signal if memory is not None else None,
    )


def noisy(memory: Memory, seed: int = 0, spread: float = 0.3 * GIB) -> Memory:
    """`memory` plus a batch's request state and allocator high-water: 0 to `spread` above."""
    rng = random.Random(seed)
    return lambda t: memory(t) + rng.uniform(0.0, spread)


def growing(gib_per_hour: float, onset: float = ONSET) -> Memory:
    return lambda t: BASE + max(0.0, t - onset) / HOUR * gib_per_hour * GIB


def flat(t: float) -> float:
    return BASE


Trace = Callable[[float], EngineSample]


def serving(memory: Memory, *, signal: str = WORKING_SET_MEMORY) -> Trace:
    return lambda t: sample(t, memory(t), signal=signal)


def sleep_wake(memory: Memory, *, gauge: bool = True) -> Trace:
    """Colocated sync RL: 20 minutes generating, then asleep at level 1 for 25 minutes (the
    trainer trains) with the weights in host memory; without the sleep gauge (vLLM before
    0.11.1) the asleep readings read as awake."""

    def at(t: float) -> EngineSample:
        asleep = t % (45 * 60) >= 20 * 60
        value = memory(t) + (WEIGHTS if asleep else 0.0)
        return sample(t, value, sleeping=asleep if gauge else None, running=0 if asleep else 64)

    return at


def step(at: float, size: float, memory: Memory = flat) -> Memory:
    return lambda t: memory(t) + (size if t >= at else 0.0)


def load_swings(t: float) -> float:
    """Batches of 8 to 256 sequences holding 8 MiB each, the load changing every 7 minutes."""
    batch = random.Random(int(t // 420)).choice((8, 64, 128, 256))
    return BASE + batch * 8 * (1 << 20)


def warm_up(t: float) -> float:
    """Model load and CUDA graph capture: host memory climbs for 15 minutes, then holds."""
    return BASE * min(1.0, 0.2 + t / (15 * 60))


def run(
    trace: Trace, hours: float, detector: MemoryGrowthDetector | None = None, start: float = 0.0
) -> tuple[MemoryGrowthDetector, list[Evaluation]]:
    """Feeds the trace every INTERVAL and evaluates after each sample: the i-th evaluation is
    at start + i INTERVAL."""
    detector = detector or MemoryGrowthDetector(CONFIG)
    evaluations = []
    t = start
    while t <= start + hours * HOUR:
        detector.observe(POD, trace(t))
        (evaluation,) = detector.evaluate(t)
        evaluations.append(evaluation)
        t += INTERVAL
    return detector, evaluations


def first(evaluations: list[Evaluation], outcome: str) -> Evaluation | None:
    return next((e for e in evaluations if e.outcome == outcome), None)


CASES = [
    pytest.param(serving(noisy(flat)), 12, HEALTHY, id="flat"),
    pytest.param(serving(noisy(growing(2.0))), 12, FINDING, id="steady-growth-2-gib-an-hour"),
    pytest.param(serving(noisy(growing(8.0))), 6, FINDING, id="fast-growth-8-gib-an-hour"),
    pytest.param(
        serving(noisy(growing(2.0)), signal=PROCESS_TREE_MEMORY),
        12,
        FINDING,
        id="steady-growth-of-the-process-tree",
    ),
    pytest.param(serving(noisy(growing(0.2))), 12, HEALTHY, id="slow-drift-under-the-threshold"),
    pytest.param(sleep_wake(noisy(flat)), 12, HEALTHY, id="sleep-wake-weights-offloaded"),
    pytest.param(
        sleep_wake(noisy(flat), gauge=False), 12, HEALTHY, id="sleep-wake-without-a-sleep-gauge"
    ),
    pytest.param(sleep_wake(noisy(growing(2.0))), 16, FINDING, id="growth-between-sleeps"),
    pytest.param(
        serving(noisy(step(3 * HOUR, WEIGHTS))),
        12,
        HEALTHY,
        id="pinned-copies-kept-after-the-first-wake",
    ),
    pytest.param(
        serving(noisy(step(3 * HOUR, 6 * GIB, step(5 * HOUR, 6 * GIB)))),
        12,
        HEALTHY,
        id="two-steps-then-flat",
    ),
    pytest.param(serving(noisy(load_swings)), 12, HEALTHY, id="load-swings"),
    pytest.param(
        serving(noisy(step(3 * HOUR, 2 * GIB, load_swings))), 12, HEALTHY, id="lasting-load-shift"
    ),
    pytest.param(serving(noisy(warm_up)), 12, HEALTHY, id="warm-up-ignored"),
]


@pytest.mark.parametrize(("trace", "hours", "outcome"), CASES)
def test_growth_is_found_and_no_fault_behaviours_are_not(
    trace: Trace, hours: float, outcome: str
) -> None:
    _, evaluations = run(trace, hours)
    found = first(evaluations, FINDING)
    if outcome == HEALTHY:
        assert found is None, found.message if found else ""
        assert evaluations[-1].outcome == HEALTHY
    else:
        assert found is not None
        assert found.reason == FailureReason.ENGINE_MEMORY_GROWTH
        assert found.detector == MEMORY_GROWTH


def test_a_finding_carries_its_evidence() -> None:
    _, evaluations = run(serving(noisy(growing(2.0))), 12)
    found = first(evaluations, FINDING)
    assert found is not None
    evidence = found.evidence
    assert evidence["signal"] == WORKING_SET_MEMORY
    assert BASE <= float(evidence["baseline_bytes"]) <= BASE + 0.3 * GIB
    assert float(evidence["memory_bytes"]) >= BASE + 10 * GIB  # 25 % of a 40 GiB baseline
    assert float(evidence["growth_bytes"]) >= 10 * GIB
    assert 1.8 <= float(evidence["growth_gib_per_hour"]) <= 2.2
    assert ONSET <= float(evidence["since"]) <= ONSET + 30 * 60
    assert float(evidence["rising_buckets"]) >= CONFIG.rising_buckets
    assert found.message.startswith(f"{POD}'s host memory grows: the pod's working set")
    assert "2.0" in found.message and "GiB/h" in found.message
    # 10 GiB at 2 GiB/h: five hours after the onset, plus the buckets the tolerance hides.
    at = evaluations.index(found) * INTERVAL
    assert ONSET + 5 * HOUR <= at <= ONSET + 6 * HOUR


def test_the_warm_up_and_the_first_bucket_are_insufficient_data() -> None:
    _, evaluations = run(serving(noisy(growing(20.0, onset=0.0))), 0.5)
    warm = [e for e in evaluations if e.outcome == INSUFFICIENT_DATA]
    # 20 minutes of warm-up and the first 10-minute bucket, which becomes the baseline.
    assert len(warm) >= (CONFIG.warmup + CONFIG.bucket) / INTERVAL
    assert "warming up" in warm[0].message
    assert first(evaluations, FINDING) is None


def test_a_restart_starts_over() -> None:
    trace = serving(noisy(growing(4.0)))
    detector, evaluations = run(trace, 8)
    found = first(evaluations, FINDING)
    assert found is not None
    restarted = ONSET + 4 * HOUR
    detector.note_restart(POD, restarted)
    # The fresh engine: memory back at its baseline, the leak again from the restart.
    fresh = serving(noisy(growing(4.0, onset=restarted + HOUR)))
    detector.observe(POD, fresh(restarted - INTERVAL))  # a late sample of the old engine
    _, after = run(fresh, 3, detector, start=restarted)
    assert after[0].outcome == INSUFFICIENT_DATA  # warming up again
    refound = first(after, FINDING)
    assert refound is None  # 10 GiB at 4 GiB/h takes 2.5 h after the onset, an hour in
    _, later = run(fresh, 3, detector, start=restarted + 3 * HOUR + INTERVAL)
    again = first(later, FINDING)
    assert again is not None
    assert float(again.evidence["since"]) >= restarted + HOUR


def test_an_engine_restarted_by_itself_starts_over() -> None:
    """The token counter falling is a new engine process: its memory is back at the baseline,
    which is no fall of the old envelope's run but a new warm-up."""

    def trace(t: float) -> EngineSample:
        restart = 5 * HOUR
        if t < restart:
            return sample(t, growing(1.5)(t))
        return sample(t, BASE, tokens=100.0 * (t - restart))

    _, evaluations = run(trace, 7)
    restarted = [e for e in evaluations[int(5 * HOUR / INTERVAL) + 1 :]]
    assert restarted[0].outcome == INSUFFICIENT_DATA
    assert restarted[-1].outcome == HEALTHY
    assert float(restarted[-1].evidence["baseline_bytes"]) == BASE


@pytest.mark.parametrize(
    ("memory", "why"),
    [
        pytest.param(None, "no host memory exported", id="no-memory-signal"),
        pytest.param(math.nan, "no host memory exported", id="garbage-memory"),
    ],
)
def test_without_a_memory_signal_the_verdict_is_insufficient(
    memory: float | None, why: str
) -> None:
    _, evaluations = run(lambda t: sample(t, memory), 2)
    assert {e.outcome for e in evaluations} == {INSUFFICIENT_DATA}
    assert why in evaluations[-1].message
    assert "container_memory_working_set_bytes" in evaluations[-1].message


def test_a_stale_engine_is_insufficient() -> None:
    detector, _ = run(serving(flat), 2)
    (evaluation,) = detector.evaluate(2 * HOUR + 10 * INTERVAL)
    assert evaluation.outcome == INSUFFICIENT_DATA


def test_the_config_follows_the_interval() -> None:
    assert MemoryGrowthConfig.from_health(Health()) == MemoryGrowthConfig(interval=30.0)
    spec = {"interval": "15m", "engineStall": {"timeout": "15m"}}
    slow = MemoryGrowthConfig.from_health(
        Health.model_validate({**spec, "verifierLatency": {"window": "15m"}})
    )
    assert (slow.warmup, slow.bucket) == (30 * 60.0, 60 * 60.0)
    assert CONFIG.threshold(40 * GIB) == 10 * GIB
    assert CONFIG.threshold(6 * GIB) == 2 * GIB  # vllm #44175's engine started at 6 GiB


# ---------------------------------------------------------------- the signals


def points(*values: tuple[float, float]) -> tuple[tuple[float, float], ...]:
    return tuple(values)


def pod_series(extra: dict[str, list[Series]]) -> dict[str, list[Series]]:
    base = {
        "generation_tokens": [Series((), points((10.0, 1.0), (40.0, 2.0)))],
        "requests_running": [Series((), points((10.0, 1.0), (40.0, 1.0)))],
        "requests_waiting": [Series((), points((10.0, 0.0), (40.0, 0.0)))],
    }
    return {**base, **extra}


def test_samples_read_the_working_set_where_present_else_the_process_tree() -> None:
    tree = [Series((), points((10.0, 3e9), (40.0, 3e9)))]
    working = [Series((("id", "/kubepods/pod1"),), points((10.0, 9e9)))]
    profile = engine_metrics(VLLM_ROLE)
    both = engine_samples(
        profile, pod_series({MEMORY_WORKING_SET: working, PROCESS_TREE_RSS: tree}), 15.0
    )
    assert [(s.memory_bytes, s.memory_signal) for s in both] == [
        (9e9, WORKING_SET_MEMORY),  # the pod cgroup: every container
        (3e9, PROCESS_TREE_MEMORY),  # no working set at 40 s (stale): the SDK's gauge
    ]
    neither = engine_samples(profile, pod_series({}), 15.0)
    assert [(s.memory_bytes, s.memory_signal) for s in neither] == [(None, None)] * 2


def test_a_pods_engine_pages_sum_their_process_trees() -> None:
    plugin = engine_metrics(GangEngines.model_validate({"exporter": "plugin"}))
    pages = [
        Series((("engine", "0"), ("rljob_engine_page", str(page))), points((10.0, size)))
        for page, size in ((0, 3e9), (1, 4e9))
    ]
    one, _ = engine_samples(plugin, pod_series({PROCESS_TREE_RSS: pages}), 15.0)
    assert (one.memory_bytes, one.memory_signal) == (7e9, PROCESS_TREE_MEMORY)


def test_profiles_ask_for_the_memory_they_can_have() -> None:
    for profile in (VLLM, SGLANG):
        signals = profile.signals()
        assert signals[MEMORY_WORKING_SET].metric == "container_memory_working_set_bytes"
        assert signals[MEMORY_WORKING_SET].matchers == (("container", ""),)
        assert PROCESS_TREE_RSS not in signals

    custom = engine_metrics(
        RolloutRole.model_validate(
            {
                "engine": "custom",
                "metricNames": {
                    "generationTokensTotal": "t",
                    "requestsRunning": "r",
                    "requestsWaiting": "w",
                },
            }
        )
    )
    assert MEMORY_WORKING_SET in custom.signals()
    # The SDK plugin serves pages for gang engines only: a rollout engine is not asked for it.
    assert PROCESS_TREE_RSS not in custom.signals()
    # The trainer's colocated engines: their pod's working set is the trainer's too; only the
    # SDK plugin's pages carry the engine processes' own memory, and Ray carries neither.
    plugin = engine_metrics(GangEngines.model_validate({"exporter": "plugin"}))
    assert PROCESS_TREE_RSS in plugin.signals()
    assert MEMORY_WORKING_SET not in plugin.signals()
    for exporter, through_ray in (("engine", False), ("ray", True)):
        gang = engine_metrics(
            GangEngines.model_validate({"exporter": exporter, "port": 15000}),
            through_ray=through_ray,
        )
        assert not {MEMORY_WORKING_SET, PROCESS_TREE_RSS} & set(gang.signals())


VLLM_ROLE = RolloutRole.model_validate({})


def test_without_memory_answers_only_memory_growth_lacks_data() -> None:
    """The round's answers carry the engine's page and no host memory (a direct scrape, or a
    Prometheus without cAdvisor): nothing fails, every other detector is fed, and only
    memory_growth says it has no data."""
    pod = Pod("mem-rollout-0", ROLLOUT)
    monitor = monitor_of(make_job("mem"), [pod])
    signals = VLLM.signals()
    values = {"generation_tokens": 500.0, "requests_running": 0.0, "requests_waiting": 0.0}
    values["kv_cache_usage"] = 0.0
    data: dict[Signal, dict[tuple[str, str], list[Series]]] = {
        signal: {} for name, signal in signals.items() if name not in OPTIONAL_ENGINE_SIGNALS
    }
    for name, value in values.items():
        data[signals[name]] = {("ns1", pod.name): [Series((), ((10.0, value),))]}
    answers = Answers(data, {})
    targets = monitor.targets()
    assert job_error(monitor, targets, answers, None) is None
    evaluations = {e.detector: e for e in evaluate(monitor, targets, answers, None, 10.0)}
    assert evaluations[MEMORY_GROWTH].outcome == INSUFFICIENT_DATA
    assert "no host memory exported" in evaluations[MEMORY_GROWTH].message
    assert evaluations["kv_leak"].outcome == HEALTHY
