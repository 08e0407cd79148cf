"""The operator's S3 side of checkpoints, over the protocol's store
(rljob.checkpoint_protocol.s3): discovery, retention's listing and deletes, the async wrapper
and the CLI."""

from rljob.checkpoints.s3.async_store import CALL_TIMEOUT, AsyncCheckpointStore
from rljob.checkpoints.s3.discovery import Discovery
from rljob.checkpoints.s3.store import OperatorStore, RetentionResult

__all__ = [
    "CALL_TIMEOUT",
    "AsyncCheckpointStore",
    "Discovery",
    "OperatorStore",
    "RetentionResult",
]
