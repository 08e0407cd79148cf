"""What each framework writes to TensorBoard, as the SDK's series: one key map per framework, every
tag cited at the commit docs/frameworks.md names. All four write with torch's
`SummaryWriter.add_scalar` (simple_value scalars), tags verbatim.

A canary keyword lists tag patterns (full matches) in order of preference: the first pattern
with a value at a step gives it, several tags matching it (one per eval dataset) are averaged.
A quantity a framework does not log has no entry, and that detector stays blind for it
(docs/frameworks.md says which). Timings are seconds per step, added to
rljob_trainer_phase_seconds_total under the phase they measure. `step_tags` says which tags are
on the trainer's step axis (slime logs train/* on an axis of optimizer steps; NeMo-RL's GPU
monitor on its own counter).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# A step's values by tag -> generated tokens that step, or None when its inputs are missing.
TokensOf = Callable[[Mapping[str, float]], float | None]


@dataclass(frozen=True)
class KeyMap:
    framework: str
    revision: str
    canaries: Mapping[str, tuple[str, ...]]
    phases: Mapping[str, str]  # tag -> phase of rljob_trainer_phase_seconds_total
    step_tags: str = ".*"
    tokens_inputs: tuple[str, ...] = ()
    tokens: TokensOf | None = None
    _compiled: dict[str, tuple[re.Pattern[str], ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for keyword, patterns in self.canaries.items():
            self._compiled[keyword] = tuple(re.compile(pattern) for pattern in patterns)

    def on_step_axis(self, tag: str) -> bool:
        return re.fullmatch(self.step_tags, tag) is not None

    def canary(self, keyword: str, values: Mapping[str, float]) -> float | None:
        """The keyword's value from one step's values by tag (None: not logged that step)."""
        for pattern in self._compiled.get(keyword, ()):
            found = [value for tag, value in values.items() if pattern.fullmatch(tag)]
            if found:
                return sum(found) / len(found)
        return None

    def wanted(self, tag: str) -> bool:
        """Whether the tag feeds any series (others are skipped as they are read)."""
        return (
            tag in self.phases
            or tag in self.tokens_inputs
            or any(p.fullmatch(tag) for patterns in self._compiled.values() for p in patterns)
        )


def _product(first: str, second: str, scale: float = 1.0) -> TokensOf:
    def tokens(values: Mapping[str, float]) -> float | None:
        if first not in values or second not in values:
            return None
        return values[first] * values[second] * scale

    return tokens


def _ratio(numerator: str, denominator: str, scale: float) -> TokensOf:
    def tokens(values: Mapping[str, float]) -> float | None:
        if numerator not in values or not values.get(denominator):
            return None
        return values[numerator] * scale / values[denominator]

    return tokens


# volcengine/verl b178a3c. Keys unprefixed, step global_steps (ray_trainer.py RayPPOTrainer.fit;
# val_before_train at 0). verl/trainer/ppo/metric_utils.py compute_data_metrics (critic/score,
# response_length), compute_timing_metrics (timing_s, timing_per_token_ms);
# verl/workers/actor/dp_actor.py update_policy (actor/*); core_algos.py compute_policy_loss_vanilla
# (actor/pg_clipfrac); ray_trainer.py _val_metrics_update (val-core/<source>/<var>/mean@<n>);
# rollout_corr_helper.py (rollout_corr/rollout_is_mean, with algorithm.rollout_correction only).
VERL = KeyMap(
    framework="verl",
    revision="volcengine/verl b178a3c",
    canaries={
        "reward_train": ("critic/score/mean",),
        "reward_eval": (r"val-core/.+/(reward|acc)/mean@\d+",),
        "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),  # to the reference, when enabled
        "clip_fraction": ("actor/pg_clipfrac",),
        "importance_ratio_mean": ("rollout_corr/rollout_is_mean",),
        "entropy": ("actor/entropy",),
        "loss": ("actor/pg_loss",),
        "grad_norm": ("actor/grad_norm",),
        "response_length_mean": ("response_length/mean",),
    },
    phases={
        "timing_s/gen": "generating",
        "timing_s/update_actor": "training",
        "timing_s/update_weights": "syncing_weights",
        "timing_s/save_checkpoint": "checkpointing",
        "timing_s/testing": "evaluating",
    },
    # compute_timing_metrics: timing_per_token_ms/gen = timing_s/gen * 1000 / sum(response_length)
    tokens_inputs=("timing_s/gen", "timing_per_token_ms/gen"),
    tokens=_ratio("timing_s/gen", "timing_per_token_ms/gen", 1000.0),
)

# OpenRLHF/OpenRLHF 3c3be62. openrlhf/utils/logging_utils.py TensorboardLogger writes train/<k>
# and eval/<k> at global_step (ppo_trainer.py save_logs_and_checkpoints, evaluate);
# ppo_actor.py training_step (policy_loss, kl, ppo_clip_ratio, entropy_loss with
# --actor.entropy_coef only, actor_grad_norm, reward, response_length); ppo_trainer.py
# _compute_rollout_stats (rollout/num_samples, rollout/response_length_mean), compute_eval_metrics
# (eval_<source>_pass1), train_step and fit (timing/*).
OPENRLHF = KeyMap(
    framework="openrlhf",
    revision="OpenRLHF/OpenRLHF 3c3be62",
    canaries={
        "reward_train": ("train/reward", "train/rollout/reward_mean"),
        "reward_eval": (r"eval/eval_.+_pass1",),
        "kl": ("train/kl",),
        "clip_fraction": ("train/ppo_clip_ratio",),
        "entropy": ("train/entropy_loss",),
        "loss": ("train/policy_loss",),
        "grad_norm": ("train/actor_grad_norm",),
        "response_length_mean": ("train/response_length", "train/rollout/response_length_mean"),
    },
    phases={
        "train/timing/generation": "generating",
        "train/timing/ppo_train": "training",
        "train/timing/broadcast": "syncing_weights",
    },
    step_tags="train/.*",  # async eval is logged at the generator's own eval step
    tokens_inputs=("train/rollout/num_samples", "train/rollout/response_length_mean"),
    tokens=_product("train/rollout/num_samples", "train/rollout/response_length_mean"),
)

# NVIDIA-NeMo/RL 7ea279a. nemo_rl/utils/logger.py TensorboardLogger.log_metrics writes
# <prefix>/<name> at total_steps + 1 (nemo_rl/algorithms/grpo.py grpo_train);
# nemo_rl/algorithms/loss/loss_functions.py ClippedPGLossFn (kl_penalty, probs_ratio,
# approx_entropy, loss); grpo.py (reward, grad_norm, timing/train/*, validate:
# validation/accuracy); nemo_rl/experience/rollouts.py (mean_gen_tokens_per_sample). No clip
# fraction for GRPO; generated tokens need the config's batch sizes, not in the files.
NEMO_RL = KeyMap(
    framework="nemo-rl",
    revision="NVIDIA-NeMo/RL 7ea279a",
    canaries={
        "reward_train": ("train/reward",),
        "reward_eval": ("validation/accuracy",),
        "kl": ("train/kl_penalty",),
        "importance_ratio_mean": ("train/probs_ratio",),
        "entropy": ("train/approx_entropy",),
        "loss": ("train/loss",),
        "grad_norm": ("train/grad_norm",),
        "response_length_mean": ("train/mean_gen_tokens_per_sample",),
    },
    phases={
        "timing/train/generation": "generating",
        "timing/train/policy_training": "training",
        "timing/train/prepare_for_generation/transfer_and_update_weights": "syncing_weights",
        "timing/train/checkpointing": "checkpointing",
        "timing/validation/total_validation_time": "evaluating",
    },
    step_tags="(train|validation|timing|performance)/.*",  # not the GPU monitor's ray/*
)

# THUDM/slime 624b824. slime/observability/tensorboard_utils.py (--use-tensorboard), keys as
# logged by logging_utils.log; rollout/*, perf/*, eval/* at rollout_id, train/* at
# rollout_id * num_steps_per_rollout + step_id (megatron_utils/model.py). slime/ray/rollout.py
# (rollout/raw_reward: rollout/rewards is group-normalised), rollout_metrics.py
# (rollout/response_len/mean, eval/<name>), megatron_utils/loss.py policy_loss_function
# (ppo_kl, kl_loss with --use-kl-loss, pg_clipfrac, ois with --get-mismatch-metrics or
# --use-tis, entropy_loss, loss), model.py train (grad_norm), train_metric_utils.py log_perf_data
# (perf/*; update_weights_time lands one rollout late). Generated tokens need
# rollout_num_gpus, not in the files.
SLIME = KeyMap(
    framework="slime",
    revision="THUDM/slime 624b824",
    canaries={
        "reward_train": ("rollout/raw_reward",),
        "reward_eval": (r"eval/(?![^/]*-(truncated_ratio|pass@\d+)$)[^/]+",),
        "kl": ("train/kl_loss",),
        "clip_fraction": ("train/pg_clipfrac",),
        "importance_ratio_mean": ("train/ois",),
        "entropy": ("train/entropy_loss",),
        "loss": ("train/loss",),
        "grad_norm": ("train/grad_norm",),
        "response_length_mean": ("rollout/response_len/mean",),
    },
    phases={
        "perf/rollout_time": "generating",
        "perf/actor_train_time": "training",
        "perf/update_weights_time": "syncing_weights",
    },
    step_tags="(rollout|perf|eval)/.*",
)

KEY_MAPS: dict[str, KeyMap] = {keys.framework: keys for keys in (VERL, OPENRLHF, NEMO_RL, SLIME)}

__all__ = ["KEY_MAPS", "NEMO_RL", "OPENRLHF", "SLIME", "VERL", "KeyMap"]
