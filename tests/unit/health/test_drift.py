"""KVCacheDrift on synthetic traces: drops beyond the threshold are found within two windows and
smaller ones never; load swings, sleep phases, global slowdowns and noise are never findings."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from rljob.api.spec import Health
from rljob.dev.traces import Cycle, EngineProfile, LoadSwings, fleet_trace
from rljob.health import DriftConfig, EngineSample, KVDriftDetector
from rljob.vocabulary.enums import FailureReason
from tests.unit.health.harness import HOUR, fleet, run_drift

CONFIG = DriftConfig(threshold=0.2, window=1800, warmup=900, cooldown=3600, interval=30)
DROP_AT = HOUR
DRIFTING = "rollout-3"


def dropped(drop: float, **changes: object) -> EngineProfile:
    return replace(EngineProfile(drop=drop, drop_at=DROP_AT), **changes)  # type: ignore[arg-type]


def cycling(index: int) -> EngineProfile:
    return EngineProfile(cycle=Cycle(offset=index * 41.0))


DETECTED = [
    pytest.param(fleet(4, rollout_3=dropped(0.3)), id="1.5x-threshold-4-engines-saturated"),
    pytest.param(fleet(8, rollout_3=dropped(0.3)), id="1.5x-threshold-8-engines"),
    pytest.param(
        {f"rollout-{i}": dropped(0.3, cycle=Cycle()) if i == 3 else cycling(i) for i in range(4)},
        id="1.5x-threshold-generate-train-cycles",
    ),
    pytest.param(
        {"rollout-0": EngineProfile(), "rollout-3": dropped(0.3)},
        id="1.5x-threshold-one-peer-confirmed-by-cache-symptoms",
    ),
    pytest.param({"rollout-3": dropped(0.3)}, id="1.5x-threshold-alone-confirmed"),
    pytest.param(fleet(4, rollout_3=dropped(0.5)), id="2.5x-threshold"),
    pytest.param(fleet(4, rollout_3=dropped(0.3, noise=0.1)), id="1.5x-threshold-with-10pct-noise"),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("profiles", DETECTED)
def test_a_drop_of_one_and_a_half_thresholds_is_found_within_two_windows(
    profiles: dict[str, EngineProfile], seed: int
) -> None:
    run = run_drift(profiles, DROP_AT + 2 * CONFIG.window + 600, CONFIG, seed)

    assert run.finding_targets() == {DRIFTING}
    assert run.first_finding[DRIFTING] <= DROP_AT + 2 * CONFIG.window


NOT_DETECTED = [
    pytest.param(fleet(4, rollout_3=dropped(0.1)), id="0.5x-threshold-4-engines"),
    pytest.param(fleet(4, rollout_3=dropped(0.1, noise=0.1)), id="0.5x-threshold-noisy"),
    pytest.param({"rollout-3": dropped(0.1)}, id="0.5x-threshold-alone"),
    pytest.param(
        {f"rollout-{i}": dropped(0.1, cycle=Cycle()) if i == 3 else cycling(i) for i in range(4)},
        id="0.5x-threshold-cycles",
    ),
]


@pytest.mark.parametrize("profiles", NOT_DETECTED)
def test_a_drop_of_half_the_threshold_is_never_found(profiles: dict[str, EngineProfile]) -> None:
    assert run_drift(profiles, 8 * HOUR, CONFIG).findings == []


def noisy_fleet(count: int) -> dict[str, EngineProfile]:
    return {
        f"rollout-{i}": EngineProfile(
            noise=0.08,
            throughput=700 + 40 * i,
            cycle=Cycle(generate=540 + 30 * i, offset=97.0 * i),
            load_swings=LoadSwings(period=5400, low_for=1200 + 60 * i, offset=700.0 * i),
            counter_resets_at=(7 * HOUR + 300 * i,) if i % 3 == 0 else (),
        )
        for i in range(count)
    }


@pytest.mark.parametrize("seed", [11, 12])
def test_a_long_noisy_trace_with_sleep_phases_load_swings_and_resets_has_no_findings(
    seed: int,
) -> None:
    run = run_drift(noisy_fleet(8), 24 * HOUR, CONFIG, seed)

    assert run.findings == []
    assert run.outcomes["healthy"] > run.outcomes["insufficient_data"] > 0


UNSATURATED_TOGETHER = LoadSwings(period=10 * HOUR, low_for=9 * HOUR, low_load=0.5, offset=-HOUR)


def test_all_engines_slowing_together_while_unsaturated_are_not_drifting() -> None:
    profiles = {f"rollout-{i}": EngineProfile(load_swings=UNSATURATED_TOGETHER) for i in range(4)}

    run = run_drift(profiles, 8 * HOUR, CONFIG)

    assert run.findings == []
    assert run.outcomes["insufficient_data"] > 0


def test_all_engines_slowing_together_while_saturated_are_not_drifting() -> None:
    profiles = {f"rollout-{i}": dropped(0.35, cache_symptoms=False) for i in range(4)}

    assert run_drift(profiles, 4 * HOUR, CONFIG).findings == []


def test_asleep_engines_are_never_findings() -> None:
    asleep = Cycle(generate=1200, drain=60, train=6 * HOUR, weight_sync=30)
    profiles = {f"rollout-{i}": dropped(0.5, cycle=asleep) for i in range(4)}

    run = run_drift(profiles, 6 * HOUR, CONFIG)

    assert run.findings == []
    assert run.outcomes["insufficient_data"] > 0


def test_a_transient_collapse_shorter_than_the_window_is_not_drift() -> None:
    detector = KVDriftDetector(CONFIG)
    collapse_start, collapse_end = 2 * HOUR, 2 * HOUR + 600
    frozen: float | None = None
    lost = 0.0
    findings = []
    for name, sample in fleet_trace(fleet(4), 3 * HOUR, interval=30):
        if name == DRIFTING:
            tokens = sample.generated_tokens_total
            if collapse_start <= sample.t < collapse_end:
                frozen = tokens if frozen is None else frozen
                lost = tokens - frozen
            detector.observe(name, replace(sample, generated_tokens_total=tokens - lost))
            findings += [e for e in detector.evaluate(sample.t) if e.is_finding]
        else:
            detector.observe(name, sample)

    assert frozen is not None
    assert findings == []


def test_each_engine_is_judged_against_its_own_baseline() -> None:
    profiles = fleet(4, rollout_3=EngineProfile(throughput=560.0))

    run = run_drift(profiles, 4 * HOUR, CONFIG)

    assert run.findings == []


def test_a_drop_against_the_baseline_needs_a_symptom_when_peers_are_few() -> None:
    profiles = {"rollout-0": EngineProfile(), "rollout-3": dropped(0.3, cache_symptoms=False)}

    run = run_drift(profiles, 4 * HOUR, CONFIG)

    assert run.findings == []
    assert run.outcomes["healthy"] > 0


def test_without_peers_or_cache_metrics_a_drop_is_insufficient_data() -> None:
    bare = dropped(0.3, prefix_hit_rate=None, preemptions_per_minute=None)

    run = run_drift({"rollout-3": bare}, 3 * HOUR, CONFIG)

    assert run.findings == []
    assert run.outcomes["insufficient_data"] > run.outcomes["healthy"]


FINDING_MESSAGE = re.compile(
    r"^rollout-3 \d+ tok/s vs baseline \d+ \(-\d+%\) and peers \d+ over 30m while saturated, "
    r"prefix hit rate 0\.\d\d -> 0\.\d\d$"
)


def test_a_finding_reads_like_an_event_with_its_evidence() -> None:
    run = run_drift(fleet(4, rollout_3=dropped(0.3)), 3 * HOUR, CONFIG)

    _, evaluation = run.findings[0]
    assert evaluation.reason == FailureReason.KV_CACHE_DRIFT
    assert evaluation.detector == "kv_drift"
    assert FINDING_MESSAGE.match(evaluation.message), evaluation.message
    evidence = evaluation.evidence
    assert evidence["throughput"] == pytest.approx(560, rel=0.1)
    assert evidence["baseline"] == pytest.approx(800, rel=0.05)
    assert evidence["peer_median"] == pytest.approx(800, rel=0.05)
    assert evidence["change"] == pytest.approx(-0.3, abs=0.05)


def feed(detector: KVDriftDetector, profiles: dict[str, EngineProfile], hours: float) -> float:
    t = 0.0
    for name, sample in fleet_trace(profiles, hours * HOUR, interval=30):
        detector.observe(name, sample)
        t = sample.t
    return t


def test_a_restart_resets_the_baseline_and_starts_a_cooldown() -> None:
    detector = KVDriftDetector(CONFIG)
    profiles = fleet(4, rollout_3=dropped(0.3))
    end = feed(detector, profiles, 3)
    assert [e.target for e in detector.evaluate(end) if e.is_finding] == [DRIFTING]

    detector.note_restart(DRIFTING, end)

    assert detector.baseline(DRIFTING) is None
    (after,) = [e for e in detector.evaluate(end + 30) if e.target == DRIFTING]
    assert after.outcome == "insufficient_data"
    assert "warming up" in after.message


def test_a_finding_within_the_cooldown_is_reported_healthy_and_marked_suppressed() -> None:
    detector = KVDriftDetector(replace(CONFIG, cooldown=6 * HOUR))
    detector.note_restart(DRIFTING, 0.0)
    end = feed(detector, fleet(4, rollout_3=dropped(0.3)), 3)

    (evaluation,) = [e for e in detector.evaluate(end) if e.target == DRIFTING]

    assert evaluation.outcome == "healthy"
    assert evaluation.evidence["suppressed"] == "cooldown"
    assert "cooldown" in evaluation.message


def test_a_counter_reset_means_the_engine_restarted_and_needs_a_new_baseline() -> None:
    detector = KVDriftDetector(CONFIG)
    end = feed(detector, {"rollout-0": EngineProfile(counter_resets_at=(2 * HOUR,))}, 2.01)

    assert detector.baseline("rollout-0") is None
    (evaluation,) = detector.evaluate(end)
    assert evaluation.outcome == "insufficient_data"


def test_an_engine_stalled_through_its_warm_up_gets_no_baseline() -> None:
    detector = KVDriftDetector(CONFIG)
    for t in range(0, 3601, 30):
        detector.observe("rollout-0", EngineSample(float(t), 100.0, running=8, waiting=4))

    (evaluation,) = detector.evaluate(3600.0)

    assert detector.baseline("rollout-0") is None
    assert evaluation.outcome == "insufficient_data"


def test_engines_that_are_gone_are_forgotten() -> None:
    detector = KVDriftDetector(CONFIG)
    feed(detector, fleet(4), 0.5)

    detector.retain({"rollout-0", "rollout-1"})
    detector.forget("rollout-1")

    assert detector.targets == ["rollout-0"]


def test_memory_per_engine_stays_bounded_over_a_week() -> None:
    detector = KVDriftDetector(CONFIG)
    engine = fleet_trace({"rollout-0": EngineProfile()}, 7 * 24 * HOUR, interval=10)
    for _, sample in engine:
        detector.observe("rollout-0", sample)

    assert detector.retained_values() <= 2 * CONFIG.window / CONFIG.interval


def test_config_comes_from_the_spec() -> None:
    health = Health.model_validate(
        {"interval": "10s", "kvDrift": {"threshold": 0.3, "window": "5m", "warmup": "2m"}}
    )

    assert DriftConfig.from_health(health) == DriftConfig(0.3, 300.0, 120.0, 3600.0, 10.0)


def test_samples_of_an_engine_with_no_queue_are_never_saturated() -> None:
    sample = EngineSample(t=1, generated_tokens_total=1, running=3, waiting=0)

    assert not sample.saturated
