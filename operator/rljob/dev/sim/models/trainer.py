"""A simulated trainer rank: the SDK exporter's step, phase, heartbeat, policy generation,
committed checkpoint and seconds per phase, and the RL canaries, progressing on its own clock.
Its step's phases are rljob.dev.sim.models.phases', its canaries
rljob.dev.sim.models.canaries'."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from rljob.dev.sim.exposition import Page, labels_text
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models.base import PROCESS_START
from rljob.dev.sim.models.canaries import Canaries
from rljob.dev.sim.models.phases import (
    PHASE_CHECKPOINTING,
    SDK_PHASES,
    PhaseSeconds,
    Regression,
    duration,
    next_phase,
    start_phase,
)
from rljob.dev.sim.profiles import TrainerProfile

# Exposed series names; counters carry `_total`.
TRAINER_STEP = "rljob_trainer_step"
TRAINER_HEARTBEAT = "rljob_trainer_heartbeat_timestamp_seconds"
TRAINER_PHASE = "rljob_trainer_phase"
POLICY_GENERATION = "rljob_policy_generation"
CHECKPOINT_STEP = "rljob_checkpoint_step"
# Steps whose reports are kept for a reader (rljob.dev.sim.tensorboard) between two advances.
STEP_REPORTS_KEPT = 64


@dataclass(frozen=True, slots=True)
class StepReport:
    """A finished step as a framework logs it: when it ended, its canary values (keyword ->
    value; reward_eval only when an evaluation ran) and the seconds each counted phase took
    since the previous step ended."""

    step: int
    at: float
    canaries: dict[str, float]
    phase_seconds: dict[str, float]
    tokens: float


@dataclass(slots=True)
class _Phase:
    name: str
    work_start: float  # progress clock when the phase began
    entered: float  # wall clock when it began


class TrainerModel:
    """One trainer rank's SDK exporter. Progress runs on its own clock, which stops while hung:
    a cleared hang resumes where it stopped. `rollout_wait`, when set (rljob.dev.sim.coupling),
    replaces the profile's wait for rollouts."""

    role = "trainer"

    def __init__(
        self,
        profile: TrainerProfile,
        start: float,
        *,
        step: int = 0,
        external_checkpoints: bool = False,
        seed: str = "",
    ) -> None:
        self.profile = profile
        self.start = self.t = start
        self.work = 0.0
        self.phase = _Phase(start_phase(profile), 0.0, start)
        self.phases_seen = set(SDK_PHASES) | {self.phase.name}
        self.phase_seconds = PhaseSeconds(self.phase.name, start)
        self.canaries = Canaries(seed, start)
        self.regression = Regression(profile, start)
        self.rollout_wait: float | None = None
        self.step = step
        self.generation = step
        self.generation_driven = False  # a simulated rollout driver publishes it (sim.driver)
        self.checkpoint_step = step
        self.heartbeat = start
        self.hung = False
        self.external_checkpoints = external_checkpoints
        # Steps whose checkpoint phase began, for a writer to pick up (bounded).
        self.checkpoints_due: deque[int] = deque(maxlen=4)
        # Finished steps, newest last, for a framework's log writer to pick up (bounded).
        self.reports: deque[StepReport] = deque(maxlen=STEP_REPORTS_KEPT)
        self._totals_at_report = self.phase_seconds.totals(start)

    def set_profile(self, profile: TrainerProfile) -> None:
        self.profile = profile
        self.regression.update(profile, self.t)

    def _duration(self, phase: _Phase) -> float:
        profile = self.profile
        wait = self.rollout_wait if profile.couple_rollouts else None
        return duration(phase.name, profile, wait, self.regression.slower(phase.entered))

    def _next(self, at: float) -> str:
        """Leaves the current phase at wall time `at`; returns the next."""
        profile = self.profile
        match self.phase.name:
            case "training":
                self.step += 1
                if profile.canaries:
                    self.canaries.report(self.step, at, profile)
                self._report(at)
                if profile.sync_seconds <= 0:
                    self._synced(at)
            case "syncing_weights":
                self._synced(at)
            case "checkpointing":
                if not self.external_checkpoints:
                    self.checkpoint_step = self.step
        following = next_phase(self.phase.name, self.step, profile)
        if following == PHASE_CHECKPOINTING:
            self.checkpoints_due.append(self.step)
        return following

    def _report(self, at: float) -> None:
        """The step just finished at `at`, as its framework logs it."""
        totals = self.phase_seconds.totals(at)
        spent = {p: totals[p] - self._totals_at_report.get(p, 0.0) for p in totals}
        self._totals_at_report = totals
        canaries = dict(self.canaries.last) if self.profile.canaries else {}
        tokens = self.profile.tokens_per_step
        self.reports.append(StepReport(self.step, at, canaries, spent, tokens))

    def _synced(self, at: float) -> None:
        """New weights published: the policy generation changes (unless a driver sets it)."""
        if not self.generation_driven:
            self.generation += 1
        self.regression.synced(at)

    def committed(self, step: int) -> None:
        """A checkpoint of `step` was committed by a writer."""
        self.checkpoint_step = max(self.checkpoint_step, step)

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        since = faults.hang_since if faults.hang_since is not None else faults.stall_since
        if since is not None and since < now:
            self._progress(max(self.t, since))
            self.t = now
            self.hung = True
            return
        self.hung = False
        self._progress(now)

    def _progress(self, now: float) -> None:
        remaining = now - self.t
        if remaining <= 0:
            return
        self.t = now
        span_start = self.work
        transitions = 0
        while remaining > 0 and transitions < 100_000:
            # A shorter coupled wait may end the phase at once, never in the past.
            end = max(self.work, self.phase.work_start + self._duration(self.phase))
            if self.work + remaining < end:
                self.work += remaining
                break
            remaining -= end - self.work
            self.work = end
            at = now - remaining
            self.phase = _Phase(self._next(at), end, at)
            self.phases_seen.add(self.phase.name)
            self.phase_seconds.enter(self.phase.name, at)
            self.heartbeat = at
            transitions += 1
        interval = self.profile.heartbeat_interval
        if interval <= 0:  # beats at phase changes only
            return
        in_phase = self.work - self.phase.work_start
        last_beat = self.phase.work_start + math.floor(in_phase / interval) * interval
        if last_beat >= span_start:  # a periodic beat within the span just run
            self.heartbeat = max(self.heartbeat, now - (self.work - last_beat))

    def state(self) -> dict[str, Any]:
        return {
            "phase": self.phase.name,
            "step": self.step,
            "policy_generation": self.generation,
            "checkpoint_step": self.checkpoint_step,
            "heartbeat": self.heartbeat,
            "hung": self.hung,
            "rollout_wait": self.rollout_wait,
            "generation_slower": self.regression.slower(self.t),
        }

    def render(self) -> str:
        page = Page()
        page.gauge(TRAINER_STEP, "Training steps completed.", float(self.step))
        page.gauge(
            TRAINER_HEARTBEAT, "Unix time of the training loop's last heartbeat.", self.heartbeat
        )
        page.gauge(
            TRAINER_PHASE,
            "1 for the phase the trainer is in.",
            [
                (labels_text((("phase", phase),)), float(phase == self.phase.name))
                for phase in (*SDK_PHASES, *sorted(self.phases_seen - set(SDK_PHASES)))
            ],
        )
        self.phase_seconds.render(page, self.t)
        page.gauge(
            POLICY_GENERATION, "Generation of the policy weights last published.", self.generation
        )
        page.gauge(
            CHECKPOINT_STEP, "Step of the newest committed checkpoint.", self.checkpoint_step
        )
        if self.profile.canaries:
            self.canaries.render(page)
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()
