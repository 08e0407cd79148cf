"""Shard uploads: one put up to the multipart threshold, else a multipart upload that aborts on
any failure. A shard's sha256 and size come from HashingReader, in the one pass that reads it
for the upload: a large shard is never read a second time to checksum it."""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Protocol

from rljob.checkpoint_protocol.errors import StoreError
from rljob.checkpoint_protocol.s3 import CheckpointStore

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MULTIPART_THRESHOLD = 64 * MiB
PART_SIZE = 64 * MiB
MIN_PART_SIZE = 5 * MiB
MAX_PARTS = 10_000


class Readable(Protocol):
    """What a shard is uploaded from: a file, a socket, or any binary stream."""

    def read(self, size: int = -1, /) -> bytes: ...


class BytesReader:
    """Bytes read as a stream, so a large write_bytes goes through the multipart upload."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else min(len(self._view), self._pos + size)
        chunk = bytes(self._view[self._pos : end])
        self._pos = end
        return chunk


class HashingReader:
    """Passes a stream's bytes through, hashing and counting them as they are read. Only
    rljob's own code reads it (boto3 gets bytes), so a retried request never hashes twice."""

    def __init__(self, source: Readable) -> None:
        self._source = source
        self._digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = self._source.read(size)
        self._digest.update(chunk)
        self.size += len(chunk)
        return chunk

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def read_exactly(stream: Readable, size: int) -> bytes:
    """`size` bytes, fewer only at the end of the stream (a read may return less)."""
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def upload_multipart(
    store: CheckpointStore,
    key: str,
    *,
    head: bytes,
    stream: Readable,
    part_size: int,
) -> int:
    """Uploads `head` then the rest of `stream` in parts; the size uploaded."""
    upload = store.call(
        "create_multipart_upload",
        Bucket=store.bucket,
        Key=key,
        ContentType="application/octet-stream",
    )
    upload_id = upload["UploadId"]
    parts: list[dict[str, Any]] = []
    size = 0
    try:
        pending = head
        number = 1
        while True:
            while len(pending) < part_size:
                more = read_exactly(stream, part_size - len(pending))
                if not more:
                    break
                pending += more
            if not pending:
                break
            body, pending = pending[:part_size], pending[part_size:]
            if number > MAX_PARTS:
                raise ValueError(f"{key}: more than {MAX_PARTS} parts; raise part_size")
            response = store.call(
                "upload_part",
                Bucket=store.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
            )
            parts.append({"PartNumber": number, "ETag": response["ETag"]})
            size += len(body)
            number += 1
        store.call(
            "complete_multipart_upload",
            Bucket=store.bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )
    except BaseException:
        try:
            store.abort_upload(key, upload_id)
        except StoreError as exc:
            log.warning("could not abort the upload of %s: %s", key, exc)
        raise
    return size
