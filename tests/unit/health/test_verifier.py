"""VerifierSlow: p99 from cumulative bucket increases as Prometheus computes it, over the whole
window; error rates; resets start the series over."""

from __future__ import annotations

import math

import pytest

from rljob.api.spec import Health
from rljob.dev.traces import SimulatedVerifier, VerifierProfile
from rljob.health import (
    Evaluation,
    VerifierLatencyConfig,
    VerifierLatencyDetector,
    VerifierSample,
    bucket_increase,
    histogram_quantile,
)
from rljob.health.evaluation import (
    AMONG_FAST_PEERS_EVIDENCE,
    VERIFIER_LATENCY,
    finding,
    healthy,
    insufficient,
)
from rljob.health.verifier import PEERS_WITHIN_BOUND_EVIDENCE, among_peers, proven_over
from rljob.vocabulary.enums import FailureReason

INF = math.inf
BOUNDS = (0.1, 0.5, 1.0, INF)

QUANTILE_CASES = [
    pytest.param(0.5, (10, 20, 30, 40), 0.5, id="median-at-a-bound"),
    pytest.param(0.2, (10, 20, 30, 40), 0.08, id="interpolated-in-the-first-bucket"),
    pytest.param(0.6, (10, 20, 30, 40), 0.7, id="interpolated-in-a-middle-bucket"),
    pytest.param(0.99, (10, 20, 30, 40), 1.0, id="in-the-inf-bucket-reads-the-highest-bound"),
    pytest.param(0.5, (10, 5, 30, 40), 0.75, id="non-monotonic-counts-are-fixed-up"),
    pytest.param(0.5, (0, 0, 0, 0), None, id="no-observations"),
    pytest.param(math.nan, (10, 20, 30, 40), None, id="nan-quantile"),
    pytest.param(-1, (10, 20, 30, 40), -INF, id="below-zero"),
    pytest.param(2, (10, 20, 30, 40), INF, id="above-one"),
]


@pytest.mark.parametrize(("q", "counts", "expected"), QUANTILE_CASES)
def test_histogram_quantile_follows_prometheus(
    q: float, counts: tuple[float, ...], expected: float | None
) -> None:
    value = histogram_quantile(q, BOUNDS, counts)

    assert value == (pytest.approx(expected) if expected is not None else None)


def test_histogram_quantile_needs_an_inf_bucket() -> None:
    assert histogram_quantile(0.5, (0.1, 0.5), (1, 2)) is None


def test_bucket_increase_is_none_after_a_reset() -> None:
    assert bucket_increase((1, 2, 3), (2, 4, 6)) == [1, 2, 3]
    assert bucket_increase((5, 6, 7), (1, 2, 3)) is None


CONFIG = VerifierLatencyConfig(p99=10.0, window=600.0, interval=30.0)
POD = "verifier-0"


Run = list[tuple[int, Evaluation]]


def run(profile: VerifierProfile, duration: float, config: VerifierLatencyConfig = CONFIG) -> Run:
    verifier = SimulatedVerifier(profile, seed=3)
    detector = VerifierLatencyDetector(config)
    evaluations: Run = []
    for t in range(0, int(duration) + 1, int(config.interval)):
        detector.observe(POD, verifier.sample(float(t)))
        evaluations.append((t, detector.evaluate(float(t))[0]))
    return evaluations


def first_finding(evaluations: Run) -> float | None:
    return next((t for t, e in evaluations if e.is_finding), None)


def test_a_verifier_slow_for_the_whole_window_is_found() -> None:
    evaluations = run(VerifierProfile(slow_factor=12.0, slow_at=1800), 3600)

    found = first_finding(evaluations)
    assert found is not None
    # Each slice's p99 is over the bound once more than 1% of its requests are slow.
    assert 1800 < found <= 1800 + 2 * 600
    finding = next(e for _, e in evaluations if e.is_finding)
    assert finding.reason == FailureReason.VERIFIER_SLOW
    assert finding.message.startswith(f"{POD} p99 ")
    assert "> 10s over 10m" in finding.message


def test_a_healthy_verifier_has_no_findings() -> None:
    evaluations = run(VerifierProfile(), 4 * 3600)

    assert first_finding(evaluations) is None
    assert evaluations[-1][1].outcome == "healthy"


def test_the_first_window_is_insufficient_data() -> None:
    evaluations = run(VerifierProfile(), 300)

    assert {e.outcome for _, e in evaluations} == {"insufficient_data"}


def test_a_verifier_with_too_few_requests_is_insufficient_data() -> None:
    evaluations = run(VerifierProfile(requests_per_second=0.001, slow_factor=20, slow_at=0), 3600)

    assert evaluations[-1][1].outcome == "insufficient_data"


def test_a_burst_of_slow_requests_within_the_window_is_not_slowness() -> None:
    verifier_fast = SimulatedVerifier(VerifierProfile(), seed=1)
    verifier_slow = SimulatedVerifier(VerifierProfile(slow_factor=30, slow_at=0), seed=1)
    detector = VerifierLatencyDetector(CONFIG)
    findings = []
    offset = [0.0] * 11
    for t in range(0, 3601, 30):
        fast = verifier_fast.sample(float(t))
        slow = verifier_slow.sample(float(t))
        burst = 1800 <= t < 1950
        source = slow if burst else fast
        if burst:
            offset = [s - f for (_, s), (_, f) in zip(slow.buckets, fast.buckets, strict=True)]
        merged = tuple(
            (bound, count + (0.0 if burst else extra))
            for (bound, count), extra in zip(source.buckets, offset, strict=True)
        )
        detector.observe(POD, VerifierSample(float(t), merged))
        findings += [e for e in detector.evaluate(float(t)) if e.is_finding]

    assert findings == []


def test_an_error_rate_over_the_bound_is_a_finding() -> None:
    evaluations = run(VerifierProfile(error_rate=0.2), 1800)

    finding = next(e for _, e in evaluations if e.is_finding)
    assert "error rate 20.0% > 5%" in finding.message


def test_a_histogram_reset_starts_the_series_over() -> None:
    detector = VerifierLatencyDetector(CONFIG)
    for t in range(0, 1201, 30):
        detector.observe(POD, VerifierSample(float(t), ((1.0, 10.0 * t), (INF, 10.0 * t))))
    assert detector.evaluate(1200.0)[0].outcome == "healthy"

    detector.observe(POD, VerifierSample(1230.0, ((1.0, 5.0), (INF, 5.0))))

    assert detector.evaluate(1230.0)[0].outcome == "insufficient_data"
    assert detector.retained_values() == 1


GARBAGE = [
    pytest.param(VerifierSample(math.nan, ((1.0, 1.0), (INF, 1.0))), id="nan-time"),
    pytest.param(VerifierSample(1.0, ((1.0, -1.0), (INF, 1.0))), id="negative-count"),
    pytest.param(VerifierSample(1.0, ((1.0, 1.0), (2.0, 1.0))), id="no-inf-bucket"),
    pytest.param(VerifierSample(1.0, ((INF, 1.0),)), id="single-bucket"),
    pytest.param(VerifierSample(1.0, ((1.0, 1.0), (1.0, 2.0), (INF, 3.0))), id="duplicate-bound"),
    pytest.param(VerifierSample(1.0, ((1.0, 1.0), (INF, 1.0)), errors_total=math.inf), id="inf"),
]


@pytest.mark.parametrize("sample", GARBAGE)
def test_garbage_samples_are_dropped(sample: VerifierSample) -> None:
    detector = VerifierLatencyDetector(CONFIG)

    detector.observe(POD, sample)

    assert detector.retained_values() == 0


def test_verifier_config_comes_from_the_spec() -> None:
    health = Health.model_validate({"verifierLatency": {"p99": "2s", "window": "5m"}})

    assert VerifierLatencyConfig.from_health(health) == VerifierLatencyConfig(2.0, 300.0, 30.0)


@pytest.mark.parametrize(
    ("bounds", "cumulative", "over"),
    [
        pytest.param((0.5, 1.0, 5.0, math.inf), (90, 95, 100, 100), True, id="5pct-over-the-bound"),
        pytest.param((0.5, 1.0, 5.0, math.inf), (99, 100, 100, 100), False, id="within-the-bound"),
        pytest.param((10.0, math.inf), (100, 100), False, id="only-a-coarse-bucket-proves-nothing"),
        pytest.param((0.5, math.inf), (50, 100), False, id="only-inf-above-the-bound"),
        pytest.param((1.0, math.inf), (0, 0), False, id="no-requests"),
    ],
)
def test_slowness_is_proven_by_a_bucket_at_or_above_the_bound(
    bounds: tuple[float, ...], cumulative: tuple[float, ...], over: bool
) -> None:
    assert proven_over(bounds, cumulative, 1.0) is over


MOST_SLOW = ": most or all slow, so the load or the reward code, not one pod"
NO_PEER = ": no peer judged to compare with"


def _judged(outcomes: str) -> list[Evaluation]:
    """One evaluation a verifier: s slow, h within the bound, i insufficient data."""
    made = {
        "s": lambda name: finding(VERIFIER_LATENCY, name, FailureReason.VERIFIER_SLOW, name, {}),
        "h": lambda name: healthy(VERIFIER_LATENCY, name, name),
        "i": lambda name: insufficient(VERIFIER_LATENCY, name, name),
    }
    return [made[o](f"verifier-{n}") for n, o in enumerate(outcomes)]


@pytest.mark.parametrize(
    ("outcomes", "peers_within_bound", "among_fast", "why"),
    [
        pytest.param("shhh", 3.0, 1.0, "", id="one-slow-of-four"),
        pytest.param("sshh", 2.0, 1.0, "", id="half-slow"),
        pytest.param("sssh", 1.0, 0.0, MOST_SLOW, id="most-slow"),
        pytest.param("ssss", 0.0, 0.0, MOST_SLOW, id="all-slow"),
        pytest.param("s", 0.0, 0.0, NO_PEER, id="a-lone-verifier"),
        pytest.param("sii", 0.0, 0.0, NO_PEER, id="peers-not-judged"),
        pytest.param("shi", 1.0, 1.0, "", id="one-judged-peer-fast"),
    ],
)
def test_a_slow_verifier_says_how_its_peers_fare(
    outcomes: str, peers_within_bound: float, among_fast: float, why: str
) -> None:
    evaluations = among_peers(_judged(outcomes))

    slow = [e for e in evaluations if e.is_finding]
    assert slow, evaluations
    for evaluation in slow:
        assert evaluation.evidence[PEERS_WITHIN_BOUND_EVIDENCE] == peers_within_bound
        assert evaluation.evidence[AMONG_FAST_PEERS_EVIDENCE] == among_fast
        assert evaluation.message.endswith(f"peers within the bound{why}")
    assert [e for e in evaluations if not e.is_finding] == [
        e for e in _judged(outcomes) if not e.is_finding
    ]


def test_the_detector_judges_each_verifier_among_its_peers() -> None:
    detector = VerifierLatencyDetector(CONFIG)
    slow = SimulatedVerifier(VerifierProfile(slow_factor=12.0, slow_at=0.0), seed=1)
    fast = SimulatedVerifier(VerifierProfile(), seed=2)
    for t in range(0, 1201, 30):
        detector.observe("verifier-0", slow.sample(float(t)))
        detector.observe("verifier-1", fast.sample(float(t)))

    found = [e for e in detector.evaluate(1200.0) if e.is_finding]

    assert [e.target for e in found] == ["verifier-0"]
    assert found[0].evidence[AMONG_FAST_PEERS_EVIDENCE] == 1.0
    assert "1 of 1 peers within the bound" in found[0].message
