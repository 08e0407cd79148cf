"""The S3 side of versioned checkpoints: every boto3/botocore import of the checkpoint protocol
lives in this subpackage (transport, object access, the sync store, discovery, the async
wrapper, the CLI); the protocol's pure logic stays in rljob.checkpoints."""

from rljob.checkpoints.s3.async_store import CALL_TIMEOUT, AsyncCheckpointStore
from rljob.checkpoints.s3.discovery import Discovery
from rljob.checkpoints.s3.objects import DELETE_BATCH, LIST_PAGE_SIZE, DeleteFailure
from rljob.checkpoints.s3.store import CheckpointStore, RetentionResult
from rljob.checkpoints.s3.transport import (
    CLIENTS,
    CONNECT_TIMEOUT,
    MAX_ATTEMPTS,
    READ_TIMEOUT,
    ClientCache,
    StoreCredentials,
    StoreEndpoint,
    client_config,
    translate_error,
)

__all__ = [
    "CALL_TIMEOUT",
    "CLIENTS",
    "CONNECT_TIMEOUT",
    "DELETE_BATCH",
    "LIST_PAGE_SIZE",
    "MAX_ATTEMPTS",
    "READ_TIMEOUT",
    "AsyncCheckpointStore",
    "CheckpointStore",
    "ClientCache",
    "DeleteFailure",
    "Discovery",
    "RetentionResult",
    "StoreCredentials",
    "StoreEndpoint",
    "client_config",
    "translate_error",
]
