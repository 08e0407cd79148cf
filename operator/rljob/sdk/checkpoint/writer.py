"""Writes versions of one job attempt: shards first, then manifest.json (the commit), then the
latest.json pointer; a superseded attempt's writer refuses to commit."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from rljob.checkpoint_protocol.errors import CommitRefused, PreconditionFailed, StoreError
from rljob.checkpoint_protocol.layout import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_URI,
    ENV_JOB,
    ENV_JOB_UID,
    ENV_NAMESPACE,
    CheckpointLocation,
    KeyKind,
    VersionId,
    check_shard_key,
)
from rljob.checkpoint_protocol.models import Manifest, ShardEntry
from rljob.checkpoint_protocol.s3 import CheckpointStore, StoreEndpoint
from rljob.sdk.checkpoint.upload import (
    MAX_PARTS,
    MIN_PART_SIZE,
    MULTIPART_THRESHOLD,
    PART_SIZE,
    BytesReader,
    HashingReader,
    Readable,
    read_exactly,
    upload_multipart,
)

log = logging.getLogger(__name__)


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
            return self.write_stream(key, BytesReader(data))
        full_key = self.writer.location.shard_key(self.version, key)
        self.writer.store.put_bytes(full_key, data)
        return self._add(
            ShardEntry(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        )

    def write_file(self, key: str, path: str | os.PathLike[str]) -> ShardEntry:
        """Uploads a file, read once: hashed while it is uploaded."""
        check_shard_key(key)
        size = os.path.getsize(path)
        with open(path, "rb") as stream:
            return self.write_stream(key, stream, size_hint=size)

    def write_stream(
        self, key: str, stream: Readable, *, size_hint: int | None = None
    ) -> ShardEntry:
        """Uploads a byte stream; multipart when it is larger than the writer's threshold."""
        check_shard_key(key)
        writer = self.writer
        part_size = writer.part_size
        if size_hint is not None:
            part_size = max(part_size, -(-size_hint // MAX_PARTS))
        source = HashingReader(stream)
        head = read_exactly(source, writer.multipart_threshold + 1)
        full_key = writer.location.shard_key(self.version, key)
        if len(head) <= writer.multipart_threshold:
            writer.store.put_bytes(full_key, head)
        else:
            upload_multipart(writer.store, full_key, head=head, stream=source, part_size=part_size)
        return self._add(ShardEntry(key=key, size=source.size, sha256=source.hexdigest()))

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
