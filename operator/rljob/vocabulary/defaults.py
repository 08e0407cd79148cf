"""Spec defaults a reader of an RLJob needs where the stored document leaves a field out (the
operator's models default to the same values)."""

from __future__ import annotations

# spec.roles.trainer.nodes: one trainer pod.
DEFAULT_TRAINER_NODES = 1
