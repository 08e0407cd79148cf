"""Reads one committed checkpoint version back, verifying every shard against its manifest."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rljob.checkpoint_protocol.errors import ChecksumMismatch, InvalidCheckpoint
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import Manifest, ShardEntry
from rljob.checkpoint_protocol.s3 import CheckpointStore, StoreEndpoint
from rljob.checkpoint_protocol.validity import Validity

# A download is hashed and written a chunk at a time, never held whole.
_CHUNK = 1024 * 1024


class CheckpointReader:
    """Reads one committed version and verifies what it downloads against the manifest."""

    def __init__(
        self,
        location: CheckpointLocation,
        version: VersionId,
        *,
        endpoint: StoreEndpoint | None = None,
        store: CheckpointStore | None = None,
    ) -> None:
        self.location = location
        self.version = version
        self.store = store or CheckpointStore(location, endpoint or StoreEndpoint.from_env())
        self._manifest: Manifest | None = None

    @classmethod
    def from_uri(cls, uri: str, *, endpoint: StoreEndpoint | None = None) -> CheckpointReader:
        location, version = CheckpointLocation.from_version_uri(uri)
        return cls(location, version, endpoint=endpoint)

    def validate(self) -> Validity:
        """Validity from one listing of the version prefix (no checksums)."""
        return self.store.validate(self.version)

    def manifest(self) -> Manifest:
        if self._manifest is None:
            verdict = self.validate()
            if not verdict.valid or verdict.manifest is None:
                raise InvalidCheckpoint(
                    f"{self.location.version_uri(self.version)}: {verdict.reason}"
                )
            self._manifest = verdict.manifest
        return self._manifest

    def _entry(self, key: str) -> ShardEntry:
        for entry in self.manifest().shards:
            if entry.key == key:
                return entry
        raise KeyError(f"{self.version.name} has no shard {key}")

    def read_bytes(self, key: str, *, verify: bool = True) -> bytes:
        entry = self._entry(key)
        data = self.store.get_bytes(self.location.shard_key(self.version, key))
        if data is None:
            raise InvalidCheckpoint(f"{self.version.name}: missing shard {key}")
        if verify:
            _verify(entry, len(data), hashlib.sha256(data).hexdigest())
        return data

    def download(
        self,
        dest: str | os.PathLike[str],
        *,
        shards: Iterable[str] | None = None,
        verify: bool = True,
        workers: int = 4,
    ) -> list[Path]:
        """Downloads the shards (all, or the named ones) under dest, keeping their relative keys;
        each file appears only once its size and sha256 match the manifest."""
        root = Path(dest)
        wanted = self.manifest().shards if shards is None else [self._entry(k) for k in shards]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(lambda e: self._download_one(root, e, verify), wanted))

    def _download_one(self, root: Path, entry: ShardEntry, verify: bool) -> Path:
        target = root / entry.key
        target.parent.mkdir(parents=True, exist_ok=True)
        key = self.location.shard_key(self.version, entry.key)
        response = self.store.call("get_object", Bucket=self.store.bucket, Key=key)
        body = response["Body"]
        digest = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in iter(lambda: body.read(_CHUNK), b""):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            if verify:
                _verify(entry, size, digest.hexdigest())
            shutil.move(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        finally:
            body.close()
        return target

    def iter_shards(self) -> Iterator[ShardEntry]:
        return iter(self.manifest().shards)


def _verify(entry: ShardEntry, size: int, sha256: str) -> None:
    if size != entry.size:
        raise ChecksumMismatch(f"shard {entry.key}: size {size} != {entry.size}")
    if sha256 != entry.sha256:
        raise ChecksumMismatch(f"shard {entry.key}: sha256 {sha256} != {entry.sha256}")
