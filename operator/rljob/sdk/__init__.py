"""What workloads import. Checkpoints: `CheckpointWriter`, `CheckpointReader`, `resolve_resume`
(see rljob.sdk.checkpoint for an example)."""

from rljob.checkpoints.errors import (
    CheckpointError,
    ChecksumMismatch,
    CommitRefused,
    InvalidCheckpoint,
    StoreUnavailable,
)
from rljob.checkpoints.models import Manifest, ShardEntry
from rljob.checkpoints.s3.transport import StoreCredentials, StoreEndpoint
from rljob.sdk.checkpoint import (
    CheckpointReader,
    CheckpointWriter,
    PendingVersion,
    ResumePoint,
    resolve_resume,
)

__all__ = [
    "CheckpointError",
    "CheckpointReader",
    "CheckpointWriter",
    "ChecksumMismatch",
    "CommitRefused",
    "InvalidCheckpoint",
    "Manifest",
    "PendingVersion",
    "ResumePoint",
    "ShardEntry",
    "StoreCredentials",
    "StoreEndpoint",
    "StoreUnavailable",
    "resolve_resume",
]
