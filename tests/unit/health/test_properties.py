"""Properties over arbitrary input: detectors never raise, never find anything in garbage
(NaN, infinities, negative values, decreasing counters), and hold bounded state."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rljob.api.spec import FailurePolicy
from rljob.api.status import RestartsStatus
from rljob.health import (
    ContainerTermination,
    CrashRepeatTracker,
    DriftConfig,
    EngineSample,
    EngineStallConfig,
    EngineStallDetector,
    Evaluation,
    KVDriftDetector,
    TrainerSignals,
    TrainerStallConfig,
    TrainerStallDetector,
    VerifierLatencyConfig,
    VerifierLatencyDetector,
    VerifierSample,
    classify_termination,
    histogram_quantile,
    ring_capacity,
    sanitize_message,
)
from rljob.reconcile.policy import (
    Failure,
    choose_action,
    record_restart,
)
from rljob.vocabulary.enums import FailureReason, RoleName

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRIFT = DriftConfig(threshold=0.2, window=300, warmup=120, cooldown=600, interval=10)
STALL = EngineStallConfig(timeout=60, interval=10)
VERIFIER = VerifierLatencyConfig(p99=1.0, window=300, interval=10)

anything = st.floats(allow_nan=True, allow_infinity=True)
garbage_value = st.one_of(
    st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.floats(max_value=-1e-9)
)
maybe_bool = st.one_of(st.none(), st.booleans())


@st.composite
def arbitrary_samples(draw: st.DrawFn) -> list[EngineSample]:
    count = draw(st.integers(0, 60))
    return [
        EngineSample(
            t=draw(anything),
            generated_tokens_total=draw(anything),
            running=draw(anything),
            waiting=draw(anything),
            kv_usage=draw(st.one_of(st.none(), anything)),
            prefix_hits_total=draw(st.one_of(st.none(), anything)),
            prefix_queries_total=draw(st.one_of(st.none(), anything)),
            preemptions_total=draw(st.one_of(st.none(), anything)),
            sleeping=draw(maybe_bool),
            paused=draw(maybe_bool),
        )
        for _ in range(count)
    ]


@st.composite
def garbage_samples(draw: st.DrawFn) -> list[EngineSample]:
    """Saturated, awake samples that are each garbage: a NaN, infinite or negative value where
    a number is needed, or a token counter lower than every earlier one."""
    count = draw(st.integers(2, 120))
    counters = sorted(
        draw(st.lists(st.floats(1, 1e12), min_size=count, max_size=count, unique=True)),
        reverse=True,
    )
    samples = []
    for index, counter in enumerate(counters):
        t = index * 10.0
        broken_field = draw(st.sampled_from(["none", "tokens", "running", "waiting", "t"]))
        value = draw(garbage_value)
        fields = {"t": t, "generated_tokens_total": counter, "running": 8.0, "waiting": 4.0}
        if broken_field != "none":
            key = "generated_tokens_total" if broken_field == "tokens" else broken_field
            fields[key] = value
        samples.append(
            EngineSample(
                t=fields["t"],
                generated_tokens_total=fields["generated_tokens_total"],
                running=fields["running"],
                waiting=fields["waiting"],
                prefix_hits_total=draw(garbage_value),
                prefix_queries_total=draw(garbage_value),
                preemptions_total=draw(garbage_value),
                sleeping=False,
                paused=False,
            )
        )
    return samples


def drift_run(
    samples: list[EngineSample], engines: int = 4
) -> tuple[KVDriftDetector, list[Evaluation]]:
    detector = KVDriftDetector(DRIFT)
    evaluations: list[Evaluation] = []
    for sample in samples:
        for engine in range(engines):
            detector.observe(f"e{engine}", sample)
        if math.isfinite(sample.t):
            evaluations += detector.evaluate(sample.t)
    return detector, evaluations


@SETTINGS
@given(arbitrary_samples())
def test_engine_detectors_never_raise_and_hold_bounded_state(samples: list[EngineSample]) -> None:
    detector, evaluations = drift_run(samples)
    evaluations += stall_run(samples)

    assert {e.outcome for e in evaluations} <= {"healthy", "insufficient_data", "finding"}
    per_engine = ring_capacity(DRIFT.window, DRIFT.interval) + ring_capacity(
        DRIFT.warmup, DRIFT.interval
    )
    assert detector.retained_values() <= 4 * per_engine


@SETTINGS
@given(garbage_samples())
def test_engine_detectors_find_nothing_in_garbage(samples: list[EngineSample]) -> None:
    _, evaluations = drift_run(samples)
    evaluations += stall_run(samples)

    assert not any(e.is_finding for e in evaluations)


@st.composite
def plausible_samples(draw: st.DrawFn) -> list[EngineSample]:
    """Ordered samples with random but valid values: exercises baselines, slices and peers."""
    count = draw(st.integers(0, 80))
    steps = draw(st.lists(st.floats(0, 2e4), min_size=count, max_size=count))
    samples = []
    t = tokens = hits = queries = 0.0
    for step in steps:
        t += 10
        tokens += step
        queries += step
        hits += step * draw(st.floats(0, 1))
        samples.append(
            EngineSample(
                t,
                tokens,
                running=draw(st.sampled_from([0.0, 8.0])),
                waiting=draw(st.sampled_from([0.0, 4.0])),
                prefix_hits_total=hits,
                prefix_queries_total=queries,
                preemptions_total=draw(st.floats(0, 10)) * t,
                sleeping=draw(st.sampled_from([False, False, True])),
            )
        )
    return samples


@SETTINGS
@given(plausible_samples(), plausible_samples())
def test_engine_detectors_never_raise_on_plausible_traces(
    first: list[EngineSample], second: list[EngineSample]
) -> None:
    detector = KVDriftDetector(DRIFT)
    for a, b in zip(first, second, strict=False):
        detector.observe("a", a)
        detector.observe("b", b)
        evaluations = detector.evaluate(a.t)
        assert all(e.outcome in {"healthy", "insufficient_data", "finding"} for e in evaluations)
    stall_run(first)


@SETTINGS
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=2000))
def test_drift_state_is_bounded_whatever_the_sample_rate(gaps: list[float]) -> None:
    detector = KVDriftDetector(DRIFT)
    t = 0.0
    for index, gap in enumerate(gaps):
        t += gap / 1e3
        detector.observe("e0", EngineSample(t, float(index), 4, 4))

    assert detector.retained_values() <= ring_capacity(
        DRIFT.window, DRIFT.interval
    ) + ring_capacity(DRIFT.warmup, DRIFT.interval)


def stall_run(samples: list[EngineSample]) -> list[Evaluation]:
    detector = EngineStallDetector(STALL)
    evaluations: list[Evaluation] = []
    for sample in samples:
        detector.observe("e0", sample)
        if math.isfinite(sample.t):
            evaluations += detector.evaluate(sample.t)
    return evaluations


@SETTINGS
@given(garbage_value, anything, st.sampled_from([None, "train", "checkpointing"]))
def test_trainer_stall_finds_nothing_without_a_plausible_heartbeat(
    heartbeat: float, now: float, phase: str | None
) -> None:
    signals = TrainerSignals(True, 0.0, heartbeat, phase)

    evaluation = TrainerStallDetector(TrainerStallConfig(60, 0)).evaluate(signals, now)

    assert not evaluation.is_finding


@st.composite
def arbitrary_histograms(draw: st.DrawFn) -> list[VerifierSample]:
    bounds = draw(st.lists(anything, min_size=0, max_size=6))
    return [
        VerifierSample(
            t=draw(anything),
            buckets=tuple((bound, draw(anything)) for bound in [*bounds, math.inf]),
            errors_total=draw(st.one_of(st.none(), anything)),
            requests_total=draw(st.one_of(st.none(), anything)),
        )
        for _ in range(draw(st.integers(0, 40)))
    ]


@SETTINGS
@given(arbitrary_histograms())
def test_verifier_never_raises_and_holds_bounded_state(samples: list[VerifierSample]) -> None:
    detector = VerifierLatencyDetector(VERIFIER)
    for sample in samples:
        detector.observe("v0", sample)
        if math.isfinite(sample.t):
            detector.evaluate(sample.t)

    assert detector.retained_values() <= ring_capacity(VERIFIER.window, VERIFIER.interval)


@SETTINGS
@given(st.integers(5, 100))
def test_verifier_finds_nothing_in_decreasing_histograms(count: int) -> None:
    detector = VerifierLatencyDetector(VERIFIER)
    findings = []
    for index in range(count):
        total = float(10 * (count - index))
        detector.observe("v0", VerifierSample(index * 10.0, ((0.5, 0.0), (math.inf, total))))
        findings += [e for e in detector.evaluate(index * 10.0) if e.is_finding]

    assert findings == []


@SETTINGS
@given(
    st.floats(allow_nan=True),
    st.lists(st.floats(allow_nan=True), min_size=0, max_size=8),
)
@example(q=0.0, counts=[0.0, math.inf])  # found by the search: rank 0 x inf is NaN
def test_histogram_quantile_never_raises(q: float, counts: list[float]) -> None:
    bounds = [float(index) for index in range(len(counts) - 1)] + [math.inf]
    histogram_quantile(q, bounds[: len(counts)], counts)


@SETTINGS
@given(st.lists(st.integers(-5, 50), max_size=50))
def test_crash_tracker_finds_nothing_in_decreasing_counts(counts: list[int]) -> None:
    tracker = CrashRepeatTracker()
    for index, count in enumerate(sorted(counts, reverse=True)):
        evaluation = tracker.observe("p", "c", count, None, float(index))
        if index and count == sorted(counts, reverse=True)[index - 1]:
            continue
        assert not evaluation.is_finding


@SETTINGS
@given(st.text(max_size=20_000), st.one_of(st.none(), st.integers(-300, 300)))
def test_classification_never_raises_and_messages_are_clean(
    text: str, exit_code: int | None
) -> None:
    classified = classify_termination(ContainerTermination(exit_code, "Error", text))
    clean = sanitize_message(text)

    assert len(clean.encode()) <= 4096
    assert not any(ord(c) < 32 or ord(c) == 127 for c in clean)
    if classified is not None:
        assert len(classified.message) <= 1024


NOW = datetime(2026, 1, 1, tzinfo=UTC)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(FailureReason)),
            st.sampled_from(list(RoleName)),
            st.one_of(st.none(), st.integers(0, 255)),
            st.integers(0, 7200),
        ),
        max_size=60,
    )
)
def test_the_policy_keeps_a_valid_bounded_ledger(
    failures: list[tuple[FailureReason, RoleName, int | None, int]],
) -> None:
    policy = FailurePolicy.model_validate({"maxRestarts": 100, "window": "1h"})
    status = RestartsStatus()
    now = NOW
    for reason, role, exit_code, step in failures:
        now += timedelta(seconds=step)
        decision = choose_action(
            Failure(reason, role, f"{role}-0", exit_code, "x"), policy, status, now
        )
        assert decision.delay_seconds >= 0
        status = record_restart(status, decision, now, policy)

    RestartsStatus.model_validate(status.model_dump(by_alias=True))
    assert len(status.recent) <= 20
    assert len(status.counted_at) <= 101
