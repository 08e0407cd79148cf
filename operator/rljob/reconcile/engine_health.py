"""status.health.engines[]: the detectors' per-engine summaries (baselines, cooldowns), written
with the progress refresh so that a restarted operator restores them instead of learning them
again. A healthy job writes status at most every 5 minutes, so only a material change is one: a
baseline or value moved by more than 1 %, another cooldown, an engine added or gone, or a summary
that would otherwise grow stale."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from rljob.api.status import (
    ENGINE_HEALTH_MAX_AGE,
    MAX_ENGINE_HEALTH,
    EngineHealth,
    HealthStatus,
    RLJobStatus,
)

# Relative change of a baseline (or any value) that is worth a status write.
MATERIAL_CHANGE = 0.01
# Well inside ENGINE_HEALTH_MAX_AGE, so an operator dying just before a refresh leaves summaries
# that a replacement arriving hours later still restores.
ENGINE_HEALTH_REFRESH = ENGINE_HEALTH_MAX_AGE / 6
# Cooldowns are equal at this precision: a round trip through status keeps microseconds at best.
_COOLDOWN_PRECISION = timedelta(seconds=1)

_Key = tuple[str, str]


def _key(summary: EngineHealth) -> _Key:
    return summary.pod, summary.detector


def with_engine_health(
    status: RLJobStatus, summaries: Iterable[EngineHealth], now: datetime
) -> RLJobStatus:
    """`status` with status.health.engines[] replaced by `summaries` (every detector's current
    ones; an engine absent from them is dropped), or `status` itself when nothing moved
    materially. At most MAX_ENGINE_HEALTH entries, by pod name."""
    by_key = {_key(summary): summary for summary in summaries}
    fresh = [by_key[key] for key in sorted(by_key)[:MAX_ENGINE_HEALTH]]
    old = {_key(summary): summary for summary in status.health.engines} if status.health else {}
    if old.keys() == {_key(summary) for summary in fresh} and all(
        _unchanged(old[_key(summary)], summary, now) for summary in fresh
    ):
        return status
    return status.model_copy(update={"health": HealthStatus(engines=fresh)})


def _unchanged(before: EngineHealth, after: EngineHealth, now: datetime) -> bool:
    return (
        before.role == after.role
        and _close(before.baseline_tokens_per_second, after.baseline_tokens_per_second)
        and before.values.keys() == after.values.keys()
        and all(_close(before.values[name], value) for name, value in after.values.items())
        and _same_cooldown(before.cooldown_until, after.cooldown_until, now)
        # A restored engine not observed since keeps its saved time: no write refreshes it.
        and after.updated_at - before.updated_at < ENGINE_HEALTH_REFRESH
    )


def _close(before: float | None, after: float | None) -> bool:
    if before is None or after is None:
        return before is after
    return abs(after - before) <= MATERIAL_CHANGE * max(abs(before), abs(after))


def _same_cooldown(before: datetime | None, after: datetime | None, now: datetime) -> bool:
    # A cooldown that has run out is no cooldown: its end is not worth a write.
    before, after = _running(before, now), _running(after, now)
    if before is None or after is None:
        return before is after
    return abs(after - before) < _COOLDOWN_PRECISION


def _running(until: datetime | None, now: datetime) -> datetime | None:
    return until if until is not None and until > now else None
