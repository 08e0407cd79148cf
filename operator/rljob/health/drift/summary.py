"""A warmed-up engine's baseline and cooldown as written to status.health.engines[], and read
back by a restarted operator so a possibly drifted engine never becomes its own baseline."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from rljob.api.status import ENGINE_HEALTH_MAX_AGE, EngineHealth
from rljob.health.drift.measures import Baseline
from rljob.vocabulary.enums import RoleName

# status.health.engines[].detector of drift summaries: the spec.health field configuring it.
KV_DRIFT_SUMMARY = "kvDrift"
_PREFIX_HIT_RATE = "prefixHitRate"
_PREEMPTIONS_PER_SECOND = "preemptionsPerSecond"


@dataclass(frozen=True, slots=True)
class Seed:
    """A saved summary waiting for its engine's first sample; times in unix seconds."""

    baseline: Baseline
    warmed_up_at: float
    cooldown_until: float
    saved_at: float


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_summary(pod: str, role: RoleName, seed: Seed, updated_at: float, now: float) -> EngineHealth:
    """The seed as a status.health.engines[] entry; a cooldown already over is left out."""
    baseline = seed.baseline
    values = {
        _PREFIX_HIT_RATE: baseline.prefix_hit_rate,
        _PREEMPTIONS_PER_SECOND: baseline.preemptions_per_second,
    }
    return EngineHealth(
        pod=pod,
        role=role,
        detector=KV_DRIFT_SUMMARY,
        baseline_tokens_per_second=baseline.throughput,
        warmed_up_at=_moment(seed.warmed_up_at),
        cooldown_until=_moment(seed.cooldown_until) if seed.cooldown_until > now else None,
        updated_at=_moment(updated_at),
        values={key: value for key, value in values.items() if value is not None},
    )


def from_summary(summary: EngineHealth, role: RoleName, now: float) -> Seed | None:
    """The summary as a seed, or None when it is not this detector's, stale or incomplete."""
    saved_at = summary.updated_at.timestamp()
    throughput = summary.baseline_tokens_per_second
    if (
        summary.detector != KV_DRIFT_SUMMARY
        or summary.role != role
        or not now - saved_at <= ENGINE_HEALTH_MAX_AGE.total_seconds()
        or throughput is None
        or not throughput > 0
        or summary.warmed_up_at is None
    ):
        return None
    cooldown = summary.cooldown_until
    return Seed(
        baseline=Baseline(
            throughput=throughput,
            prefix_hit_rate=summary.values.get(_PREFIX_HIT_RATE),
            preemptions_per_second=summary.values.get(_PREEMPTIONS_PER_SECOND),
        ),
        warmed_up_at=summary.warmed_up_at.timestamp(),
        cooldown_until=cooldown.timestamp() if cooldown is not None else -math.inf,
        saved_at=saved_at,
    )
