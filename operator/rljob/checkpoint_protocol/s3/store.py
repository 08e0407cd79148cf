"""The checkpoint protocol over S3 (synchronous), what workloads and the operator share: the
pointer, attempt markers, the capability probe, version listings and validation. The operator's
discovery and retention build on it in rljob.checkpoints.s3.store.

A capability probe per endpoint records whether conditional writes (If-None-Match) are honoured;
correctness never depends on them: they only narrow races that the lineage fence already makes
harmless.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime

from rljob.checkpoint_protocol.errors import PreconditionFailed, StoreError, StoreUnavailable
from rljob.checkpoint_protocol.layout import CheckpointLocation, KeyKind, VersionId
from rljob.checkpoint_protocol.models import AttemptMarker, DocumentError, Pointer
from rljob.checkpoint_protocol.s3.objects import LIST_PAGE_SIZE, S3Objects
from rljob.checkpoint_protocol.s3.transport import (
    Capabilities,
    ClientCache,
    StoreEndpoint,
    unsupported,
)
from rljob.checkpoint_protocol.validity import (
    Validity,
    VersionObjects,
    check_version,
    group_versions,
)


class CheckpointStore(S3Objects):
    """One job's checkpoints in one bucket (synchronous)."""

    def __init__(
        self,
        location: CheckpointLocation,
        endpoint: StoreEndpoint | None = None,
        *,
        clients: ClientCache | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        super().__init__(location, endpoint, clients=clients, page_size=page_size)
        self._markers: dict[int, AttemptMarker] = {}

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
            data = self.get_document(obj)
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

    # -- capabilities -----------------------------------------------------------------------

    def probe_capabilities(self, *, force: bool = False) -> Capabilities:
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
            if not unsupported(exc):
                raise
        finally:
            with contextlib.suppress(StoreError):
                self.call("delete_object", Bucket=self.bucket, Key=key)
        caps = Capabilities(conditional_writes=works, probed_at=datetime.now(UTC))
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
        data = None if manifest is None else self.get_document(manifest)
        return check_version(version, objects, data, checked_at=now)
