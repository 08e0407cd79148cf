"""The thresholds by which the operator names the role bounding the trainer's step
(rljob.health.bottleneck.attribution), which the kubectl plugin reapplies to the figures it
prints (rljob.kubectl.diagnose_verdict): one rule, so the screen never argues with the verdict
by other numbers."""

from __future__ import annotations

from dataclasses import dataclass

from rljob.vocabulary.phases import GENERATING, WAITING_FOR_ROLLOUTS

# The phases of the rollout side, weighed as one against training and weight sync.
ROLLOUT_SIDE = (WAITING_FOR_ROLLOUTS, GENERATING)


@dataclass(frozen=True, slots=True)
class AttributionRule:
    min_coverage: float = 0.5  # share of the window the phase counters must span
    saturated_time: float = 0.5  # an engine queueing this share of the window is saturated
    saturated_engines: float = 0.5  # more than this share of engines saturated: all are
    kv_full: float = 0.9  # mean KV usage this high is a full cache
    queue_per_pod: float = 1.0  # verifier requests queued per pod that count as a backlog


DEFAULT_ATTRIBUTION = AttributionRule()
