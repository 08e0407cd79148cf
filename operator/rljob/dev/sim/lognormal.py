"""The log-normal latency distribution: the simulated verifiers' request latencies and the
synthetic verifier traces (rljob.dev.traces) share it. Imports nothing of the simulator, so the
traces do not pull in its models (whose profiles use the traces)."""

from __future__ import annotations

import math


def lognormal_cdf(x: float, median: float, sigma: float) -> float:
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    return 0.5 * (1 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2))))
