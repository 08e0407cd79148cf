"""KVCacheDrift: a rollout engine whose saturated throughput decays
(docs/architecture.md section 7).

Throughput counts only intervals where the engine is serving (awake, not paused for a weight
sync) and saturated (requests running and waiting at both ends), so load swings, drain tails and
sleep phases of generate/train cycles never look like drift. A finding needs the drop against the
engine's own post-warm-up baseline in every slice of the window, and either against the median
of at least three warmed-up peers of the same role or, with fewer peers, a confirming KV-cache
symptom (prefix-cache hit rate down, preemption rate up).

Coverage is judged against the serving part of the window: sleep and weight-sync time say
nothing about throughput, and an RL engine sleeps through every training phase, so counting it
would leave a generate/train job "insufficient data" forever. A window also needs saturated
time of at least a quarter of its wall time, so a window spent mostly asleep is not judged on a
few minutes.

A warmed-up engine's baseline and cooldown are summarized into status.health.engines[] and
restored by a restarted operator: re-taken after a restart, a baseline would be measured on
throughput that may already have drifted, and the drifting engine would become its own baseline.
"""

from rljob.health.drift.config import DriftConfig
from rljob.health.drift.detector import KVDriftDetector
from rljob.health.drift.measures import Baseline, WindowStats
from rljob.health.drift.summary import KV_DRIFT_SUMMARY

__all__ = ["KV_DRIFT_SUMMARY", "Baseline", "DriftConfig", "KVDriftDetector", "WindowStats"]
