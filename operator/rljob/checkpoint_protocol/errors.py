"""Typed errors of the checkpoint store and the SDK (pure: callers catch them without boto3).

Names follow S3's vocabulary (StoreUnavailable, PreconditionFailed), hence no Error suffix."""

from __future__ import annotations


class CheckpointError(Exception):
    """Base of every checkpoint error."""


class StoreError(CheckpointError):
    """The store answered with an error that is none of the more specific ones below."""

    def __init__(self, message: str, *, code: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class StoreUnavailable(StoreError):  # noqa: N818
    """The store cannot be reached, timed out, or answered 5xx/throttling after retries.
    Transient: retry later with backoff; nothing may be deleted on the strength of a failed read."""


class StoreAccessDenied(StoreError):  # noqa: N818
    """Credentials are missing, invalid, or lack a permission (403)."""


class BucketNotFound(StoreError):  # noqa: N818
    """The bucket does not exist."""


class ObjectNotFound(StoreError):  # noqa: N818
    """The object does not exist (404)."""


class PreconditionFailed(StoreError):  # noqa: N818
    """A conditional write lost: If-None-Match found an object, or If-Match a different ETag."""


class CommitRefused(CheckpointError):  # noqa: N818
    """The SDK refused to commit a version: a newer attempt exists, or the version is taken."""


class ChecksumMismatch(CheckpointError):  # noqa: N818
    """A downloaded shard's size or sha256 differs from its manifest entry."""


class InvalidCheckpoint(CheckpointError):  # noqa: N818
    """A version cannot be read: no manifest, a corrupt manifest, or missing shards."""
