"""Retention: keep the newest `keep` eligible valid versions and the one in use, clean up what
can never be resumed from, and never touch anything eligible that is in use."""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import cast

import pytest

from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.validity import (
    PendingUpload,
    Validity,
    VersionObjects,
    check_version,
)
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.retention import (
    RetentionPlan,
    plan_retention,
    retention_window,
)

from ._build import LOC, NOW, manifest, objects, v

GRACE = timedelta(hours=6)
SECOND = Lineage(2, {1: None, 2: 100})  # attempt 2 resumed from v100-a1

BASE = {
    v(80, 1): objects(v(80, 1)),
    v(90, 1): objects(v(90, 1)),
    v(95, 1): objects(v(95, 1), with_manifest=False),  # crashed mid-save
    v(100, 1): objects(v(100, 1)),  # resumed from
    v(150, 1): objects(v(150, 1)),  # zombie: committed after attempt 2 started
    v(160, 1): objects(v(160, 1), with_manifest=False),  # zombie, half-written
    v(110, 2): objects(v(110, 2)),
    v(120, 2): objects(v(120, 2)),
    v(130, 2): objects(v(130, 2), with_manifest=False, age=timedelta(hours=1)),  # being written
    v(10, 3): objects(v(10, 3)),  # an attempt newer than the one we know of
}


def _verdicts(
    versions: dict[VersionId, VersionObjects],
    broken: set[VersionId] = frozenset(),  # type: ignore[assignment]
) -> dict[VersionId, Validity]:
    out = {}
    for version, listing in versions.items():
        if not listing.complete:
            continue
        data = b"garbage" if version in broken else manifest(version).to_json()
        out[version] = check_version(version, listing, data)
    return out


def _outcome(plan: RetentionPlan) -> dict[VersionId, str]:
    out = {version: "keep" for version in plan.kept}
    out |= {d.version: "delete" for d in plan.deletions}
    out |= {version: "left" for version, _ in plan.left}
    return out


def _plan(
    versions: dict[VersionId, VersionObjects] = BASE,
    *,
    lineage: Lineage = SECOND,
    keep: int = 2,
    broken: set[VersionId] = frozenset(),  # type: ignore[assignment]
    in_use: tuple[VersionId, ...] = (v(100, 1),),
    live: bool = True,
    validities: dict[VersionId, Validity] | None = None,
    uploads: tuple[PendingUpload, ...] = (),
) -> RetentionPlan:
    return plan_retention(
        location=LOC,
        versions=versions,
        lineage=lineage,
        keep=keep,
        validities=_verdicts(versions, broken) if validities is None else validities,
        now=NOW,
        incomplete_grace=GRACE,
        in_use=in_use,
        live=live,
        uploads=uploads,
    )


EXPECTED_BASE = {
    v(120, 2): "keep",
    v(110, 2): "keep",
    v(100, 1): "keep",  # in use
    v(90, 1): "delete",
    v(80, 1): "delete",
    v(95, 1): "delete",  # incomplete, finished attempt
    v(150, 1): "delete",  # zombie: not in the lineage
    v(160, 1): "delete",  # zombie, incomplete
    v(130, 2): "left",  # live attempt, within grace
    v(10, 3): "left",  # newer attempt
}


@pytest.mark.parametrize(
    ("kwargs", "changes"),
    [
        pytest.param({}, {}, id="baseline"),
        pytest.param(
            {"keep": 3}, {}, id="zombie-never-counted"
        ),  # window = 120, 110, 100: v150-a1 takes no slot
        pytest.param({"keep": 4}, {v(90, 1): "keep"}, id="keep-4"),
        pytest.param({"in_use": ()}, {v(100, 1): "delete"}, id="nothing-in-use"),
        pytest.param(
            {"keep": 1, "in_use": (v(110, 2),)},
            {v(110, 2): "keep", v(100, 1): "delete"},
            id="keep-1-in-use-older",
        ),
        pytest.param(
            {"broken": {v(120, 2)}},
            {v(100, 1): "keep"},
            id="broken-newest-kept-uncounted",
        ),
        pytest.param(
            {"validities": {}},
            {v(90, 1): "keep", v(80, 1): "keep"},
            id="unchecked-versions-are-never-deleted",
        ),
        pytest.param({"live": False}, {v(130, 2): "delete"}, id="job-finished"),
        pytest.param(
            {
                "versions": {
                    **BASE,
                    v(130, 2): objects(v(130, 2), with_manifest=False, age=timedelta(hours=7)),
                }
            },
            {v(130, 2): "delete"},
            id="live-incomplete-past-grace",
        ),
        pytest.param(
            {"lineage": Lineage(2, {1: None, 2: None}), "in_use": ()},
            {
                v(80, 1): "left",
                v(90, 1): "left",
                v(100, 1): "left",
                v(150, 1): "left",
            },
            id="scratch-start-leaves-old-lineage-to-humans",
        ),
        pytest.param(
            {"lineage": Lineage(2, {1: None})},
            {v(90, 1): "left", v(80, 1): "left", v(150, 1): "left"},
            id="missing-marker-deletes-nothing-committed",
        ),
    ],
)
def test_plan(kwargs: dict[str, object], changes: dict[VersionId, str]) -> None:
    plan = _plan(**kwargs)  # type: ignore[arg-type]
    expected = {**EXPECTED_BASE, **changes}
    versions = cast("Collection[VersionId]", kwargs.get("versions", BASE))
    assert _outcome(plan) == {k: e for k, e in expected.items() if k in versions}
    in_use = set(kwargs.get("in_use", (v(100, 1),)))  # type: ignore[call-overload]
    for deletion in plan.deletions:
        assert deletion.version not in in_use
        assert deletion.reason


def test_nothing_eligible_in_use_is_ever_deleted() -> None:
    for keep in range(1, 8):
        for in_use in [v(80, 1), v(90, 1), v(100, 1), v(110, 2), v(120, 2)]:
            plan = _plan(keep=keep, in_use=(in_use,))
            assert in_use in plan.kept
            kept_valid = [x for x in plan.kept if x in retention_window(BASE, SECOND)]
            assert len(kept_valid) >= min(keep, 5)


def test_reasons_name_the_rule() -> None:
    reasons = {d.version: d.reason for d in _plan().deletions}
    assert reasons[v(90, 1)].startswith("beyond keep=2")
    assert reasons[v(95, 1)] == "incomplete version of finished attempt 1"
    assert "attempt 2 resumed from step 100 < 150" in reasons[v(150, 1)]
    late = {**BASE, v(130, 2): objects(v(130, 2), with_manifest=False, age=timedelta(hours=7))}
    assert _plan(late).deletions[-1].reason == "incomplete for 7h00m > incompleteGrace 6h00m"


def test_manifest_keys_come_first() -> None:
    plan = _plan()
    manifests = plan.manifest_keys()
    assert manifests == [LOC.manifest_key(x) for x in (v(80, 1), v(90, 1), v(150, 1))]
    others = plan.other_keys()
    assert not set(manifests) & set(others)
    assert LOC.shard_key(v(95, 1), "model/rank0.pt") in others


@pytest.mark.parametrize(
    ("key", "age", "aborted", "reason"),
    [
        pytest.param(
            LOC.shard_key(v(160, 1), "big"), 1, True, "upload of finished attempt 1", id="finished"
        ),
        pytest.param(LOC.shard_key(v(130, 2), "big"), 1, False, "", id="live-fresh"),
        pytest.param(
            LOC.shard_key(v(130, 2), "big"),
            7,
            True,
            "upload started 7h00m ago > incompleteGrace 6h00m",
            id="live-stale",
        ),
        pytest.param(LOC.shard_key(v(10, 3), "big"), 9, False, "", id="newer-attempt"),
        pytest.param(LOC.base + "stray", 7, True, "upload started 7h00m ago", id="stray-stale"),
    ],
)
def test_uploads(key: str, age: int, aborted: bool, reason: str) -> None:
    upload = PendingUpload(key, "id-1", NOW - timedelta(hours=age))
    plan = _plan(uploads=(upload,))
    assert bool(plan.aborts) is aborted
    if aborted:
        assert plan.aborts[0].reason.startswith(reason)
        assert (plan.aborts[0].key, plan.aborts[0].upload_id) == (key, "id-1")


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError):
        _plan(keep=0)
