"""A small in-memory stand-in for a boto3 S3 client (the calls the checkpoint store makes), with
the two faults attempt starts must survive: a listing that misses objects once (eventual
consistency) and an operation that fails (permissions, timeouts)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError

from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import Manifest, ShardEntry
from rljob.checkpoint_protocol.s3 import ClientCache, StoreEndpoint

from ._build import NOW

Fault = Callable[[dict[str, Any]], Exception | None]


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "op",
    )


def denied(params: dict[str, Any]) -> Exception:
    error: Exception = client_error("AccessDenied", 403)
    return error


def read_timeout(params: dict[str, Any]) -> Exception:
    error: Exception = ReadTimeoutError(endpoint_url="http://fake")
    return error


class FakeS3:
    """Objects in a dict. `hidden`: keys the next listing that would show them leaves out (once
    each); `faults`: per operation, what to raise for a call (None: answer normally)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, datetime]] = {}
        self.uploads: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.hidden: set[str] = set()
        self.faults: dict[str, Fault] = {}
        self.listings: list[dict[str, Any]] = []
        self.now = NOW

    def _fault(self, operation: str, params: dict[str, Any]) -> None:
        fault = self.faults.get(operation)
        error = None if fault is None else fault(params)
        if error is not None:
            raise error

    def put_object(self, **kw: Any) -> dict[str, Any]:
        self._fault("put_object", kw)
        if kw.get("IfNoneMatch") == "*" and kw["Key"] in self.objects:
            raise client_error("PreconditionFailed", 412)
        body = kw["Body"] if isinstance(kw["Body"], bytes) else kw["Body"].encode()
        self.objects[kw["Key"]] = (body, self.now)
        return {"ETag": _etag(body)}

    def get_object(self, **kw: Any) -> dict[str, Any]:
        self._fault("get_object", kw)
        if kw["Key"] not in self.objects:
            raise client_error("NoSuchKey", 404)
        data = self.objects[kw["Key"]][0]
        return {"Body": io.BytesIO(data), "ETag": _etag(data)}

    def delete_object(self, **kw: Any) -> dict[str, Any]:
        self.objects.pop(kw["Key"], None)
        return {}

    def delete_objects(self, **kw: Any) -> dict[str, Any]:
        self._fault("delete_objects", kw)
        for item in kw["Delete"]["Objects"]:
            self.objects.pop(item["Key"], None)
            self.deleted.append(item["Key"])
        return {}

    def list_objects_v2(self, **kw: Any) -> dict[str, Any]:
        self._fault("list_objects_v2", kw)
        self.listings.append(kw)
        after = kw.get("StartAfter") or ""
        keys = sorted(k for k in self.objects if k.startswith(kw["Prefix"]) and k > after)
        shown = [k for k in keys if k not in self.hidden]
        self.hidden -= set(keys)
        contents = [
            {
                "Key": k,
                "Size": len(self.objects[k][0]),
                "ETag": _etag(self.objects[k][0]),
                "LastModified": self.objects[k][1],
            }
            for k in shown
        ]
        return {"Contents": contents, "IsTruncated": False}

    def list_multipart_uploads(self, **kw: Any) -> dict[str, Any]:
        self._fault("list_multipart_uploads", kw)
        return {"Uploads": list(self.uploads), "IsTruncated": False}

    def abort_multipart_upload(self, **kw: Any) -> dict[str, Any]:
        self.uploads = [u for u in self.uploads if u["UploadId"] != kw["UploadId"]]
        return {}

    def write_version(
        self,
        location: CheckpointLocation,
        version: VersionId,
        *,
        age: timedelta = timedelta(hours=1),
        commit: bool = True,
        missing: tuple[str, ...] = (),
    ) -> None:
        """A version saved `age` before NOW: a shard, then (commit) its manifest; shards named
        in `missing` are listed in the manifest but never written."""
        shards = {"model.pt": b"w" * 100, **{name: b"x" for name in missing}}
        self.now = NOW - age
        try:
            for name, data in shards.items():
                if name not in missing:
                    self.put_object(Key=location.shard_key(version, name), Body=data)
            if commit:
                manifest = Manifest(
                    job=location.job,
                    namespace=location.namespace,
                    attempt=version.attempt,
                    step=version.step,
                    created_at=NOW - age,
                    shards=[
                        ShardEntry(key=k, size=len(d), sha256=hashlib.sha256(d).hexdigest())
                        for k, d in shards.items()
                    ],
                )
                self.put_object(Key=location.manifest_key(version), Body=manifest.to_json())
        finally:
            self.now = NOW


class FakeClients(ClientCache):
    """Every endpoint is the one fake."""

    def __init__(self, fake: FakeS3) -> None:
        super().__init__()
        self.fake = fake

    def client(self, endpoint: StoreEndpoint) -> Any:
        return self.fake


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'
