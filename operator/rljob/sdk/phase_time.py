"""Seconds the trainer spends in each phase, `rljob_trainer_phase_seconds_total{phase}`: the phase
gauge, sampled every scrape, cannot say what share of a step each phase takes; this counter can
(`rate(...[5m])` per phase over their sum).

Time accrues to the phase the trainer last entered: at each change the previous phase gets the
seconds since it was entered, and a scrape adds the current phase's elapsed seconds without
storing them, so the counter never goes down and never waits for the next change.

The progress exporter's phase names map onto the counter's phases as:

    generating, waiting_for_rollouts, training, syncing_weights, evaluating  the same names
    checkpointing                                                             checkpointing
    starting, and any other name                                              not accrued
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rljob.sdk.collector import Collector

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily

# prometheus_client adds `_total` to a counter family's samples.
PHASE_SECONDS = "rljob_trainer_phase_seconds"
# The phases a bottleneck diagnosis splits a step into.
STEP_PHASES = ("generating", "waiting_for_rollouts", "training", "syncing_weights", "evaluating")
# A periodic save is wall time between steps: counted on its own so that no share hides it.
COUNTED_PHASES = (*STEP_PHASES, "checkpointing")
# The exporter's phase names that accrue seconds, and the counter phase each accrues to.
PHASE_SECONDS_OF: dict[str, str] = {name: name for name in COUNTED_PHASES}


class PhaseSeconds(Collector):
    """The counter as a collector: entered phases from the trainer, reads from scrapes (each under
    one lock). `clock` gives seconds that never go backwards (time.monotonic by default)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(COUNTED_PHASES, 0.0)
        self._current: str | None = None
        self._since = clock()

    def enter(self, name: str) -> None:
        """The trainer is now in phase `name` (an exporter phase name)."""
        with self._lock:
            now = self._clock()
            if self._current is not None:
                self._totals[self._current] += max(0.0, now - self._since)
            self._current = PHASE_SECONDS_OF.get(name)
            self._since = now

    def add(self, phase: str, seconds: float) -> None:
        """Seconds a trainer measured itself (a framework's per-step timing) in counter phase
        `phase`; negative or non-finite seconds are not added."""
        if phase in self._totals and 0 <= seconds < float("inf"):
            with self._lock:
                self._totals[phase] += seconds

    def totals(self) -> dict[str, float]:
        """Seconds per counter phase, the current phase's elapsed time included."""
        with self._lock:
            totals = dict(self._totals)
            if self._current is not None:
                totals[self._current] += max(0.0, self._clock() - self._since)
        return totals

    def _family(self, totals: dict[str, float]) -> CounterMetricFamily:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            PHASE_SECONDS, "Seconds the trainer spent in each phase.", labels=["phase"]
        )
        for phase, seconds in totals.items():
            family.add_metric([phase], seconds)
        return family

    def describe(self) -> Iterable[CounterMetricFamily]:
        # Registration asks for names only: no clock read, no lock.
        return [self._family({})]

    def collect(self) -> Iterable[CounterMetricFamily]:
        return [self._family(self.totals())]


__all__ = ["COUNTED_PHASES", "PHASE_SECONDS", "PHASE_SECONDS_OF", "STEP_PHASES", "PhaseSeconds"]
