"""What the health loop keeps of each rollout engine for drains and the policy-current gate
(issue #17): its latest running requests and reported weight generation, with the sample's
time, and when a new reading could move a drain or a gate. Pure: rljob.health.monitor_answers
keeps each pod's reading from a round's (or a backfill's) answers and the loop hands the readings
to the passes. Imports neither the monitor nor its answers (both import it).

A reading's time is its newest running-gauge sample (the generation at that time), so a drain
never counts a running count older than the time it is stamped with. Garbage is no reading: a
negative or non-finite running count gives running None, a negative, fractional or
not exactly representable generation gives generation None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rljob.health.profiles import (
    ENGINE_POLICY_GENERATION,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    EngineMetrics,
    Series,
    SeriesLookup,
)

# A float gauge holds every integer up to 2**53 exactly; a larger "generation" is garbage.
MAX_GENERATION = 2**53
# Prometheus's lookback delta: a series without a sample for this long is not current to it
# either (a metrics source down this long leaves an HTTP-read generation on its own).
RUNNING_GONE_SECONDS = 300.0
# The signals an engine reading is made of.
ENGINE_GAUGE_SIGNALS = (REQUESTS_RUNNING, REQUESTS_WAITING, ENGINE_POLICY_GENERATION)


@dataclass(frozen=True, slots=True)
class EngineGauges:
    """One rollout engine's latest reading: the sample's time (unix seconds), its requests
    running or queued (summed over the engines of the pod) and the generation it serves (the
    lowest of its engines'); None: no valid value."""

    t: float
    running: float | None
    generation: int | None


class ReadingLike(Protocol):
    """A reading as the wake rule compares it (EngineReading and EngineGauges by pod fit)."""

    @property
    def pod(self) -> str: ...

    @property
    def running(self) -> float | None: ...

    @property
    def generation(self) -> int | None: ...


def engine_gauges(
    profile: EngineMetrics, series: Mapping[str, Sequence[Series]], staleness: float
) -> EngineGauges | None:
    """One pod's reading from its series by signal name; None without any point."""
    running = SeriesLookup(series.get(REQUESTS_RUNNING, ()), profile.engine_label, staleness)
    generation = SeriesLookup(
        series.get(ENGINE_POLICY_GENERATION, ()), profile.engine_label, staleness
    )
    t = _newest(series.get(REQUESTS_RUNNING, ()))
    if t is None:
        t = _newest(series.get(ENGINE_POLICY_GENERATION, ()))
    if t is None:
        return None
    waiting = SeriesLookup(series.get(REQUESTS_WAITING, ()), profile.engine_label, staleness)
    held = _held(_running(running.values_at(t)), waiting.values_at(t))
    return EngineGauges(t, held, _generation(generation.values_at(t)))


def _held(running: float | None, waiting: Sequence[float]) -> float | None:
    """Requests the engine holds: running plus queued (a drain that ended with requests still
    queued would lose them); no queue gauge at that time counts as an empty queue."""
    if running is None or not waiting:
        return running
    queued = _running(waiting)
    return None if queued is None else running + queued


def _newest(series: Iterable[Series]) -> float | None:
    return max((one.points[-1][0] for one in series if one.points), default=None)


def _running(values: Sequence[float]) -> float | None:
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        return None
    return sum(values)


def _generation(values: Sequence[float]) -> int | None:
    """The lowest generation of the pod's engines: the pod serves it only once all do."""
    if not values or any(not _whole(v) for v in values):
        return None
    return int(min(values))


def _whole(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= MAX_GENERATION and value == int(value)


def with_generation(known: EngineGauges | None, t: float, generation: int) -> EngineGauges:
    """A pod's reading with the generation its engine reported over HTTP at `t` (generationFrom
    engine). A running count is kept with its own time: stamped later it could end a drain that
    began after it was sampled (a Prometheus sample lags by a scrape or more), while the
    generation, read after it, is then stamped no later than it was read, which the gate's
    freshness rule takes as conservative. A running count older than RUNNING_GONE_SECONDS says
    nothing of now: the reading is the generation alone at `t`. A reading newer than `t` stays
    as it is (an older value never replaces a newer one), given the generation if it has none
    (a metrics reading without the gauge: the version only moves when the driver pushes)."""
    if known is not None and known.t > t:
        return known if known.generation is not None else replace(known, generation=generation)
    if known is None or known.running is None or t - known.t > RUNNING_GONE_SECONDS:
        return EngineGauges(t, None, generation)
    return EngineGauges(known.t, known.running, generation)


def readings_moved(before: Iterable[ReadingLike], after: Iterable[ReadingLike]) -> bool:
    """Whether a pod's reading could now move a drain or a gate: its running count became 0
    (or its first reading is 0), or its generation changed (or appeared)."""
    known = {reading.pod: reading for reading in before}
    for reading in after:
        was = known.get(reading.pod)
        if reading.running == 0 and (was is None or was.running != 0):
            return True
        if reading.generation is not None and (was is None or was.generation != reading.generation):
            return True
    return False
