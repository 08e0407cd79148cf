"""Versioned checkpoints for trainers: write versions the operator can resume from, read them back.

Works with or without the operator. Under the operator the trainer pods get RLJOB_NAME,
RLJOB_NAMESPACE, RLJOB_ATTEMPT, RLJOB_CHECKPOINT_URI (spec.checkpoint.uri), optionally
RLJOB_JOB_UID, RLJOB_S3_ENDPOINT, RLJOB_S3_REGION, RLJOB_S3_ADDRESSING_STYLE, AWS credentials
from spec.checkpoint.credentialsSecret, and, when resuming, RLJOB_RESUME_URI, RLJOB_RESUME_STEP and
RLJOB_RESUME_VERSION. Without it, pass the same values as arguments.

Example::

    from rljob.sdk import CheckpointWriter, resolve_resume

    start = 0
    resume = resolve_resume()                  # None on a fresh start
    if resume is not None:
        resume.reader().download("/tmp/ckpt")  # verifies every shard's size and sha256
        load_state("/tmp/ckpt")
        start = resume.step

    writer = CheckpointWriter.from_env()
    for step in range(start + 1, total_steps + 1):
        train_one_step()
        if step % 100 == 0:
            save_state("/tmp/out")
            with writer.version(step, policy_generation=step) as version:
                version.write_file("model/rank0.pt", "/tmp/out/rank0.pt")
                version.write_bytes("train_state.json", json.dumps(state).encode())
            # leaving the block cleanly commits: manifest.json last, then latest.json

With several ranks, each rank writes its own shards in `writer.version(step, commit=False)` and
sends `version.entries` to rank 0, which adds them with `add_entries` and commits.

The writer refuses to commit (CommitRefused) when a newer attempt's marker exists: a zombie of a
superseded attempt must not publish. The operator's lineage rule fences such versions off anyway.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from rljob.checkpoints.errors import (
    ChecksumMismatch,
    CommitRefused,
    InvalidCheckpoint,
    PreconditionFailed,
    StoreError,
)
from rljob.checkpoints.layout import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_URI,
    ENV_JOB,
    ENV_JOB_UID,
    ENV_NAMESPACE,
    ENV_RESUME_STEP,
    ENV_RESUME_URI,
    ENV_RESUME_VERSION,
    CheckpointLocation,
    KeyKind,
    VersionId,
    check_shard_key,
)
from rljob.checkpoints.models import Manifest, ShardEntry
from rljob.checkpoints.s3 import CheckpointStore, StoreEndpoint
from rljob.checkpoints.validity import Validity

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MULTIPART_THRESHOLD = 64 * MiB
PART_SIZE = 64 * MiB
MIN_PART_SIZE = 5 * MiB
MAX_PARTS = 10_000
_CHUNK = 1 * MiB


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if not value:
        raise ValueError(f"{name} is not set: pass it explicitly or run under the operator")
    return value


class CheckpointWriter:
    """Writes versions of one job attempt."""

    def __init__(
        self,
        location: CheckpointLocation,
        attempt: int,
        *,
        endpoint: StoreEndpoint | None = None,
        job_uid: str | None = None,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        part_size: int = PART_SIZE,
        check_newer_attempt: bool = True,
        store: CheckpointStore | None = None,
    ) -> None:
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size must be at least {MIN_PART_SIZE} bytes")
        self.location = location
        self.attempt = attempt
        self.job_uid = job_uid
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.check_newer_attempt = check_newer_attempt
        self.store = store or CheckpointStore(location, endpoint or StoreEndpoint.from_env())

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        uri: str | None = None,
        namespace: str | None = None,
        job: str | None = None,
        attempt: int | None = None,
        endpoint: StoreEndpoint | None = None,
        **options: Any,
    ) -> CheckpointWriter:
        """From the variables the operator injects; explicit arguments win."""
        env = os.environ if env is None else env
        location = CheckpointLocation.from_uri(
            uri or _require(env, ENV_CHECKPOINT_URI),
            namespace or _require(env, ENV_NAMESPACE),
            job or _require(env, ENV_JOB),
        )
        number = attempt if attempt is not None else int(_require(env, ENV_ATTEMPT))
        return cls(
            location,
            number,
            endpoint=endpoint or StoreEndpoint.from_env(env),
            job_uid=options.pop("job_uid", None) or env.get(ENV_JOB_UID) or None,
            **options,
        )

    def version(
        self,
        step: int,
        *,
        policy_generation: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        commit: bool = True,
    ) -> PendingVersion:
        """A version to write shards into; a `with` block commits it on a clean exit (unless
        commit=False, for ranks that only upload their shards)."""
        return PendingVersion(
            self, VersionId(step, self.attempt), policy_generation, dict(metadata or {}), commit
        )

    def newer_attempt(self) -> int | None:
        """The newest attempt after ours that has a marker (one listing), or None."""
        start = self.location.marker_key(self.attempt)
        newer = [
            parsed.attempt
            for obj in self.store.list_objects(self.location.attempts_prefix, start_after=start)
            if (parsed := self.location.parse_key(obj.key)).kind is KeyKind.MARKER
            and parsed.attempt is not None
            and parsed.attempt > self.attempt
        ]
        return max(newer, default=None)

    def _refuse_if_superseded(self, version: VersionId) -> None:
        if not self.check_newer_attempt:
            return
        newer = self.newer_attempt()
        if newer is not None:
            raise CommitRefused(
                f"not committing {version.name}: attempt {newer} has started, this attempt "
                f"({self.attempt}) is superseded"
            )


class PendingVersion:
    """Shards of one version being written; `commit()` writes the manifest, then the pointer."""

    def __init__(
        self,
        writer: CheckpointWriter,
        version: VersionId,
        policy_generation: int | None,
        metadata: dict[str, Any],
        commit_on_exit: bool,
    ) -> None:
        self.writer = writer
        self.version = version
        self.policy_generation = policy_generation
        self.metadata = metadata
        self.commit_on_exit = commit_on_exit
        self._entries: dict[str, ShardEntry] = {}
        self.manifest: Manifest | None = None

    @property
    def entries(self) -> list[ShardEntry]:
        return list(self._entries.values())

    @property
    def uri(self) -> str:
        return self.writer.location.version_uri(self.version)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self.commit_on_exit and self.manifest is None:
            self.commit()

    def add_entries(self, entries: Iterable[ShardEntry]) -> None:
        """Shards another rank wrote into this version."""
        for entry in entries:
            self._add(entry)

    def _add(self, entry: ShardEntry) -> ShardEntry:
        if self.manifest is not None:
            raise CommitRefused(f"{self.version.name} is already committed")
        if entry.key in self._entries and self._entries[entry.key] != entry:
            raise ValueError(f"shard {entry.key} written twice with different content")
        self._entries[entry.key] = entry
        return entry

    def write_bytes(self, key: str, data: bytes) -> ShardEntry:
        check_shard_key(key)
        if len(data) > self.writer.multipart_threshold:
            return self.write_stream(key, _BytesReader(data))
        full_key = self.writer.location.shard_key(self.version, key)
        self.writer.store.put_bytes(full_key, data)
        return self._add(
            ShardEntry(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        )

    def write_file(self, key: str, path: str | os.PathLike[str]) -> ShardEntry:
        check_shard_key(key)
        size = os.path.getsize(path)
        with open(path, "rb") as stream:
            if size <= self.writer.multipart_threshold:
                return self.write_bytes(key, stream.read())
            return self.write_stream(key, stream, size_hint=size)

    def write_stream(
        self, key: str, stream: _Readable, *, size_hint: int | None = None
    ) -> ShardEntry:
        """Uploads a byte stream; multipart when it is larger than the writer's threshold."""
        check_shard_key(key)
        writer = self.writer
        part_size = writer.part_size
        if size_hint is not None:
            part_size = max(part_size, -(-size_hint // MAX_PARTS))
        digest = hashlib.sha256()
        head = _read_exactly(stream, writer.multipart_threshold + 1)
        digest.update(head)
        full_key = writer.location.shard_key(self.version, key)
        if len(head) <= writer.multipart_threshold:
            writer.store.put_bytes(full_key, head)
            return self._add(ShardEntry(key=key, size=len(head), sha256=digest.hexdigest()))
        size = _multipart(
            writer.store, full_key, head=head, stream=stream, part_size=part_size, digest=digest
        )
        return self._add(ShardEntry(key=key, size=size, sha256=digest.hexdigest()))

    def commit(self) -> Manifest:
        """Writes manifest.json (the commit), then moves latest.json. Raises CommitRefused when a
        newer attempt has started or the version is already committed."""
        writer = self.writer
        if self.manifest is not None:
            return self.manifest
        writer._refuse_if_superseded(self.version)
        manifest = Manifest(
            job=writer.location.job,
            namespace=writer.location.namespace,
            job_uid=writer.job_uid,
            attempt=self.version.attempt,
            step=self.version.step,
            policy_generation=self.policy_generation,
            created_at=datetime.now(UTC),
            shards=sorted(self._entries.values(), key=lambda e: e.key),
            metadata=self.metadata,
        )
        try:
            writer.store.put_bytes(
                writer.location.manifest_key(self.version),
                manifest.to_json(),
                if_none_match=True,
                content_type="application/json",
            )
        except PreconditionFailed as exc:
            raise CommitRefused(f"{self.version.name} is already committed") from exc
        self.manifest = manifest
        try:
            if writer.check_newer_attempt and writer.newer_attempt() is not None:
                log.warning("%s committed but not published: a newer attempt exists", self.uri)
            else:
                writer.store.write_pointer(self.version)
        except StoreError as exc:  # the pointer is a fast path only
            log.warning("could not move latest.json to %s: %s", self.version.name, exc)
        return manifest


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else min(len(self._view), self._pos + size)
        chunk = bytes(self._view[self._pos : end])
        self._pos = end
        return chunk


def _read_exactly(stream: _Readable, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _multipart(
    store: CheckpointStore,
    key: str,
    *,
    head: bytes,
    stream: _Readable,
    part_size: int,
    digest: Any,
) -> int:
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
                more = _read_exactly(stream, part_size - len(pending))
                if not more:
                    break
                digest.update(more)
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


@dataclass(frozen=True)
class ResumePoint:
    """The version a trainer attempt should load."""

    location: CheckpointLocation
    version: VersionId

    @property
    def step(self) -> int:
        return self.version.step

    @property
    def uri(self) -> str:
        return self.location.version_uri(self.version)

    def reader(self, endpoint: StoreEndpoint | None = None) -> CheckpointReader:
        return CheckpointReader(self.location, self.version, endpoint=endpoint)


def resolve_resume(env: Mapping[str, str] | None = None) -> ResumePoint | None:
    """The version to load from RLJOB_RESUME_URI (and the consistent RLJOB_RESUME_VERSION /
    RLJOB_RESUME_STEP when set), or None when the attempt starts from scratch."""
    env = os.environ if env is None else env
    uri = env.get(ENV_RESUME_URI, "").strip()
    if not uri:
        return None
    location, version = CheckpointLocation.from_version_uri(uri)
    named = env.get(ENV_RESUME_VERSION, "").strip()
    if named and VersionId.parse(named) != version:
        raise ValueError(f"{ENV_RESUME_VERSION}={named} does not match {ENV_RESUME_URI}={uri}")
    step = env.get(ENV_RESUME_STEP, "").strip()
    if step and int(step) != version.step:
        raise ValueError(f"{ENV_RESUME_STEP}={step} does not match {ENV_RESUME_URI}={uri}")
    return ResumePoint(location, version)


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
