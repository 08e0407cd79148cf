"""The trainer's progress as Prometheus metrics, the signals the operator's detectors read:

    progress = ProgressExporter()          # serves /metrics on RLJOB_METRICS_PORT (default 9400)
    progress.phase("generating")           # heartbeat at every phase change
    progress.step(1200)                    # heartbeat too
    progress.checkpoint(1200)
    progress.policy_generation(37)

Phases the detectors know: `waiting_for_rollouts` (a stall is not a hang) and `checkpointing`.
Besides PHASES, `evaluating` (a held-out evaluation) and any other name are accepted. Seconds
per phase accrue in rljob_trainer_phase_seconds_total{phase} (rljob.sdk.phase_time has the
mapping); docs/sdk-metrics.md lists every series."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rljob.sdk.phase_time import PhaseSeconds

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

METRICS_PORT_ENV = "RLJOB_METRICS_PORT"
DEFAULT_PORT = 9400
PHASES = (
    "starting",
    "generating",
    "waiting_for_rollouts",
    "training",
    "syncing_weights",
    "checkpointing",
)
# Not in PHASES, whose gauge series every exporter starts with (the simulator copies them).
EVALUATING = "evaluating"


class ProgressExporter:
    """rljob_trainer_step, rljob_trainer_heartbeat_timestamp_seconds, rljob_trainer_phase{phase},
    rljob_policy_generation, rljob_checkpoint_step and rljob_trainer_phase_seconds_total{phase}.
    `clock` times the phases (time.monotonic by default; tests pass a fake)."""

    def __init__(
        self,
        port: int | None = None,
        registry: CollectorRegistry | None = None,
        *,
        serve: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Imported here: the SDK requires boto3 only, and a trainer that exports progress has it.
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.registry = registry or CollectorRegistry()
        # Every phase name ever set, so that leaving an unlisted phase resets its gauge too.
        self._phases_seen: set[str] = set(PHASES)
        self._phase_seconds = PhaseSeconds(clock)
        self.registry.register(self._phase_seconds)
        self._step = Gauge(
            "rljob_trainer_step", "Last completed training step.", registry=self.registry
        )
        self._heartbeat = Gauge(
            "rljob_trainer_heartbeat_timestamp_seconds",
            "Last sign of life.",
            registry=self.registry,
        )
        self._phase = Gauge(
            "rljob_trainer_phase", "1 for the current phase.", ["phase"], registry=self.registry
        )
        self._policy = Gauge(
            "rljob_policy_generation",
            "Weights generation served to engines.",
            registry=self.registry,
        )
        self._checkpoint = Gauge(
            "rljob_checkpoint_step",
            "Step of the last committed checkpoint.",
            registry=self.registry,
        )
        self.phase("starting")
        if serve:
            start_http_server(
                port or int(os.environ.get(METRICS_PORT_ENV, DEFAULT_PORT)), registry=self.registry
            )

    def heartbeat(self) -> None:
        self._heartbeat.set(time.time())

    def step(self, step: int) -> None:
        self._step.set(step)
        self.heartbeat()

    def phase(self, name: str) -> None:
        self._phase_seconds.enter(name)
        self._phases_seen.add(name)
        for known in self._phases_seen:
            self._phase.labels(phase=known).set(1 if known == name else 0)
        self.heartbeat()

    def add_phase_seconds(self, phase: str, seconds: float) -> None:
        """Seconds the trainer timed itself in a counted phase (rljob.sdk.tensorboard_bridge
        passes a framework's per-step timings)."""
        self._phase_seconds.add(phase, seconds)

    def policy_generation(self, generation: int) -> None:
        self._policy.set(generation)

    def checkpoint(self, step: int) -> None:
        self._checkpoint.set(step)
        self.heartbeat()
