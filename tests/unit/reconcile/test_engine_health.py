"""status.health.engines[]: the detectors' summaries replace it only when something moved
materially (a healthy job writes status at most every 5 minutes), and it stays bounded."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pydantic import ValidationError

from rljob.api.status import (
    ENGINE_HEALTH_KEY_MAX_LENGTH,
    MAX_ENGINE_HEALTH,
    MAX_ENGINE_HEALTH_VALUES,
    EngineHealth,
    HealthStatus,
    RLJobStatus,
)
from rljob.health import DriftConfig, EngineSample, KVDriftDetector
from rljob.reconcile.engine_health import ENGINE_HEALTH_REFRESH, with_engine_health
from rljob.vocabulary.enums import RoleName
from tests.unit.reconcile.world import T0

MINUTE = dt.timedelta(minutes=1)
NOW = T0 + 5 * MINUTE


def summary(pod: str = "rollout-0", **changes: Any) -> EngineHealth:
    fields: dict[str, Any] = {
        "pod": pod,
        "role": RoleName.ROLLOUT,
        "detector": "kvDrift",
        "baseline_tokens_per_second": 800.0,
        "warmed_up_at": T0 - 20 * MINUTE,
        "updated_at": T0,
        "values": {"prefixHitRate": 0.7},
    }
    return EngineHealth(**{**fields, **changes})


def saved(*engines: EngineHealth) -> RLJobStatus:
    return RLJobStatus(health=HealthStatus(engines=list(engines)))


STEADY = saved(summary("rollout-0"), summary("rollout-1"))

UNCHANGED = [
    pytest.param(STEADY, {"updated_at": NOW}, id="same-summary-confirmed-5m-later"),
    pytest.param(STEADY, {"baseline_tokens_per_second": 807.0}, id="baseline-within-1pct"),
    pytest.param(STEADY, {"values": {"prefixHitRate": 0.705}}, id="value-within-1pct"),
    pytest.param(STEADY, {"cooldown_until": NOW - MINUTE}, id="cooldown-already-over"),
    pytest.param(
        saved(summary("rollout-0", cooldown_until=NOW - MINUTE), summary("rollout-1")),
        {},
        id="saved-cooldown-ran-out",
    ),
    pytest.param(
        saved(summary("rollout-0", cooldown_until=NOW + MINUTE), summary("rollout-1")),
        {"cooldown_until": NOW + MINUTE + dt.timedelta(microseconds=3)},
        id="same-cooldown-after-a-round-trip",
    ),
    pytest.param(
        saved(
            summary("rollout-0", updated_at=T0 - 2 * ENGINE_HEALTH_REFRESH), summary("rollout-1")
        ),
        {"updated_at": T0 - 2 * ENGINE_HEALTH_REFRESH},
        id="restored-engine-not-yet-seen-keeps-its-saved-time",
    ),
    pytest.param(STEADY, {"warmed_up_at": T0}, id="warm-up-time-alone"),
]


@pytest.mark.parametrize(("status", "change"), UNCHANGED)
def test_nothing_material_writes_nothing(status: RLJobStatus, change: dict[str, Any]) -> None:
    fresh = [summary("rollout-0", **change), summary("rollout-1", updated_at=NOW)]

    assert with_engine_health(status, fresh, NOW) is status


CHANGED = [
    pytest.param(STEADY, {"baseline_tokens_per_second": 820.0}, id="baseline-moved-2.5pct"),
    pytest.param(
        saved(summary("rollout-0", baseline_tokens_per_second=None), summary("rollout-1")),
        {},
        id="baseline-taken",
    ),
    pytest.param(STEADY, {"cooldown_until": NOW + MINUTE}, id="cooldown-started"),
    pytest.param(
        saved(summary("rollout-0", cooldown_until=NOW + MINUTE), summary("rollout-1")),
        {"cooldown_until": NOW + 2 * MINUTE},
        id="cooldown-moved",
    ),
    pytest.param(STEADY, {"values": {"prefixHitRate": 0.6}}, id="value-moved"),
    pytest.param(
        STEADY, {"values": {"prefixHitRate": 0.7, "preemptionsPerSecond": 0.0}}, id="value-added"
    ),
    pytest.param(STEADY, {"role": RoleName.VERIFIER}, id="role-changed"),
    pytest.param(
        STEADY, {"updated_at": T0 + ENGINE_HEALTH_REFRESH}, id="confirmed-a-refresh-period-later"
    ),
    pytest.param(saved(summary("rollout-1")), {}, id="engine-added"),
    pytest.param(
        saved(summary("rollout-0"), summary("rollout-1"), summary("rollout-2")),
        {},
        id="engine-gone",
    ),
    pytest.param(RLJobStatus(), {}, id="first-summaries"),
]


@pytest.mark.parametrize(("status", "change"), CHANGED)
def test_a_material_change_replaces_the_summaries(
    status: RLJobStatus, change: dict[str, Any]
) -> None:
    fresh = [summary("rollout-1", updated_at=NOW), summary("rollout-0", **change)]

    written = with_engine_health(status, fresh, NOW)

    assert written is not status
    assert written.health == HealthStatus(engines=[fresh[1], fresh[0]])
    assert written.model_copy(update={"health": status.health}) == status


EMPTY = [
    pytest.param(RLJobStatus(), False, id="nothing-saved-nothing-to-save"),
    pytest.param(saved(), False, id="empty-list-saved"),
    pytest.param(STEADY, True, id="every-engine-gone"),
]


@pytest.mark.parametrize(("status", "writes"), EMPTY)
def test_no_summaries(status: RLJobStatus, writes: bool) -> None:
    written = with_engine_health(status, [], NOW)

    assert (written is not status) is writes
    if writes:
        assert written.health == HealthStatus()


def test_summaries_are_deduplicated_and_bounded_by_pod_name() -> None:
    pods = [f"rollout-{index:03d}" for index in range(MAX_ENGINE_HEALTH + 10)]
    fresh = [summary(pod) for pod in reversed(pods)] + [summary(pods[0], role=RoleName.VERIFIER)]

    written = with_engine_health(RLJobStatus(), fresh, NOW).health

    assert written is not None
    assert [engine.pod for engine in written.engines] == pods[:MAX_ENGINE_HEALTH]
    assert written.engines[0].role == RoleName.VERIFIER


def test_a_steady_detector_writes_once_then_once_a_refresh_period() -> None:
    detector = KVDriftDetector(DriftConfig(warmup=60, interval=30))
    start = T0.timestamp()
    for step in range(5):
        detector.observe("rollout-0", EngineSample(start + 30 * step, 1e4 * step, 8, 4))

    def refresh(status: RLJobStatus, at: dt.datetime) -> RLJobStatus:
        return with_engine_health(status, detector.summaries(at.timestamp()), at)

    first = refresh(RLJobStatus(), NOW)
    assert first.health is not None and len(first.health.engines) == 1
    assert refresh(first, NOW + 5 * MINUTE) is first
    assert refresh(first, NOW + ENGINE_HEALTH_REFRESH - MINUTE) is first
    assert refresh(first, NOW + ENGINE_HEALTH_REFRESH) is not first


LONG_KEY = "k" * (ENGINE_HEALTH_KEY_MAX_LENGTH + 1)
TOO_MANY_VALUES = {f"v{index}": 1.0 for index in range(MAX_ENGINE_HEALTH_VALUES + 1)}
INVALID = [
    pytest.param({"pod": "p" * 254}, id="pod-name-too-long"),
    pytest.param({"detector": "KV drift"}, id="detector-not-a-field-name"),
    pytest.param({"detector": "d" * 64}, id="detector-too-long"),
    pytest.param({"values": TOO_MANY_VALUES}, id="too-many-values"),
    pytest.param({"values": {LONG_KEY: 1.0}}, id="value-key-too-long"),
    pytest.param({"values": {"": 1.0}}, id="empty-value-key"),
    pytest.param({"values": {"x": float("nan")}}, id="nan-value"),
    pytest.param({"baseline_tokens_per_second": -1.0}, id="negative-baseline"),
    pytest.param({"baseline_tokens_per_second": float("inf")}, id="infinite-baseline"),
]


@pytest.mark.parametrize("change", INVALID)
def test_an_engine_summary_is_bounded(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        summary(**change)


LISTS = [
    pytest.param([summary(f"r-{i}") for i in range(MAX_ENGINE_HEALTH + 1)], id="too-many-engines"),
    pytest.param([summary("r-0"), summary("r-0", role=RoleName.VERIFIER)], id="duplicate-pod"),
]


@pytest.mark.parametrize("engines", LISTS)
def test_the_engine_list_is_bounded_and_keyed_by_pod_and_detector(
    engines: list[EngineHealth],
) -> None:
    with pytest.raises(ValidationError):
        HealthStatus(engines=engines)


def test_the_same_pod_may_have_a_summary_per_detector() -> None:
    engines = [summary("r-0"), summary("r-0", detector="engineStall")]

    assert HealthStatus(engines=engines).engines == engines
