"""Builders for checkpoint unit tests: listings and manifests without a store."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import Manifest, ShardEntry
from rljob.checkpoint_protocol.validity import ListedObject, VersionObjects

LOC = CheckpointLocation("bucket", "ckpt", "rl", "grpo")
NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


def v(step: int, attempt: int) -> VersionId:
    return VersionId(step, attempt)


def manifest(
    version: VersionId, shards: dict[str, bytes] | None = None, *, created_at: datetime = NOW
) -> Manifest:
    shards = {"model/rank0.pt": b"weights"} if shards is None else shards
    return Manifest(
        job=LOC.job,
        namespace=LOC.namespace,
        job_uid="uid-1",
        attempt=version.attempt,
        step=version.step,
        policy_generation=version.step,
        created_at=created_at,
        shards=[
            ShardEntry(key=k, size=len(d), sha256=hashlib.sha256(d).hexdigest())
            for k, d in shards.items()
        ],
    )


def objects(
    version: VersionId,
    *,
    sizes: dict[str, int] | None = None,
    with_manifest: bool = True,
    age: timedelta = timedelta(hours=1),
) -> VersionObjects:
    """A version's listing: shards with sizes (default: the default manifest's) and a manifest."""
    sizes = {"model/rank0.pt": len(b"weights")} if sizes is None else sizes
    names = dict(sizes)
    if with_manifest:
        names["manifest.json"] = 300
    modified = NOW - age
    return VersionObjects(
        version,
        {
            rel: ListedObject(
                LOC.shard_key(version, rel)
                if rel != "manifest.json"
                else LOC.manifest_key(version),
                size,
                f'"{rel}"',
                modified,
            )
            for rel, size in names.items()
        },
    )
