"""The facade the health loop feeds: samples in, status.bottleneck out.

Feed it each round (any order between roles, each pod's samples in time order):
`observe_engine` with the rollout engines' EngineSample, `observe_trainer` with a trainer pod's
phase counter and step, `observe_verifier` with a verifier pod's queue depth and
`note_verifier_latency` with the VerifierSlow detector's latest quantiles; `retain` drops pods
that left; `evaluate(now)` diagnoses (at most once per interval is plenty).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from rljob.api.diagnosis import Bottleneck
from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.bottleneck.attribution import Observations, attribute
from rljob.health.bottleneck.curve import CurveFeeder
from rljob.health.bottleneck.extrapolate import CurveVerdict, judge_curve
from rljob.health.bottleneck.load import EngineLedger, EngineWindow, VerifierLedger
from rljob.health.bottleneck.phases import (
    PhaseBreakdown,
    PhaseLedger,
    breakdown_of,
    coverage_of,
)
from rljob.health.bottleneck.status import curve_status, to_status
from rljob.health.bottleneck.tracker import CONFIRMATIONS, RoleTracker
from rljob.health.knee import DEFAULT_RULE, KneeRule
from rljob.health.samples import MIN_SPACING_INTERVALS, EngineSample, ring_capacity
from rljob.vocabulary.attribution import DEFAULT_ATTRIBUTION, AttributionRule
from rljob.vocabulary.enums import BottleneckRole, RoleName

DEFAULT_WINDOW = 900.0
DEFAULT_INTERVAL = 30.0
# A concurrency bin of the curve needs this share of the window observed (spec's description).
BIN_SHARE_OF_WINDOW = 1 / 3


@dataclass(frozen=True, slots=True)
class BottleneckConfig:
    window: float = DEFAULT_WINDOW  # seconds the shares and loads are judged over
    interval: float = DEFAULT_INTERVAL  # the health interval: samples' spacing and curve slots
    min_bin_seconds: float | None = None  # None: a third of the window
    rule: KneeRule = DEFAULT_RULE
    attribution: AttributionRule = field(default_factory=lambda: DEFAULT_ATTRIBUTION)
    confirmations: int = CONFIRMATIONS
    # The engines fed to observe_engine: rollout, or trainer when they are colocated with it.
    engine_role: RoleName = RoleName.ROLLOUT

    @classmethod
    def from_health(cls, health: Health) -> BottleneckConfig:
        """spec.health.bottleneck.window, at least two health intervals."""
        interval = max(1.0, parse_duration(health.interval))
        window = max(parse_duration(health.bottleneck.window), 2 * interval)
        return cls(window=window, interval=interval)

    @property
    def bin_seconds(self) -> float:
        if self.min_bin_seconds is not None:
            return self.min_bin_seconds
        return self.window * BIN_SHARE_OF_WINDOW


class BottleneckMonitor:
    """One job's diagnosis; memory is bounded per pod (rings sized for the window)."""

    def __init__(self, config: BottleneckConfig | None = None) -> None:
        self.config = config = config or BottleneckConfig()
        capacity = ring_capacity(config.window, config.interval)
        spacing = config.interval * MIN_SPACING_INTERVALS
        self._phases = PhaseLedger(capacity, spacing)
        self._engines = EngineLedger(config.interval, capacity)
        self._verifier = VerifierLedger(capacity, spacing)
        self._feeder = CurveFeeder(config.interval, config.bin_seconds, config.window, config.rule)
        self._tracker = RoleTracker(config.confirmations)
        self._breakdown: PhaseBreakdown | None = None
        self._replaced: BottleneckRole | None = None
        self._changed = False

    def observe_engine(self, pod: str, sample: EngineSample) -> None:
        """A rollout engine's scrape (samples of one pod in time order; others are dropped)."""
        interval = self._engines.observe(pod, sample)
        if interval is not None:
            self._feeder.add(pod, interval)

    def observe_trainer(
        self, pod: str, t: float, phase_seconds: Mapping[str, float], step: float | None = None
    ) -> None:
        """A trainer pod's rljob_trainer_phase_seconds_total by phase and rljob_trainer_step."""
        self._phases.observe(pod, t, phase_seconds, step)

    def observe_verifier(self, pod: str, t: float, queue_depth: float) -> None:
        """A verifier pod's rljob_verifier_queue_depth."""
        self._verifier.observe(pod, t, queue_depth)

    def note_verifier_latency(
        self, p50: float | None, p99: float | None, slow: bool = False
    ) -> None:
        """The verifiers' latest quantiles (seconds) and whether VerifierSlow found p99 over
        its bound."""
        self._verifier.note_latency(p50, p99, slow)

    def retain(self, pods: Collection[str]) -> None:
        """Forgets every pod not in `pods` (all roles' current pods)."""
        self._phases.retain(pods)
        self._engines.retain(pods)
        self._verifier.retain(pods)
        self._feeder.retain(pods)

    @property
    def role(self) -> BottleneckRole | None:
        """The held role (rljob_job_bottleneck{role}); None before the first evaluation."""
        return self._tracker.role

    @property
    def changed(self) -> tuple[BottleneckRole | None, BottleneckRole] | None:
        """(old, new) when the last evaluation changed the role (an Event); None otherwise."""
        role = self._tracker.role
        return (self._replaced, role) if self._changed and role is not None else None

    def step_phase_seconds(self) -> dict[str, float]:
        """Mean seconds per step in each phase over the last evaluation's window
        (rljob_job_step_phase_seconds{phase}); empty when no step ended in it."""
        return dict(self._breakdown.seconds_per_step) if self._breakdown is not None else {}

    def evaluate(self, now: float) -> Bottleneck | None:
        """The diagnosis over the window ending now; None when nothing was ever observed."""
        config, window = self.config, self.config.window
        self._feeder.flush()
        verifier = self._verifier.window(now, window)
        if not (self._phases.pods() or self._engines.pods() or verifier is not None):
            return None
        per_pod = self._phases.per_pod(now, window)
        breakdown = breakdown_of(per_pod, window, config.attribution.min_coverage)
        engines = self._engines.windows(now, window)
        in_flight = self._feeder.highest(now, window)
        if in_flight is None and engines:
            in_flight = sum(e.in_flight for e in engines)
        curve = self._curve(now, engines, in_flight)
        coverage = coverage_of(per_pod, window)
        seen = Observations(window, breakdown, coverage, engines, verifier, curve, in_flight)
        tracked = self._tracker.update(attribute(seen, config.attribution), now)
        self._breakdown = breakdown
        self._replaced, self._changed = tracked.replaced, tracked.changed
        bins = self._feeder.bins(now)
        current = self._feeder.current()
        status = curve_status(curve, bins, current, config.engine_role) if curve else None
        return to_status(tracked, now, seen, status)

    def _curve(
        self, now: float, engines: list[EngineWindow], in_flight: float | None
    ) -> CurveVerdict | None:
        curve = self._feeder.curve
        if not curve.engines():
            return None
        capacity = kv_capacity(engines)
        knee = curve.knee(now)
        return judge_curve(knee, curve.points(now), capacity, in_flight, rule=self.config.rule)


def kv_capacity(engines: list[EngineWindow]) -> float | None:
    """Requests running that fill every engine's KV cache: the engines that tell, scaled to all."""
    known = [e.capacity for e in engines if e.capacity is not None]
    if not known:
        return None
    return sum(known) / len(known) * len(engines)
