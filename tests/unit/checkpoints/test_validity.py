"""Validity from one listing plus the manifest."""

from __future__ import annotations

import pytest

from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.validity import (
    ListedObject,
    Problem,
    VersionObjects,
    check_version,
    group_versions,
)

from ._build import LOC, manifest, objects, v

V = v(100, 1)
GOOD = manifest(V, {"model/rank0.pt": b"weights", "model/rank1.pt": b"weights!", "state": b""})
SIZES = {"model/rank0.pt": 7, "model/rank1.pt": 8, "state": 0}


@pytest.mark.parametrize(
    ("listing", "data", "problem", "reason"),
    [
        pytest.param(objects(V, sizes=SIZES), GOOD.to_json(), None, "", id="valid"),
        pytest.param(
            objects(V, sizes={}), manifest(V, {}).to_json(), None, "", id="valid-no-shards"
        ),
        pytest.param(
            objects(V, sizes=SIZES, with_manifest=False),
            None,
            Problem.INCOMPLETE,
            "incomplete: no manifest",
            id="incomplete",
        ),
        pytest.param(
            objects(V, sizes=SIZES, with_manifest=False),
            GOOD.to_json(),
            Problem.INCOMPLETE,
            "incomplete: no manifest",
            id="listing-wins-over-stale-manifest",
        ),
        pytest.param(
            objects(V, sizes=SIZES),
            b'{"formatVersion": 1, "job": "grpo"',
            Problem.CORRUPT_MANIFEST,
            "corrupt manifest: ",
            id="corrupt-json",
        ),
        pytest.param(
            objects(V, sizes=SIZES),
            b'{"formatVersion": 1}',
            Problem.CORRUPT_MANIFEST,
            "corrupt manifest: job: Field required",
            id="corrupt-missing-fields",
        ),
        pytest.param(
            objects(V, sizes=SIZES),
            manifest(v(200, 1)).to_json(),
            Problem.MISPLACED_MANIFEST,
            "corrupt manifest: it names v000000000200-a000001",
            id="misplaced",
        ),
        pytest.param(
            objects(V, sizes={"model/rank0.pt": 7, "state": 0}),
            GOOD.to_json(),
            Problem.MISSING_SHARD,
            "missing shard model/rank1.pt",
            id="missing-shard",
        ),
        pytest.param(
            objects(V, sizes={**SIZES, "model/rank1.pt": 3}),
            GOOD.to_json(),
            Problem.TRUNCATED_SHARD,
            "truncated shard model/rank1.pt: size 3 != 8",
            id="truncated-shard",
        ),
        pytest.param(
            objects(V, sizes={**SIZES, "model/rank1.pt": 9}),
            GOOD.to_json(),
            Problem.TRUNCATED_SHARD,
            "oversized shard model/rank1.pt: size 9 != 8",
            id="oversized-shard",
        ),
        pytest.param(
            objects(V, sizes={**SIZES, "extra.bin": 5}), GOOD.to_json(), None, "", id="extra-ok"
        ),
    ],
)
def test_check_version(
    listing: VersionObjects, data: bytes | None, problem: Problem | None, reason: str
) -> None:
    verdict = check_version(V, listing, data)
    assert verdict.problem is problem
    assert verdict.valid is (problem is None)
    assert verdict.reason.startswith(reason)
    if problem is None:
        assert verdict.describe() == "v000000000100-a000001: valid"
    else:
        assert verdict.describe() == f"v000000000100-a000001: {verdict.reason}"


def test_group_versions_ignores_foreign_keys() -> None:
    keys = [
        LOC.manifest_key(v(1, 1)),
        LOC.shard_key(v(1, 1), "a"),
        LOC.shard_key(v(2, 1), "a"),
        LOC.pointer_key,
        LOC.marker_key(1),
        "ckpt/rl/grpo/v0001/x",
        "elsewhere/v000000000001-a000001/manifest.json",
    ]
    grouped = group_versions(LOC, [ListedObject(k, 1) for k in keys])
    assert list(grouped) == [v(1, 1), v(2, 1)]
    assert grouped[v(1, 1)].complete and not grouped[v(2, 1)].complete
    assert grouped[v(1, 1)].object_keys()[0] == LOC.manifest_key(v(1, 1))


def test_keys_put_the_manifest_first() -> None:
    listing = objects(VersionId(5, 1), sizes={"z": 1, "a": 1})
    assert [k.rsplit("/", 1)[-1] for k in listing.object_keys()] == ["manifest.json", "a", "z"]
