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
from rljob.health.canaries.throughput_regression import (
    THROUGHPUT_REGRESSION,
    THROUGHPUT_REGRESSION_VALUE,
    ThroughputRegressionConfig,
    ThroughputRegressionDetector,
    ThroughputSample,
)

__all__ = [
    "REWARD_HACKING",
    "REWARD_HACKING_VALUE",
    "THROUGHPUT_REGRESSION",
    "THROUGHPUT_REGRESSION_VALUE",
    "RewardHackingConfig",
    "RewardHackingDetector",
    "RewardSample",
    "ThroughputRegressionConfig",
    "ThroughputRegressionDetector",
    "ThroughputSample",
]
