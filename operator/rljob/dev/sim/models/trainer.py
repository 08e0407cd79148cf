"""A simulated trainer rank: the SDK exporter's step, phase, heartbeat, policy generation and
committed checkpoint, progressing on its own clock."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from rljob.dev.sim.exposition import Page, labels_text
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models.base import PROCESS_START
from rljob.dev.sim.profiles import TrainerProfile

# The SDK progress exporter's phases (rljob.sdk.progress.PHASES, which exports all of them, one
# at 1); the detectors know waiting_for_rollouts and checkpointing (rljob.health.stall). Copied,
# not imported, to keep boto3 and pydantic out of the simulator process; a unit test compares.
PHASE_WAITING_FOR_ROLLOUTS = "waiting_for_rollouts"
PHASE_TRAINING = "training"
PHASE_CHECKPOINTING = "checkpointing"
SDK_PHASES = (
    "starting",
    "generating",
    PHASE_WAITING_FOR_ROLLOUTS,
    PHASE_TRAINING,
    "syncing_weights",
    PHASE_CHECKPOINTING,
)
# Exposed series names; counters carry `_total`.
TRAINER_STEP = "rljob_trainer_step"
TRAINER_HEARTBEAT = "rljob_trainer_heartbeat_timestamp_seconds"
TRAINER_PHASE = "rljob_trainer_phase"
POLICY_GENERATION = "rljob_policy_generation"
CHECKPOINT_STEP = "rljob_checkpoint_step"


@dataclass(slots=True)
class _Phase:
    name: str
    work_start: float  # progress clock when the phase began


class TrainerModel:
    """One trainer rank's SDK exporter. Progress runs on its own clock, which stops while hung:
    a cleared hang resumes where it stopped."""

    role = "trainer"

    def __init__(
        self,
        profile: TrainerProfile,
        start: float,
        *,
        step: int = 0,
        external_checkpoints: bool = False,
    ) -> None:
        self.profile = profile
        self.start = self.t = start
        self.work = 0.0
        self.phase = _Phase(PHASE_WAITING_FOR_ROLLOUTS, 0.0)
        self.step = step
        self.generation = step
        self.checkpoint_step = step
        self.heartbeat = start
        self.hung = False
        self.external_checkpoints = external_checkpoints
        # Steps whose checkpoint phase began, for a writer to pick up (bounded).
        self.checkpoints_due: deque[int] = deque(maxlen=4)

    def set_profile(self, profile: TrainerProfile) -> None:
        self.profile = profile

    def _duration(self, phase: str) -> float:
        profile = self.profile
        return {
            PHASE_WAITING_FOR_ROLLOUTS: profile.wait_for_rollouts,
            PHASE_TRAINING: profile.step_seconds,
        }.get(phase, profile.checkpoint_seconds)

    def _next(self) -> str:
        match self.phase.name:
            case "waiting_for_rollouts":
                return PHASE_TRAINING
            case "training":
                self.step += 1
                self.generation += 1
                if self.step % self.profile.checkpoint_every == 0:
                    self.checkpoints_due.append(self.step)
                    return PHASE_CHECKPOINTING
                return PHASE_WAITING_FOR_ROLLOUTS
            case _:
                if not self.external_checkpoints:
                    self.checkpoint_step = self.step
                return PHASE_WAITING_FOR_ROLLOUTS

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
            end = self.phase.work_start + self._duration(self.phase.name)
            if self.work + remaining < end:
                self.work += remaining
                break
            remaining -= end - self.work
            self.work = end
            self.phase = _Phase(self._next(), end)
            self.heartbeat = now - remaining
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
                for phase in SDK_PHASES
            ],
        )
        page.gauge(
            POLICY_GENERATION, "Generation of the policy weights last published.", self.generation
        )
        page.gauge(
            CHECKPOINT_STEP, "Step of the newest committed checkpoint.", self.checkpoint_step
        )
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()
