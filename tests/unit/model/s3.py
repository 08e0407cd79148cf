"""An in-memory S3 shaped like the boto3 client methods the checkpoint store and the SDK writer
call, with the faults S3-compatible stores show: listings that lag writes (eventually
consistent), listings that fail or time out, ListMultipartUploads denied, conditional writes
unsupported, deletes refused (object lock), and late writes from a superseded attempt.

Keys are listed in ascending order, a page at most `max_keys` long, continued by an opaque
token; ETags are quoted MD5s (multipart: MD5 of the part MD5s, dash, part count), as S3's are."""

# ruff: noqa: N803 - the methods take boto3's parameter names
from __future__ import annotations

import datetime as dt
import hashlib
import io
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError

from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import Manifest
from rljob.checkpoint_protocol.s3 import ClientCache, StoreEndpoint
from rljob.checkpoints.s3 import OperatorStore
from rljob.sdk.checkpoint import CheckpointWriter, PendingVersion

JSON = dict[str, Any]
ENDPOINT = "https://s3.model.invalid"
SHARDS: Mapping[str, bytes] = {"model/rank0.pt": b"w" * 64, "train_state.json": b'{"step": 0}'}


def client_error(code: str, status: int, operation: str, message: str = "") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message or code},
         "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )  # fmt: skip


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


@dataclass
class Stored:
    data: bytes
    etag: str
    last_modified: dt.datetime


@dataclass
class Upload:
    key: str
    initiated: dt.datetime
    parts: dict[int, bytes] = field(default_factory=dict)


class _Body(io.BytesIO):
    """A StreamingBody stand-in: read() and close()."""


class FakeS3:
    """One S3 endpoint holding buckets of objects; the methods are boto3's, keyword-only."""

    def __init__(
        self,
        buckets: Iterable[str] = (),
        *,
        max_keys: int = 1000,
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.buckets: dict[str, dict[str, Stored]] = {b: {} for b in buckets}
        self.uploads: dict[str, dict[str, Upload]] = {b: {} for b in buckets}
        self.max_keys = max_keys
        self.now = now or (lambda: dt.datetime.now(dt.UTC))
        self.calls: list[tuple[str, str]] = []  # (operation, key or prefix)
        self.conditional_writes = True
        self.deny_multipart_listing = False
        self.locked: set[str] = set()  # keys whose deletes are refused (object lock)
        self.shown: set[tuple[str, str]] = set()  # (bucket, key) some listing returned
        # Called with (bucket, key, the new data or None for a delete) right before a key is
        # stored or removed, under the lock: an observer reads `buckets`, never calls back.
        self.observers: list[Callable[[str, str, bytes | None], None]] = []
        self._hidden: dict[tuple[str, str], int] = {}  # key -> listings it is still missing from
        self._lag = 0
        self._list_faults: list[Exception] = []
        self._lock = threading.Lock()  # the store calls from its thread pool

    # -- faults ------------------------------------------------------------------------------

    def lag_writes(self, listings: int) -> None:
        """Keys written from now on are missing from the next `listings` listings that would
        show them (0: consistent again)."""
        self._lag = listings

    def hide(self, bucket: str, key: str, listings: int) -> None:
        self._hidden[(bucket, key)] = listings

    def fail_listings(self, count: int = 1, code: str = "InternalError", status: int = 500) -> None:
        self._list_faults.extend(client_error(code, status, "ListObjectsV2") for _ in range(count))

    def time_out_listings(self, count: int = 1) -> None:
        """The next listings get no answer within the client's read timeout."""
        self._list_faults.extend(ReadTimeoutError(endpoint_url=ENDPOINT) for _ in range(count))

    # -- objects -----------------------------------------------------------------------------

    def put_object(
        self,
        *,
        Bucket: str,
        Key: str,
        Body: bytes | str,
        ContentType: str = "binary/octet-stream",
        IfNoneMatch: str | None = None,
        IfMatch: str | None = None,
    ) -> JSON:
        with self._lock:
            self.calls.append(("put_object", Key))
            objects = self._bucket(Bucket, "PutObject")
            if (IfNoneMatch or IfMatch) and not self.conditional_writes:
                raise client_error("NotImplemented", 501, "PutObject")
            existing = objects.get(Key)
            if IfNoneMatch == "*" and existing is not None:
                raise client_error("PreconditionFailed", 412, "PutObject")
            if IfMatch is not None and (existing is None or existing.etag != IfMatch):
                raise client_error("PreconditionFailed", 412, "PutObject")
            data = Body.encode() if isinstance(Body, str) else bytes(Body)
            return {"ETag": self._store(Bucket, Key, data, _etag(data))}

    def get_object(self, *, Bucket: str, Key: str) -> JSON:
        with self._lock:
            self.calls.append(("get_object", Key))
            stored = self._bucket(Bucket, "GetObject").get(Key)
            if stored is None:
                raise client_error("NoSuchKey", 404, "GetObject")
            return {
                "Body": _Body(stored.data),
                "ETag": stored.etag,
                "ContentLength": len(stored.data),
                "LastModified": stored.last_modified,
            }

    def delete_object(self, *, Bucket: str, Key: str) -> JSON:
        with self._lock:
            self.calls.append(("delete_object", Key))
            objects = self._bucket(Bucket, "DeleteObject")
            if Key in objects:
                self._notify(Bucket, Key, None)
            objects.pop(Key, None)
            return {}

    def delete_objects(self, *, Bucket: str, Delete: JSON) -> JSON:
        with self._lock:
            objects = self._bucket(Bucket, "DeleteObjects")
            errors = []
            for item in Delete["Objects"]:
                key = item["Key"]
                self.calls.append(("delete_objects", key))
                if key in self.locked:
                    errors.append({"Key": key, "Code": "AccessDenied", "Message": "object lock"})
                elif key in objects:
                    self._notify(Bucket, key, None)
                    objects.pop(key)
            return {"Errors": errors} if errors else {}

    def list_objects_v2(
        self,
        *,
        Bucket: str,
        Prefix: str = "",
        MaxKeys: int = 1000,
        StartAfter: str = "",
        ContinuationToken: str | None = None,
    ) -> JSON:
        with self._lock:
            self.calls.append(("list_objects_v2", Prefix))
            if self._list_faults:
                raise self._list_faults.pop(0)
            objects = self._bucket(Bucket, "ListObjectsV2")
            after = ContinuationToken.removeprefix("after:") if ContinuationToken else StartAfter
            matching = sorted(k for k in objects if k.startswith(Prefix) and k > after)
            visible = [k for k in matching if self._hidden.get((Bucket, k), 0) <= 0]
            limit = min(MaxKeys, self.max_keys)
            page, truncated = visible[:limit], len(visible) > limit
            shown, end = set(page), page[-1] if truncated else None
            self.shown.update((Bucket, k) for k in page)
            for key in matching:  # a listing that left a key out counts towards its lag
                if key not in shown and (end is None or key < end):
                    self._unhide(Bucket, key)
            response: JSON = {
                "Contents": [
                    {
                        "Key": k,
                        "Size": len(objects[k].data),
                        "ETag": objects[k].etag,
                        "LastModified": objects[k].last_modified,
                    }
                    for k in page
                ],
                "KeyCount": len(page),
                "IsTruncated": truncated,
                "MaxKeys": limit,
            }
            if truncated:
                response["NextContinuationToken"] = f"after:{page[-1]}"
            return response

    # -- multipart uploads ---------------------------------------------------------------------

    def create_multipart_upload(
        self,
        *,
        Bucket: str,
        Key: str,
        ContentType: str = "binary/octet-stream",
    ) -> JSON:
        with self._lock:
            self.calls.append(("create_multipart_upload", Key))
            self._bucket(Bucket, "CreateMultipartUpload")
            upload_id = uuid.uuid4().hex
            self.uploads[Bucket][upload_id] = Upload(Key, self.now())
            return {"UploadId": upload_id, "Key": Key, "Bucket": Bucket}

    def upload_part(
        self,
        *,
        Bucket: str,
        Key: str,
        UploadId: str,
        PartNumber: int,
        Body: bytes,
    ) -> JSON:
        with self._lock:
            self.calls.append(("upload_part", Key))
            upload = self._upload(Bucket, Key, UploadId, "UploadPart")
            upload.parts[PartNumber] = bytes(Body)
            return {"ETag": _etag(bytes(Body))}

    def complete_multipart_upload(
        self,
        *,
        Bucket: str,
        Key: str,
        UploadId: str,
        MultipartUpload: JSON,
    ) -> JSON:
        with self._lock:
            self.calls.append(("complete_multipart_upload", Key))
            upload = self._upload(Bucket, Key, UploadId, "CompleteMultipartUpload")
            numbers = [part["PartNumber"] for part in MultipartUpload["Parts"]]
            if any(n not in upload.parts for n in numbers):
                raise client_error("InvalidPart", 400, "CompleteMultipartUpload")
            data = b"".join(upload.parts[n] for n in numbers)
            digests = b"".join(hashlib.md5(upload.parts[n]).digest() for n in numbers)
            etag = f'"{hashlib.md5(digests).hexdigest()}-{len(numbers)}"'
            del self.uploads[Bucket][UploadId]
            return {"ETag": self._store(Bucket, Key, data, etag), "Key": Key}

    def abort_multipart_upload(
        self,
        *,
        Bucket: str,
        Key: str,
        UploadId: str,
    ) -> JSON:
        with self._lock:
            self.calls.append(("abort_multipart_upload", Key))
            self._upload(Bucket, Key, UploadId, "AbortMultipartUpload")
            del self.uploads[Bucket][UploadId]
            return {}

    def list_multipart_uploads(
        self,
        *,
        Bucket: str,
        Prefix: str = "",
        KeyMarker: str = "",
        UploadIdMarker: str = "",
    ) -> JSON:
        with self._lock:
            self.calls.append(("list_multipart_uploads", Prefix))
            if self.deny_multipart_listing:
                raise client_error("AccessDenied", 403, "ListMultipartUploads")
            self._bucket(Bucket, "ListMultipartUploads")
            pending = sorted(
                (u.key, upload_id, u)
                for upload_id, u in self.uploads[Bucket].items()
                if u.key.startswith(Prefix) and (u.key, upload_id) > (KeyMarker, UploadIdMarker)
            )
            page = pending[: self.max_keys]
            response: JSON = {
                "Uploads": [
                    {"Key": key, "UploadId": upload_id, "Initiated": u.initiated}
                    for key, upload_id, u in page
                ],
                "IsTruncated": len(pending) > len(page),
            }
            if response["IsTruncated"]:
                response["NextKeyMarker"], response["NextUploadIdMarker"] = page[-1][:2]
            return response

    # -- inside --------------------------------------------------------------------------------

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """What the bucket holds (not what a listing shows)."""
        return sorted(k for k in self.buckets.get(bucket, {}) if k.startswith(prefix))

    def _bucket(self, bucket: str, operation: str) -> dict[str, Stored]:
        objects = self.buckets.get(bucket)
        if objects is None:
            raise client_error("NoSuchBucket", 404, operation)
        return objects

    def _upload(self, bucket: str, key: str, upload_id: str, operation: str) -> Upload:
        self._bucket(bucket, operation)
        upload = self.uploads[bucket].get(upload_id)
        if upload is None or upload.key != key:
            raise client_error("NoSuchUpload", 404, operation)
        return upload

    def _notify(self, bucket: str, key: str, data: bytes | None) -> None:
        for observer in self.observers:
            observer(bucket, key, data)

    def _store(self, bucket: str, key: str, data: bytes, etag: str) -> str:
        self._notify(bucket, key, data)
        self.buckets[bucket][key] = Stored(data, etag, self.now())
        if self._lag > 0:
            self._hidden[(bucket, key)] = self._lag
        return etag

    def _unhide(self, bucket: str, key: str) -> None:
        left = self._hidden.get((bucket, key), 0) - 1
        if left > 0:
            self._hidden[(bucket, key)] = left
        else:
            self._hidden.pop((bucket, key), None)


class FakeClients(ClientCache):
    """The operator's client cache, answering every endpoint with the fake."""

    def __init__(self, s3: FakeS3) -> None:
        super().__init__()
        self.s3 = s3

    def client(self, endpoint: StoreEndpoint) -> Any:
        return self.s3


def store(s3: FakeS3, location: CheckpointLocation) -> OperatorStore:
    """A checkpoint store (the operator's and the SDK's S3 adapter) on the fake."""
    return OperatorStore(location, StoreEndpoint(url=ENDPOINT), clients=FakeClients(s3))


def writer(
    s3: FakeS3, location: CheckpointLocation, attempt: int, *, zombie: bool = False
) -> CheckpointWriter:
    """The SDK's writer of one attempt; a `zombie` skips its check for a newer attempt (a
    superseded rank that raced the new marker)."""
    return CheckpointWriter(
        location, attempt, store=store(s3, location), check_newer_attempt=not zombie
    )


def begin_version(
    s3: FakeS3,
    location: CheckpointLocation,
    step: int,
    attempt: int,
    *,
    shards: Mapping[str, bytes] = SHARDS,
    zombie: bool = False,
) -> PendingVersion:
    """Shards written, manifest not yet: an incomplete version until `.commit()` (a late
    commit from a superseded attempt when `zombie`)."""
    sdk = writer(s3, location, attempt, zombie=zombie)
    pending = sdk.version(step, policy_generation=step, commit=False)
    for key, data in shards.items():
        pending.write_bytes(key, data)
    return pending


def write_version(
    s3: FakeS3, location: CheckpointLocation, step: int, attempt: int, *, zombie: bool = False
) -> Manifest:
    """A complete version as the SDK writes it: shards, manifest.json last, then latest.json.
    Raises CommitRefused when a newer attempt started (unless `zombie`)."""
    return begin_version(s3, location, step, attempt, zombie=zombie).commit()


def version_keys(s3: FakeS3, location: CheckpointLocation, version: VersionId) -> list[str]:
    return s3.keys(location.bucket, location.version_prefix(version))
