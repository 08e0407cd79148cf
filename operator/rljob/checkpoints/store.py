"""The S3 adapter of the checkpoint protocol: boto3 behind typed errors, sync and async.

- One shared botocore configuration (`client_config`): checksums `when_required` (newer boto3
  defaults send CRC trailers most S3-compatible stores reject), connect/read timeouts, standard
  retries with 3 attempts, the addressing style from the spec.
- One client per (endpoint, region, addressing style, credentials, CA bundle), shared through
  `CLIENTS`; boto3 clients are thread-safe once created.
- A capability probe per endpoint records whether conditional writes (If-None-Match) are honoured;
  correctness never depends on them: they only narrow races that the lineage fence already makes
  harmless.
- `CheckpointStore` is synchronous (the SDK, the CLI); `AsyncCheckpointStore` runs every call in a
  dedicated thread pool with a deadline, so the operator's event loop never blocks and a hung
  store turns into `StoreUnavailable` within the timeout.
- Every S3 request goes through `CheckpointStore.call`, which counts it (`requests`) and maps
  failures to the errors in `rljob.checkpoints.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

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

from rljob.api.spec import Checkpoint
from rljob.api.status import StoreCapabilities
from rljob.checkpoints.errors import (
    BucketNotFound,
    ObjectNotFound,
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoints.layout import (
    ENV_S3_ADDRESSING_STYLE,
    ENV_S3_ENDPOINT,
    ENV_S3_REGION,
    CheckpointLocation,
    KeyKind,
    VersionId,
)
from rljob.checkpoints.lineage import Lineage, next_attempt
from rljob.checkpoints.models import AttemptMarker, DocumentError, Pointer
from rljob.checkpoints.retention import (
    PendingUpload,
    RetentionPlan,
    plan_retention,
    retention_window,
)
from rljob.checkpoints.selection import Selection, newest_eligible_first, summarize
from rljob.checkpoints.validity import (
    ListedObject,
    Validity,
    VersionObjects,
    check_version,
    group_versions,
)
from rljob.crashpoints import crash_point

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
MAX_ATTEMPTS = 3
CALL_TIMEOUT = 60.0
LIST_PAGE_SIZE = 1000
DELETE_BATCH = 1000
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

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "rljob_checkpoint_deadline", default=None
)

P = ParamSpec("P")
T = TypeVar("T")


@functools.cache
def client_config(addressing_style: str = "auto") -> Config:
    """The shared botocore configuration, with the spec's addressing style."""
    return _BASE_CONFIG.merge(Config(s3={"addressing_style": addressing_style}))


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
    def from_spec(
        cls,
        spec: Checkpoint,
        credentials: StoreCredentials | None = None,
        ca_bundle: str | None = None,
    ) -> StoreEndpoint:
        return cls(
            url=spec.endpoint,
            region=spec.region,
            addressing_style=str(spec.addressing_style.value),
            credentials=credentials,
            ca_bundle=ca_bundle,
        )

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
    """Shared boto3 clients and probed capabilities, one per endpoint key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[object, ...], Any] = {}
        self._capabilities: dict[tuple[object, ...], StoreCapabilities] = {}

    def client(self, endpoint: StoreEndpoint) -> Any:
        key = endpoint.cache_key()
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._create(endpoint)
                self._clients[key] = client
            return client

    @staticmethod
    def _create(endpoint: StoreEndpoint) -> Any:
        creds = endpoint.credentials
        session = boto3.session.Session(
            aws_access_key_id=None if creds is None else creds.access_key_id,
            aws_secret_access_key=None if creds is None else creds.secret_access_key,
            aws_session_token=None if creds is None else creds.session_token,
        )
        region = endpoint.region or session.region_name or _DEFAULT_REGION
        return session.client(
            "s3",
            endpoint_url=endpoint.url,
            region_name=region,
            config=client_config(endpoint.addressing_style),
            verify=endpoint.ca_bundle if endpoint.ca_bundle else None,
        )

    def capabilities(self, endpoint: StoreEndpoint) -> StoreCapabilities | None:
        with self._lock:
            return self._capabilities.get(endpoint.cache_key())

    def record_capabilities(self, endpoint: StoreEndpoint, caps: StoreCapabilities) -> None:
        with self._lock:
            self._capabilities[endpoint.cache_key()] = caps

    def clear(self) -> None:
        with self._lock:
            self._clients.clear()
            self._capabilities.clear()


CLIENTS = ClientCache()


class _LRU:
    """A small thread-safe LRU for immutable documents keyed by (endpoint, bucket, key, etag)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._data: OrderedDict[tuple[object, ...], bytes] = OrderedDict()

    def get(self, key: tuple[object, ...]) -> bytes | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: tuple[object, ...], value: bytes) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)


_DOCUMENTS = _LRU(4096)


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
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = f"{what}: {code or status} {error.get('Message', '')}".rstrip()
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


@dataclass(frozen=True)
class DeleteFailure:
    key: str
    code: str
    message: str


@dataclass(frozen=True)
class RetentionResult:
    """What apply_retention did; a non-empty `failed` becomes CheckpointRetentionFailed."""

    deleted: tuple[str, ...] = ()
    aborted: tuple[str, ...] = ()
    failed: tuple[DeleteFailure, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed

    def message(self) -> str:
        if not self.failed:
            return f"deleted {len(self.deleted)} objects, aborted {len(self.aborted)} uploads"
        first = self.failed[0]
        more = f" (+{len(self.failed) - 1} more)" if len(self.failed) > 1 else ""
        return f"could not delete {first.key}: {first.code} {first.message}{more}".rstrip()


@dataclass(frozen=True)
class Discovery:
    """The outcome of discovery: the selection, and how it was reached."""

    selection: Selection
    pointer: VersionId | None = None
    pointer_note: str = ""  # why the pointer was not used, if it was not
    start_after: str | None = None  # where the listing started (None: from the first version)
    listed_versions: int = 0
    full_scan: bool = False  # whether it had to list the versions before start_after too
    requests: int = 0

    @property
    def chosen(self) -> Validity | None:
        return self.selection.chosen


class CheckpointStore:
    """One job's checkpoints in one bucket (synchronous)."""

    def __init__(
        self,
        location: CheckpointLocation,
        endpoint: StoreEndpoint | None = None,
        *,
        clients: ClientCache | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self.location = location
        self.endpoint = endpoint or StoreEndpoint()
        self._clients = clients or CLIENTS
        self._page_size = page_size
        self._count_lock = threading.Lock()
        self._requests = 0
        self._markers: dict[int, AttemptMarker] = {}

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        return self._clients.client(self.endpoint)

    @property
    def bucket(self) -> str:
        return self.location.bucket

    @property
    def requests(self) -> int:
        """S3 API calls made through this store (each page of a listing counts)."""
        with self._count_lock:
            return self._requests

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        """One S3 API call: counted, deadline-checked, errors translated."""
        what = f"{operation} s3://{params.get('Bucket', self.bucket)}/{params.get('Key', '')}"
        deadline = _DEADLINE.get()
        if deadline is not None and time.monotonic() > deadline:
            raise StoreUnavailable(f"{what}: deadline exceeded")
        with self._count_lock:
            self._requests += 1
        try:
            result: dict[str, Any] = getattr(self.client, operation)(**params)
        except Exception as exc:
            raise translate_error(exc, what) from exc
        return result

    def _cache_key(self, key: str, etag: str | None) -> tuple[object, ...] | None:
        if not etag:
            return None
        return (self.endpoint.cache_key(), self.bucket, key, etag)

    # -- objects ----------------------------------------------------------------------------

    def get_object(self, key: str) -> tuple[bytes, str | None] | None:
        """(content, etag), or None when there is no such object."""
        try:
            response = self.call("get_object", Bucket=self.bucket, Key=key)
        except ObjectNotFound:
            return None
        body = response["Body"]
        try:
            data: bytes = body.read()
        except Exception as exc:
            raise translate_error(exc, f"reading s3://{self.bucket}/{key}") from exc
        finally:
            body.close()
        return data, response.get("ETag")

    def get_bytes(self, key: str) -> bytes | None:
        got = self.get_object(key)
        return None if got is None else got[0]

    def put_bytes(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        content_type: str = "application/octet-stream",
    ) -> str | None:
        """Writes an object; returns its ETag. Conditions the store rejects as unsupported are
        dropped (correctness never depends on them); a lost condition raises
        PreconditionFailed."""
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "Body": data,
            "ContentType": content_type,
        }
        conditional = dict(params)
        if if_none_match:
            conditional["IfNoneMatch"] = "*"
        if if_match:
            conditional["IfMatch"] = if_match
        try:
            response = self.call("put_object", **conditional)
        except StoreError as exc:
            if len(conditional) == len(params) or not _unsupported(exc):
                raise
            response = self.call("put_object", **params)
        return response.get("ETag")

    def list_pages(
        self, prefix: str, start_after: str | None = None, *, stop_at: str | None = None
    ) -> Iterator[list[ListedObject]]:
        """ListObjectsV2 pages under prefix, keys > start_after; stops after the page that
        reaches stop_at (keys are returned in ascending order)."""
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": prefix,
            "MaxKeys": self._page_size,
        }
        if start_after:
            params["StartAfter"] = start_after
        while True:
            response = self.call("list_objects_v2", **params)
            page = [
                ListedObject(
                    key=item["Key"],
                    size=int(item.get("Size", 0)),
                    etag=item.get("ETag"),
                    last_modified=item.get("LastModified"),
                )
                for item in response.get("Contents", [])
            ]
            yield page
            if not response.get("IsTruncated"):
                return
            if stop_at is not None and page and page[-1].key >= stop_at:
                return
            token = response.get("NextContinuationToken")
            if not token:
                return
            params["ContinuationToken"] = token

    def list_objects(
        self, prefix: str, start_after: str | None = None, *, stop_at: str | None = None
    ) -> list[ListedObject]:
        objects = [
            o for page in self.list_pages(prefix, start_after, stop_at=stop_at) for o in page
        ]
        if stop_at is not None:
            objects = [o for o in objects if o.key < stop_at]
        return objects

    def delete_keys(self, keys: Sequence[str]) -> tuple[list[str], list[DeleteFailure]]:
        """DeleteObjects in batches; returns (deleted, failures). Raises only when the store is
        unreachable; per-key refusals (object lock, permissions) come back as failures."""
        deleted: list[str] = []
        failed: list[DeleteFailure] = []
        for start in range(0, len(keys), DELETE_BATCH):
            batch = list(keys[start : start + DELETE_BATCH])
            try:
                response = self.call(
                    "delete_objects",
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except StoreAccessDenied as exc:
                failed.extend(DeleteFailure(k, exc.code or "AccessDenied", str(exc)) for k in batch)
                continue
            errors = response.get("Errors", [])
            bad = {e.get("Key", ""): e for e in errors}
            failed.extend(
                DeleteFailure(k, str(e.get("Code", "")), str(e.get("Message", "")))
                for k, e in bad.items()
            )
            deleted.extend(k for k in batch if k not in bad)
        return deleted, failed

    def list_uploads(self, prefix: str | None = None) -> list[PendingUpload]:
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix or self.location.base}
        uploads: list[PendingUpload] = []
        while True:
            response = self.call("list_multipart_uploads", **params)
            uploads.extend(
                PendingUpload(u["Key"], u["UploadId"], u.get("Initiated"))
                for u in response.get("Uploads", [])
            )
            if not response.get("IsTruncated"):
                return uploads
            params["KeyMarker"] = response.get("NextKeyMarker", "")
            params["UploadIdMarker"] = response.get("NextUploadIdMarker", "")

    def abort_upload(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(ObjectNotFound):  # already completed or aborted
            self.call("abort_multipart_upload", Bucket=self.bucket, Key=key, UploadId=upload_id)

    # -- protocol documents -----------------------------------------------------------------

    def read_pointer(self) -> tuple[Pointer, str | None] | None:
        """(pointer, etag); None when missing or unreadable (it is only a fast path)."""
        got = self.get_object(self.location.pointer_key)
        if got is None:
            return None
        try:
            return Pointer.parse(got[0]), got[1]
        except DocumentError:
            return None

    def write_pointer(self, version: VersionId, *, tries: int = 3) -> bool:
        """Moves latest.json to version unless it already names a version of a newer attempt,
        or a newer step of the same attempt. True when written."""
        for _ in range(tries):
            current = self.read_pointer()
            etag = None
            if current is not None:
                pointer, etag = current
                try:
                    existing = pointer.version_id
                except ValueError:
                    existing = None
                if existing is not None and (existing.attempt, existing.step) >= (
                    version.attempt,
                    version.step,
                ):
                    return False
            try:
                self.put_bytes(
                    self.location.pointer_key,
                    Pointer.to(version).to_json(),
                    if_none_match=current is None,
                    if_match=etag,
                    content_type="application/json",
                )
            except PreconditionFailed:
                continue
            return True
        return False

    def marker_attempts(self) -> list[int]:
        """Attempt numbers that have a marker (one listing of attempts/)."""
        attempts = []
        for obj in self.list_objects(self.location.attempts_prefix):
            parsed = self.location.parse_key(obj.key)
            if parsed.kind is KeyKind.MARKER and parsed.attempt is not None:
                attempts.append(parsed.attempt)
        return sorted(attempts)

    def read_markers(self) -> dict[int, AttemptMarker]:
        """Every readable attempt marker (markers are immutable: each is fetched once per store).
        A corrupt marker is left out, which fences off the attempts before it."""
        for obj in self.list_objects(self.location.attempts_prefix):
            parsed = self.location.parse_key(obj.key)
            if parsed.kind is not KeyKind.MARKER or parsed.attempt is None:
                continue
            if parsed.attempt in self._markers:
                continue
            data = self._get_document(obj)
            if data is None:
                continue
            try:
                marker = AttemptMarker.parse(data)
            except DocumentError:
                continue
            if marker.attempt == parsed.attempt:
                self._markers[parsed.attempt] = marker
        return dict(self._markers)

    def write_marker(self, marker: AttemptMarker) -> AttemptMarker:
        """Writes attempt's marker unless it exists. An existing marker of the same job uid is
        returned as is (a retried write); one of another job raises PreconditionFailed."""
        key = self.location.marker_key(marker.attempt)
        existing = self._existing_marker(key)
        if existing is None:
            try:
                self.put_bytes(
                    key, marker.to_json(), if_none_match=True, content_type="application/json"
                )
                self._markers[marker.attempt] = marker
                return marker
            except PreconditionFailed:
                existing = self._existing_marker(key)
                if existing is None:
                    raise
        if marker.job_uid is None or existing.job_uid == marker.job_uid:
            self._markers[marker.attempt] = existing
            return existing
        raise PreconditionFailed(
            f"attempt marker {key} already exists for job uid {existing.job_uid}"
        )

    def _existing_marker(self, key: str) -> AttemptMarker | None:
        data = self.get_bytes(key)
        if data is None:
            return None
        try:
            return AttemptMarker.parse(data)
        except DocumentError as exc:
            raise PreconditionFailed(f"attempt marker {key} exists but is corrupt: {exc}") from exc

    def next_attempt(self) -> int:
        """The attempt after the highest marker (and the pointer's attempt): 1 when none."""
        pointer = self.read_pointer()
        seen = []
        if pointer is not None:
            with contextlib.suppress(ValueError):
                seen.append(pointer[0].version_id.attempt)
        return next_attempt(self.marker_attempts(), seen)

    def _get_document(self, obj: ListedObject) -> bytes | None:
        """A small immutable document, from the shared cache when its ETag is known."""
        cache_key = self._cache_key(obj.key, obj.etag)
        if cache_key is not None:
            cached = _DOCUMENTS.get(cache_key)
            if cached is not None:
                return cached
        got = self.get_object(obj.key)
        if got is None:
            return None
        data, etag = got
        key = self._cache_key(obj.key, etag)
        if key is not None and (obj.etag is None or etag == obj.etag):
            _DOCUMENTS.put(key, data)
        return data

    # -- capabilities -----------------------------------------------------------------------

    def probe_capabilities(self, *, force: bool = False) -> StoreCapabilities:
        """Whether PutObject honours If-None-Match, probed once per endpoint with a scratch
        object under the job's prefix (deleted afterwards)."""
        if not force:
            known = self._clients.capabilities(self.endpoint)
            if known is not None:
                return known
        key = f"{self.location.base}.rljob-probe-{uuid.uuid4().hex}"
        works = False
        try:
            self.call("put_object", Bucket=self.bucket, Key=key, Body=b"1", IfNoneMatch="*")
            try:
                self.call("put_object", Bucket=self.bucket, Key=key, Body=b"2", IfNoneMatch="*")
            except PreconditionFailed:
                works = True
        except StoreUnavailable:
            raise
        except StoreError as exc:
            if not _unsupported(exc):
                raise
        finally:
            with contextlib.suppress(StoreError):
                self.call("delete_object", Bucket=self.bucket, Key=key)
        caps = StoreCapabilities(conditional_writes=works, probed_at=datetime.now(UTC))
        self._clients.record_capabilities(self.endpoint, caps)
        return caps

    # -- versions ---------------------------------------------------------------------------

    def list_versions(
        self, start_after: str | None = None, *, stop_at: str | None = None
    ) -> dict[VersionId, VersionObjects]:
        objects = self.list_objects(self.location.versions_prefix, start_after, stop_at=stop_at)
        return group_versions(self.location, objects)

    def validate(self, version: VersionId, objects: VersionObjects | None = None) -> Validity:
        """The verdict for one version: one listing of its prefix (unless objects come from a
        listing already made) and its manifest (from the cache when the ETag matches)."""
        if objects is None:
            listed = self.list_objects(self.location.version_prefix(version))
            objects = group_versions(self.location, listed).get(version, VersionObjects(version))
        now = datetime.now(UTC)
        manifest = objects.manifest
        data = None if manifest is None else self._get_document(manifest)
        return check_version(version, objects, data, checked_at=now)

    def discover(
        self,
        lineage: Lineage,
        *,
        history: Iterable[VersionId] = (),
        pinned: VersionId | None = None,
        full_scan: bool = True,
    ) -> Discovery:
        """The newest eligible valid version.

        Reads the pointer, then makes ONE listing (a page sequence) starting at the newest of:
        the pointer's version if it is eligible, the newest eligible version in `history`
        (status.checkpoint.history), and the step the current attempt resumed from (every
        eligible version of an older attempt is at or below it). Eligible versions in that window
        are validated newest first from the listing itself; `history` versions below it follow.
        Only when none of them is valid does it list the versions before the window (full_scan).
        `pinned` (spec resume: <version>) validates just that version."""
        before = self.requests
        if pinned is not None:
            return Discovery(summarize([self.validate(pinned)]), requests=self.requests - before)
        pointer, note, bounds = self._pointer_bound(lineage)
        history_eligible = newest_eligible_first(history, lineage)
        if history_eligible:
            bounds.append(self.location.start_after_version(history_eligible[0]))
        resumed = lineage.resumed_from.get(lineage.current_attempt)
        if resumed is not None:
            bounds.append(self.location.start_after_step(resumed))
        start_after = max(bounds) if bounds else None

        window = self.list_versions(start_after)
        candidates = {*(v for v in window if lineage.eligible(v)), *history_eligible}
        checked = self._check_newest_first(candidates, window, start_after, [])
        scanned = False
        if not any(v.valid for v in checked) and full_scan and start_after is not None:
            scanned = True
            earlier = self.list_versions(stop_at=start_after)
            candidates = {v for v in earlier if lineage.eligible(v)}
            checked = self._check_newest_first(candidates, earlier, None, checked)
        return Discovery(
            summarize(checked),
            pointer=pointer,
            pointer_note=note,
            start_after=start_after,
            listed_versions=len(window),
            full_scan=scanned,
            requests=self.requests - before,
        )

    def _pointer_bound(self, lineage: Lineage) -> tuple[VersionId | None, str, list[str]]:
        """(pointer version, why it is not used, [listing start]) from latest.json."""
        got = self.read_pointer()
        if got is None:
            return None, "no readable pointer", []
        try:
            version = got[0].version_id
        except ValueError:
            return None, "pointer names no version", []
        why = lineage.why_ineligible(version)
        if why is not None:
            return version, f"pointer {version.name} ignored: {why}", []
        return version, "", [self.location.start_after_version(version)]

    def _check_newest_first(
        self,
        candidates: Iterable[VersionId],
        listed: Mapping[VersionId, VersionObjects],
        start_after: str | None,
        checked: list[Validity],
    ) -> list[Validity]:
        """Validates candidates newest first until one is valid; versions already checked are
        skipped, and a candidate inside the listed window that the listing lacks is incomplete."""
        done = {v.version for v in checked}
        result = list(checked)
        for version in sorted(candidates, reverse=True):
            if version in done:
                continue
            objects = listed.get(version)
            if objects is None and (
                start_after is None or self.location.version_prefix(version) > start_after
            ):
                objects = VersionObjects(version)
            verdict = self.validate(version, objects)
            result.append(verdict)
            if verdict.valid:
                break
        return result

    # -- retention --------------------------------------------------------------------------

    def plan_retention(
        self,
        lineage: Lineage,
        *,
        keep: int,
        incomplete_grace: timedelta,
        in_use: Iterable[VersionId] = (),
        live: bool = True,
        now: datetime | None = None,
    ) -> RetentionPlan:
        """Lists every version and pending upload, validates the newest eligible ones until
        `keep` are valid, and plans (see rljob.checkpoints.retention)."""
        versions = self.list_versions()
        validities: dict[VersionId, Validity] = {}
        valid = 0
        for version in retention_window(versions, lineage):
            if valid >= keep:
                break
            verdict = self.validate(version, versions[version])
            validities[version] = verdict
            valid += verdict.valid
        uploads = self.list_uploads()
        return plan_retention(
            location=self.location,
            versions=versions,
            lineage=lineage,
            keep=keep,
            validities=validities,
            now=now or datetime.now(UTC),
            incomplete_grace=incomplete_grace,
            in_use=in_use,
            live=live,
            uploads=uploads,
        )

    def apply_retention(self, plan: RetentionPlan) -> RetentionResult:
        """Deletes each planned version's manifest first, then (only for versions whose manifest
        is gone) its other objects; then aborts stale uploads. Per-object refusals come back in
        the result; an unreachable store raises StoreUnavailable."""
        deleted, failed = self.delete_keys(plan.manifest_keys())
        if deleted:
            crash_point("retention:manifests-deleted")
        gone = set(deleted)
        rest: list[str] = []
        for deletion in plan.deletions:
            manifest = [k for k in deletion.keys if k.endswith("/manifest.json")]
            if all(k in gone for k in manifest):
                rest.extend(k for k in deletion.keys if k not in gone)
        more_deleted, more_failed = self.delete_keys(rest)
        aborted: list[str] = []
        abort_failed: list[DeleteFailure] = []
        for abort in plan.aborts:
            try:
                self.abort_upload(abort.key, abort.upload_id)
                aborted.append(abort.key)
            except (StoreAccessDenied, PreconditionFailed) as exc:
                abort_failed.append(DeleteFailure(abort.key, exc.code, str(exc)))
            except StoreUnavailable:
                raise
            except StoreError as exc:
                abort_failed.append(DeleteFailure(abort.key, exc.code, str(exc)))
        return RetentionResult(
            tuple(deleted + more_deleted),
            tuple(aborted),
            tuple(failed + more_failed + abort_failed),
        )


def _unsupported(exc: StoreError) -> bool:
    """The store rejected a conditional header as unsupported (not as a lost condition)."""
    return exc.code in _NOT_IMPLEMENTED_CODES or exc.status == 501


_EXECUTOR = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rljob-s3")


class AsyncCheckpointStore:
    """The operator's view: every call runs in a dedicated thread pool (never on the event loop,
    never starving the default executor) under a deadline of `timeout` seconds, checked before
    each S3 request; past it, StoreUnavailable. `with_timeout` gives a copy with another one."""

    def __init__(self, store: CheckpointStore, *, timeout: float = CALL_TIMEOUT) -> None:
        self.store = store
        self.timeout = timeout

    def with_timeout(self, timeout: float) -> AsyncCheckpointStore:
        return AsyncCheckpointStore(self.store, timeout=timeout)

    @property
    def requests(self) -> int:
        return self.store.requests

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        limit = self.timeout
        token = _DEADLINE.set(time.monotonic() + limit)
        try:
            context = contextvars.copy_context()
        finally:
            _DEADLINE.reset(token)
        loop = asyncio.get_running_loop()
        call = functools.partial(context.run, fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(loop.run_in_executor(_EXECUTOR, call), limit)
        except TimeoutError:
            raise StoreUnavailable(
                f"{getattr(fn, '__name__', 'call')} on {self.store.endpoint.describe()}: "
                f"no answer within {limit:g}s"
            ) from None

    async def read_pointer(self) -> Pointer | None:
        got = await self._run(self.store.read_pointer)
        return None if got is None else got[0]

    async def read_markers(self) -> dict[int, AttemptMarker]:
        return await self._run(self.store.read_markers)

    async def write_marker(self, marker: AttemptMarker) -> AttemptMarker:
        return await self._run(self.store.write_marker, marker)

    async def next_attempt(self) -> int:
        return await self._run(self.store.next_attempt)

    async def probe_capabilities(self, *, force: bool = False) -> StoreCapabilities:
        return await self._run(self.store.probe_capabilities, force=force)

    async def validate(self, version: VersionId) -> Validity:
        return await self._run(self.store.validate, version)

    async def discover(
        self,
        lineage: Lineage,
        *,
        history: Iterable[VersionId] = (),
        pinned: VersionId | None = None,
        full_scan: bool = True,
    ) -> Discovery:
        return await self._run(
            self.store.discover,
            lineage,
            history=tuple(history),
            pinned=pinned,
            full_scan=full_scan,
        )

    async def plan_retention(
        self,
        lineage: Lineage,
        *,
        keep: int,
        incomplete_grace: timedelta,
        in_use: Iterable[VersionId] = (),
        live: bool = True,
    ) -> RetentionPlan:
        return await self._run(
            self.store.plan_retention,
            lineage,
            keep=keep,
            incomplete_grace=incomplete_grace,
            in_use=tuple(in_use),
            live=live,
        )

    async def apply_retention(self, plan: RetentionPlan) -> RetentionResult:
        return await self._run(self.store.apply_retention, plan)
