"""Feeds the rollout engines' intervals to the knee's `ConcurrencyCurve` as rounds.

Engines are fed one pod at a time (a backfill brings many samples of one pod), so their
intervals do not line up. They are cut into slots of one health interval: a slot is a round
once every engine reporting lately has passed its end (or fell silent for MAX_SILENT_SLOTS), and
each engine covering at least half of it gives its mean requests in flight and tokens per
second there. A round every active engine covers teaches the pooled curve (its totals) and each
engine's; a round missing one (asleep, paused, late) teaches only the engines' own curves, as
the pool's totals would understate the role. Only steady intervals (`LoadInterval.steady`: the
ends' requests in flight agree) teach the curve; every judged one counts for the rounds' in-flight
counts, so a synchronous batch's decaying tail still shows the driver's setting.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

from rljob.health.bottleneck.load import LoadInterval
from rljob.health.knee import DEFAULT_RULE, ConcurrencyCurve, KneeRule

# An engine whose last interval ended this many slots before the newest one's no longer holds
# rounds back: it left, or its scrapes stopped.
MAX_SILENT_SLOTS = 3
MIN_SLOT_COVERAGE = 0.5
# Slots held open at most: an engine far ahead of the others cannot grow them without bound.
MAX_OPEN_SLOTS = 512


@dataclass(slots=True)
class _Piece:
    seconds: float = 0.0
    in_flight: float = 0.0  # integral of requests in flight over the seconds
    peak: float = 0.0  # the most requests in flight a sample showed
    # The same over the steady intervals only: what the curve learns from.
    steady_seconds: float = 0.0
    steady_tokens: float = 0.0
    steady_in_flight: float = 0.0


@dataclass(frozen=True, slots=True)
class Round:
    end: float
    in_flight: float  # mean requests in flight, summed over the engines of a full round
    peak: float  # the most any sample showed, summed likewise


class CurveFeeder:
    """The role's curve and the rounds of the last window."""

    def __init__(
        self, slot: float, min_seconds: float, window: float, rule: KneeRule | None = None
    ) -> None:
        self.curve = ConcurrencyCurve(min_seconds=min_seconds, rule=rule or DEFAULT_RULE)
        self._slot = slot
        self._slots: dict[int, dict[str, _Piece]] = {}
        self._latest: dict[str, float] = {}
        self._flushed = -math.inf  # slots ending by this time are closed
        self._rounds: deque[Round] = deque(maxlen=max(4, math.ceil(window / slot) + 2))

    def add(self, engine: str, interval: LoadInterval) -> None:
        """One interval of one engine; an interval it was not judged in still marks it alive."""
        self._latest[engine] = max(self._latest.get(engine, -math.inf), interval.end)
        if not interval.judged:
            return
        first = math.floor(max(interval.start, self._flushed) / self._slot)
        index = first
        while index * self._slot < interval.end:
            low = max(interval.start, index * self._slot, self._flushed)
            high = min(interval.end, (index + 1) * self._slot)
            if high > low:
                piece = self._slots.setdefault(index, {}).setdefault(engine, _Piece())
                piece.seconds += high - low
                piece.in_flight += interval.in_flight * (high - low)
                piece.peak = max(piece.peak, interval.peak_in_flight)
                if interval.steady:
                    piece.steady_seconds += high - low
                    piece.steady_tokens += interval.tokens * (high - low) / interval.duration
                    piece.steady_in_flight += interval.in_flight * (high - low)
            index += 1
        while len(self._slots) > MAX_OPEN_SLOTS:
            del self._slots[min(self._slots)]

    def retain(self, engines: Collection[str]) -> None:
        self.curve.retain(engines)
        for gone in [engine for engine in self._latest if engine not in engines]:
            del self._latest[gone]
        for pieces in self._slots.values():
            for gone in [engine for engine in pieces if engine not in engines]:
                del pieces[gone]

    def flush(self) -> None:
        """Closes the slots every active engine has passed and feeds them to the curve."""
        if not self._latest:
            return
        newest = max(self._latest.values())
        active = [e for e, t in self._latest.items() if t >= newest - MAX_SILENT_SLOTS * self._slot]
        watermark = min(self._latest[e] for e in active)
        for index in sorted(i for i in self._slots if (i + 1) * self._slot <= watermark):
            self._feed(index, self._slots.pop(index), active)
        self._flushed = max(self._flushed, math.floor(watermark / self._slot) * self._slot)

    def _feed(self, index: int, pieces: dict[str, _Piece], active: Collection[str]) -> None:
        end = (index + 1) * self._slot
        enough = MIN_SLOT_COVERAGE * self._slot
        covered = [engine for engine, piece in pieces.items() if piece.seconds >= enough]
        if covered and all(engine in covered for engine in active):
            in_flight = sum(pieces[e].in_flight / pieces[e].seconds for e in covered)
            self._rounds.append(Round(end, in_flight, sum(pieces[e].peak for e in covered)))
        readings = {
            engine: (
                piece.steady_in_flight / piece.steady_seconds,
                piece.steady_tokens / piece.steady_seconds,
            )
            for engine, piece in pieces.items()
            if piece.steady_seconds >= enough
        }
        if not readings:
            return
        seconds = sum(pieces[engine].steady_seconds for engine in readings) / len(readings)
        if all(engine in readings for engine in active):
            self.curve.observe_round(readings, seconds, end)
            return
        for engine, (concurrency, throughput) in readings.items():
            self.curve.observe(engine, concurrency, throughput, seconds, end)

    def current(self) -> float | None:
        """Requests in flight over the role's engines in the latest full round."""
        return self._rounds[-1].in_flight if self._rounds else None

    def highest(self, now: float, window: float) -> float | None:
        """The most requests in flight of a full round in the window: the driver's setting, as
        a synchronous rollout's in-flight count decays from it each step."""
        values = [r.peak for r in self._rounds if r.end >= now - window]
        return max(values) if values else None

    def bins(self, now: float) -> list[tuple[float, float, float]]:
        """The pooled curve's bins with enough time: (concurrency, throughput, seconds)."""
        means = self.curve.means(now, None)
        return [m for m in means if m[2] >= self.curve.min_seconds]
