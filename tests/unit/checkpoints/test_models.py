"""Protocol documents: camelCase JSON, format versions, strictness where it matters."""

from __future__ import annotations

import json

import pytest

from rljob.checkpoint_protocol.models import (
    FORMAT_VERSION,
    AttemptMarker,
    DocumentError,
    Manifest,
    Pointer,
)

from ._build import NOW, manifest, v


def test_manifest_round_trips_in_camel_case() -> None:
    original = manifest(v(1200, 3))
    data = json.loads(original.to_json())
    assert data["formatVersion"] == FORMAT_VERSION
    assert {"jobUid", "policyGeneration", "createdAt", "shards"} <= set(data)
    assert data["shards"][0] == {
        "key": "model/rank0.pt",
        "size": 7,
        "sha256": original.shards[0].sha256,
    }
    assert Manifest.parse(original.to_json()) == original
    assert original.version == v(1200, 3)


def test_unknown_fields_are_ignored() -> None:
    data = json.loads(manifest(v(1, 1)).to_json())
    data["addedLater"] = {"x": 1}
    assert Manifest.parse(json.dumps(data)).step == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"formatVersion": FORMAT_VERSION + 1}, "newer than this reader", id="future"),
        pytest.param({"step": -1}, "step", id="negative-step"),
        pytest.param({"createdAt": "yesterday"}, "createdAt", id="bad-time"),
        pytest.param({"shards": [{"key": "a", "size": 1, "sha256": "zz"}]}, "sha256", id="sha"),
        pytest.param({"shards": [{"key": "../a", "size": 1, "sha256": "0" * 64}]}, "key", id="key"),
        pytest.param(
            {"shards": [{"key": "a", "size": 1, "sha256": "0" * 64}] * 2}, "twice", id="dup"
        ),
    ],
)
def test_invalid_manifests_name_the_problem(change: dict[str, object], message: str) -> None:
    data = json.loads(manifest(v(1, 1)).to_json())
    data.update(change)
    with pytest.raises(DocumentError, match=message):
        Manifest.parse(json.dumps(data))


def test_not_json_is_a_document_error() -> None:
    with pytest.raises(DocumentError):
        Manifest.parse(b"{truncated")


def test_marker_and_pointer() -> None:
    marker = AttemptMarker(
        job="grpo", namespace="rl", attempt=2, started_at=NOW, resumed_from_step=100
    )
    data = json.loads(marker.to_json())
    assert data["resumedFromStep"] == 100 and data["startedAt"].startswith("2026-01-10")
    assert AttemptMarker.parse(marker.to_json()) == marker
    pointer = Pointer.to(v(150, 1), NOW)
    assert Pointer.parse(pointer.to_json()).version_id == v(150, 1)
    with pytest.raises(DocumentError):
        Pointer.parse(b'{"version": "v1-a1"}')
