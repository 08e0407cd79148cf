"""How the operator, the SDK and the CLI reach S3: one shared botocore configuration, one client
per endpoint, and botocore failures mapped to the typed errors of rljob.checkpoint_protocol.errors.

- `client_config`: checksums `when_required` (newer boto3 defaults send CRC trailers most
  S3-compatible stores reject), connect/read timeouts, standard retries with 3 attempts, the
  addressing style from the spec.
- One client per (endpoint, region, addressing style, credentials, CA bundle), shared through
  `CLIENTS`; boto3 clients are thread-safe once created. The cache also holds each endpoint's
  probed capabilities.
- `DEADLINE`: the monotonic time after which no further S3 request starts (set by the async
  wrapper around each call, checked before every request).
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from rljob.checkpoint_protocol.errors import (
    BucketNotFound,
    ObjectNotFound,
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoint_protocol.layout import ENV_S3_ADDRESSING_STYLE, ENV_S3_ENDPOINT, ENV_S3_REGION

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
MAX_ATTEMPTS = 3
_DEFAULT_REGION = "us-east-1"

_BASE_CONFIG = Config(
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
    connect_timeout=CONNECT_TIMEOUT,
    read_timeout=READ_TIMEOUT,
    retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},  # 3 tries in all
    max_pool_connections=32,
)

_UNAVAILABLE_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
    }
)
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "AllAccessDisabled",
        "AccountProblem",
    }
)
_NOT_IMPLEMENTED_CODES = frozenset({"NotImplemented", "InvalidArgument", "InvalidRequest"})

DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "rljob_checkpoint_deadline", default=None
)


@functools.cache
def client_config(addressing_style: str = "auto") -> Config:
    """The shared botocore configuration, with the spec's addressing style."""
    return _BASE_CONFIG.merge(Config(s3={"addressing_style": addressing_style}))


@dataclass(frozen=True)
class Capabilities:
    """What a capability probe found of an endpoint (the operator records it in the RLJob's
    status as StoreCapabilities)."""

    conditional_writes: bool
    probed_at: datetime


@dataclass(frozen=True)
class StoreCredentials:
    """Static credentials; None in StoreEndpoint means boto3's default chain (ambient identity)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class StoreEndpoint:
    """How to reach the store."""

    url: str | None = None
    region: str | None = None
    addressing_style: str = "auto"
    credentials: StoreCredentials | None = None
    ca_bundle: str | None = None  # path of a PEM bundle for a private endpoint

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreEndpoint:
        """RLJOB_S3_ENDPOINT (else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL), RLJOB_S3_REGION (else
        AWS_REGION / AWS_DEFAULT_REGION), RLJOB_S3_ADDRESSING_STYLE; credentials from the AWS
        variables or any other source of boto3's default chain."""
        env = os.environ if env is None else env
        url = (
            env.get(ENV_S3_ENDPOINT)
            or env.get("AWS_ENDPOINT_URL_S3")
            or env.get("AWS_ENDPOINT_URL")
            or None
        )
        region = env.get(ENV_S3_REGION) or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        style = env.get(ENV_S3_ADDRESSING_STYLE) or ("path" if url else "auto")
        access, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        credentials = (
            StoreCredentials(access, secret, env.get("AWS_SESSION_TOKEN") or None)
            if access and secret
            else None
        )
        return cls(url=url, region=region or None, addressing_style=style, credentials=credentials)

    def describe(self) -> str:
        return self.url or f"AWS S3 ({self.region or 'default region'})"

    def cache_key(self) -> tuple[object, ...]:
        creds = self.credentials
        secret = (
            None
            if creds is None
            else hashlib.sha256(
                f"{creds.access_key_id}\0{creds.secret_access_key}\0{creds.session_token}".encode()
            ).hexdigest()
        )
        return (self.url, self.region, self.addressing_style, secret, self.ca_bundle)


class ClientCache:
    """Shared boto3 clients and probed capabilities, one per endpoint key.

    Every client comes from one boto3 session: a session parses botocore's endpoint and S3
    models (about 11 MiB) once, so a fleet of many endpoints or credentials pays that once, not
    per endpoint; each client gets its own credentials explicitly."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._clients: dict[tuple[object, ...], Any] = {}
        self._capabilities: dict[tuple[object, ...], Capabilities] = {}

    def client(self, endpoint: StoreEndpoint) -> Any:
        key = endpoint.cache_key()
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._create(endpoint)
                self._clients[key] = client
            return client

    def _create(self, endpoint: StoreEndpoint) -> Any:
        if self._session is None:
            self._session = boto3.session.Session()
        creds = endpoint.credentials
        region = endpoint.region or self._session.region_name or _DEFAULT_REGION
        return self._session.client(
            "s3",
            endpoint_url=endpoint.url,
            region_name=region,
            config=client_config(endpoint.addressing_style),
            verify=endpoint.ca_bundle if endpoint.ca_bundle else None,
            aws_access_key_id=None if creds is None else creds.access_key_id,
            aws_secret_access_key=None if creds is None else creds.secret_access_key,
            aws_session_token=None if creds is None else creds.session_token,
        )

    def capabilities(self, endpoint: StoreEndpoint) -> Capabilities | None:
        with self._lock:
            return self._capabilities.get(endpoint.cache_key())

    def record_capabilities(self, endpoint: StoreEndpoint, caps: Capabilities) -> None:
        with self._lock:
            self._capabilities[endpoint.cache_key()] = caps

    def clear(self) -> None:
        with self._lock:
            self._clients.clear()
            self._capabilities.clear()


CLIENTS = ClientCache()


def translate_error(exc: Exception, what: str) -> StoreError:
    """Maps a botocore exception to a typed StoreError naming `what` was attempted."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return StoreAccessDenied(f"{what}: no usable credentials ({exc})")
    if isinstance(
        exc,
        EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionClosedError,
    ):
        return StoreUnavailable(f"{what}: {exc}")
    if isinstance(exc, ClientError):
        code = error_code(exc.response.get("Error", {}).get("Code"))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        # The store's status and error code only: its Message is never reflected into status.
        message = f"{what}: HTTP {status} {code}".rstrip()
        server_side = isinstance(status, int) and status >= 500 and status != 501
        if code in _UNAVAILABLE_CODES or (server_side and code != "NotImplemented"):
            return StoreUnavailable(message, code=code, status=status)
        if code in _DENIED_CODES or status == 403:
            return StoreAccessDenied(message, code=code, status=status)
        if code == "NoSuchBucket":
            return BucketNotFound(message, code=code, status=status)
        if code in ("NoSuchKey", "NotFound", "NoSuchUpload") or status == 404:
            return ObjectNotFound(message, code=code, status=status)
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
            return PreconditionFailed(message, code=code, status=status)
        return StoreError(message, code=code, status=status if isinstance(status, int) else None)
    if isinstance(exc, BotoCoreError):
        return StoreUnavailable(f"{what}: {exc}")
    if isinstance(exc, OSError):
        return StoreUnavailable(f"{what}: {exc}")
    return StoreError(f"{what}: {type(exc).__name__}: {exc}")


def error_code(code: object) -> str:
    """An S3 error code as the store sent it when it looks like one (AccessDenied), else ""."""
    text = str(code or "")
    return text if re.fullmatch(r"[A-Za-z0-9.]{1,64}", text) else ""


def unsupported(exc: StoreError) -> bool:
    """The store rejected a conditional header as unsupported (not as a lost condition)."""
    return exc.code in _NOT_IMPLEMENTED_CODES or exc.status == 501
