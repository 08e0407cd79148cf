"""Validity of a version from one listing of its prefix and its manifest (pure).

Valid: the manifest parses, names the version it is stored under, and every shard it lists is
present in the listing with the listed size. Checksums are not checked here (that needs the
data; the SDK's reader verifies them on download).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from rljob.checkpoint_protocol.layout import MANIFEST_NAME, CheckpointLocation, KeyKind, VersionId
from rljob.checkpoint_protocol.models import DocumentError, Manifest


@dataclass(frozen=True)
class ListedObject:
    """One object as a listing returns it."""

    key: str
    size: int
    etag: str | None = None
    last_modified: datetime | None = None


@dataclass(frozen=True)
class PendingUpload:
    """A multipart upload in progress, as ListMultipartUploads returns it."""

    key: str
    upload_id: str
    initiated: datetime | None = None


@dataclass(frozen=True)
class VersionObjects:
    """The objects of one version, keyed by their key relative to the version prefix."""

    version: VersionId
    objects: Mapping[str, ListedObject] = field(default_factory=dict)

    @property
    def manifest(self) -> ListedObject | None:
        return self.objects.get(MANIFEST_NAME)

    @property
    def complete(self) -> bool:
        """Has a manifest (committed), valid or not."""
        return MANIFEST_NAME in self.objects

    @property
    def newest_modified(self) -> datetime | None:
        times = [o.last_modified for o in self.objects.values() if o.last_modified is not None]
        return max(times, default=None)

    def object_keys(self) -> list[str]:
        """Full keys, the manifest first (deleting it first turns a half-deleted version into an
        incomplete one, never into one that looks committed but lacks shards)."""
        manifest = self.objects.get(MANIFEST_NAME)
        rest = sorted(o.key for rel, o in self.objects.items() if rel != MANIFEST_NAME)
        return ([manifest.key] if manifest else []) + rest


def group_versions(
    location: CheckpointLocation, objects: Iterable[ListedObject]
) -> dict[VersionId, VersionObjects]:
    """Groups listed objects by version; keys that are not version objects are ignored."""
    grouped: dict[VersionId, dict[str, ListedObject]] = {}
    for obj in objects:
        parsed = location.parse_key(obj.key)
        if parsed.kind is KeyKind.VERSION_OBJECT and parsed.version is not None:
            grouped.setdefault(parsed.version, {})[parsed.relative] = obj
    return {v: VersionObjects(v, objs) for v, objs in sorted(grouped.items())}


class Problem(StrEnum):
    """What makes a version unusable; also the reason of the operator's Warning Event."""

    INCOMPLETE = "Incomplete"
    CORRUPT_MANIFEST = "CorruptManifest"
    MISSING_SHARD = "MissingShard"
    TRUNCATED_SHARD = "TruncatedShard"
    MISPLACED_MANIFEST = "MisplacedManifest"


# Problems a stale listing can cause (an eventually consistent listing misses objects, never
# invents them); a manifest's content is read directly and does not change on re-listing.
LISTING_PROBLEMS = frozenset({Problem.INCOMPLETE, Problem.MISSING_SHARD, Problem.TRUNCATED_SHARD})


@dataclass(frozen=True)
class Validity:
    """The verdict on one version."""

    version: VersionId
    problem: Problem | None = None
    reason: str = ""
    manifest: Manifest | None = None
    checked_at: datetime | None = None

    @property
    def valid(self) -> bool:
        return self.problem is None

    @property
    def may_be_stale(self) -> bool:
        """Broken in a way another listing of its prefix might not confirm."""
        return self.problem in LISTING_PROBLEMS

    def describe(self) -> str:
        """`v...-a...: <reason>` or `v...-a...: valid`."""
        return f"{self.version.name}: {self.reason if self.problem else 'valid'}"


def check_version(
    version: VersionId,
    objects: VersionObjects | None,
    manifest_data: bytes | None,
    *,
    checked_at: datetime | None = None,
) -> Validity:
    """The verdict for version from one listing of its prefix (objects; None or empty when the
    listing found nothing) and the manifest's content (None when there is none)."""
    listed = objects.objects if objects is not None else {}
    if manifest_data is None or (objects is not None and MANIFEST_NAME not in listed):
        return Validity(version, Problem.INCOMPLETE, "incomplete: no manifest", None, checked_at)
    try:
        manifest = Manifest.parse(manifest_data)
    except DocumentError as exc:
        return Validity(
            version, Problem.CORRUPT_MANIFEST, f"corrupt manifest: {exc}", None, checked_at
        )
    if manifest.version != version:
        return Validity(
            version,
            Problem.MISPLACED_MANIFEST,
            f"corrupt manifest: it names {manifest.version.name}",
            manifest,
            checked_at,
        )
    for shard in manifest.shards:
        found = listed.get(shard.key)
        if found is None:
            return Validity(
                version, Problem.MISSING_SHARD, f"missing shard {shard.key}", manifest, checked_at
            )
        if found.size != shard.size:
            word = "truncated" if found.size < shard.size else "oversized"
            return Validity(
                version,
                Problem.TRUNCATED_SHARD,
                f"{word} shard {shard.key}: size {found.size} != {shard.size}",
                manifest,
                checked_at,
            )
    return Validity(version, None, "", manifest, checked_at)
