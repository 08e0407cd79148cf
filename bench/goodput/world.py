"""The simulated RL job of the goodput benchmark at one time scale, and what each failure class
of the trace does to it (pure: profiles, specs and a plan of world events; `inject.py` carries
the plan out on the bed).

The job (trace.JobSize's defaults): a trainer of 4 nodes of 8 GPUs, 4 rollout engines of 8
GPUs, 4 CPU verifiers; 64 GPUs. Its times are the trace's `Durations.scaled(factor)`:

- a healthy step is `step_s`: `rollout_share` of it waiting for rollouts (coupled to the
  engines' throughput and the verifiers' delay, rljob.dev.sim.coupling, so that a degraded
  engine or verifier costs training time), the rest training; a checkpoint every
  `checkpoint_interval_s / step_s` steps, blocking for `checkpoint_save_s` (DCP async save);
- a trainer rank starts with `checkpoint_load_s` (loading model and checkpoint) before its first
  step; an engine (re)started supplies nothing for `model_load_s` (loading its weights);
- the operator's detection windows and restart timing are its defaults scaled the same way (the
  health interval at least 1 s, the API's floor).

Every failure is the same world event in every arm (`plan`): what the cluster or the workload
does, never what an arm does about it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bench.goodput.trace import HOUR, Durations, FailureClass, FailureEvent, JobSize, Role

# Each rollout engine's healthy tokens/s (the simulator's EngineProfile default).
ENGINE_THROUGHPUT = 800.0
# Verifier latency (the simulator's VerifierProfile): median at real scale, log-normal sigma.
VERIFIER_MEDIAN_S = 0.2
# What the drift fault does: throughput falls linearly to DRIFT_DROP below normal, crossing the
# detector's 20 % threshold `drift_onset_to_threshold_s` after onset (the trace's assumption).
DRIFT_DROP = 0.3
DRIFT_THRESHOLD = 0.2
# A slow verifier's p99 latency against the operator's bound (10 s at real scale): 3x.
VERIFIER_SLOWDOWN = 3.0
# torch's NCCL watchdog message (tests/integration/rljobs.py), the operator's NCCLTimeout.
NCCL_WATCHDOG = (
    "[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, "
    "OpType=ALLREDUCE) ran for {ms} milliseconds before timing out."
)
# torch's message for cudaErrorECCUncorrectable, the operator's GPUHardwareError
# (rljob.signatures: "uncorrectable ECC error").
CUDA_ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
OOM_EXIT_CODE = 137
# The kubelet-less bed: how long a lost node stays lost before the bench brings it back (a host
# repaired; only the pool's spare capacity depends on it).
NODE_REPAIR_S = 120.0


def go_duration(seconds: float) -> str:
    """A Go duration the API accepts (milliseconds kept)."""
    return f"{max(seconds, 0.001):.3f}s"


@dataclass(frozen=True)
class World:
    """The simulated job at 1/factor of real time."""

    factor: float
    size: JobSize = field(default_factory=JobSize)
    rollout_share: float = 0.5
    # How many times their cited rates the trace's engine and verifier failures arrive: the
    # failure policy's window shrinks by as much, so that the restarts within one (the budget
    # and the pod -> role -> job escalation count them) stay what they would be at those rates.
    window_stress: float = 1.0

    @property
    def durations(self) -> Durations:
        return Durations().scaled(self.factor)

    @property
    def gpus(self) -> int:
        return self.size.units(Role.TRAINER) + self.size.units(Role.ROLLOUT)

    @property
    def checkpoint_every(self) -> int:
        d = self.durations
        return max(1, round(d.checkpoint_interval_s / d.step_s))

    @property
    def wait_s(self) -> float:
        return self.durations.step_s * self.rollout_share

    @property
    def train_s(self) -> float:
        return self.durations.step_s - self.wait_s

    @property
    def verifier_median_s(self) -> float:
        return VERIFIER_MEDIAN_S / self.factor

    @property
    def health_interval_s(self) -> float:
        return max(1.0, self.durations.health_interval_s)

    @property
    def nccl_timeout_s(self) -> float:
        return self.durations.nccl_timeout_s

    # ---------------------------------------------------------------- simulator profiles

    def trainer_profile(self, *, resume_from_store: bool = False) -> dict[str, Any]:
        d = self.durations
        # The wait is tokens_per_step over the engines' supply (plus the verifiers' mean delay,
        # small at this scale): the healthy wait is `wait_s`.
        tokens = ENGINE_THROUGHPUT * self.size.rollout_engines * self.wait_s
        return {
            "couple_rollouts": True,
            "tokens_per_step": round(tokens, 3),
            "wait_for_rollouts": round(self.wait_s, 4),
            "step_seconds": round(self.train_s, 4),
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_seconds": round(d.checkpoint_save_s, 4),
            "load_seconds": round(d.checkpoint_load_s, 4),
            "engine_load_seconds": round(d.model_load_s, 4),
            "resume_from_store": resume_from_store,
            "canaries": False,  # no RL canary findings: they are not part of the trace
            "heartbeat_interval": 1.0,
        }

    def engine_profile(self) -> dict[str, Any]:
        return {"throughput": ENGINE_THROUGHPUT}

    def verifier_profile(self) -> dict[str, Any]:
        return {"median_latency": round(self.verifier_median_s, 6)}

    def profile_env(self, role: Role, *, resume_from_store: bool = False) -> dict[str, str]:
        profile = {
            Role.TRAINER: self.trainer_profile(resume_from_store=resume_from_store),
            Role.ROLLOUT: self.engine_profile(),
            Role.VERIFIER: self.verifier_profile(),
        }[role]
        return {"RLJOB_SIM_PROFILE": json.dumps(profile, sort_keys=True)}

    # ---------------------------------------------------------------- operator specs

    def health_spec(self, prometheus_url: str) -> dict[str, Any]:
        """spec.health: the operator's defaults (rljob.api.spec) scaled by 1/factor."""
        d = self.durations
        return {
            "source": {"prometheus": {"url": prometheus_url}},
            "interval": go_duration(self.health_interval_s),
            "kvDrift": {
                "threshold": DRIFT_THRESHOLD,
                "window": go_duration(max(d.kv_drift_window_s, self.health_interval_s)),
                "warmup": go_duration(d.kv_drift_warmup_s),
                "cooldown": go_duration(d.kv_drift_cooldown_s),
            },
            "engineStall": {
                "timeout": go_duration(max(d.engine_stall_timeout_s, self.health_interval_s))
            },
            "trainerStall": {
                "timeout": go_duration(d.trainer_stall_timeout_s),
                "startupGrace": go_duration(d.trainer_stall_startup_grace_s),
            },
            "verifierLatency": {
                "p99": go_duration(d.verifier_p99_bound_s),
                "window": go_duration(max(d.verifier_latency_window_s, self.health_interval_s)),
            },
        }

    def failure_policy_timing(self) -> dict[str, Any]:
        """spec.failurePolicy's times: the defaults (rljob.api.failure_policy) scaled by
        1/factor (the window by 1/(factor x window_stress)); maxRestarts and noProgressRestarts
        stay the defaults (10, 3)."""
        d = self.durations
        return {
            "window": go_duration(24 * HOUR / self.factor / self.window_stress),
            "backoff": {
                "initial": go_duration(d.restart_backoff_initial_s),
                "max": go_duration(d.restart_backoff_max_s),
            },
            "nodeLostTimeout": go_duration(d.node_lost_timeout_s),
            "teardownTimeout": go_duration(max(600.0 / self.factor, 1.0)),
            "actionTimeout": go_duration(max(1800.0 / self.factor, 1.0)),
            "suspectNodeTTL": go_duration(max(6 * HOUR / self.factor, 60.0)),
        }


class Effect(StrEnum):
    """One thing the world does (inject.py carries it out)."""

    HANG_GANG = "hang-gang"  # the simulator's hang on every rank: they block in a collective
    FAIL_RANK = "fail-rank"  # a rank's container ends Failed (kwok fail annotations)
    FAIL_ENGINE = "fail-engine"  # an engine's container ends (OOMKilled, exit 137)
    STOP_NODE = "stop-node"  # the node under the pod stops its kubelet heartbeat
    UNREACHABLE = "unreachable"  # the pod's process answers nothing (its node is gone)
    STALL = "stall"  # an engine generates nothing (its node is gone)
    DRIFT = "drift"  # the simulator's drift fault
    LATENCY = "latency"  # the simulator's latency fault


@dataclass(frozen=True)
class Step:
    """One effect on one pod of the failure's role (`rank`: a trainer rank by completion index,
    else the failure's own pod), after `delay_s`; message, exit code, fault parameters."""

    effect: Effect
    rank: int | None = None
    delay_s: float = 0.0
    exit_code: int = 1
    reason: str = "Error"
    message: str = ""
    params: tuple[tuple[str, float], ...] = ()

    def describe(self) -> str:
        where = f" rank {self.rank}" if self.rank is not None else ""
        after = f" after {self.delay_s:.1f} s" if self.delay_s else ""
        extra = ", ".join(f"{k}={v:g}" for k, v in self.params)
        return f"{self.effect}{where}{after}" + (f" ({extra})" if extra else "")


def plan(event: FailureEvent, world: World) -> list[Step]:
    """What the world does for one failure, the same in every arm. Trainer failures first freeze
    every rank (they block in their next collective, as NCCL's would); the rank that fails does so
    with the message the operator's classifier reads; a rank the others wait on fails them after
    the NCCL watchdog's timeout (whoever acts first wins: an arm restarting the gang earlier
    removes the pod before kwok fails it)."""
    ranks = world.size.trainer_nodes
    watchdog = NCCL_WATCHDOG.format(rank="{rank}", ms=round(world.nccl_timeout_s * 1000))
    index = event.index
    other = (index + 1) % ranks
    match event.failure_class, event.role:
        case FailureClass.GPU_HARDWARE, _:
            return [
                Step(Effect.HANG_GANG),
                Step(Effect.FAIL_RANK, rank=index, message=CUDA_ECC),
            ]
        case FailureClass.NCCL_TIMEOUT, _:
            return [
                Step(Effect.HANG_GANG),
                Step(Effect.FAIL_RANK, rank=index, delay_s=world.nccl_timeout_s, message=watchdog),
            ]
        case FailureClass.HUNG_RANK, _:
            return [
                Step(Effect.HANG_GANG),
                Step(Effect.FAIL_RANK, rank=other, delay_s=world.nccl_timeout_s, message=watchdog),
            ]
        case FailureClass.NODE_LOST, Role.TRAINER:
            return [
                Step(Effect.STOP_NODE, rank=index),
                Step(Effect.UNREACHABLE, rank=index),
                Step(Effect.HANG_GANG),
                Step(Effect.FAIL_RANK, rank=other, delay_s=world.nccl_timeout_s, message=watchdog),
            ]
        case FailureClass.NODE_LOST, _:
            return [Step(Effect.STOP_NODE), Step(Effect.UNREACHABLE), Step(Effect.STALL)]
        case FailureClass.ENGINE_OOM, _:
            return [Step(Effect.FAIL_ENGINE, exit_code=OOM_EXIT_CODE, reason="OOMKilled")]
        case FailureClass.ENGINE_DRIFT, _:
            onset = world.durations.drift_onset_to_threshold_s
            over = onset * DRIFT_DROP / DRIFT_THRESHOLD
            return [Step(Effect.DRIFT, params=(("drop", DRIFT_DROP), ("over_seconds", over)))]
        case FailureClass.SLOW_VERIFIER, _:
            p99 = world.durations.verifier_p99_bound_s * VERIFIER_SLOWDOWN
            return [Step(Effect.LATENCY, params=(("p99_seconds", p99),))]
    raise ValueError(f"no world event for {event.failure_class} on {event.role}")


STOPS_TRAINER = frozenset(
    {
        FailureClass.GPU_HARDWARE,
        FailureClass.NCCL_TIMEOUT,
        FailureClass.HUNG_RANK,
    }
)


def stops_trainer(event: FailureEvent) -> bool:
    """Whether the failure stops the trainer itself (it then recovers by a gang restart)."""
    return event.failure_class in STOPS_TRAINER or (
        event.failure_class is FailureClass.NODE_LOST and event.role is Role.TRAINER
    )


def describe_plan(failure_class: FailureClass, role: Role, world: World) -> str:
    """The world event of a class on a role, in words (GOODPUT.md's mapping table)."""
    steps = plan(FailureEvent(0.0, failure_class, role, 0), world)
    return "; ".join(step.describe() for step in steps)


__all__ = [
    "NODE_REPAIR_S",
    "Effect",
    "Step",
    "World",
    "describe_plan",
    "go_duration",
    "plan",
    "stops_trainer",
]
