"""KVCacheLeak: an idle engine holding KV blocks, or a queue wedged on a full cache with nothing
running, as vLLM's own core shows a leak (bench/vllm_core/README.md); busy, asleep, paused and
stale-page engines give no finding."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rljob.api.spec import Health
from rljob.health.causes import KVLeakConfig, KVLeakDetector
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import FailureReason

CONFIG = KVLeakConfig(interval=30.0)
POD = "rollout-0"
END = 600.0


def sample(
    t: float,
    *,
    running: float = 0,
    waiting: float = 0,
    usage: float | None = 0.0,
    sleeping: bool | None = False,
    gauges: tuple[float | None, ...] | None = None,
) -> EngineSample:
    return EngineSample(
        t,
        generated_tokens_total=100.0 * t,
        running=running,
        waiting=waiting,
        kv_usage=usage,
        sleeping=sleeping,
        gauges=gauges,
    )


def cycle(idle_usage: float) -> Callable[[float], EngineSample]:
    """Sync RL: 60 s generating, 60 s idle (the trainer steps) reading `idle_usage`."""

    def at(t: float) -> EngineSample:
        if t % 120 < 60:
            return sample(t, running=200, usage=0.8)
        return sample(t, usage=idle_usage)

    return at


Trace = Callable[[float], EngineSample]
CASES = [
    pytest.param(cycle(0.0), "healthy", "", id="idle-reads-zero"),
    pytest.param(cycle(0.02), "healthy", "", id="idle-below-the-floor"),
    pytest.param(cycle(0.3), "finding", "idle_floor", id="idle-above-the-floor"),
    pytest.param(
        lambda t: sample(t, waiting=112, usage=0.996) if t >= 400 else cycle(0.0)(t),
        "finding",
        "wedged_queue",
        id="queue-wedged-on-a-full-cache",
    ),
    pytest.param(
        lambda t: sample(t, waiting=112, usage=0.996) if t >= 560 else cycle(0.0)(t),
        "healthy",
        "",
        id="wedged-shorter-than-a-minute",
    ),
    pytest.param(
        lambda t: sample(t, waiting=3, usage=0.0),
        "healthy",
        "",
        id="queue-with-nothing-running-and-an-empty-cache",  # vllm #39863's page: a stall
    ),
    pytest.param(
        lambda t: sample(t, running=180, waiting=300, usage=0.99),
        "healthy",
        "",
        id="busy-with-a-full-cache",
    ),
    pytest.param(
        lambda t: sample(t, running=4, waiting=120, usage=0.99),
        "healthy",
        "",
        id="few-running-with-a-full-cache",  # a long-context batch can hold it legitimately
    ),
    pytest.param(
        lambda t: sample(t, usage=0.4, sleeping=True), "healthy", "", id="asleep-with-usage"
    ),
    pytest.param(
        lambda t: sample(t, running=193, usage=0.92) if t >= 300 else cycle(0.0)(t),
        "healthy",
        "",
        id="page-held-through-a-paused-weight-sync",
    ),
    pytest.param(
        lambda t: sample(t, usage=0.3, gauges=(0.0, 0.0, 0.3, 0.0)),
        "healthy",
        "",
        id="sglang-gauges-unchanged-are-no-reading",
    ),
    pytest.param(lambda t: sample(t, usage=None), "insufficient_data", "", id="no-kv-usage"),
]


@pytest.mark.parametrize(("trace", "outcome", "cause"), CASES)
def test_kv_leak(trace: Trace, outcome: str, cause: str) -> None:
    detector = KVLeakDetector(CONFIG)
    for t in range(0, int(END) + 1, 30):
        detector.observe(POD, trace(float(t)))

    (evaluation,) = detector.evaluate(END)

    assert evaluation.outcome == outcome, evaluation.message
    if outcome == "finding":
        assert evaluation.reason == FailureReason.KV_CACHE_LEAK
        assert evaluation.evidence["cause"] == cause
        assert evaluation.message.startswith(f"{POD} leaked KV capacity")
        assert {"kv_usage", "running", "waiting", "for_seconds"} <= set(evaluation.evidence)


def test_the_idle_floor_evidence_names_usage_and_duration() -> None:
    detector = KVLeakDetector(CONFIG)
    for t in range(0, 601, 30):
        detector.observe(POD, cycle(0.564)(float(t)))

    (evaluation,) = detector.evaluate(600.0)

    assert evaluation.evidence["idle_kv_usage"] == pytest.approx(0.564)
    assert float(evaluation.evidence["idle_readings"]) >= 2
    assert "56.4% of its KV cache held while idle" in evaluation.message


def test_the_wedge_evidence_says_for_how_long() -> None:
    detector = KVLeakDetector(CONFIG)
    for t in range(0, 601, 30):
        detector.observe(POD, sample(float(t), waiting=112, usage=0.996))

    (evaluation,) = detector.evaluate(600.0)

    assert evaluation.evidence["for_seconds"] == 600.0
    assert evaluation.evidence["waiting"] == 112
    assert "queue wedged for 10m with 112 waiting, nothing running" in evaluation.message


def test_an_idle_reading_below_the_floor_clears_the_finding() -> None:
    detector = KVLeakDetector(CONFIG)
    for t in range(0, 301, 30):
        detector.observe(POD, cycle(0.3)(float(t)))
    assert detector.evaluate(300.0)[0].is_finding
    for t in range(330, 601, 30):
        detector.observe(POD, cycle(0.0)(float(t)))

    assert detector.evaluate(600.0)[0].outcome == "healthy"


def test_a_restart_starts_the_evidence_over() -> None:
    detector = KVLeakDetector(CONFIG)
    for t in range(0, 601, 30):
        detector.observe(POD, sample(float(t), waiting=112, usage=0.996))
    detector.note_restart(POD, 600.0)
    detector.observe(POD, sample(630.0, waiting=112, usage=0.996))

    assert detector.evaluate(630.0)[0].outcome == "healthy"


def test_stale_metrics_are_insufficient_data() -> None:
    detector = KVLeakDetector(CONFIG)
    detector.observe(POD, sample(0.0, waiting=112, usage=0.996))

    assert detector.evaluate(3600.0)[0].outcome == "insufficient_data"


def test_the_config_follows_the_interval() -> None:
    slow = KVLeakConfig.from_health(Health.model_validate({"interval": "2m"}))

    assert (slow.interval, slow.wedge_for) == (120.0, 240.0)
    assert KVLeakConfig.from_health(Health()).wedge_for == 60.0
