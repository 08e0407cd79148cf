"""The operator's side of the checkpoint store: discovery, the next attempt's number, and
retention's listing and deletes, over the protocol's CheckpointStore
(rljob.checkpoint_protocol.s3.store). They need lineage, selection and retention, which workloads
never use, and retention's crash point, which only the operator's tests arm."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rljob.checkpoint_protocol.errors import (
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.s3.objects import DeleteFailure
from rljob.checkpoint_protocol.s3.store import CheckpointStore
from rljob.checkpoint_protocol.validity import Validity
from rljob.checkpoints.attempt_plan import CandidateCheck
from rljob.checkpoints.lineage import Lineage, next_attempt
from rljob.checkpoints.retention import (
    RetentionListing,
    RetentionPlan,
    fenced_out,
    plan_retention,
    retention_window,
)
from rljob.checkpoints.s3.discovery import Discovery, discover, recheck, resume_candidates
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


class OperatorStore(CheckpointStore):
    """One job's checkpoints in one bucket, with what only the operator does (synchronous)."""

    def next_attempt(self) -> int:
        """The attempt after the highest marker (and the pointer's attempt): 1 when none."""
        pointer = self.read_pointer()
        seen = []
        if pointer is not None:
            with contextlib.suppress(ValueError):
                seen.append(pointer[0].version_id.attempt)
        return next_attempt(self.marker_attempts(), seen)

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
