"""The trainer's phases, as the SDK's rljob_trainer_phase_seconds_total{phase} names them: the
operator splits a step into them, the kubectl plugin prints them."""

from __future__ import annotations

# The SDK's phases (rljob.sdk.phase_time.COUNTED_PHASES; the vocabulary does not import the SDK).
GENERATING = "generating"
WAITING_FOR_ROLLOUTS = "waiting_for_rollouts"
TRAINING = "training"
SYNCING_WEIGHTS = "syncing_weights"
EVALUATING = "evaluating"
CHECKPOINTING = "checkpointing"
PHASES = (GENERATING, WAITING_FOR_ROLLOUTS, TRAINING, SYNCING_WEIGHTS, EVALUATING, CHECKPOINTING)
