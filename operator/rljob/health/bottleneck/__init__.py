"""What bounds the trainer's step (status.bottleneck), and the rollout concurrency to run at.

Pure: the health loop feeds `BottleneckMonitor` the rollout engines' samples, the trainer's
phase counters (rljob_trainer_phase_seconds_total) and step, the verifiers' queue depth and
latency, and writes what `evaluate(now)` returns. `phases` splits the trainer's time, `load`
measures the engines and verifiers, `curve` and `extrapolate` place the concurrency knee (beyond
what ran, too), `attribution` names the role, `tracker` keeps it from flapping and `status`
bounds the result.
"""

from rljob.health.bottleneck.attribution import Verdict, attribute
from rljob.health.bottleneck.extrapolate import CurveVerdict, StepTimeFit, judge_curve
from rljob.health.bottleneck.monitor import BottleneckConfig, BottleneckMonitor
from rljob.health.bottleneck.phases import PhaseBreakdown

__all__ = [
    "BottleneckConfig",
    "BottleneckMonitor",
    "CurveVerdict",
    "PhaseBreakdown",
    "StepTimeFit",
    "Verdict",
    "attribute",
    "judge_curve",
]
