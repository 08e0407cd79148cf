"""The kvDrift settings of one job, in seconds, as the detector uses them."""

from __future__ import annotations

from dataclasses import dataclass

from rljob.api.durations import parse_duration
from rljob.api.spec import Health

MAX_SLICES = 6


@dataclass(frozen=True, slots=True)
class DriftConfig:
    """kvDrift bounds in seconds, plus the job's evaluation interval."""

    threshold: float = 0.2
    window: float = 1800.0
    warmup: float = 900.0
    cooldown: float = 3600.0
    interval: float = 30.0

    @classmethod
    def from_health(cls, health: Health) -> DriftConfig:
        drift = health.kv_drift
        return cls(
            threshold=drift.threshold,
            window=parse_duration(drift.window),
            warmup=parse_duration(drift.warmup),
            cooldown=parse_duration(drift.cooldown),
            interval=parse_duration(health.interval),
        )

    @property
    def slices(self) -> int:
        if not self.interval > 0:
            return MAX_SLICES
        return max(1, min(MAX_SLICES, int(self.window // (4 * self.interval))))
