"""What the health loop last read of each rollout engine that a pass needs to drain it or let it
rejoin: its running requests and the policy generation it reports, with when they were read; and
what the pod itself says at the pass: an engine with no container running holds no request."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
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
    """The readings, each rollout pod with no container running read at `now` as stopped with
    nothing running (its generation as last reported)."""
    stopped = {
        p.name
        for p in pods
        if p.role == RoleName.ROLLOUT.value and not p.container_running and not p.deleting
    }
    if not stopped:
        return readings
    kept = tuple(r for r in readings if r.pod not in stopped)
    known = {r.pod: r for r in readings}
    added = tuple(
        replace(known[pod], at=now, running=0.0, stopped=True)
        if pod in known
        else EngineReading(pod=pod, at=now, running=0.0, stopped=True)
        for pod in sorted(stopped)
    )
    return kept + added
