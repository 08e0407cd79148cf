"""One job's prefix in one bucket, at the level of objects: every S3 request goes through
`S3Objects.call`, which counts it (`requests`), stops at the deadline and maps failures to the
errors in rljob.checkpoint_protocol.errors. Small immutable documents (manifests, markers) are
cached by ETag across stores."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rljob.checkpoint_protocol.errors import (
    ObjectNotFound,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoint_protocol.layout import CheckpointLocation
from rljob.checkpoint_protocol.s3.transport import (
    CLIENTS,
    DEADLINE,
    ClientCache,
    StoreEndpoint,
    error_code,
    translate_error,
    unsupported,
)
from rljob.checkpoint_protocol.validity import ListedObject, PendingUpload

LIST_PAGE_SIZE = 1000
DELETE_BATCH = 1000


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


DOCUMENTS = _LRU(4096)


@dataclass(frozen=True)
class DeleteFailure:
    key: str
    code: str
    message: str


class S3Objects:
    """Object access under one job's prefix (synchronous; boto3 clients are thread-safe)."""

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
        deadline = DEADLINE.get()
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
            if len(conditional) == len(params) or not unsupported(exc):
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
                DeleteFailure(k, error_code(e.get("Code")), "refused by the store")
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

    def get_document(self, obj: ListedObject) -> bytes | None:
        """A small immutable document, from the shared cache when its ETag is known."""
        cache_key = self._cache_key(obj.key, obj.etag)
        if cache_key is not None:
            cached = DOCUMENTS.get(cache_key)
            if cached is not None:
                return cached
        got = self.get_object(obj.key)
        if got is None:
            return None
        data, etag = got
        key = self._cache_key(obj.key, etag)
        if key is not None and (obj.etag is None or etag == obj.etag):
            DOCUMENTS.put(key, data)
        return data
