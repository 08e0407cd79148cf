"""The rollout parallelism knee, estimated passively. Users find it by hand: run collection at a
low client parallelism, double it (5 -> 10 -> 20 -> 40 ...) and watch throughput; where a doubling
barely changes it (< 20%) the model server or verification is the limit, not the client. Each
scrape of an engine already gives its requests in flight and its generation throughput, so binned
on a log2 scale of concurrency they draw the curve that sweep would, without running it.

The knee is the first point of the plateau: the lowest observed concurrency from which every
doubling gains less than `flat` (a fifth of linear scaling's +100%) and which the doubling into
it no longer climbed to (it gained less than `flat` too, or no lower point was observed). That is
the manual reading of a sweep: doubling to 64 barely moved throughput, so at 64 the server is the
limit; at 32 the doubling into it still paid, so 32 is the top of the climb, not the plateau.
Run at 80% of the peak's concurrency (the lowest reaching the highest throughput within noise);
past the peak throughput degrades.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from rljob.health.evaluation import format_percent_change
from rljob.vocabulary.knee import Confidence, Knee, Point, format_amount, format_count

# Old behaviour weighs 1/e as much after this long (seconds): the curve follows the job's changes.
MEMORY = 6 * 3600.0
# Bin width in octaves: quarter-octaves give each step of a doubling sweep a bin of its own.
BIN_OCTAVES = 0.25
# Concurrency the bins reach (pooled over a role's engines), which bounds the bins per curve.
MAX_CONCURRENCY = 2.0**16
# Seconds a bin needs before its mean is a point: a few rollout batches, not one burst.
MIN_SECONDS = 300.0
# A bin with this share of MIN_SECONDS counts as observed: it stretches the span judged.
SEEN_SHARE = 0.1
# A bin decayed below this share of MIN_SECONDS is dropped: it no longer says anything.
PRUNE_SHARE = 1e-3
# Steps shorter than this (octaves) amplify noise too much when scaled to a doubling.
MIN_STEP_OCTAVES = 0.5


@dataclass(frozen=True, slots=True)
class KneeRule:
    """The thresholds of the manual procedure, as shares of throughput."""

    flat: float = 0.2  # a doubling gaining less is flat (linear scaling gains 1.0)
    peak_tolerance: float = (
        0.05  # within this of the highest throughput is the peak: bins are noisy
    )
    degrade_tolerance: float = (
        0.1  # falling more than this below the highest past the peak degrades
    )
    headroom: float = 0.8  # run at this share of the peak's concurrency
    min_points: int = 3  # bins with enough time: two steps show a bend, one does not
    min_coverage: float = 0.5  # share of the observed span those bins must cover
    min_octaves: float = 1.0  # a claim needs at least one doubling observed


DEFAULT_RULE = KneeRule()


def find_knee(
    points: Sequence[Point],
    *,
    span: tuple[float, float] | None = None,
    rule: KneeRule = DEFAULT_RULE,
    unit: str = "rollouts/s",
) -> Knee:
    """The knee of (concurrency, throughput) means; `span` is the observed range, thin bins
    included (the points' own range when None)."""
    curve = sorted(
        (c, t) for c, t in points if c > 0 and t >= 0 and math.isfinite(c) and math.isfinite(t)
    )
    confidence = _confidence(curve, span)
    if not curve:
        return Knee(None, None, None, None, None, confidence, False, _too_few(confidence, rule))
    peak = _peak(curve, rule)
    (peak_c, peak_t), top = curve[peak], max(t for _, t in curve)
    degrading = next(
        (c for c, t in curve[peak + 1 :] if t < (1 - rule.degrade_tolerance) * top), None
    )
    octaves = math.log2(curve[-1][0] / curve[0][0])
    if (
        confidence.bins < rule.min_points
        or confidence.coverage < rule.min_coverage
        or octaves < rule.min_octaves
    ):
        message = _too_few(confidence, rule)
        return Knee(None, peak_c, peak_t, degrading, None, confidence, False, message)
    found = _knee_index(curve, rule.flat)
    if found is None:
        message = _beyond_message(curve, unit)
        return Knee(None, peak_c, peak_t, degrading, None, confidence, True, message)
    # The plateau cannot begin past the peak: a curve that drops after it bent there.
    knee = min(found, peak)
    recommended = rule.headroom * peak_c
    message = _knee_message(curve, knee, peak, rule, unit)
    if degrading is not None:
        fallen = next(t for c, t in curve if c == degrading)
        message += (
            f"; past the peak throughput falls {1 - fallen / top:.0%} below its highest "
            f"by {format_count(degrading)} in flight"
        )
    knee_c = curve[knee][0]
    return Knee(knee_c, peak_c, peak_t, degrading, recommended, confidence, False, message)


def _confidence(curve: Sequence[Point], span: tuple[float, float] | None) -> Confidence:
    """A gap of up to one octave between points counts as covered: a sweep doubles."""
    if not curve:
        low, high = span or (0.0, 0.0)
        return Confidence(0, 0.0, low, high)
    low = min(curve[0][0], span[0]) if span else curve[0][0]
    high = max(curve[-1][0], span[1]) if span else curve[-1][0]
    total = math.log2(high / low) if low > 0 else 0.0
    covered = sum(min(math.log2(b[0] / a[0]), 1.0) for a, b in itertools.pairwise(curve))
    return Confidence(len(curve), covered / total if total > 0 else 0.0, low, high)


def _peak(curve: Sequence[Point], rule: KneeRule) -> int:
    """The lowest point within the tolerance of the highest throughput."""
    top = max(t for _, t in curve)
    return next(i for i, (_, t) in enumerate(curve) if t >= (1 - rule.peak_tolerance) * top)


def _partner(curve: Sequence[Point], i: int, direction: int) -> int | None:
    """The point nearest one doubling up (+1) or down (-1) from point i, at least half an octave
    away; the nearest beyond when none is within a doubling."""
    here = math.log2(curve[i][0])
    steps = [(j, (math.log2(c) - here) * direction) for j, (c, _) in enumerate(curve)]
    near = [(abs(step - 1.0), j) for j, step in steps if step >= MIN_STEP_OCTAVES]
    return min(near)[1] if near else None


def _step(curve: Sequence[Point], i: int, direction: int) -> tuple[Point, Point] | None:
    """(lower, upper) of the step between point i and its partner."""
    j = _partner(curve, i, direction)
    return None if j is None else (curve[min(i, j)], curve[max(i, j)])


def _gain(curve: Sequence[Point], i: int, direction: int) -> float | None:
    """Throughput gained per doubling between point i and its partner, scaled on log2."""
    if (step := _step(curve, i, direction)) is None:
        return None
    (c0, t0), (c1, t1) = step
    if t0 <= 0:
        return math.inf if t1 > 0 else 0.0
    return float((t1 / t0) ** (1.0 / math.log2(c1 / c0)) - 1.0)


def _knee_index(curve: Sequence[Point], flat: float) -> int | None:
    """The first point of the plateau (see the module docstring), or None while still climbing."""
    ups = [_gain(curve, i, +1) for i in range(len(curve))]
    for k in range(len(curve)):
        into = _gain(curve, k, -1)
        if into is not None and into >= flat:
            continue
        after = [gain for gain in ups[k:] if gain is not None]
        # A point no step reaches or leaves has no evidence either way.
        if (into is not None or after) and all(gain < flat for gain in after):
            return k
    return None


def _step_text(curve: Sequence[Point], i: int, direction: int) -> str | None:
    if (step := _step(curve, i, direction)) is None or step[0][1] <= 0:
        return None
    (c0, t0), (c1, t1) = step
    return f"{format_percent_change(t1 / t0)} from {format_count(c0)} to {format_count(c1)}"


def _at(curve: Sequence[Point], i: int, unit: str, directions: Sequence[int]) -> str:
    """throughput T unit at C in flight, +X% from A to C and +Y% from C to B."""
    c, t = curve[i]
    steps = [s for d in directions if (s := _step_text(curve, i, d)) is not None]
    head = f"throughput {format_amount(t)} {unit} at {format_count(c)} in flight"
    return f"{head}, {' and '.join(steps)}" if steps else head


def _knee_message(curve: Sequence[Point], knee: int, peak: int, rule: KneeRule, unit: str) -> str:
    at = format_count(curve[knee][0])
    where = f"the knee is at {at}" if knee else f"the knee is at or below {at}, the lowest observed"
    peak_text = f"the peak's {format_count(curve[peak][0])}"
    if peak != knee:
        peak_text += f" at {format_amount(curve[peak][1])} {unit}"
    headroom = format_count(rule.headroom * curve[peak][0])
    run = f"run at {headroom} ({rule.headroom:.0%} of {peak_text})"
    return f"{_at(curve, knee, unit, (-1, +1))}: {where}; {run}"


def _beyond_message(curve: Sequence[Point], unit: str) -> str:
    top = format_count(curve[-1][0])
    return (
        f"{_at(curve, len(curve) - 1, unit, (-1,))}: the knee lies beyond {top}: "
        f"the job never ran above {top} in flight"
    )


def _too_few(confidence: Confidence, rule: KneeRule) -> str:
    if not confidence.bins:
        return "no concurrency has enough time observed to place the knee"
    return (
        f"{confidence.bins} bins with enough time, covering {confidence.coverage:.0%} of "
        f"{format_count(confidence.lowest)}-{format_count(confidence.highest)} in flight: "
        "too few to place "
        f"the knee (a claim takes {rule.min_points} bins over at least "
        f"{rule.min_octaves:g} doubling, covering {rule.min_coverage:.0%} of the span)"
    )


class _Bin:
    """Decayed time-weighted sums of one concurrency bin."""

    __slots__ = ("at", "concurrency", "seconds", "throughput")

    def __init__(self, at: float) -> None:
        self.seconds = self.concurrency = self.throughput = 0.0
        self.at = at

    def add(self, concurrency: float, throughput: float, seconds: float, at: float) -> None:
        # A late observation is aged instead of making the sums grow back.
        keep = math.exp(-max(0.0, at - self.at) / MEMORY)
        weight = seconds * math.exp(-max(0.0, self.at - at) / MEMORY)
        self.seconds = self.seconds * keep + weight
        self.concurrency = self.concurrency * keep + weight * concurrency
        self.throughput = self.throughput * keep + weight * throughput
        self.at = max(self.at, at)

    def seconds_at(self, now: float) -> float:
        return self.seconds * math.exp(-max(0.0, now - self.at) / MEMORY)


class ConcurrencyCurve:
    """Throughput against requests in flight, per engine and pooled for a role. Bins are centred
    on powers of two so a sweep's jitter around 8, 16, 32 ... stays in one bin each."""

    def __init__(
        self,
        *,
        bin_octaves: float = BIN_OCTAVES,
        min_seconds: float = MIN_SECONDS,
        rule: KneeRule = DEFAULT_RULE,
        unit: str = "tokens/s",
    ) -> None:
        self.bin_octaves = bin_octaves
        self.min_seconds = min_seconds
        self.rule = rule
        self.unit = unit
        self._engines: dict[str, dict[int, _Bin]] = {}
        self._pooled: dict[int, _Bin] = {}

    def observe(
        self, engine: str, concurrency: float, throughput: float, seconds: float, at: float
    ) -> None:
        """One scrape: requests in flight (running + waiting) and throughput over `seconds`."""
        bins = self._engines.setdefault(engine, {})
        self._add(bins, concurrency, throughput, seconds, at)

    def observe_round(
        self, readings: Mapping[str, tuple[float, float]], seconds: float, at: float
    ) -> None:
        """One scrape of every engine of the role, {engine: (concurrency, throughput)}: each
        engine's curve and the pooled one (totals) learn from it."""
        for engine, (concurrency, throughput) in readings.items():
            self.observe(engine, concurrency, throughput, seconds, at)
        values = [value for reading in readings.values() for value in reading]
        # A garbled engine would understate the role's totals: the round teaches the pool nothing.
        if values and all(math.isfinite(v) and v >= 0 for v in values):
            total = [sum(reading[k] for reading in readings.values()) for k in (0, 1)]
            self._add(self._pooled, total[0], total[1], seconds, at)

    def forget(self, engine: str) -> None:
        self._engines.pop(engine, None)

    def retain(self, engines: Collection[str]) -> None:
        for engine in [name for name in self._engines if name not in engines]:
            del self._engines[engine]

    def engines(self) -> list[str]:
        return sorted(self._engines)

    def retained_bins(self) -> int:
        return len(self._pooled) + sum(len(bins) for bins in self._engines.values())

    def points(self, now: float, engine: str | None = None) -> list[Point]:
        """(mean concurrency, mean throughput) of the bins with enough time; the pool's for None."""
        return [(c, t) for c, t, seconds in self.means(now, engine) if seconds >= self.min_seconds]

    def knee(self, now: float, engine: str | None = None) -> Knee:
        seen = [c for c, _, s in self.means(now, engine) if s >= SEEN_SHARE * self.min_seconds]
        span = (min(seen), max(seen)) if seen else None
        return find_knee(self.points(now, engine), span=span, rule=self.rule, unit=self.unit)

    def means(self, now: float, engine: str | None) -> list[tuple[float, float, float]]:
        """Every bin's (mean concurrency, mean throughput, decayed seconds); the pool's for None."""
        bins = self._pooled if engine is None else self._engines.get(engine, {})
        return [
            (b.concurrency / b.seconds, b.throughput / b.seconds, b.seconds_at(now))
            for _, b in sorted(bins.items())
            if b.seconds > 0
        ]

    def _add(
        self,
        bins: dict[int, _Bin],
        concurrency: float,
        throughput: float,
        seconds: float,
        at: float,
    ) -> None:
        values = (concurrency, throughput, seconds, at)
        # Idle (under one request in flight) says nothing about parallelism; garbage is dropped.
        if not all(math.isfinite(v) for v in values) or throughput < 0 or seconds <= 0:
            return
        if not 1.0 <= concurrency < MAX_CONCURRENCY:
            return
        index = round(math.log2(concurrency) / self.bin_octaves)
        bins.setdefault(index, _Bin(at)).add(concurrency, throughput, seconds, at)
        floor = PRUNE_SHARE * self.min_seconds
        for stale in [i for i, b in bins.items() if b.seconds_at(at) < floor]:
            del bins[stale]
