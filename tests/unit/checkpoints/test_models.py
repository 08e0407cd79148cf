"""Protocol documents: camelCase JSON, format versions, strictness where it matters."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rljob.checkpoint_protocol.models import (
    FORMAT_VERSION,
    AttemptMarker,
    DocumentError,
    Manifest,
    Pointer,
    ShardEntry,
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


# Documents as the pydantic models before rljob.checkpoint_protocol wrote them (tests/unit/
# checkpoints/wire): what a store written by an older operator or SDK holds. Each parses, and
# writing the parsed document again gives the same bytes, so an older reader reads ours too.
WIRE = Path(__file__).parent / "wire"
WIRE_DOCUMENTS: list[tuple[str, type[Manifest | AttemptMarker | Pointer]]] = [
    ("manifest_full.json", Manifest),
    ("manifest_minimal.json", Manifest),
    ("manifest_offset_time.json", Manifest),
    ("marker_resumed.json", AttemptMarker),
    ("marker_fresh.json", AttemptMarker),
    ("pointer.json", Pointer),
    ("pointer_bare.json", Pointer),
]


@pytest.mark.parametrize(("name", "kind"), WIRE_DOCUMENTS, ids=[name for name, _ in WIRE_DOCUMENTS])
def test_documents_the_old_writer_wrote_parse_and_write_back_byte_for_byte(
    name: str, kind: type[Manifest | AttemptMarker | Pointer]
) -> None:
    data = (WIRE / name).read_bytes()
    assert kind.parse(data).to_json() == data


def test_an_old_manifest_parses_to_the_values_it_was_written_with() -> None:
    parsed = Manifest.parse((WIRE / "manifest_full.json").read_bytes())
    assert (parsed.job_uid, parsed.policy_generation, parsed.version) == (
        "0b5e-uid",
        1199,
        v(1200, 3),
    )
    assert parsed.created_at == datetime(2026, 1, 10, 12, 30, 5, 123456, tzinfo=UTC)
    assert parsed.shards[1] == ShardEntry(key="optim/rank1.pt", size=0, sha256="0" * 64)
    assert parsed.metadata["nested"] == {"list": [1, "two", None, True]}


@pytest.mark.parametrize(
    ("value", "written"),
    [
        pytest.param(1.5e-06, "1.5e-6", id="small-exponent-unpadded"),
        pytest.param(1e20, "1e+20", id="large-exponent"),
        pytest.param(0.25, "0.25", id="plain"),
        pytest.param(float("nan"), "null", id="nan-is-null"),
        pytest.param(float("inf"), "null", id="inf-is-null"),
    ],
)
def test_metadata_floats_are_written_as_the_old_writer_wrote_them(
    value: float, written: str
) -> None:
    document = Manifest(
        job="j", namespace="n", attempt=1, step=1, created_at=NOW, metadata={"x": value}
    )
    assert f'"x": {written}\n' in document.to_json().decode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"step": "5"}, "step: must be an integer", id="string-for-integer"),
        pytest.param({"attempt": True}, "attempt: must be an integer", id="bool-for-integer"),
        pytest.param(
            {"createdAt": 1700000000}, "createdAt: must be an ISO 8601 time", id="number-for-time"
        ),
        pytest.param({"job": ""}, "job: must be 1 to 253", id="empty-job"),
        pytest.param({"jobUid": 7}, "jobUid: must be a string", id="number-for-uid"),
        pytest.param({"shards": {}}, "shards: must be a JSON array", id="shards-object"),
        pytest.param({"shards": ["a"]}, "shards.0.shard must be a JSON object", id="shard-string"),
        pytest.param({"metadata": []}, "metadata: must be a JSON object", id="metadata-array"),
    ],
)
def test_parsing_is_strict_and_names_the_wire_field(
    change: dict[str, object], message: str
) -> None:
    data = json.loads(manifest(v(1, 1)).to_json())
    data.update(change)
    with pytest.raises(DocumentError, match=message):
        Manifest.parse(json.dumps(data))


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(b"[]", "must be a JSON object", id="array"),
        pytest.param(
            b'{"namespace": "n", "attempt": 1, "step": 1, "createdAt": "2026-01-01"}',
            "job: Field required",
            id="missing-job",
        ),
    ],
)
def test_what_is_not_a_manifest(document: bytes, message: str) -> None:
    with pytest.raises(DocumentError, match=message):
        Manifest.parse(document)


def test_a_naive_time_is_utc() -> None:
    marker = AttemptMarker(job="j", namespace="n", attempt=1, started_at=datetime(2026, 1, 1))
    assert marker.started_at.tzinfo is UTC
    assert b'"startedAt": "2026-01-01T00:00:00Z"' in marker.to_json()


@pytest.mark.parametrize(
    ("keep_none", "keys"),
    [
        pytest.param(
            False, {"formatVersion", "job", "namespace", "attempt", "startedAt"}, id="wire"
        ),
        pytest.param(
            True,
            {
                "formatVersion", "job", "namespace", "jobUid", "attempt", "startedAt",
                "resumedFromStep", "resumedFromVersion",
            },
            id="display",
        ),
    ],
)  # fmt: skip
def test_absent_fields_are_left_out_of_the_wire_and_kept_for_display(
    keep_none: bool, keys: set[str]
) -> None:
    marker = AttemptMarker(job="j", namespace="n", attempt=1, started_at=NOW)
    assert set(marker.to_wire(keep_none=keep_none)) == keys
