"""What the start of a trainer attempt tells about checkpoints: status.checkpoint and the
CheckpointReady, CheckpointStoreUnavailable and CheckpointRetentionFailed conditions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rljob.api import CheckpointRef, CheckpointStatus, Condition, ConditionType, StoreCapabilities
from rljob.api.status import MAX_CHECKPOINT_HISTORY
from rljob.reconcile.conditions import ConditionState


@dataclass(frozen=True)
class AttemptCheckpoint:
    """The checkpoint side of one attempt's start."""

    attempt: int
    resumed_from: CheckpointRef | None
    capabilities: StoreCapabilities | None
    problem: str = ""  # why a newer version was skipped
    retention_problem: str = ""


def checkpoint_status(
    previous: CheckpointStatus | None, outcome: AttemptCheckpoint
) -> CheckpointStatus:
    """status.checkpoint after the attempt started: resumedFrom, latest, bounded history."""
    old = previous or CheckpointStatus()
    ref = outcome.resumed_from
    if ref is None:
        return old.model_copy(update={"store_capabilities": outcome.capabilities})
    keep = MAX_CHECKPOINT_HISTORY - 1
    history = [h for h in old.history if h.version != ref.version][-keep:]
    newest = old.latest if old.latest and old.latest.step > ref.step else ref
    return old.model_copy(
        update={
            "resumed_from": ref,
            "latest": newest,
            "history": [*history, ref],
            "store_capabilities": outcome.capabilities,
        }
    )


def with_latest(previous: CheckpointStatus | None, ref: CheckpointRef) -> CheckpointStatus:
    """status.checkpoint with a newer committed version the trainer saved (no resume)."""
    old = previous or CheckpointStatus()
    if old.latest is not None and old.latest.step >= ref.step:
        return old
    keep = MAX_CHECKPOINT_HISTORY - 1
    history = [h for h in old.history if h.version != ref.version][-keep:]
    return old.model_copy(update={"latest": ref, "history": [*history, ref]})


def checkpoint_conditions(
    previous: Sequence[Condition], outcome: AttemptCheckpoint
) -> list[ConditionState]:
    reachable = ConditionState.of(
        ConditionType.CHECKPOINT_STORE_UNAVAILABLE, False, "StoreReachable", "the store answered"
    )
    return [reachable, _ready(outcome), *_retention(previous, outcome)]


def store_down(attempt: int, error: str) -> ConditionState:
    return ConditionState.of(
        ConditionType.CHECKPOINT_STORE_UNAVAILABLE,
        True,
        "StoreError",
        f"attempt {attempt} waits: {error}",
    )


def _ready(outcome: AttemptCheckpoint) -> ConditionState:
    ref = outcome.resumed_from
    if outcome.problem:
        return ConditionState.of(
            ConditionType.CHECKPOINT_READY, ref is not None, "FellBack", outcome.problem
        )
    if ref is not None:
        message = f"attempt {outcome.attempt} resumed from {ref.version}"
        return ConditionState.of(ConditionType.CHECKPOINT_READY, True, "Resumed", message)
    message = f"attempt {outcome.attempt} starts from scratch"
    return ConditionState.of(ConditionType.CHECKPOINT_READY, False, "NoCheckpoint", message)


def _retention(previous: Sequence[Condition], outcome: AttemptCheckpoint) -> list[ConditionState]:
    if outcome.retention_problem:
        return [
            ConditionState.of(
                ConditionType.CHECKPOINT_RETENTION_FAILED,
                True,
                "DeleteFailed",
                outcome.retention_problem,
            )
        ]
    if any(c.type == ConditionType.CHECKPOINT_RETENTION_FAILED for c in previous):
        return [
            ConditionState.of(
                ConditionType.CHECKPOINT_RETENTION_FAILED, False, "Retained", "retention succeeded"
            )
        ]
    return []
