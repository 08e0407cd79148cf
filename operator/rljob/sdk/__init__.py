"""What workloads import. Checkpoints: `CheckpointWriter`, `CheckpointReader`, `resolve_resume`
(see rljob.sdk.checkpoint for an example). Rollout engines: `EngineRoster` (a driver follows
the engines' roster, rljob.sdk.roster) and `set_policy_generation` (an engine reports the
policy generation it serves, rljob.sdk.engine_generation); docs/weight-sync.md.

The names load on first use (PEP 562): `python -m rljob.sdk.entrypoint` imports this package
first and must run under a trainer image's Python that lacks the checkpoint dependencies."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rljob.checkpoint_protocol.errors import (
        CheckpointError,
        ChecksumMismatch,
        CommitRefused,
        InvalidCheckpoint,
        StoreUnavailable,
    )
    from rljob.checkpoint_protocol.models import Manifest, ShardEntry
    from rljob.checkpoint_protocol.s3.transport import StoreCredentials, StoreEndpoint
    from rljob.sdk.checkpoint import (
        CheckpointReader,
        CheckpointWriter,
        PendingVersion,
        ResumePoint,
        resolve_resume,
    )
    from rljob.sdk.engine_generation import set_policy_generation
    from rljob.sdk.roster import Engine, EngineRoster

_HOMES = {
    "CheckpointError": "rljob.checkpoint_protocol.errors",
    "ChecksumMismatch": "rljob.checkpoint_protocol.errors",
    "CommitRefused": "rljob.checkpoint_protocol.errors",
    "InvalidCheckpoint": "rljob.checkpoint_protocol.errors",
    "StoreUnavailable": "rljob.checkpoint_protocol.errors",
    "Manifest": "rljob.checkpoint_protocol.models",
    "ShardEntry": "rljob.checkpoint_protocol.models",
    "StoreCredentials": "rljob.checkpoint_protocol.s3.transport",
    "StoreEndpoint": "rljob.checkpoint_protocol.s3.transport",
    "CheckpointReader": "rljob.sdk.checkpoint",
    "CheckpointWriter": "rljob.sdk.checkpoint",
    "PendingVersion": "rljob.sdk.checkpoint",
    "ResumePoint": "rljob.sdk.checkpoint",
    "resolve_resume": "rljob.sdk.checkpoint",
    "Engine": "rljob.sdk.roster",
    "EngineRoster": "rljob.sdk.roster",
    "set_policy_generation": "rljob.sdk.engine_generation",
}

__all__ = [
    "CheckpointError",
    "CheckpointReader",
    "CheckpointWriter",
    "ChecksumMismatch",
    "CommitRefused",
    "Engine",
    "EngineRoster",
    "InvalidCheckpoint",
    "Manifest",
    "PendingVersion",
    "ResumePoint",
    "ShardEntry",
    "StoreCredentials",
    "StoreEndpoint",
    "StoreUnavailable",
    "resolve_resume",
    "set_policy_generation",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
