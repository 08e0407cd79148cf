"""A simulated framework's TensorBoard event files and the SDK entrypoint's bridge over them
(TrainerProfile.tensorboard_keys): the trainer of verl, OpenRLHF, NeMo-RL or slime, which exports
no SDK series of its own, run as the examples run it (examples/frameworks/*.yaml, `--tensorboard-
dir --tensorboard-keys`).

Rank 0's model appends each finished step of the simulated trainer (rljob.dev.sim.models.trainer
StepReport: its canary values, the seconds its phases took, its tokens) to an event file under
its pod's directory, one Event per scalar as torch's `SummaryWriter.add_scalar` writes them, in
the framework's own tags (FRAMEWORK_TAGS, each as rljob.sdk.framework_keys cites it). Its page is
the real rljob.sdk.tensorboard_bridge.TensorBoardBridge's registry (a ProgressExporter that
serves nothing and RLMetrics on one CollectorRegistry), polled every BRIDGE_INTERVAL seconds of
the model's advances, as the entrypoint's thread reads every RLJOB_TENSORBOARD_INTERVAL. A hung
trainer (faults `hang` or `stall`) finishes no step, so the files stop advancing; the profile's
`reward_hacking` (set through the control API's profiles) flattens the logged eval reward.

The other ranks are Ray workers (`ray start --block`, no entrypoint): their page has no series.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rljob.dev.event_records import event, file_version
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models.phases import (
    PHASE_GENERATING,
    PHASE_SYNCING_WEIGHTS,
    PHASE_TRAINING,
    PHASE_WAITING_FOR_ROLLOUTS,
)
from rljob.dev.sim.models.trainer import StepReport, TrainerModel
from rljob.dev.sim.profiles import TrainerProfile

# How often rank 0's bridge reads the files: the entrypoint's RLJOB_TENSORBOARD_INTERVAL, here
# the simulator's tick.
BRIDGE_INTERVAL = 1.0
HEARTBEAT = "rljob_trainer_heartbeat_timestamp_seconds"
# Rollouts are generated while the simulated trainer generates or waits for them.
ROLLOUT_PHASES = (PHASE_GENERATING, PHASE_WAITING_FOR_ROLLOUTS)

# A step's (step, tag -> value) records from its report.
Records = list[tuple[int, dict[str, float]]]


@dataclass(frozen=True)
class FrameworkTags:
    """What one framework logs per step (the tags rljob.sdk.framework_keys reads, as the
    examples configure the framework): canary keyword -> tag, tag -> the simulated phases whose
    seconds it times, extra tags from a step's report, and where its writer puts the files."""

    canaries: Mapping[str, str]
    timings: Mapping[str, tuple[str, ...]]
    extra: Callable[[StepReport, Mapping[str, float]], dict[str, float]] = lambda *_: {}
    subdirectory: str = ""
    # slime logs on rollout_id (from 0); the others on their 1-based step.
    step_offset: int = 0


def _verl_tokens(report: StepReport, timings: Mapping[str, float]) -> dict[str, float]:
    """compute_timing_metrics: timing_per_token_ms/gen = timing_s/gen * 1000 / tokens."""
    gen = timings.get("timing_s/gen", 0.0)
    if gen <= 0 or report.tokens <= 0:
        return {}
    return {"timing_per_token_ms/gen": gen * 1000.0 / report.tokens}


def _openrlhf_rollout(report: StepReport, _: Mapping[str, float]) -> dict[str, float]:
    """_compute_rollout_stats: samples and their mean response length (tokens = product)."""
    length = report.canaries.get("response_length_mean", 0.0)
    if length <= 0:
        return {}
    return {
        "train/rollout/num_samples": report.tokens / length,
        "train/rollout/response_length_mean": length,
    }


FRAMEWORK_TAGS: dict[str, FrameworkTags] = {
    "verl": FrameworkTags(
        canaries={
            "reward_train": "critic/score/mean",
            "reward_eval": "val-core/openai/gsm8k/reward/mean@1",
            "kl": "actor/kl_loss",  # actor_rollout_ref.actor.use_kl_loss=True
            "clip_fraction": "actor/pg_clipfrac",
            "entropy": "actor/entropy",
            "loss": "actor/pg_loss",
            "grad_norm": "actor/grad_norm",
            "response_length_mean": "response_length/mean",
        },
        timings={
            "timing_s/gen": ROLLOUT_PHASES,
            "timing_s/update_actor": (PHASE_TRAINING,),
            "timing_s/update_weights": (PHASE_SYNCING_WEIGHTS,),
        },
        extra=_verl_tokens,
    ),
    "openrlhf": FrameworkTags(
        canaries={
            "reward_train": "train/reward",
            "reward_eval": "eval/eval_gsm8k_pass1",
            "kl": "train/kl",
            "clip_fraction": "train/ppo_clip_ratio",
            "loss": "train/policy_loss",
            "grad_norm": "train/actor_grad_norm",
            "response_length_mean": "train/response_length",
        },
        timings={
            "train/timing/generation": ROLLOUT_PHASES,
            "train/timing/ppo_train": (PHASE_TRAINING,),
            "train/timing/broadcast": (PHASE_SYNCING_WEIGHTS,),
        },
        extra=_openrlhf_rollout,
    ),
    "nemo-rl": FrameworkTags(
        canaries={
            "reward_train": "train/reward",
            "reward_eval": "validation/accuracy",
            "kl": "train/kl_penalty",
            "importance_ratio_mean": "train/probs_ratio",
            "entropy": "train/approx_entropy",
            "loss": "train/loss",
            "grad_norm": "train/grad_norm",
            "response_length_mean": "train/mean_gen_tokens_per_sample",
        },
        timings={
            "timing/train/generation": ROLLOUT_PHASES,
            "timing/train/policy_training": (PHASE_TRAINING,),
            "timing/train/prepare_for_generation/transfer_and_update_weights": (
                PHASE_SYNCING_WEIGHTS,
            ),
        },
        subdirectory="exp_001/tensorboard",  # logger.log_dir/exp_NNN/tensorboard
    ),
    "slime": FrameworkTags(
        canaries={
            "reward_train": "rollout/raw_reward",
            "reward_eval": "eval/aime",
            "kl": "train/kl_loss",  # --use-kl-loss
            "clip_fraction": "train/pg_clipfrac",
            "entropy": "train/entropy_loss",
            "loss": "train/loss",
            "grad_norm": "train/grad_norm",
            "response_length_mean": "rollout/response_len/mean",
        },
        timings={
            "perf/rollout_time": ROLLOUT_PHASES,
            "perf/actor_train_time": (PHASE_TRAINING,),
            "perf/update_weights_time": (PHASE_SYNCING_WEIGHTS,),
        },
        step_offset=-1,  # one optimizer step per rollout: train/* on the same axis value
    ),
}


def step_records(tags: FrameworkTags, report: StepReport) -> dict[str, float]:
    """The tag -> value pairs the framework logs for one finished step."""
    timings = {
        tag: sum(report.phase_seconds.get(phase, 0.0) for phase in phases)
        for tag, phases in tags.timings.items()
    }
    values = {tag: report.canaries[k] for k, tag in tags.canaries.items() if k in report.canaries}
    return {**values, **timings, **tags.extra(report, timings)}


# ------------------------------------------------------------------ the event file's bytes
# tensorboard/compat/proto/event.proto and summary.proto, as rljob.sdk.event_file reads them.


class EventWriter:
    """One event file, appended to record by record and flushed after each step."""

    def __init__(self, directory: Path, started: float, host: str) -> None:
        from rljob.sdk.event_file import encode_record

        self._encode = encode_record
        directory.mkdir(parents=True, exist_ok=True)
        # SummaryWriter's name: events.out.tfevents.<time>.<host>.<pid>.<uid>
        self.path = directory / f"events.out.tfevents.{int(started)}.{host}.{os.getpid()}.0"
        self._append([file_version(started)])

    def write(self, wall_time: float, step: int, scalars: Mapping[str, float]) -> None:
        """One Event per scalar, as torch's add_scalar writes them."""
        self._append([event(step, {t: v}, wall_time=wall_time) for t, v in scalars.items()])

    def _append(self, events: list[bytes]) -> None:
        with self.path.open("ab") as stream:
            stream.write(b"".join(self._encode(event) for event in events))


# ------------------------------------------------------------------ the trainer ranks


@dataclass
class _Bridge:
    """The SDK objects the entrypoint makes: the bridge and the registry its page serves."""

    bridge: Any
    registry: Any
    polled: float = field(default=-math.inf)


def _bridge(directory: Path, framework: str) -> _Bridge:
    from prometheus_client import CollectorRegistry

    from rljob.sdk.framework_keys import KEY_MAPS
    from rljob.sdk.metrics import RLMetrics
    from rljob.sdk.progress import ProgressExporter
    from rljob.sdk.tensorboard_bridge import TensorBoardBridge

    registry = CollectorRegistry()
    progress = ProgressExporter(registry=registry, serve=False)
    bridge = TensorBoardBridge(directory, KEY_MAPS[framework], progress, RLMetrics(registry))
    return _Bridge(bridge, registry)


class BridgedTrainer(TrainerModel):
    """Rank 0 of a framework's trainer: the simulated steps written to event files under
    `directory`, its page the bridge's reading of them."""

    def __init__(
        self,
        profile: TrainerProfile,
        start: float,
        directory: Path,
        *,
        host: str,
        clock: Callable[[], float],
        step: int = 0,
        seed: str = "",
    ) -> None:
        super().__init__(profile, start, step=step, seed=seed)
        self.framework = profile.tensorboard_keys
        self.tags = FRAMEWORK_TAGS[self.framework]
        self.directory = directory
        # The entrypoint starts its bridge before the framework opens its file.
        self.sdk = _bridge(directory, self.framework)
        self.writer = EventWriter(directory / self.tags.subdirectory, start, host)
        self.written = step

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        super().advance(now, faults)
        self._write()
        if now - self.sdk.polled >= BRIDGE_INTERVAL:
            self.sdk.polled = now
            self.sdk.bridge.poll()

    def _write(self) -> None:
        for report in [r for r in self.reports if r.step > self.written]:
            step = report.step + self.tags.step_offset
            self.writer.write(report.at, step, step_records(self.tags, report))
            self.written = report.step

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "tensorboard": {
                "framework": self.framework,
                "file": str(self.writer.path),
                "written_step": self.written,
                "bridge_step": self.sdk.bridge.step,
                "heartbeat": self.sdk.registry.get_sample_value(HEARTBEAT),
            },
        }

    def render(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.sdk.registry).decode()


class RayWorkerTrainer(TrainerModel):
    """A rank other than 0 under the ray launcher: `ray start --block`, no entrypoint, so no
    trainer series on its page (its engines still serve theirs)."""

    def render(self) -> str:
        return ""


def framework_trainer(
    profile: TrainerProfile,
    start: float,
    *,
    rank: int,
    directory: Path,
    host: str,
    clock: Callable[[], float],
    step: int = 0,
    seed: str = "",
) -> TrainerModel:
    """The trainer rank of a framework run under the bridge (profile.tensorboard_keys set)."""
    if rank != 0:
        return RayWorkerTrainer(profile, start, step=step, seed=seed)
    return BridgedTrainer(profile, start, directory, host=host, clock=clock, step=step, seed=seed)


def default_root() -> Path:
    """Where event files go when the simulator names no state directory."""
    return Path(tempfile.mkdtemp(prefix="rljob-sim-tensorboard-"))


__all__ = [
    "BRIDGE_INTERVAL",
    "FRAMEWORK_TAGS",
    "BridgedTrainer",
    "EventWriter",
    "FrameworkTags",
    "RayWorkerTrainer",
    "default_root",
    "framework_trainer",
    "step_records",
]
