"""What the health loop last read of each rollout engine that a pass needs to drain it or let it
rejoin: its running requests and the policy generation it reports, with when they were read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class EngineReading:
    """One rollout engine's latest reading; None: the source had no value for it."""

    pod: str
    at: datetime  # when the sample was taken (a drain counts only samples after it began)
    running: float | None = None  # requests running or queued (the profile's two gauges)
    generation: int | None = None  # rljob_engine_policy_generation, or the engine's own
