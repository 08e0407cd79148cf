"""What the health loop last read of each rollout engine that a pass needs to drain it or let it
rejoin: its running requests and the policy generation it reports, with when they were read; and
what the pod itself says at the pass: an engine with no container running holds no request and
serves no generation, and a reading from before its container (re)started says nothing of it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from rljob.api import RoleName
from rljob.reconcile.observed import ObservedPod


@dataclass(frozen=True)
class EngineReading:
    """One rollout engine's latest reading; None: the source had no value for it."""

    pod: str
    at: datetime  # when the sample was taken (a drain counts only samples after it began)
    running: float | None = None  # requests running or queued (the profile's two gauges)
    generation: int | None = None  # rljob_engine_policy_generation, or the engine's own
    stopped: bool = False  # no container of its pod runs (read from the pod, not its metrics)


def with_stopped_engines(
    readings: tuple[EngineReading, ...], pods: Iterable[ObservedPod], now: datetime
) -> tuple[EngineReading, ...]:
    """The readings a pass judges rollout engines by: a pod with no container running read at
    `now` as stopped with nothing running and no generation (no process serves one), and a
    reading taken before its pod's container last (re)started dropped (it describes the process
    before, whose generation the new one does not serve)."""
    rollout = [p for p in pods if p.role == RoleName.ROLLOUT.value and not p.deleting]
    stopped = {p.name for p in rollout if not p.container_running}
    started = {p.name: p.started_at for p in rollout if p.started_at is not None}
    kept = tuple(
        r
        for r in readings
        if r.pod not in stopped and (r.pod not in started or r.at >= started[r.pod])
    )
    added = tuple(
        EngineReading(pod=pod, at=now, running=0.0, stopped=True) for pod in sorted(stopped)
    )
    return kept + added
