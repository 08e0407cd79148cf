"""An engine's learned throughput model as status.health.engines[] keeps it (detector
`kvOperatingPoint`), and read back by a restarted operator: re-learned after a restart, the KV
capacity would be measured on a cache that may already have fragmented."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from rljob.api.enums import RoleName
from rljob.api.status import ENGINE_HEALTH_MAX_AGE, EngineHealth
from rljob.health.drift.point_state import PointBaseline, PointState
from rljob.health.drift.throughput_model import PointModel

POINT_SUMMARY = "kvOperatingPoint"
# Seven of the eight values status allows: the per-token slopes are left out and re-fitted
# after a restore, which starts from the flat model at the saved mean time.
_CAPACITY, _MAX_BATCH, _LATENCY = "capacityTokens", "maxBatch", "tokenSeconds"
_SHARE, _PREFIX = "usableShare", "prefixHitRate"
_PREEMPTIONS, _PROMPT = "preemptionsPerRequest", "promptTokens"


@dataclass(frozen=True, slots=True)
class PointSeed:
    model: PointModel
    baseline: PointBaseline
    warmed_up_at: float
    cooldown_until: float

    @property
    def model_and_baseline(self) -> tuple[PointModel, PointBaseline, float]:
        return self.model, self.baseline, self.warmed_up_at


def _rounded(value: float | None) -> float | None:
    """Two significant figures: the fit refreshes every pass, and status is written only when a
    value moves materially, so finer digits would be a write every few minutes for nothing."""
    if value is None or not math.isfinite(value) or value == 0:
        return value
    return round(value, 1 - math.floor(math.log10(abs(value))))


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_point_summary(pod: str, role: RoleName, state: PointState, now: float) -> EngineHealth:
    model, baseline = state.model, state.baseline
    assert model is not None
    values = {
        _CAPACITY: model.capacity,
        _MAX_BATCH: model.max_batch if math.isfinite(model.max_batch) else None,
        _LATENCY: _rounded(model.intercept),
        _SHARE: _rounded(model.usable_share),
        _PREFIX: baseline.prefix_hit_rate if baseline else None,
        _PREEMPTIONS: baseline.preemptions_per_request if baseline else None,
        _PROMPT: baseline.prompt if baseline else None,
    }
    cooldown = state.cooldown_until
    return EngineHealth(
        pod=pod,
        role=role,
        detector=POINT_SUMMARY,
        baseline_tokens_per_second=None,
        warmed_up_at=_moment(state.warmed_up_at or now),
        cooldown_until=_moment(cooldown) if cooldown > now else None,
        updated_at=_moment(now),
        values={key: value for key, value in values.items() if value is not None},
    )


def from_point_summary(summary: EngineHealth, role: RoleName, now: float) -> PointSeed | None:
    values = summary.values
    if (
        summary.detector != POINT_SUMMARY
        or summary.role != role
        or not now - summary.updated_at.timestamp() <= ENGINE_HEALTH_MAX_AGE.total_seconds()
        or summary.warmed_up_at is None
        or not values.get(_CAPACITY, 0.0) > 0
        or not values.get(_LATENCY, 0.0) > 0
    ):
        return None
    model = PointModel(
        capacity=values[_CAPACITY],
        max_batch=values.get(_MAX_BATCH, math.inf),
        intercept=values[_LATENCY],
        per_kv_token=0.0,
        per_prefill_token=0.0,
        mean_kv=0.0,
        mean_prefill=0.0,
        usable_share=values.get(_SHARE, 1.0),
    )
    baseline = PointBaseline(values.get(_PREFIX), values.get(_PREEMPTIONS), values.get(_PROMPT))
    cooldown = summary.cooldown_until
    return PointSeed(
        model,
        baseline,
        summary.warmed_up_at.timestamp(),
        cooldown.timestamp() if cooldown is not None else -math.inf,
    )
