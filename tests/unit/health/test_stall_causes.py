"""EngineStalled names what the page shows of the cause (issue 32): a page frozen in every value
with requests pending (vllm #39863, #29928), a queue wedged on a full KV cache (leaked blocks),
or no progress; the reason stays EngineStalled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from rljob.health import EngineSample, EngineStallConfig, EngineStallDetector
from rljob.vocabulary.enums import FailureReason

ENGINE = EngineStallConfig(timeout=300, interval=30)
POD = "rollout-1"


def sample(
    t: float,
    *,
    tokens: float = 1000.0,
    running: float = 265,
    waiting: float = 247,
    usage: float = 0.056,
    queries: float = 5e5,
) -> EngineSample:
    return EngineSample(
        t,
        generated_tokens_total=tokens,
        running=running,
        waiting=waiting,
        kv_usage=usage,
        prefix_hits_total=0.8 * queries,
        prefix_queries_total=queries,
        preemptions_total=3.0,
        sleeping=False,
        finished_requests_total=2048.0,
    )


Trace = Callable[[float], EngineSample]
CASES = [
    pytest.param(sample, "page_frozen", id="every-value-repeats-with-requests-running"),
    pytest.param(
        lambda t: sample(t, running=0, waiting=3, usage=0.0),
        "page_frozen",
        id="every-value-repeats-with-a-queue",  # vllm #39863's page: 0 running, 3 waiting, 0 %
    ),
    pytest.param(
        lambda t: replace(sample(t), memory_bytes=40e9 + 1e6 * t),
        "page_frozen",
        id="frozen-page-while-the-pods-memory-still-moves",  # memory is not from the page
    ),
    pytest.param(
        lambda t: sample(t, running=0, waiting=112, usage=0.996),
        "kv_wedged",
        id="queue-wedged-on-a-full-cache",
    ),
    pytest.param(
        lambda t: sample(t, queries=5e5 + 100 * t),
        "no_progress",
        id="page-moving-but-no-tokens",
    ),
    pytest.param(
        lambda t: sample(t, queries=5e5 + 100 * min(t, 450.0)),
        "no_progress",
        id="page-frozen-for-less-than-the-timeout",
    ),
]


@pytest.mark.parametrize(("trace", "cause"), CASES)
def test_the_stall_names_its_cause(trace: Trace, cause: str) -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 601, 30):
        detector.observe(POD, trace(float(t)))

    (evaluation,) = detector.evaluate(600.0)

    assert evaluation.reason == FailureReason.ENGINE_STALLED, evaluation.message
    assert evaluation.evidence["cause"] == cause
    assert evaluation.message.startswith(f"{POD} generated no tokens for 10m")


def test_a_frozen_page_says_so_with_what_it_shows() -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 601, 30):
        detector.observe(POD, sample(float(t)))

    (evaluation,) = detector.evaluate(600.0)

    assert evaluation.evidence["unchanged_seconds"] == 600.0
    assert "page frozen, every value unchanged for 10m with 265 running" in evaluation.message
    assert "engine core dead or its stats loop stuck" in evaluation.message


def test_a_frozen_page_waits_for_the_timeout() -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 271, 30):
        detector.observe(POD, sample(float(t)))

    assert detector.evaluate(270.0)[0].outcome == "healthy"


def test_a_wedged_queue_names_leaked_capacity() -> None:
    detector = EngineStallDetector(ENGINE)
    for t in range(0, 601, 30):
        detector.observe(POD, sample(float(t), running=0, waiting=112, usage=0.996))

    (evaluation,) = detector.evaluate(600.0)

    assert "KV usage 99.6%" in evaluation.message
    assert "leaked KV capacity" in evaluation.message
