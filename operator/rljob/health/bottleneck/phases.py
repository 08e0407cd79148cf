"""Where the trainer's time goes: each trainer pod's `rljob_trainer_phase_seconds_total{phase}`
samples (cumulative seconds per phase) and its `rljob_trainer_step`, kept in a bounded ring per
pod and read over a window as seconds, shares and seconds per step of each phase.

A phase counter that goes down belongs to a restarted process: it counts from zero again, as
Prometheus' increase() reads it. A step gauge that goes down is a resume from a checkpoint: only
its climbs count. An interval whose phases accrued far more seconds than it lasted is garbage
and dropped; one that accrued a little more (scrape versus counter clock) is scaled to fit.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from rljob.vocabulary.phases import PHASES

WIDTH = len(PHASES)
NAN = math.nan
# Beyond this a counter is garbage: 1e12 seconds is 30,000 years of one phase.
MAX_PLAUSIBLE_SECONDS = 1e12
MAX_PLAUSIBLE_STEP = 1e12
# An interval may accrue this share more than it lasted (plus ACCRUAL_SLACK seconds) before it
# is garbage rather than clock skew between the scrape and the trainer's monotonic clock.
ACCRUAL_TOLERANCE = 1.0
ACCRUAL_SLACK = 60.0
# Combined pods named in evidence; the rest are counted.
NAMED_PODS = 3


@dataclass(frozen=True, slots=True)
class PhaseSample:
    t: float
    seconds: Mapping[str, float]
    step: float | None


@dataclass(frozen=True, slots=True)
class PodPhases:
    """One pod's phases over a window."""

    pod: str
    seconds: dict[str, float]  # accrued in the window, per phase
    covered: float  # seconds of the window between the pod's samples
    steps: float | None  # steps completed in the window; None: no step gauge

    @property
    def accrued(self) -> float:
        return sum(self.seconds.values())

    def shares(self) -> dict[str, float]:
        total = self.accrued
        return {p: s / total for p, s in self.seconds.items()} if total > 0 else {}


@dataclass(frozen=True, slots=True)
class PhaseBreakdown:
    """The trainer's phases over a window, combined over its pods as the mean of their shares
    (and of their seconds and steps): every rank waits alike in a data-parallel step."""

    window: float
    pods: tuple[str, ...]  # the pods combined: each covered at least the minimum share
    shares: dict[str, float]
    seconds: dict[str, float]
    steps: float | None
    coverage: float  # mean share of the window the combined pods' samples span

    @property
    def seconds_per_step(self) -> dict[str, float]:
        """Mean seconds of each step in each phase; empty when no step ended in the window."""
        if self.steps is None or self.steps <= 0:
            return {}
        return {phase: seconds / self.steps for phase, seconds in self.seconds.items()}

    @property
    def step_seconds(self) -> float | None:
        per_step = self.seconds_per_step
        return sum(per_step.values()) if per_step else None

    def share(self, *phases: str) -> float:
        return sum(self.shares.get(phase, 0.0) for phase in phases)

    def describe_pods(self) -> str:
        if len(self.pods) == 1:
            return f"trainer pod {self.pods[0]}"
        named = ", ".join(self.pods[:NAMED_PODS])
        more = f" and {len(self.pods) - NAMED_PODS} more" if len(self.pods) > NAMED_PODS else ""
        return f"the mean of {len(self.pods)} trainer pods: {named}{more}"


def clean_sample(t: float, seconds: Mapping[str, float], step: float | None) -> PhaseSample | None:
    """The known phases with plausible values, or None when the time or every phase is garbage."""
    if not _plausible(t, math.inf) or t < 0:
        return None
    kept = {
        phase: float(value)
        for phase, value in seconds.items()
        if phase in PHASES and _plausible(value, MAX_PLAUSIBLE_SECONDS)
    }
    if not kept:
        return None
    return PhaseSample(t, kept, step if _plausible(step, MAX_PLAUSIBLE_STEP) else None)


def _plausible(value: object, bound: float) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= bound
    )


# A PodPhaseRing's running totals per sample: each phase's accrued seconds, then the seconds
# covered, the steps climbed and the intervals with a step gauge at both ends.
COVERED, STEPS, STEPPED = WIDTH, WIDTH + 1, WIDTH + 2
TOTALS_WIDTH = WIDTH + 3


class PodPhaseRing:
    """One pod's samples in time order, the latest `capacity` of them, and running totals of
    what its phases accrued interval by interval (computed once, as each sample arrives). A
    window is the difference of two totals plus the two intervals straddling its bounds: every
    round reads every pod's 30-minute window, and summing it row by row was most of the
    diagnosis. Kept in float arrays: a window of dictionaries took about 860 bytes a sample."""

    __slots__ = ("_capacity", "_min_spacing", "_seconds", "_step", "_t", "_totals")

    def __init__(self, capacity: int, min_spacing: float) -> None:
        self._capacity = max(2, capacity)
        self._min_spacing = max(min_spacing, 1e-9)
        self._t = array("d")
        self._step = array("d")  # NaN: no step gauge
        self._seconds = array("d")
        self._totals = array("d")  # TOTALS_WIDTH per sample, up to and including its interval

    def add(self, sample: PhaseSample) -> bool:
        """Accepts a sample `min_spacing` after the last one: out-of-order samples and
        duplicates are dropped, and a fast scrape is thinned to what the ring is sized for."""
        last = self._sample(len(self._t) - 1) if self._t else None
        if last is not None and sample.t < last.t + self._min_spacing:
            return False
        step = NAN if sample.step is None else sample.step
        interval = _interval_totals(last, sample, step) if last is not None else None
        totals = self._totals[-TOTALS_WIDTH:] if self._t else array("d", [0.0] * TOTALS_WIDTH)
        if interval is not None:
            totals = array("d", [a + b for a, b in zip(totals, interval, strict=True)])
        self._totals.extend(totals)
        self._t.append(sample.t)
        self._step.append(step)
        self._seconds.extend(_row(sample.seconds))
        if len(self._t) > self._capacity:
            del self._t[0], self._step[0], self._seconds[:WIDTH], self._totals[:TOTALS_WIDTH]
        return True

    def __len__(self) -> int:
        return len(self._t)

    def over(self, pod: str, start: float, end: float) -> PodPhases:
        """Seconds per phase accrued between start and end; an interval straddling a bound
        counts by its share inside."""
        times, count = self._t, len(self._t)
        first = bisect_left(times, start)  # intervals ending after it may start before `start`
        last = bisect_right(times, end) - 1  # intervals ending at or before it end inside
        sums = [0.0] * TOTALS_WIDTH
        if first + 1 <= last:  # the intervals wholly inside: first -> first+1, ..., last-1 -> last
            sums = self._between(first, last)
        for index in sorted({first, last + 1}):  # the straddling ones, if any
            if 1 <= index < count:
                self._add_share(sums, index, start, end)
        return PodPhases(
            pod,
            dict(zip(PHASES, sums[:WIDTH], strict=True)),
            sums[COVERED],
            sums[STEPS] if sums[STEPPED] > 0 else None,
        )

    def _between(self, older: int, newer: int) -> list[float]:
        totals = self._totals
        low, high = older * TOTALS_WIDTH, newer * TOTALS_WIDTH
        return [totals[high + k] - totals[low + k] for k in range(TOTALS_WIDTH)]

    def _add_share(self, sums: list[float], index: int, start: float, end: float) -> None:
        """Adds the interval ending at `index` by the share of it inside [start, end]."""
        previous, current = self._t[index - 1], self._t[index]
        inside = min(current, end) - max(previous, start)
        interval = self._between(index - 1, index)
        if inside <= 0 or interval[COVERED] <= 0:
            return
        share = inside / (current - previous)
        for column in range(WIDTH):
            sums[column] += interval[column] * share
        sums[COVERED] += inside
        sums[STEPS] += interval[STEPS] * share
        sums[STEPPED] += interval[STEPPED]

    def _sample(self, index: int) -> PhaseSample:
        row = self._seconds[index * WIDTH : (index + 1) * WIDTH]
        step = self._step[index]
        return PhaseSample(
            self._t[index],
            {
                phase: value
                for phase, value in zip(PHASES, row, strict=True)
                if not math.isnan(value)
            },
            None if math.isnan(step) else step,
        )


def _interval_totals(last: PhaseSample, sample: PhaseSample, step: float) -> list[float] | None:
    """What the interval from `last` to `sample` adds to the running totals; None when it adds
    nothing (no time passed, or its accruals are garbage)."""
    duration = sample.t - last.t
    amounts = _accrued(last, sample)
    if duration <= 0 or not amounts:
        return None
    stepped = last.step is not None and not math.isnan(step)
    climbed = max(0.0, step - last.step) if stepped and last.step is not None else 0.0
    return [
        *(amounts.get(phase, 0.0) for phase in PHASES),
        duration,
        climbed,
        1.0 if stepped else 0.0,
    ]


def _row(values: Mapping[str, float] | None) -> list[float]:
    """A sample's phases in PHASES order, NaN where there is none."""
    if values is None:
        return [NAN] * WIDTH
    return [values.get(phase, NAN) for phase in PHASES]


def _accrued(previous: PhaseSample, current: PhaseSample) -> dict[str, float] | None:
    """Each phase's increase between two samples; None when they add up to garbage."""
    duration = current.t - previous.t
    # Any phase going down means the process restarted: every phase counts from zero.
    restarted = any(v < previous.seconds.get(p, 0.0) for p, v in current.seconds.items())
    amounts = {
        phase: value if restarted else value - previous.seconds.get(phase, 0.0)
        for phase, value in current.seconds.items()
    }
    total = sum(amounts.values())
    if total > duration * (1 + ACCRUAL_TOLERANCE) + ACCRUAL_SLACK:
        return None
    if total > duration:
        return {phase: amount * duration / total for phase, amount in amounts.items()}
    return amounts


class PhaseLedger:
    """Every trainer pod's phase samples, bounded per pod."""

    def __init__(self, capacity: int, min_spacing: float) -> None:
        self._capacity = capacity
        self._min_spacing = min_spacing
        self._pods: dict[str, PodPhaseRing] = {}

    def observe(self, pod: str, t: float, seconds: Mapping[str, float], step: float | None) -> bool:
        sample = clean_sample(t, seconds, step)
        if sample is None:
            return False
        ring = self._pods.setdefault(pod, PodPhaseRing(self._capacity, self._min_spacing))
        return ring.add(sample)

    def retain(self, pods: Collection[str]) -> None:
        for gone in [pod for pod in self._pods if pod not in pods]:
            del self._pods[gone]

    def pods(self) -> list[str]:
        return sorted(self._pods)

    def per_pod(self, now: float, window: float) -> list[PodPhases]:
        return [ring.over(pod, now - window, now) for pod, ring in sorted(self._pods.items())]

    def breakdown(self, now: float, window: float, min_coverage: float) -> PhaseBreakdown | None:
        """The pods whose samples span at least `min_coverage` of the window, combined; None
        when no pod does (see `coverage` for how much the best one spans)."""
        return breakdown_of(self.per_pod(now, window), window, min_coverage)

    def coverage(self, now: float, window: float) -> float:
        """The best pod's share of the window spanned by its samples."""
        return coverage_of(self.per_pod(now, window), window)


def breakdown_of(
    per_pod: Iterable[PodPhases], window: float, min_coverage: float
) -> PhaseBreakdown | None:
    """PhaseLedger.breakdown from the pods' phases over the window, read once per round."""
    kept = [p for p in per_pod if p.accrued > 0 and p.covered >= min_coverage * window]
    return combine(kept, window) if kept else None


def coverage_of(per_pod: Iterable[PodPhases], window: float) -> float:
    """PhaseLedger.coverage from the pods' phases over the window."""
    return max((p.covered / window for p in per_pod), default=0.0)


def combine(pods: Iterable[PodPhases], window: float) -> PhaseBreakdown:
    chosen = list(pods)
    count = len(chosen)
    shares = {phase: _mean(p.shares().get(phase, 0.0) for p in chosen) for phase in PHASES}
    seconds = {phase: _mean(p.seconds[phase] for p in chosen) for phase in PHASES}
    stepped = [p.steps for p in chosen if p.steps is not None]
    return PhaseBreakdown(
        window=window,
        pods=tuple(p.pod for p in chosen),
        shares=shares,
        seconds=seconds,
        steps=sum(stepped) / len(stepped) if stepped else None,
        coverage=min(1.0, sum(p.covered for p in chosen) / count / window) if count else 0.0,
    )


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0
