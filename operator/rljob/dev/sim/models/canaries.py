"""A simulated trainer's RL canary series, as rljob.sdk.metrics.RLMetrics.report_step exports
them (pure, seeded): one report per step sets `rljob_rl_step` and the canary gauges, each
exported only once reported, and adds the step's tokens to `rljob_rl_generated_tokens_total`.
Names and help texts are copied, not imported (the SDK pulls in prometheus_client's registry
machinery the simulator does not use); a unit test compares.

Healthy values hold near constants with small noise. The training reward rises by
`reward_slope_per_hour` of wall time and the held-out eval reward with it, reported at the
first report and every `eval_every` steps (when an evaluation runs) and held between; with
`reward_hacking` the eval reward stays flat instead. The slope integrates over time, so
switching it or the hacking on at run time bends the rewards without a jump.
"""

from __future__ import annotations

import random

from rljob.dev.sim.exposition import Page
from rljob.dev.sim.profiles import TrainerProfile

RL_PREFIX = "rljob_rl_"
RL_STEP = f"{RL_PREFIX}step"
# A prometheus_client Counter: `_total` and `_created` are added.
RL_GENERATED_TOKENS = f"{RL_PREFIX}generated_tokens"
# rljob.sdk.metrics.CANARIES: keyword -> help text; the exposed name is RL_PREFIX + keyword.
RL_CANARIES: dict[str, str] = {
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
_HELP = {
    RL_STEP: "Step of the last reported canary values.",
    **{RL_PREFIX + keyword: text for keyword, text in RL_CANARIES.items()},
}
# Healthy levels of the values that do not trend, and their relative noise.
HEALTHY = {
    "importance_ratio_tail": 0.2,
    "clip_fraction": 0.04,
    "kl": 0.02,
    "entropy": 0.5,
    "response_length_mean": 1024.0,
    "grad_norm": 1.0,
    "loss": 0.1,
}
NOISE = 0.02
P90_OVER_MEAN = 1.8
REWARD_TRAIN_START = 0.3
REWARD_EVAL_START = 0.25


class Canaries:
    """The RL series one trainer rank reports."""

    def __init__(self, seed: str, start: float) -> None:
        self._rng = random.Random(f"{seed}:canaries")
        self.start = start
        self.train_level, self.eval_level = REWARD_TRAIN_START, REWARD_EVAL_START
        self._levels_at = start
        self._reports = 0
        self.values: dict[str, float] = {}  # exposed name -> value, those reported so far
        # keyword -> value of the last report alone (reward_eval only when an evaluation ran):
        # what a framework logs that step (rljob.dev.sim.tensorboard).
        self.last: dict[str, float] = {}
        self.tokens = 0.0

    def report(self, step: int, at: float, profile: TrainerProfile) -> None:
        """The step `step` ended at `at`: its values, as a training loop would report them."""
        hours = max(0.0, at - self._levels_at) / 3600
        self._levels_at = at
        self.train_level += profile.reward_slope_per_hour * hours
        if not profile.reward_hacking:
            self.eval_level += profile.reward_slope_per_hour * hours
        rng = self._rng
        values = {k: level * max(0.0, 1 + rng.gauss(0, NOISE)) for k, level in HEALTHY.items()}
        values["importance_ratio_mean"] = 1 + rng.gauss(0, NOISE / 10)
        values["response_length_p90"] = P90_OVER_MEAN * values["response_length_mean"]
        values["reward_train"] = self.train_level + rng.gauss(0, profile.reward_noise)
        if self._reports == 0 or step % profile.eval_every == 0:
            values["reward_eval"] = self.eval_level + rng.gauss(0, profile.reward_noise)
        self._reports += 1
        self.last = values
        self.values[RL_STEP] = float(step)
        self.values.update({RL_PREFIX + k: v for k, v in values.items()})
        self.tokens += profile.tokens_per_step

    def render(self, page: Page) -> None:
        for name, value in sorted(self.values.items()):
            page.gauge(name, _HELP[name], value)
        page.counter(
            RL_GENERATED_TOKENS, "Tokens generated for training steps.", self.tokens, self.start
        )
