"""The checkpoint protocol over S3 (synchronous: the SDK, the CLI, and the operator through
AsyncCheckpointStore): the pointer, attempt markers, the capability probe, version listings and
validation, discovery, and retention's listing and deletes.

A capability probe per endpoint records whether conditional writes (If-None-Match) are honoured;
correctness never depends on them: they only narrow races that the lineage fence already makes
harmless.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rljob.api.status import StoreCapabilities
from rljob.checkpoints.attempt_plan import CandidateCheck
from rljob.checkpoints.errors import (
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoints.layout import CheckpointLocation, KeyKind, VersionId
from rljob.checkpoints.lineage import Lineage, next_attempt
from rljob.checkpoints.models import AttemptMarker, DocumentError, Pointer
from rljob.checkpoints.retention import (
    RetentionListing,
    RetentionPlan,
    fenced_out,
    plan_retention,
    retention_window,
)
from rljob.checkpoints.s3.discovery import Discovery, discover, recheck, resume_candidates
from rljob.checkpoints.s3.objects import LIST_PAGE_SIZE, DeleteFailure, S3Objects
from rljob.checkpoints.s3.transport import ClientCache, StoreEndpoint, unsupported
from rljob.checkpoints.validity import Validity, VersionObjects, check_version, group_versions
from rljob.crashpoints import crash_point


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

    def next_attempt(self) -> int:
        """The attempt after the highest marker (and the pointer's attempt): 1 when none."""
        pointer = self.read_pointer()
        seen = []
        if pointer is not None:
            with contextlib.suppress(ValueError):
                seen.append(pointer[0].version_id.attempt)
        return next_attempt(self.marker_attempts(), seen)

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
            if not unsupported(exc):
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
        data = None if manifest is None else self.get_document(manifest)
        return check_version(version, objects, data, checked_at=now)

    def discover(
        self,
        lineage: Lineage,
        *,
        history: Iterable[VersionId] = (),
        pinned: VersionId | None = None,
        full_scan: bool = True,
    ) -> Discovery:
        """The newest eligible valid version (see rljob.checkpoints.s3.discovery.discover)."""
        return discover(self, lineage, history=history, pinned=pinned, full_scan=full_scan)

    def resume_candidates(
        self,
        lineage: Lineage,
        *,
        history: Iterable[VersionId] = (),
        pinned: VersionId | None = None,
    ) -> tuple[CandidateCheck, ...]:
        """What an attempt's start chooses from (see s3.discovery.resume_candidates)."""
        return resume_candidates(self, lineage, history=history, pinned=pinned)

    def recheck(self, version: VersionId) -> CandidateCheck:
        """A version's verdict, listed again (bounded) while a stale listing could explain it."""
        return recheck(self, self.validate(version))

    # -- retention --------------------------------------------------------------------------

    def retention_listing(self, lineage: Lineage, *, keep: int) -> RetentionListing:
        """Lists every version and pending upload, and validates (from the listing itself: one
        manifest read per version, cached by ETag) the newest eligible versions until `keep` are
        valid and the committed versions outside the lineage."""
        versions = self.list_versions()
        validities: dict[VersionId, Validity] = {}
        valid = 0
        for version in retention_window(versions, lineage):
            if valid >= keep:
                break
            verdict = self.validate(version, versions[version])
            validities[version] = verdict
            valid += verdict.valid
        for version in fenced_out(versions, lineage):
            validities[version] = self.validate(version, versions[version])
        return RetentionListing(versions, validities, tuple(self.list_uploads()))

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
        """The listing, then the plan (see rljob.checkpoints.retention)."""
        listing = self.retention_listing(lineage, keep=keep)
        return plan_retention(
            location=self.location,
            versions=listing.versions,
            lineage=lineage,
            keep=keep,
            validities=listing.validities,
            now=now or datetime.now(UTC),
            incomplete_grace=incomplete_grace,
            in_use=in_use,
            live=live,
            uploads=listing.uploads,
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
