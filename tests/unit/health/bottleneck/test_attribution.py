"""The verdict from phase shares and load: which role bounds the step, its evidence and advice."""

from __future__ import annotations

import pytest

from rljob.health.bottleneck.attribution import Observations, attribute, describe_engines
from rljob.health.bottleneck.extrapolate import judge_curve
from rljob.health.bottleneck.load import EngineWindow, VerifierWindow
from rljob.health.bottleneck.phases import PhaseBreakdown
from rljob.health.knee import DEFAULT_RULE, find_knee
from rljob.vocabulary.attribution import DEFAULT_ATTRIBUTION as RULE
from rljob.vocabulary.enums import BottleneckRole
from rljob.vocabulary.phases import PHASES

WINDOW = 900.0


def phases(**shares: float) -> PhaseBreakdown:
    full = {phase: shares.get(phase, 0.0) for phase in PHASES}
    return PhaseBreakdown(
        window=WINDOW,
        pods=("trainer-0",),
        shares=full,
        seconds={phase: share * WINDOW for phase, share in full.items()},
        steps=10.0,
        coverage=1.0,
    )


def engines(
    count: int, running: float, waiting: float, kv: float, saturated: float
) -> list[EngineWindow]:
    return [
        EngineWindow(f"engine-{i}", WINDOW, running, waiting, kv, 1000.0, saturated, running / kv)
        for i in range(count)
    ]


IDLE = engines(4, 9, 0, 0.31, 0.0)
FULL = engines(4, 64, 20, 0.95, 0.9)
QUEUE = VerifierWindow(pods=2, queue_depth=12.0, growth=8.0, p50=0.5, p99=9.0, slow=False)
CALM = VerifierWindow(pods=2, queue_depth=0.4, growth=0.0, p50=0.1, p99=0.3, slow=False)
SLOW = VerifierWindow(pods=2, queue_depth=0.2, growth=0.0, p50=3.0, p99=30.0, slow=True)
WAITS = phases(waiting_for_rollouts=0.62, training=0.3, syncing_weights=0.08)
CLIMBING = [(1.0, 100.0), (2.0, 195.0), (4.0, 380.0), (8.0, 720.0), (16.0, 1300.0)]
BEND = [(8.0, 2.1), (16.0, 4.0), (32.0, 7.2), (64.0, 8.1), (128.0, 8.3)]


def seen(
    breakdown: PhaseBreakdown | None = WAITS,
    load: list[EngineWindow] = IDLE,
    verifier: VerifierWindow | None = None,
    points: list[tuple[float, float]] | None = None,
    in_flight: float | None = 36.0,
    capacity: float | None = None,
) -> Observations:
    curve = None
    if points is not None:
        curve = judge_curve(find_knee(points), points, capacity, in_flight, rule=DEFAULT_RULE)
    coverage = breakdown.coverage if breakdown else 0.0
    return Observations(WINDOW, breakdown, coverage, load, verifier, curve, in_flight)


CASES = [
    pytest.param(
        seen(),
        BottleneckRole.ROLLOUT_CONCURRENCY,
        "4 engines unsaturated: 9 requests in flight each, KV 31%, queue 0",
        id="idle-engines-want-concurrency",
    ),
    pytest.param(
        seen(load=FULL),
        BottleneckRole.ROLLOUT,
        "4 of 4 engines saturated",
        id="saturated-engines-want-more-engines",
    ),
    pytest.param(
        seen(load=engines(4, 40, 0, 0.93, 0.0)),
        BottleneckRole.ROLLOUT,
        "KV 93%",
        id="kv-full-is-saturated",
    ),
    pytest.param(
        seen(verifier=QUEUE),
        BottleneckRole.VERIFIER,
        "verifier queue 12.0 requests over 2 pods, growing by 8",
        id="verifier-queue",
    ),
    pytest.param(
        seen(verifier=SLOW), BottleneckRole.VERIFIER, "p99 30s (over its bound)", id="verifier-slow"
    ),
    pytest.param(
        seen(verifier=CALM),
        BottleneckRole.ROLLOUT_CONCURRENCY,
        "trainer waited for rollouts 62% of 15m",
        id="calm-verifier-is-not-it",
    ),
    pytest.param(
        seen(load=FULL, verifier=QUEUE),
        BottleneckRole.ROLLOUT,
        "saturated",
        id="saturated-engines-before-a-queue-they-feed",
    ),
    pytest.param(
        seen(points=BEND, in_flight=128.0),
        BottleneckRole.ROLLOUT,
        "128 in flight, at or past the recommended 51, the knee at 64",
        id="at-the-knee-needs-engines",
    ),
    pytest.param(
        seen(points=BEND, in_flight=56.0),
        BottleneckRole.ROLLOUT,
        "56 in flight, at or past the recommended 51",
        id="between-the-recommendation-and-the-knee-never-advises-lowering",
    ),
    pytest.param(
        seen(points=BEND, in_flight=40.0),
        BottleneckRole.ROLLOUT_CONCURRENCY,
        "4 engines unsaturated",
        id="below-the-recommendation-raises",
    ),
    pytest.param(
        seen(breakdown=phases(waiting_for_rollouts=0.2, training=0.7, syncing_weights=0.1)),
        BottleneckRole.TRAINER,
        "trainer trained 70% of 15m",
        id="trainer",
    ),
    pytest.param(
        seen(breakdown=phases(waiting_for_rollouts=0.2, training=0.3, syncing_weights=0.5)),
        BottleneckRole.WEIGHT_SYNC,
        "synced weights 50% of 15m, 45s per step",
        id="weight-sync",
    ),
    pytest.param(
        seen(breakdown=phases(generating=0.4, training=0.2, evaluating=0.4)),
        BottleneckRole.ROLLOUT_CONCURRENCY,
        "evaluating 40%",
        id="evaluating-reported-never-the-bound",
    ),
    pytest.param(
        seen(breakdown=phases(evaluating=0.6, checkpointing=0.4)),
        BottleneckRole.UNKNOWN,
        "only evaluated or checkpointed",
        id="only-evaluating",
    ),
    pytest.param(
        seen(breakdown=None),
        BottleneckRole.UNKNOWN,
        "no trainer phase counter (rljob_trainer_phase_seconds_total",
        id="no-sdk",
    ),
]


@pytest.mark.parametrize(("observations", "role", "evidence"), CASES)
def test_attribution(observations: Observations, role: BottleneckRole, evidence: str) -> None:
    verdict = attribute(observations)
    assert verdict.role is role
    assert evidence in verdict.evidence


ADVICE = [
    pytest.param(
        seen(load=FULL),
        "about 7 more than the 4 running (x2.6)",
        None,
        id="engines-by-the-waiting-share",
    ),
    pytest.param(
        seen(points=BEND, in_flight=16.0),
        "from about 16 requests in flight to 51 (80% of the peak's 64",
        51,
        id="concurrency-to-the-knee",
    ),
    pytest.param(
        seen(points=CLIMBING, in_flight=16.0, capacity=256.0),
        "extrapolated near",
        None,
        id="concurrency-extrapolated",
    ),
    pytest.param(
        seen(points=CLIMBING, in_flight=16.0),
        "to 32 (the knee lies beyond 16 in flight)",
        32,
        id="concurrency-doubled",
    ),
    pytest.param(
        seen(in_flight=10.0), "from about 10 requests in flight to 20", 20, id="no-curve-doubles"
    ),
    pytest.param(seen(verifier=QUEUE), "add verifier replicas", None, id="verifier"),
    pytest.param(
        # The engines may be saturated under a trainer verdict: the advice must not call them idle.
        seen(breakdown=phases(waiting_for_rollouts=0.37, training=0.45), load=FULL),
        "move GPUs from rollout only while its engines have room",
        None,
        id="trainer-beside-saturated-engines",
    ),
]


@pytest.mark.parametrize(("observations", "advice", "recommended"), ADVICE)
def test_advice(observations: Observations, advice: str, recommended: int | None) -> None:
    verdict = attribute(observations)
    assert advice in verdict.advice
    if recommended is not None:
        assert verdict.recommended_concurrency == recommended


# Unsaturated engines whose curve cannot place a knee where the driver runs: the curve's
# recommendation (none, or one below the driver's in-flight count) never reads as Rollout.
UNTRUSTED = [
    pytest.param(
        seen(points=CLIMBING[:2], in_flight=128.0),
        "to 256 (2 bins with enough time",
        256,
        id="too-few-bins-doubles",
    ),
    pytest.param(
        seen(points=CLIMBING, in_flight=1000.0, capacity=256.0),
        "to 2000 (the curve's 163 (80% of the peak extrapolated",
        2000,
        id="extrapolated-below-the-driver-doubles",
    ),
    pytest.param(seen(points=[], in_flight=64.0), "to 128", 128, id="no-bins-doubles"),
]


@pytest.mark.parametrize(("observations", "advice", "recommended"), UNTRUSTED)
def test_an_untrusted_curve_never_makes_unsaturated_engines_rollout(
    observations: Observations, advice: str, recommended: int
) -> None:
    verdict = attribute(observations)
    assert verdict.role is BottleneckRole.ROLLOUT_CONCURRENCY
    assert advice in verdict.advice
    assert verdict.recommended_concurrency == recommended


def test_extrapolated_recommendation_is_set() -> None:
    verdict = attribute(seen(points=CLIMBING, in_flight=16.0, capacity=256.0))
    assert verdict.role is BottleneckRole.ROLLOUT_CONCURRENCY
    assert verdict.recommended_concurrency is not None and verdict.recommended_concurrency > 32


def test_thin_phase_coverage_is_unknown_with_its_figure() -> None:
    thin = PhaseBreakdown(WINDOW, ("trainer-0",), WAITS.shares, WAITS.seconds, 3.0, 0.3)
    verdict = attribute(Observations(WINDOW, thin, 0.3, FULL, None, None, None))
    assert verdict.role is BottleneckRole.UNKNOWN
    assert "span 30% of 15m, under the 50% needed" in verdict.evidence
    assert "the engines are saturated" in verdict.advice


@pytest.mark.parametrize(
    ("load", "text"),
    [
        pytest.param([], "no rollout engine load observed", id="none"),
        pytest.param(engines(1, 9, 0, 0.31, 0.0), "1 engine unsaturated", id="one"),
        pytest.param(
            engines(4, 30, 2, 0.5, 0.3), "4 engines queueing 30% of the time", id="partly"
        ),
    ],
)
def test_describe_engines(load: list[EngineWindow], text: str) -> None:
    assert text in describe_engines(load, RULE)
