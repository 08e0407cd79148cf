"""Retention planning (pure): what to delete and which multipart uploads to abort.

- Eligible committed versions, newest first: the newest `keep` valid ones are kept; broken or
  unchecked ones newer than the oldest kept one stay too (evidence, and never counted); everything
  eligible older than that window is deleted, except the version in use.
- Incomplete versions (no manifest) of finished attempts are deleted; those of the live attempt
  once their newest object is older than `incompleteGrace`.
- Committed versions outside the lineage because a later attempt resumed from an earlier step
  (a zombie's writes, leftovers after a rollback) are deleted and never counted. Versions fenced
  only by a missing marker or a from-scratch start are left alone: removing a whole earlier
  lineage is a human's decision.
- Versions of attempts newer than the current one and the version in use are never touched.
- Multipart uploads of finished attempts are aborted; others once older than `incompleteGrace`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rljob.checkpoint_protocol.layout import MANIFEST_NAME, CheckpointLocation, VersionId
from rljob.checkpoint_protocol.validity import PendingUpload, Validity, VersionObjects
from rljob.checkpoints.lineage import Lineage

_MANIFEST = f"/{MANIFEST_NAME}"


@dataclass(frozen=True)
class RetentionListing:
    """What retention plans from: every version under the job's prefix, verdicts for the newest
    eligible ones (retention_window's order, until `keep` are valid), the pending uploads."""

    versions: Mapping[VersionId, VersionObjects] = field(default_factory=dict)
    validities: Mapping[VersionId, Validity] = field(default_factory=dict)
    uploads: tuple[PendingUpload, ...] = ()


@dataclass(frozen=True)
class VersionDeletion:
    version: VersionId
    reason: str
    keys: tuple[str, ...]  # the manifest first


@dataclass(frozen=True)
class UploadAbort:
    key: str
    upload_id: str
    reason: str


@dataclass(frozen=True)
class RetentionPlan:
    kept: tuple[VersionId, ...] = ()
    deletions: tuple[VersionDeletion, ...] = ()
    aborts: tuple[UploadAbort, ...] = ()
    left: tuple[tuple[VersionId, str], ...] = ()  # versions neither kept nor deleted, and why

    @property
    def empty(self) -> bool:
        return not self.deletions and not self.aborts

    @property
    def deleted_versions(self) -> list[VersionId]:
        return [d.version for d in self.deletions]

    def manifest_keys(self) -> list[str]:
        """Keys deleted first: every deleted version's manifest (then it reads as incomplete)."""
        return [
            d.keys[0] for d in self.deletions if d.keys and d.keys[0].endswith("/manifest.json")
        ]

    def other_keys(self) -> list[str]:
        manifests = set(self.manifest_keys())
        return [k for d in self.deletions for k in d.keys if k not in manifests]


def retention_window(
    versions: Mapping[VersionId, VersionObjects], lineage: Lineage
) -> list[VersionId]:
    """Eligible committed versions, newest first: the store validates them in this order until
    it has `keep` valid ones, and passes the verdicts to plan_retention."""
    return sorted(
        (v for v, objs in versions.items() if objs.complete and lineage.eligible(v)), reverse=True
    )


def fenced_out(versions: Mapping[VersionId, VersionObjects], lineage: Lineage) -> list[VersionId]:
    """Committed versions deleted as outside the lineage (a later attempt resumed from an
    earlier step), newest first: the store validates them too, so a broken one is kept as
    evidence rather than deleted on the strength of the lineage alone."""
    return sorted(
        (
            v
            for v, objs in versions.items()
            if objs.complete
            and v.attempt <= lineage.current_attempt
            and not lineage.eligible(v)
            and _fenced_by_resume(v.attempt, lineage)
        ),
        reverse=True,
    )


def plan_retention(
    *,
    location: CheckpointLocation,
    versions: Mapping[VersionId, VersionObjects],
    lineage: Lineage,
    keep: int,
    validities: Mapping[VersionId, Validity],
    now: datetime,
    incomplete_grace: timedelta,
    in_use: Iterable[VersionId] = (),
    live: bool = True,
    uploads: Sequence[PendingUpload] = (),
) -> RetentionPlan:
    """The plan for one job. `live`: whether the current attempt may still be writing.
    `validities`: verdicts for (a prefix of) retention_window's versions."""
    if keep < 1:
        raise ValueError("keep must be >= 1")
    policy = _Policy(lineage, live, now, incomplete_grace)
    protected = set(in_use)
    kept = _keep_window(versions, lineage, keep, validities) | (protected & set(versions))
    decisions: list[tuple[VersionId, bool, str]] = []
    for version, objs in versions.items():
        if version not in kept:
            decision = policy.decide(version, objs, keep)
            if decision is not None:
                decisions.append((version, *decision))
    return RetentionPlan(
        kept=tuple(sorted(kept, reverse=True)),
        deletions=tuple(
            VersionDeletion(v, why, tuple(versions[v].object_keys()))
            for v, delete, why in decisions
            if delete
        ),
        aborts=tuple(policy.aborts(location, uploads)),
        left=tuple((v, why) for v, delete, why in decisions if not delete),
    )


def _keep_window(
    versions: Mapping[VersionId, VersionObjects],
    lineage: Lineage,
    keep: int,
    validities: Mapping[VersionId, Validity],
) -> set[VersionId]:
    """Eligible committed versions down to the keep-th valid one (broken and unchecked ones in
    between stay, uncounted)."""
    kept: set[VersionId] = set()
    valid = 0
    for version in retention_window(versions, lineage):
        if valid >= keep:
            break
        kept.add(version)
        verdict = validities.get(version)
        if verdict is not None and verdict.valid:
            valid += 1
    return kept


@dataclass(frozen=True)
class _Policy:
    lineage: Lineage
    live: bool
    now: datetime
    grace: timedelta

    def decide(
        self, version: VersionId, objs: VersionObjects, keep: int
    ) -> tuple[bool, str] | None:
        """(delete?, why) for a version outside the keep window; None: nothing to say."""
        current = self.lineage.current_attempt
        if version.attempt > current:
            return False, f"attempt {version.attempt} is newer than the current attempt {current}"
        if not objs.complete:
            return self._incomplete(version, objs)
        why = self.lineage.why_ineligible(version)
        if why is None:
            return True, f"beyond keep={keep}: older than the {keep} newest valid versions"
        if _fenced_by_resume(version.attempt, self.lineage):
            return True, f"not in the lineage: {why}"
        return False, f"not in the lineage, left for a human: {why}"

    def _finished(self, attempt: int) -> bool:
        return attempt < self.lineage.current_attempt or not self.live

    def _incomplete(self, version: VersionId, objs: VersionObjects) -> tuple[bool, str]:
        if self._finished(version.attempt):
            return True, f"incomplete version of finished attempt {version.attempt}"
        newest = objs.newest_modified
        if newest is None:
            return False, "incomplete, age unknown"
        age = self.now - newest
        if age > self.grace:
            return True, f"incomplete for {human(age)} > incompleteGrace {human(self.grace)}"
        return False, f"incomplete, written {human(age)} ago: may still be in progress"

    def aborts(
        self, location: CheckpointLocation, uploads: Sequence[PendingUpload]
    ) -> Iterator[UploadAbort]:
        for upload in uploads:
            parsed = location.parse_key(upload.key)
            attempt = parsed.version.attempt if parsed.version is not None else None
            if attempt is not None and attempt > self.lineage.current_attempt:
                continue
            if attempt is not None and self._finished(attempt):
                reason = f"upload of finished attempt {attempt}"
                yield UploadAbort(upload.key, upload.upload_id, reason)
            elif upload.initiated is not None and self.now - upload.initiated > self.grace:
                age = human(self.now - upload.initiated)
                reason = f"upload started {age} ago > incompleteGrace {human(self.grace)}"
                yield UploadAbort(upload.key, upload.upload_id, reason)


def _fenced_by_resume(attempt: int, lineage: Lineage) -> bool:
    """True when every later attempt has a marker with a resume step (so the fence is a definite
    step, not a missing marker or a from-scratch start)."""
    return all(
        lineage.resumed_from.get(later) is not None
        for later in range(attempt + 1, lineage.current_attempt + 1)
    )


def human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
