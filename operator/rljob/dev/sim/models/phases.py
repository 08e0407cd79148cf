"""A simulated trainer's step, phase by phase (pure): which phase follows which, how long each
takes, the seconds each accrues in the SDK's rljob_trainer_phase_seconds_total{phase}, and a
throughput regression after a weight sync.

A rank starts in phase starting for `load_seconds` (if any: loading its model and checkpoint).
A step: generating (if `generate_seconds`) -> waiting_for_rollouts -> training -> syncing_weights
(if `sync_seconds`) -> evaluating (if `eval_seconds`, every `eval_every` steps) -> checkpointing
(every `checkpoint_every` steps). The names are the SDK's (rljob.sdk.progress.PHASES, the
gauge's series, plus rljob.sdk.progress.EVALUATING; rljob.sdk.phase_time.COUNTED_PHASES, the
counter's), copied, not imported, to keep boto3 and pydantic out of the simulator process; a
unit test compares. The detectors know waiting_for_rollouts and checkpointing
(rljob.health.stall).
"""

from __future__ import annotations

from rljob.dev.sim.exposition import Page, labels_text
from rljob.dev.sim.profiles import TrainerProfile

PHASE_STARTING = "starting"
PHASE_GENERATING = "generating"
PHASE_WAITING_FOR_ROLLOUTS = "waiting_for_rollouts"
PHASE_TRAINING = "training"
PHASE_SYNCING_WEIGHTS = "syncing_weights"
PHASE_EVALUATING = "evaluating"
PHASE_CHECKPOINTING = "checkpointing"
# The gauge's series every exporter starts with; others appear once entered.
SDK_PHASES = (
    PHASE_STARTING,
    PHASE_GENERATING,
    PHASE_WAITING_FOR_ROLLOUTS,
    PHASE_TRAINING,
    PHASE_SYNCING_WEIGHTS,
    PHASE_CHECKPOINTING,
)
# rljob.sdk.phase_time: the counter (prometheus_client adds `_total`) and its phases.
PHASE_SECONDS = "rljob_trainer_phase_seconds"
STEP_PHASES = (
    PHASE_GENERATING,
    PHASE_WAITING_FOR_ROLLOUTS,
    PHASE_TRAINING,
    PHASE_SYNCING_WEIGHTS,
    PHASE_EVALUATING,
)
COUNTED_PHASES = (*STEP_PHASES, PHASE_CHECKPOINTING)
_ORDER = COUNTED_PHASES


def _included(phase: str, step: int, profile: TrainerProfile) -> bool:
    """Whether `phase` runs in the step that ends with `step` steps done."""
    match phase:
        case "generating":
            return profile.generate_seconds > 0
        case "syncing_weights":
            return profile.sync_seconds > 0
        case "evaluating":
            return profile.eval_seconds > 0 and step % profile.eval_every == 0
        case "checkpointing":
            return step % profile.checkpoint_every == 0
    return True


def first_phase(profile: TrainerProfile) -> str:
    return PHASE_GENERATING if profile.generate_seconds > 0 else PHASE_WAITING_FOR_ROLLOUTS


def start_phase(profile: TrainerProfile) -> str:
    """The phase a rank starts in: starting while it loads (`load_seconds`), else its step's."""
    return PHASE_STARTING if profile.load_seconds > 0 else first_phase(profile)


def next_phase(phase: str, step: int, profile: TrainerProfile) -> str:
    """The phase after `phase`, `step` steps done (training has counted its step)."""
    later = _ORDER[_ORDER.index(phase) + 1 :] if phase in _ORDER else ()
    return next((p for p in later if _included(p, step, profile)), first_phase(profile))


def duration(
    phase: str, profile: TrainerProfile, rollout_wait: float | None, slower: float
) -> float:
    """Seconds `phase` takes: the wait follows the rollouts when coupled (`rollout_wait`), and
    generation takes `slower` times as long during a throughput regression."""
    match phase:
        case "generating":
            return profile.generate_seconds * slower
        case "waiting_for_rollouts":
            return rollout_wait if rollout_wait is not None else profile.wait_for_rollouts
        case "training":
            return profile.step_seconds
        case "syncing_weights":
            return profile.sync_seconds
        case "evaluating":
            return profile.eval_seconds
        case "starting":
            return profile.load_seconds
    return profile.checkpoint_seconds


class PhaseSeconds:
    """rljob_trainer_phase_seconds_total{phase} as the SDK's PhaseSeconds keeps it: wall seconds
    accrue to the phase last entered (also while hung: the SDK's clock runs on), a scrape adds
    the current phase's elapsed time, and every counted phase is exported from the start."""

    def __init__(self, phase: str, at: float) -> None:
        self._totals = dict.fromkeys(COUNTED_PHASES, 0.0)
        self._current: str | None = phase if phase in self._totals else None
        self._since = at

    def enter(self, phase: str, at: float) -> None:
        if self._current is not None:
            self._totals[self._current] += max(0.0, at - self._since)
        self._current = phase if phase in self._totals else None
        self._since = at

    def totals(self, now: float) -> dict[str, float]:
        totals = dict(self._totals)
        if self._current is not None:
            totals[self._current] += max(0.0, now - self._since)
        return totals

    def render(self, page: Page, now: float) -> None:
        samples = [(labels_text((("phase", p),)), s) for p, s in self.totals(now).items()]
        # A collector's CounterMetricFamily: no `_created` series.
        page.counter(PHASE_SECONDS, "Seconds the trainer spent in each phase.", samples, None)


class Regression:
    """Generation slower by 1 / (1 - `regression`) from the first weight sync at least
    `regression_delay` seconds after the profile took effect, for `regression_seconds` (0: for
    as long as the profile asks)."""

    def __init__(self, profile: TrainerProfile, at: float) -> None:
        self.armed_from: float | None = None
        self.started: float | None = None
        self._key = (0.0, 0.0, 0.0)
        self.update(profile, at)

    def update(self, profile: TrainerProfile, at: float) -> None:
        """A profile took effect at `at`: a changed regression is armed anew."""
        key = (profile.regression, profile.regression_delay, profile.regression_seconds)
        if key == self._key:
            return
        self._key = key
        self.started = None
        self.armed_from = at + profile.regression_delay if profile.regression > 0 else None

    def synced(self, at: float) -> None:
        """A weight sync (a policy generation change) finished at `at`."""
        if self.armed_from is not None and self.started is None and at >= self.armed_from:
            self.started = at

    def slower(self, at: float) -> float:
        """How many times as long generation takes at `at`."""
        share, _, seconds = self._key
        if self.started is None or at < self.started:
            return 1.0
        if seconds > 0 and at >= self.started + seconds:
            return 1.0
        return 1.0 / (1.0 - share)
