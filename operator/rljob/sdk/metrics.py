"""RL correctness canaries: the per-step series RL practitioners read to see a run going wrong
(an off-policy drift, a collapsing entropy, a reward hacked), one call per training step:

    progress = ProgressExporter()                  # serves its registry on :9400
    rl = RLMetrics(progress.registry)              # the canaries on the same page
    rl.report_step(step, kl=0.012, clip_fraction=0.08, reward_train=0.61, generated_tokens=n)

Each keyword sets the gauge `rljob_rl_<keyword>` (and `rljob_rl_step` is set to `step`); a
keyword left out or None leaves its series as it was, and a series never reported is not
exported at all (a 0 would read as a healthy KL or a reward). NaN and infinite values are not
exported: they are counted in `rljob_rl_rejected_values_total{name}` instead (a NaN loss is
itself the canary). `generated_tokens` adds to the counter `rljob_rl_generated_tokens_total`,
so alerts can normalise step time per generated token. docs/sdk-metrics.md lists every series.
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, SupportsFloat, TypedDict, Unpack

from rljob.sdk.collector import Collector

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

PREFIX = "rljob_rl_"
STEP = f"{PREFIX}step"
GENERATED_TOKENS = f"{PREFIX}generated_tokens"
REJECTED = f"{PREFIX}rejected_values"
# The keyword that feeds the generated-tokens counter rather than a gauge.
TOKENS_KEYWORD = "generated_tokens"


class StepValues(TypedDict, total=False):
    """report_step's keywords: a float, a numpy scalar or a 0-d tensor (anything float() takes)."""

    importance_ratio_mean: SupportsFloat | None
    importance_ratio_tail: SupportsFloat | None
    clip_fraction: SupportsFloat | None
    kl: SupportsFloat | None
    entropy: SupportsFloat | None
    reward_train: SupportsFloat | None
    reward_eval: SupportsFloat | None
    response_length_mean: SupportsFloat | None
    response_length_p90: SupportsFloat | None
    grad_norm: SupportsFloat | None
    loss: SupportsFloat | None
    generated_tokens: SupportsFloat | None


# Gauge keyword -> help text; the exposed name is PREFIX + keyword.
CANARIES: dict[str, str] = {
    "importance_ratio_mean": "Mean importance ratio pi_theta / pi_behaviour over the tokens.",
    "importance_ratio_tail": "Tail quantile (p99 advised) of |ratio - 1| over the step's tokens.",
    "clip_fraction": "Share of tokens whose ratio the surrogate clipped.",
    "kl": "KL divergence of the policy to the reference model.",
    "entropy": "Mean token entropy of the policy.",
    "reward_train": "Mean reward of the step's training rollouts.",
    "reward_eval": "Mean reward on the held-out evaluation set (eval steps only).",
    "response_length_mean": "Mean response length in tokens.",
    "response_length_p90": "90th percentile of response length in tokens.",
    "grad_norm": "Gradient norm before clipping.",
    "loss": "Training loss.",
}
KEYWORDS = frozenset(StepValues.__annotations__)
_HELP = {
    STEP: "Step of the last reported canary values.",
    **{PREFIX + keyword: text for keyword, text in CANARIES.items()},
}
# Every gauge's exposed name, for tools that check queries against them (none is exported
# before it is first reported).
GAUGES = tuple(_HELP)


def _number(keyword: str, raw: object) -> float:
    if not isinstance(raw, SupportsFloat):
        raise TypeError(f"{keyword} must be a number, got {type(raw).__name__}")
    return float(raw)


def _exportable(keyword: str, value: float) -> bool:
    return math.isfinite(value) and (keyword != TOKENS_KEYWORD or value >= 0)


class _Gauges(Collector):
    """The step and canary gauges: only those reported so far are exported."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}

    def set(self, values: dict[str, float]) -> None:
        with self._lock:
            self._values.update(values)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        from prometheus_client.core import GaugeMetricFamily

        # Every name up front, so a clash in the registry shows at construction.
        return [GaugeMetricFamily(name, text) for name, text in _HELP.items()]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            values = sorted(self._values.items())
        return [GaugeMetricFamily(name, _HELP[name], value=value) for name, value in values]


class RLMetrics:
    """The canary series in `registry` (a new one if None; pass the ProgressExporter's to serve
    them on its port). Thread-safe."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # Imported here: the SDK requires boto3 only, and a trainer that exports metrics has it.
        from prometheus_client import CollectorRegistry, Counter

        self.registry = registry or CollectorRegistry()
        self._gauges = _Gauges()
        self.registry.register(self._gauges)
        self._tokens = Counter(
            GENERATED_TOKENS, "Tokens generated for training steps.", registry=self.registry
        )
        self._rejected = Counter(
            REJECTED,
            "Reported values not exported because they were NaN, infinite or negative tokens.",
            ["name"],
            registry=self.registry,
        )

    def report_step(self, step: int, **values: Unpack[StepValues]) -> tuple[str, ...]:
        """Exports this step's canaries; returns the keywords rejected (NaN, infinite, negative
        generated_tokens). TypeError names a keyword that is not a known series."""
        unknown = sorted(set(values) - KEYWORDS)
        if unknown:
            raise TypeError(f"report_step() got unknown series {', '.join(map(repr, unknown))}")
        step = operator.index(step)
        if step < 0:
            raise ValueError(f"step must not be negative, got {step}")
        # All converted before anything is exported: a value float() refuses changes nothing.
        given = {
            keyword: _number(keyword, raw) for keyword, raw in values.items() if raw is not None
        }
        rejected = tuple(k for k, v in given.items() if not _exportable(k, v))
        for keyword in rejected:
            self._rejected.labels(name=keyword).inc()
        tokens = given.pop(TOKENS_KEYWORD, None)
        if tokens is not None and TOKENS_KEYWORD not in rejected:
            self._tokens.inc(tokens)
        accepted = {PREFIX + k: v for k, v in given.items() if k not in rejected}
        self._gauges.set({STEP: float(step), **accepted})
        return rejected


__all__ = ["CANARIES", "GAUGES", "KEYWORDS", "PREFIX", "RLMetrics", "StepValues"]
