"""The health scheduler's former home, kept until its importers move: the loop lives in
rljob.runtime.health_loop, the per-job detector state in rljob.health.monitor."""

from rljob.adapters.metrics import SignalData
from rljob.health.monitor import JobKey, PodLike, next_slot, pods_by_role
from rljob.runtime.health_loop import EvaluationsCallback, HealthScheduler, SourceFactory

__all__ = [
    "EvaluationsCallback",
    "HealthScheduler",
    "JobKey",
    "PodLike",
    "SignalData",
    "SourceFactory",
    "next_slot",
    "pods_by_role",
]
