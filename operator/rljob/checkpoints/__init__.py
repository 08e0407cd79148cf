"""Versioned checkpoints in S3: the protocol's pure logic (layout, documents, validity, lineage,
selection, retention). The boto3 side is the subpackage rljob.checkpoints.s3; import it
explicitly (this package stays free of I/O imports)."""

from rljob.checkpoints.errors import (
    BucketNotFound,
    CheckpointError,
    ChecksumMismatch,
    CommitRefused,
    InvalidCheckpoint,
    ObjectNotFound,
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoints.layout import CheckpointLocation, VersionId, resume_env
from rljob.checkpoints.lineage import Lineage, next_attempt
from rljob.checkpoints.models import FORMAT_VERSION, AttemptMarker, Manifest, Pointer, ShardEntry
from rljob.checkpoints.retention import PendingUpload, RetentionPlan, plan_retention
from rljob.checkpoints.selection import Selection, checkpoint_ref, select_version
from rljob.checkpoints.validity import (
    ListedObject,
    Problem,
    Validity,
    VersionObjects,
    check_version,
    group_versions,
)

__all__ = [
    "FORMAT_VERSION",
    "AttemptMarker",
    "BucketNotFound",
    "CheckpointError",
    "CheckpointLocation",
    "ChecksumMismatch",
    "CommitRefused",
    "InvalidCheckpoint",
    "Lineage",
    "ListedObject",
    "Manifest",
    "ObjectNotFound",
    "PendingUpload",
    "Pointer",
    "PreconditionFailed",
    "Problem",
    "RetentionPlan",
    "Selection",
    "ShardEntry",
    "StoreAccessDenied",
    "StoreError",
    "StoreUnavailable",
    "Validity",
    "VersionId",
    "VersionObjects",
    "check_version",
    "checkpoint_ref",
    "group_versions",
    "next_attempt",
    "plan_retention",
    "resume_env",
    "select_version",
]
