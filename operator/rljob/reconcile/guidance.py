"""Values below production guidance: right for a demo or a test, which want faults acted on in
seconds, but a production job with them takes ordinary slow phases for faults and restarts
healthy workloads. The operator accepts them and says so in one Warning Event per generation,
naming each field, its value and the shortest production value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rljob.api import ConditionType, RLJob, RLJobSpec
from rljob.api.durations import duration_nanoseconds
from rljob.reconcile.conditions import find
from rljob.reconcile.events import EventSpec

GUIDANCE_REASON = "BelowProductionGuidance"


@dataclass(frozen=True)
class Floor:
    field: str  # the spec path as users write it
    least: str  # the shortest production value
    why: str
    read: Callable[[RLJobSpec], str]


FLOORS = (
    Floor("health.interval", "10s", "rounds faster than a scrape read the same samples",
          lambda s: s.health.interval),
    Floor("health.kvDrift.window", "10m", "shorter than a few rollout phases, a phase's tail "
          "reads as decay", lambda s: s.health.kv_drift.window),
    Floor("health.kvDrift.warmup", "5m", "a baseline taken before the caches warm",
          lambda s: s.health.kv_drift.warmup),
    Floor("health.kvDrift.cooldown", "15m", "one engine restarted again before it warms",
          lambda s: s.health.kv_drift.cooldown),
    Floor("health.engineStall.timeout", "2m", "one long batch's prefill or decode tail",
          lambda s: s.health.engine_stall.timeout),
    Floor("health.trainerStall.timeout", "10m", "a checkpoint save or an evaluation between "
          "steps", lambda s: s.health.trainer_stall.timeout),
    Floor("health.trainerStall.startupGrace", "10m", "loading a large model and checkpoint",
          lambda s: s.health.trainer_stall.startup_grace),
    Floor("health.verifierLatency.window", "2m", "one slow batch of verifications",
          lambda s: s.health.verifier_latency.window),
)  # fmt: skip


def below_guidance(spec: RLJobSpec) -> list[str]:
    """Each field under its floor, as "field value < floor (why)"."""
    return [
        f"{floor.field} {value} < {floor.least} ({floor.why})"
        for floor in FLOORS
        if duration_nanoseconds(value := floor.read(spec)) < duration_nanoseconds(floor.least)
    ]


def guidance_event(job: RLJob) -> EventSpec | None:
    """The Warning for a generation this pass accepts for the first time, when any of its
    values is below guidance; None on every later pass of that generation."""
    accepted = find(job.status.conditions, ConditionType.ACCEPTED)
    if accepted is not None and accepted.observed_generation == job.metadata.generation:
        return None
    below = below_guidance(job.spec)
    if not below:
        return None
    message = "values below production guidance, fine for a demo or a test: " + "; ".join(below)
    return EventSpec("Warning", GUIDANCE_REASON, message)
