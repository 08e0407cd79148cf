"""KVCacheDrift across an operator restart: a detector restored from the summaries a previous
operator kept in status judges each engine against its saved baseline at once, so drift that
began before the restart is found, where a fresh detector would take the drifted throughput as
its baseline and never find it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from rljob.api.rounding import DETECTOR_VALUE_DIGITS, round_significant
from rljob.api.status import (
    ENGINE_HEALTH_MAX_AGE,
    MAX_ENGINE_HEALTH,
    EngineHealth,
    HealthStatus,
    RLJobStatus,
)
from rljob.dev.traces import Cycle, EngineProfile, fleet_trace
from rljob.health import DriftConfig, EngineSample, KVDriftDetector
from rljob.health.drift import KV_DRIFT_SUMMARY
from rljob.health.drift.measures import Baseline
from rljob.vocabulary.enums import RoleName
from tests.unit.health.harness import HOUR, fleet

CONFIG = DriftConfig(threshold=0.2, window=1800, warmup=900, cooldown=3600, interval=30)
DROP_AT = HOUR
# The old operator goes away 10 minutes into the drift, before a window of it could be judged.
RESTART_AT = DROP_AT + 600
DRIFTING = "rollout-3"


def dropped(drop: float, **changes: object) -> EngineProfile:
    return replace(EngineProfile(drop=drop, drop_at=DROP_AT), **changes)  # type: ignore[arg-type]


def cycling(index: int, **changes: object) -> EngineProfile:
    return replace(EngineProfile(cycle=Cycle(offset=index * 41.0)), **changes)  # type: ignore[arg-type]


def as_saved(baseline: Baseline | None) -> Baseline | None:
    """The baseline as status keeps it: each number to DetectorValue's significant digits."""

    def kept(value: float | None) -> float | None:
        return None if value is None else round_significant(value, DETECTOR_VALUE_DIGITS)

    if baseline is None:
        return None
    return Baseline(
        throughput=round_significant(baseline.throughput, DETECTOR_VALUE_DIGITS),
        prefix_hit_rate=kept(baseline.prefix_hit_rate),
        preemptions_per_second=kept(baseline.preemptions_per_second),
    )


def through_status(summaries: list[EngineHealth]) -> list[EngineHealth]:
    """The summaries as a restarted operator reads them back from the API server."""
    wire = RLJobStatus(health=HealthStatus(engines=summaries)).model_dump_json(exclude_none=True)
    health = RLJobStatus.model_validate(json.loads(wire)).health
    assert health is not None
    return health.engines


@dataclass
class Failover:
    """The old operator's detector until the restart, then a restored and a fresh one fed the
    same samples; first findings in seconds after the restart."""

    old: KVDriftDetector
    restored: KVDriftDetector
    fresh: KVDriftDetector
    saved: list[EngineHealth] = field(default_factory=list)
    first: dict[str, dict[str, float]] = field(
        default_factory=lambda: {"restored": {}, "fresh": {}}
    )
    suppressed: list[float] = field(default_factory=list)


def failover(
    profiles: Mapping[str, EngineProfile],
    after: float,
    config: DriftConfig = CONFIG,
    seed: int = 0,
    before_restart: Callable[[KVDriftDetector], None] = lambda _: None,
    edit: Callable[[EngineHealth], EngineHealth] = lambda summary: summary,
) -> Failover:
    run = Failover(KVDriftDetector(config), KVDriftDetector(config), KVDriftDetector(config))
    before_restart(run.old)
    last = list(profiles)[-1]
    for name, sample in fleet_trace(profiles, RESTART_AT + after, interval=30, seed=seed):
        if sample.t < RESTART_AT:
            run.old.observe(name, sample)
            continue
        if not run.saved:
            run.saved = through_status(run.old.summaries(RESTART_AT))
            run.restored.restore([edit(summary) for summary in run.saved], RESTART_AT)
        run.restored.observe(name, sample)
        run.fresh.observe(name, sample)
        if name == last:
            _evaluate(run, sample.t)
    return run


def _evaluate(run: Failover, t: float) -> None:
    for label, detector in (("restored", run.restored), ("fresh", run.fresh)):
        for evaluation in detector.evaluate(t):
            if evaluation.is_finding:
                run.first[label].setdefault(evaluation.target, t - RESTART_AT)
            if label == "restored" and evaluation.evidence.get("suppressed") == "cooldown":
                run.suppressed.append(t - RESTART_AT)


DRIFTED_BEFORE_THE_RESTART = [
    pytest.param(fleet(4, rollout_3=dropped(0.3)), id="4-engines-judged-against-peers"),
    pytest.param(fleet(8, rollout_3=dropped(0.5)), id="8-engines-2.5x-threshold"),
    pytest.param(
        {"rollout-3": dropped(0.3)}, id="alone-confirmed-by-restored-cache-symptom-baselines"
    ),
    pytest.param(
        {f"rollout-{i}": cycling(i, drop=0.3 * (i == 3), drop_at=DROP_AT) for i in range(4)},
        id="generate-train-cycles",
    ),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("profiles", DRIFTED_BEFORE_THE_RESTART)
def test_drift_that_began_before_a_restart_is_found_within_a_window_only_when_restored(
    profiles: dict[str, EngineProfile], seed: int
) -> None:
    run = failover(profiles, 4 * HOUR, seed=seed)

    assert run.first["restored"].keys() == {DRIFTING}
    assert run.first["restored"][DRIFTING] <= CONFIG.window
    assert run.first["fresh"] == {}  # the defect: the drifted engine became its own baseline


HEALTHY_ACROSS_THE_RESTART = [
    pytest.param(fleet(4), id="4-saturated-engines"),
    pytest.param({f"rollout-{i}": cycling(i) for i in range(4)}, id="generate-train-cycles"),
    pytest.param(fleet(4, rollout_3=dropped(0.1)), id="half-threshold-drop"),
]


@pytest.mark.parametrize("profiles", HEALTHY_ACROSS_THE_RESTART)
def test_restored_healthy_engines_are_never_findings(profiles: dict[str, EngineProfile]) -> None:
    run = failover(profiles, 4 * HOUR)

    assert run.first["restored"] == {}


def test_a_restored_engine_is_judged_from_its_first_sample_without_a_new_warm_up() -> None:
    run = failover(fleet(4, rollout_3=dropped(0.3)), 60)

    assert run.restored.baseline(DRIFTING) == as_saved(run.old.baseline(DRIFTING))
    assert run.fresh.baseline(DRIFTING) is None
    (restored,) = [e for e in run.restored.evaluate(RESTART_AT + 60) if e.target == DRIFTING]
    assert "warming up" not in restored.message


COOLDOWNS = [
    pytest.param(3 * HOUR, 3 * HOUR - RESTART_AT, id="cooldown-outlasting-the-restart-is-kept"),
    pytest.param(0.5 * HOUR, None, id="cooldown-over-before-the-restart-is-not-saved"),
]


@pytest.mark.parametrize(("cooldown", "left_after_restart"), COOLDOWNS)
def test_a_cooldown_survives_the_restart(cooldown: float, left_after_restart: float | None) -> None:
    run = failover(
        fleet(4, rollout_3=dropped(0.3)),
        4 * HOUR,
        replace(CONFIG, cooldown=cooldown),
        before_restart=lambda old: old.note_restart(DRIFTING, 0.0),
    )

    (saved,) = [summary for summary in run.saved if summary.pod == DRIFTING]
    first = run.first["restored"][DRIFTING]
    if left_after_restart is None:
        assert saved.cooldown_until is None
        assert run.suppressed == []
        assert first <= CONFIG.window
    else:
        assert saved.cooldown_until == datetime.fromtimestamp(cooldown, UTC)
        assert run.suppressed and max(run.suppressed) < left_after_restart <= first
        assert first <= left_after_restart + CONFIG.interval


def _aged(age: timedelta) -> Callable[[EngineHealth], EngineHealth]:
    def edit(summary: EngineHealth) -> EngineHealth:
        moment = datetime.fromtimestamp(RESTART_AT, UTC) - age
        return summary.model_copy(update={"updated_at": moment})

    return edit


def _changed(**update: object) -> Callable[[EngineHealth], EngineHealth]:
    return lambda summary: summary.model_copy(update=update)


SECOND = timedelta(seconds=1)
SUMMARIES = [
    pytest.param(_aged(ENGINE_HEALTH_MAX_AGE - SECOND), True, id="just-younger-than-max-age"),
    pytest.param(_aged(ENGINE_HEALTH_MAX_AGE + SECOND), False, id="stale-older-than-max-age"),
    pytest.param(_changed(detector="engineStall"), False, id="another-detectors"),
    pytest.param(_changed(role=RoleName.VERIFIER), False, id="another-roles"),
    pytest.param(_changed(baseline_tokens_per_second=None), False, id="without-a-baseline"),
    pytest.param(_changed(warmed_up_at=None), False, id="without-a-warm-up-time"),
]


@pytest.mark.parametrize(("edit", "used"), SUMMARIES)
def test_only_fresh_complete_summaries_of_this_detector_are_restored(
    edit: Callable[[EngineHealth], EngineHealth], used: bool
) -> None:
    run = failover(fleet(4, rollout_3=dropped(0.3)), 4 * HOUR, edit=edit)

    assert (run.restored.baseline(DRIFTING) == as_saved(run.old.baseline(DRIFTING))) is used
    assert (DRIFTING in run.first["restored"]) is used


def test_a_summary_of_a_pod_that_is_gone_is_ignored() -> None:
    run = failover(fleet(4), 60)
    gone = run.saved[0].model_copy(update={"pod": "rollout-9"})
    run.restored.restore([gone], RESTART_AT)

    assert "rollout-9" not in run.restored.targets
    assert "rollout-9" not in {e.target for e in run.restored.evaluate(RESTART_AT + 60)}
    run.restored.retain([f"rollout-{i}" for i in range(4)])
    assert "rollout-9" not in {s.pod for s in run.restored.summaries(RESTART_AT + 60)}


def _restarted_by_the_operator(detector: KVDriftDetector) -> None:
    detector.note_restart("rollout-0", RESTART_AT + 1)


def _counter_reset(detector: KVDriftDetector) -> None:
    for t, tokens in ((30, 1e6), (60, 0.0)):
        detector.observe("rollout-0", EngineSample(RESTART_AT + t, tokens, running=8, waiting=4))


@pytest.mark.parametrize(
    "restart",
    [
        pytest.param(_restarted_by_the_operator, id="restart-noted-by-the-operator"),
        pytest.param(_counter_reset, id="counter-reset-seen-in-its-metrics"),
    ],
)
def test_an_engine_restarted_after_its_summary_was_saved_warms_up_again(
    restart: Callable[[KVDriftDetector], None],
) -> None:
    detector = KVDriftDetector(CONFIG)
    saved = failover(fleet(4), 0).saved
    detector.restore(saved, RESTART_AT)
    restart(detector)
    detector.observe("rollout-1", EngineSample(RESTART_AT + 30, 0.0, running=8, waiting=4))
    detector.restore(saved, RESTART_AT + 90)  # restored again, as after a spec change

    assert detector.baseline("rollout-0") is None
    assert detector.baseline("rollout-1") is not None


def test_a_restore_after_the_engines_were_seen_replaces_a_baseline_taken_on_drift() -> None:
    profiles = fleet(4, rollout_3=dropped(0.3))
    saved = failover(profiles, 0).saved
    late = KVDriftDetector(CONFIG)
    for name, sample in fleet_trace(profiles, RESTART_AT + HOUR, interval=30):
        if sample.t >= RESTART_AT:
            late.observe(name, sample)
    drifted = late.baseline(DRIFTING)

    late.restore(saved, RESTART_AT + HOUR)

    restored = late.baseline(DRIFTING)
    assert drifted is not None and restored is not None
    assert restored.throughput == saved[3].baseline_tokens_per_second
    assert drifted.throughput < 0.8 * restored.throughput


def test_a_summary_lists_warmed_up_engines_by_pod_with_their_baseline_and_symptoms() -> None:
    detector = KVDriftDetector(CONFIG)
    for name, sample in fleet_trace(fleet(3), HOUR, interval=30):
        detector.observe(name, sample)
    detector.note_restart("rollout-1", HOUR)  # warming up again: not summarized
    baseline = detector.baseline("rollout-2")
    assert baseline is not None

    summaries = detector.summaries(HOUR + 30)

    assert [summary.pod for summary in summaries] == ["rollout-0", "rollout-2"]
    summary = summaries[1]
    assert (summary.role, summary.detector) == (RoleName.ROLLOUT, KV_DRIFT_SUMMARY)
    assert summary.baseline_tokens_per_second == baseline.throughput
    assert summary.warmed_up_at is not None
    assert CONFIG.warmup <= summary.warmed_up_at.timestamp() < HOUR
    assert summary.updated_at == datetime.fromtimestamp(HOUR + 30, UTC)
    assert summary.cooldown_until is None
    assert summary.values == {
        "prefixHitRate": baseline.prefix_hit_rate,
        "preemptionsPerSecond": baseline.preemptions_per_second,
    }


def test_summaries_round_trip_through_status_json_unchanged() -> None:
    run = failover(fleet(4), 60)
    wire = json.loads(RLJobStatus(health=HealthStatus(engines=run.saved)).model_dump_json())
    engine = wire["health"]["engines"][0]

    assert {"baselineTokensPerSecond", "warmedUpAt", "updatedAt", "values"} <= engine.keys()
    assert through_status(run.saved) == run.saved
    assert [run.restored.baseline(f"rollout-{i}") for i in range(4)] == [
        as_saved(run.old.baseline(f"rollout-{i}")) for i in range(4)
    ]


def test_a_restored_engine_not_yet_seen_keeps_its_saved_time_until_it_grows_stale() -> None:
    run = failover(fleet(2), 0)
    detector = KVDriftDetector(CONFIG)
    detector.restore(run.saved, RESTART_AT)
    max_age = ENGINE_HEALTH_MAX_AGE.total_seconds()

    assert detector.summaries(RESTART_AT + HOUR) == run.saved
    assert detector.summaries(RESTART_AT + max_age + 1) == []


def test_summaries_are_bounded() -> None:
    config = replace(CONFIG, warmup=60)
    detector = KVDriftDetector(config)
    pods = [f"rollout-{index:03d}" for index in range(MAX_ENGINE_HEALTH + 44)]
    for t in range(0, 121, 30):
        for pod in pods:
            detector.observe(pod, EngineSample(float(t), 1000.0 * t, running=8, waiting=4))

    summaries = detector.summaries(120.0)

    assert [summary.pod for summary in summaries] == pods[:MAX_ENGINE_HEALTH]
    assert HealthStatus(engines=summaries).engines == summaries
