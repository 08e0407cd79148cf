"""One engine's drift state: its interval series, running totals, warm-up or baseline, and the
restarts and cooldown that reset or silence it."""

from __future__ import annotations

import math

from rljob.health.drift.config import DriftConfig
from rljob.health.drift.measures import TOTALS_WIDTH, Baseline, Warmup, WindowStats, amounts
from rljob.health.drift.summary import Seed
from rljob.health.samples import CumulativeRing, EngineSample, EngineSeries, ring_capacity


class EngineState:
    """What the detector keeps of one engine, from its first sample or its last restart."""

    __slots__ = (
        "baseline",
        "cooldown_until",
        "not_before",
        "ring",
        "series",
        "warmed_up_at",
        "warmup",
    )

    def __init__(self, config: DriftConfig) -> None:
        self.series = EngineSeries(config.interval)
        self.ring = CumulativeRing(ring_capacity(config.window, config.interval), TOTALS_WIDTH)
        self.warmup: Warmup | None = Warmup(ring_capacity(config.warmup, config.interval))
        self.baseline: Baseline | None = None
        self.warmed_up_at: float | None = None
        self.cooldown_until = -math.inf
        self.not_before = -math.inf

    def add(self, sample: EngineSample, config: DriftConfig) -> None:
        if not sample.t >= self.not_before:
            return
        interval = self.series.add(sample)
        if interval is None:
            return
        if interval.counter_reset:
            # The token counter only goes down when the engine process restarted.
            self.restart(config, interval.end)
            return
        self.ring.append(interval.start, interval.end, amounts(interval))
        if self.warmup is not None:
            self.warmup.add(interval)
            if self.warmup.done(config.warmup):
                self._take_baseline(config, interval.end)

    def _take_baseline(self, config: DriftConfig, at: float) -> None:
        baseline = self.warmup.baseline() if self.warmup is not None else None
        if baseline is not None and baseline.throughput > 0:
            self.baseline, self.warmup, self.warmed_up_at = baseline, None, at
        else:
            # A warm-up spent stalled gives no baseline to compare against: start it over.
            self.warmup = Warmup(ring_capacity(config.warmup, config.interval))

    def restart(self, config: DriftConfig, at: float) -> None:
        self.ring.clear()
        # Samples arrive in time order anyway; this keeps older saved summaries off the new process.
        self.not_before = max(self.not_before, at)
        self.warmup = Warmup(ring_capacity(config.warmup, config.interval))
        self.baseline = self.warmed_up_at = None

    def seed(self, seed: Seed) -> None:
        if seed.saved_at < self.not_before:
            return  # restarted after the summary was saved: its baseline is the old process's
        # The saved baseline wins over one taken since the restart, possibly on drifted throughput.
        self.baseline, self.warmup, self.warmed_up_at = seed.baseline, None, seed.warmed_up_at
        self.cooldown_until = max(self.cooldown_until, seed.cooldown_until)

    def as_seed(self) -> Seed | None:
        if self.baseline is None or self.warmed_up_at is None:
            return None
        return Seed(self.baseline, self.warmed_up_at, self.cooldown_until, -math.inf)

    def window_stats(self, config: DriftConfig, now: float) -> WindowStats:
        return WindowStats.of(self.ring, now - config.window, now, config.slices)

    def retained_values(self) -> int:
        return len(self.ring) + (len(self.warmup.rates) if self.warmup is not None else 0)
