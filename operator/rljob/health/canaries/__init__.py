"""RL correctness canaries as findings a failurePolicy rule can act on (Report, or Suspend): the
shipped alerts RewardHackingSuspected and ThroughputRegressionAfterSync judged by the operator
from the SDK's trainer series, with thresholds from spec.health.canaries."""

from rljob.health.canaries.reward_hacking import (
    REWARD_HACKING,
    REWARD_HACKING_VALUE,
    RewardHackingConfig,
    RewardHackingDetector,
    RewardSample,
)

__all__ = [
    "REWARD_HACKING",
    "REWARD_HACKING_VALUE",
    "RewardHackingConfig",
    "RewardHackingDetector",
    "RewardSample",
]
