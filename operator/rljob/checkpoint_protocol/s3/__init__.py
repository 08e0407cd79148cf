"""The protocol's S3 side: every boto3/botocore import of rljob.checkpoint_protocol lives in this
subpackage (transport, object access, the synchronous store)."""

from rljob.checkpoint_protocol.s3.objects import DELETE_BATCH, LIST_PAGE_SIZE, DeleteFailure
from rljob.checkpoint_protocol.s3.store import CheckpointStore
from rljob.checkpoint_protocol.s3.transport import (
    CLIENTS,
    CONNECT_TIMEOUT,
    MAX_ATTEMPTS,
    READ_TIMEOUT,
    Capabilities,
    ClientCache,
    StoreCredentials,
    StoreEndpoint,
    client_config,
    translate_error,
)

__all__ = [
    "CLIENTS",
    "CONNECT_TIMEOUT",
    "DELETE_BATCH",
    "LIST_PAGE_SIZE",
    "MAX_ATTEMPTS",
    "READ_TIMEOUT",
    "Capabilities",
    "CheckpointStore",
    "ClientCache",
    "DeleteFailure",
    "StoreCredentials",
    "StoreEndpoint",
    "client_config",
    "translate_error",
]
