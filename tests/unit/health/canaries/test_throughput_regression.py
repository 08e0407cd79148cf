"""ThroughputRegression from per-pod trainer counters: a simulated trainer whose steps generate
at a rate that a sync can change, sampled every interval; the regression found once per sync,
and the healthy cases it could be confused with (a short warm-up, longer responses, a sync
every step)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pytest

from rljob.api.spec import Health
from rljob.health.canaries.throughput_regression import (
    THROUGHPUT_REGRESSION,
    THROUGHPUT_REGRESSION_VALUE,
    ThroughputRegressionConfig,
    ThroughputRegressionDetector,
    ThroughputSample,
)
from rljob.health.evaluation import FINDING, HEALTHY, INSUFFICIENT_DATA, Evaluation
from rljob.vocabulary.enums import FailureReason

MINUTE = 60.0
HOUR = 3600.0
START = 1_700_000_000.0
INTERVAL = 30.0
CONFIG = ThroughputRegressionConfig(interval=INTERVAL)
BASE_RATE = 500.0  # tokens per second of generation
SLICE = 5.0

Rate = Callable[[float, float], float]  # (elapsed, seconds since the last sync) -> tokens/s


@dataclass
class Trainer:
    """Steps back to back: generate `tokens(elapsed)` at `rate`, then train; the generation
    gauge counts the syncs passed; the counters as the SDK exports them (tokens added when a
    step is reported, at its end; generating seconds as they accrue)."""

    syncs: Sequence[float] = ()
    rate: Rate = lambda elapsed, since_sync: BASE_RATE
    tokens: Callable[[float], float] = lambda elapsed: 60_000.0
    train: float = 60.0
    # The counters start over just after these times (a process restarted in place).
    resets: Sequence[float] = ()
    steps: list[tuple[float, float, float, float]] = field(default_factory=list)

    def since_sync(self, elapsed: float) -> float:
        passed = [s for s in self.syncs if s <= elapsed]
        return elapsed - passed[-1] if passed else math.inf

    def trace(self, duration: float, start: float = START) -> list[ThroughputSample]:
        elapsed = 0.0
        while elapsed < duration:
            tokens = self.tokens(elapsed)
            generate = self._generating_time(elapsed, tokens)
            self.steps.append(
                (elapsed, elapsed + generate, elapsed + generate + self.train, tokens)
            )
            elapsed += generate + self.train
        return [self._sample(i * INTERVAL, start) for i in range(int(duration // INTERVAL) + 1)]

    def _generating_time(self, begin: float, tokens: float) -> float:
        """Seconds to generate `tokens` from `begin`, the rate read every SLICE seconds."""
        at, left = begin, tokens
        while True:
            rate = self.rate(at, self.since_sync(at))
            if rate * SLICE >= left:
                return at + left / rate - begin
            left -= rate * SLICE
            at += SLICE

    def _totals(self, at: float) -> tuple[float, float]:
        seconds = sum(min(max(at - s, 0.0), e - s) for s, e, _, _ in self.steps)
        tokens = sum(n for _, _, end, n in self.steps if end <= at)
        return tokens, seconds

    def _sample(self, elapsed: float, start: float) -> ThroughputSample:
        tokens, seconds = self._totals(elapsed)
        passed_resets = [r for r in self.resets if r < elapsed]
        if passed_resets:
            base_tokens, base_seconds = self._totals(passed_resets[-1])
            tokens, seconds = tokens - base_tokens, seconds - base_seconds
        generation = float(sum(1 for s in self.syncs if s <= elapsed))
        return ThroughputSample(start + elapsed, tokens, seconds, generation)


def rounds(
    traces: dict[str, list[ThroughputSample]],
    detector: ThroughputRegressionDetector | None = None,
) -> list[Evaluation]:
    """Feeds each pod's sample of a round, then evaluates, as the health loop would."""
    detector = detector or ThroughputRegressionDetector(CONFIG)
    evaluations = []
    for samples in zip(*traces.values(), strict=True):
        for pod, sample in zip(traces, samples, strict=True):
            detector.observe(pod, sample)
        evaluations.append(detector.evaluate(samples[0].t))
    return evaluations


def findings(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    return [e for e in evaluations if e.is_finding]


def slower_after(factor: float, sync_index: int = 0) -> Callable[[Trainer], Rate]:
    def rate_of(trainer: Trainer) -> Rate:
        def rate(elapsed: float, since_sync: float) -> float:
            synced = [s for s in trainer.syncs if s <= elapsed]
            return BASE_RATE * (factor if len(synced) > sync_index else 1.0)

        return rate

    return rate_of


def warm_up(minutes: float, speed: float) -> Rate:
    return lambda elapsed, since_sync: BASE_RATE * (speed if since_sync < minutes * MINUTE else 1)


def growing_responses(elapsed: float) -> float:
    return 20_000.0 * (1 + elapsed / HOUR)  # three times longer after 2h


CASES = [
    pytest.param(Trainer(syncs=[2 * HOUR]), 3 * HOUR, HEALTHY, id="steady"),
    pytest.param(
        Trainer(syncs=[2 * HOUR], rate=warm_up(3, 0.25)), 3 * HOUR, HEALTHY, id="short-warm-up"
    ),
    pytest.param(
        Trainer(syncs=[2 * HOUR], tokens=growing_responses),
        3 * HOUR,
        HEALTHY,
        id="responses-grow",
    ),
    pytest.param(
        Trainer(syncs=[2 * HOUR], rate=warm_up(10, 0.25)), 3 * HOUR, FINDING, id="long-warm-up"
    ),
    pytest.param(
        Trainer(syncs=[h * 4 * MINUTE for h in range(1, 45)]),
        3 * HOUR,
        HEALTHY,
        id="sync-every-step",
    ),
    pytest.param(Trainer(), 3 * HOUR, INSUFFICIENT_DATA, id="no-sync"),
    pytest.param(Trainer(syncs=[30 * MINUTE]), 3 * HOUR, INSUFFICIENT_DATA, id="before-uncovered"),
    pytest.param(
        Trainer(syncs=[2 * HOUR + 50 * MINUTE]), 3 * HOUR, INSUFFICIENT_DATA, id="after-partial"
    ),
]


@pytest.mark.parametrize(("trainer", "duration", "outcome"), CASES)
def test_outcomes(trainer: Trainer, duration: float, outcome: str) -> None:
    evaluations = rounds({"trainer-0": trainer.trace(duration)})
    final = evaluations[-1]
    seen = {e.outcome for e in evaluations}
    if outcome == FINDING:
        assert FINDING in seen, final.message
    else:
        assert FINDING not in seen
        assert final.outcome == outcome, final.message
    assert final.detector == THROUGHPUT_REGRESSION
    assert final.target == "trainer"


def regressed(factor: float = 0.5, syncs: Sequence[float] = (2 * HOUR,)) -> Trainer:
    trainer = Trainer(syncs=list(syncs))
    trainer.rate = slower_after(factor)(trainer)
    return trainer


def test_regression_is_found_once_after_the_after_window() -> None:
    samples = regressed().trace(4 * HOUR)
    evaluations = rounds({"trainer-0": samples})
    found = [(s.t, e) for s, e in zip(samples, evaluations, strict=True) if e.is_finding]
    assert len(found) == 1
    at, evaluation = found[0]
    assert START + 2 * HOUR + CONFIG.after <= at <= START + 2 * HOUR + CONFIG.after + 2 * INTERVAL
    assert evaluation.reason == FailureReason.THROUGHPUT_REGRESSION
    evidence = evaluation.evidence
    assert evidence["pod"] == "trainer-0"
    assert evidence["policy_generation"] == 1
    assert evidence["generation_changed_at"] == START + 2 * HOUR
    assert evidence["before_tokens_per_second"] == pytest.approx(BASE_RATE, rel=0.05)
    assert evidence["after_tokens_per_second"] == pytest.approx(BASE_RATE / 2, rel=0.05)
    assert evidence[THROUGHPUT_REGRESSION_VALUE] == pytest.approx(0.5, rel=0.05)
    assert evidence["drop"] == pytest.approx(0.5, rel=0.1)
    assert "-50%" in evaluation.message and "policy generation 1" in evaluation.message
    later = evaluations[-1]
    assert later.outcome == HEALTHY and "reported already" in later.message


def test_a_second_sync_is_judged_on_its_own() -> None:
    trainer = Trainer(syncs=[2 * HOUR, 3 * HOUR + 30 * MINUTE])
    trainer.rate = lambda elapsed, _: (
        BASE_RATE * (0.5 if elapsed >= 2 * HOUR else 1.0) * (0.5 if elapsed >= 3.5 * HOUR else 1.0)
    )
    found = findings(rounds({"trainer-0": trainer.trace(5 * HOUR)}))
    assert [e.evidence["policy_generation"] for e in found] == [1, 2]


def test_a_sync_that_recovers_is_healthy() -> None:
    trainer = Trainer(syncs=[2 * HOUR, 3 * HOUR + 30 * MINUTE])
    trainer.rate = lambda elapsed, _: BASE_RATE * (0.5 if 2 * HOUR <= elapsed < 3.5 * HOUR else 1)
    evaluations = rounds({"trainer-0": trainer.trace(5 * HOUR)})
    assert [e.evidence["policy_generation"] for e in findings(evaluations)] == [1]
    assert evaluations[-1].outcome == HEALTHY
    assert evaluations[-1].evidence["policy_generation"] == 2


def test_counter_resets_read_as_the_same_rates() -> None:
    plain = rounds({"trainer-0": regressed().trace(3 * HOUR)})
    reset = regressed()
    reset.resets = [40 * MINUTE, 2 * HOUR + 5 * MINUTE]
    with_resets = rounds({"trainer-0": reset.trace(3 * HOUR)})
    assert [e.outcome for e in with_resets] == [e.outcome for e in plain]
    assert findings(with_resets)[0].evidence[THROUGHPUT_REGRESSION_VALUE] == pytest.approx(
        findings(plain)[0].evidence[THROUGHPUT_REGRESSION_VALUE]
    )


def test_restart_forgets_the_attempt_and_its_reported_syncs() -> None:
    detector = ThroughputRegressionDetector(CONFIG)
    first = regressed().trace(3 * HOUR)
    assert len(findings(rounds({"trainer-0": first}, detector))) == 1
    restart = first[-1].t + INTERVAL
    detector.note_restart(restart)
    detector.observe("trainer-0", first[-1])  # the old attempt's sample, arriving late
    assert detector.retained_values() == 0
    # The new attempt resumes and regresses at the same generation number: a new sync.
    second = regressed().trace(3 * HOUR, start=restart)
    evaluations = rounds({"trainer-0": second}, detector)
    assert evaluations[0].outcome == INSUFFICIENT_DATA
    assert [e.evidence["policy_generation"] for e in findings(evaluations)] == [1]


def test_pods_combine_and_each_sync_is_reported_once() -> None:
    traces = {
        "rank-0": Trainer(syncs=[2 * HOUR]).trace(3 * HOUR),
        "rank-1": regressed(0.4).trace(3 * HOUR),
        "rank-2": regressed(0.6).trace(3 * HOUR),
    }
    detector = ThroughputRegressionDetector(CONFIG)
    found = findings(rounds(traces, detector))
    assert len(found) == 1
    assert found[0].evidence["pod"] == "rank-1"
    assert "(of 3 trainer pods)" in found[0].message
    detector.retain({"rank-0"})
    assert detector.evaluate(traces["rank-0"][-1].t).outcome == HEALTHY


GARBAGE = [
    pytest.param(ThroughputSample(math.nan, 1.0, 1.0, 1.0), id="nan-time"),
    pytest.param(ThroughputSample(START, math.nan, 1.0, 1.0), id="nan-tokens"),
    pytest.param(ThroughputSample(START, -5.0, 1.0, 1.0), id="negative-tokens"),
    pytest.param(ThroughputSample(START, 1.0, math.inf, 1.0), id="inf-seconds"),
    pytest.param(ThroughputSample(START, 1.0, 1.0, math.nan), id="nan-generation"),
    pytest.param(ThroughputSample(START, 1e300, 1.0, 1.0), id="huge-tokens"),
]


@pytest.mark.parametrize("sample", GARBAGE)
def test_garbage_samples_are_dropped(sample: ThroughputSample) -> None:
    detector = ThroughputRegressionDetector(CONFIG)
    detector.observe("trainer-0", sample)
    assert detector.retained_values() == 0


def test_duplicates_and_out_of_order_samples_are_dropped() -> None:
    samples = regressed().trace(3 * HOUR)
    noisy = ThroughputRegressionDetector(CONFIG)
    evaluations = []
    for sample in samples:
        noisy.observe("trainer-0", sample)
        noisy.observe("trainer-0", sample)
        noisy.observe("trainer-0", ThroughputSample(sample.t - 5, 0.0, 0.0, 9.0))
        noisy.observe("trainer-0", ThroughputSample(sample.t + 1, 0.0, 0.0, 9.0))
        evaluations.append(noisy.evaluate(sample.t))
    assert evaluations == rounds({"trainer-0": samples})


def test_ring_is_bounded_and_the_verdict_outlives_it() -> None:
    detector = ThroughputRegressionDetector(CONFIG)
    evaluations = rounds({"trainer-0": regressed().trace(12 * HOUR)}, detector)
    window = CONFIG.before + CONFIG.after
    assert detector.retained_values() <= 2 * window / INTERVAL
    assert len(findings(evaluations)) == 1
    assert evaluations[-1].outcome == HEALTHY
    assert evaluations[-1].evidence["policy_generation"] == 1


def test_stale_and_empty_are_insufficient() -> None:
    empty = ThroughputRegressionDetector(CONFIG).evaluate(START)
    assert empty.outcome == INSUFFICIENT_DATA and "rljob_policy_generation" in empty.message
    detector = ThroughputRegressionDetector(CONFIG)
    samples = Trainer(syncs=[2 * HOUR]).trace(3 * HOUR)
    rounds({"trainer-0": samples}, detector)
    stale = detector.evaluate(samples[-1].t + 10 * INTERVAL)
    assert stale.outcome == INSUFFICIENT_DATA and "no recent" in stale.message


def test_config_from_spec() -> None:
    health = Health.model_validate(
        {"interval": "1m", "canaries": {"throughputRegression": {"after": "20m", "threshold": 0.5}}}
    )
    config = ThroughputRegressionConfig.from_health(health)
    assert config == ThroughputRegressionConfig(
        before=HOUR, after=20 * MINUTE, threshold=0.5, interval=60
    )
