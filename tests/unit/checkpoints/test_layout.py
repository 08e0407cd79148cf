"""Key layout: version names, locations, key classification."""

from __future__ import annotations

import pytest

from rljob.checkpoint_protocol.layout import (
    CheckpointLocation,
    KeyKind,
    VersionId,
    check_shard_key,
    parse_s3_uri,
    resume_env,
)

from ._build import LOC


@pytest.mark.parametrize(
    ("step", "attempt", "name"),
    [
        pytest.param(0, 0, "v000000000000-a000000", id="zero"),
        pytest.param(1200, 3, "v000000001200-a000003", id="typical"),
        pytest.param(10**12 - 1, 10**6 - 1, "v999999999999-a999999", id="max"),
    ],
)
def test_version_name_round_trips(step: int, attempt: int, name: str) -> None:
    version = VersionId(step, attempt)
    assert version.name == name == str(version)
    assert VersionId.parse(name) == version
    assert VersionId.parse(name + "/") == version


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("v1200-a3", id="unpadded"),
        pytest.param("v000000001200-a00003", id="short-attempt"),
        pytest.param("v000000001200_a000003", id="wrong-separator"),
        pytest.param("x000000001200-a000003", id="wrong-letter"),
        pytest.param("v00000000120\u0660-a000003", id="non-ascii-digit"),
        pytest.param("", id="empty"),
    ],
)
def test_bad_version_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="not a checkpoint version"):
        VersionId.parse(name)


@pytest.mark.parametrize(
    ("step", "attempt"),
    [
        pytest.param(-1, 1, id="negative-step"),
        pytest.param(10**12, 1, id="step-too-big"),
        pytest.param(1, 10**6, id="attempt-too-big"),
    ],
)
def test_out_of_range_versions_are_rejected(step: int, attempt: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        VersionId(step, attempt)


def test_key_order_is_version_order() -> None:
    versions = [VersionId(s, a) for s in (0, 9, 10, 99, 100, 1000, 10**11) for a in (1, 2, 10)]
    by_key = sorted(versions, key=LOC.version_prefix)
    assert by_key == sorted(versions)
    # the listing window bounds sort where discovery expects them
    assert LOC.start_after_step(100) < LOC.version_prefix(VersionId(100, 1))
    assert LOC.version_prefix(VersionId(99, 7)) < LOC.start_after_step(100)
    assert LOC.start_after_version(VersionId(100, 1)) < LOC.manifest_key(VersionId(100, 1))
    assert LOC.start_after_version(VersionId(100, 2)) > LOC.manifest_key(VersionId(100, 1))


@pytest.mark.parametrize(
    ("uri", "bucket", "root"),
    [
        pytest.param("s3://ckpt", "ckpt", "", id="bucket-only"),
        pytest.param("s3://ckpt/", "ckpt", "", id="trailing-slash"),
        pytest.param("s3://ckpt/a/b", "ckpt", "a/b", id="prefix"),
    ],
)
def test_parse_s3_uri(uri: str, bucket: str, root: str) -> None:
    assert parse_s3_uri(uri) == (bucket, root)


@pytest.mark.parametrize(
    "uri",
    [
        pytest.param("http://x/y", id="scheme"),
        pytest.param("s3://A_B/x", id="bucket"),
        pytest.param("s3://ckpt/a b", id="space"),
    ],
)
def test_parse_s3_uri_rejects(uri: str) -> None:
    with pytest.raises(ValueError):
        parse_s3_uri(uri)


def test_location_keys() -> None:
    version = VersionId(1200, 3)
    assert LOC.base == "ckpt/rl/grpo/"
    assert LOC.uri == "s3://bucket/ckpt/rl/grpo/"
    assert LOC.version_prefix(version) == "ckpt/rl/grpo/v000000001200-a000003/"
    assert LOC.manifest_key(version) == "ckpt/rl/grpo/v000000001200-a000003/manifest.json"
    assert LOC.marker_key(3) == "ckpt/rl/grpo/attempts/a000003.json"
    assert LOC.pointer_key == "ckpt/rl/grpo/latest.json"
    assert CheckpointLocation.from_uri("s3://bkt", "ns", "job").base == "ns/job/"


def test_location_from_job_and_version_uris() -> None:
    assert CheckpointLocation.from_job_uri("s3://bucket/ckpt/rl/grpo") == LOC
    assert CheckpointLocation.from_job_uri("s3://bucket/rl/grpo/").base == "rl/grpo/"
    version = VersionId(1200, 3)
    assert CheckpointLocation.from_version_uri(LOC.version_uri(version)) == (LOC, version)
    with pytest.raises(ValueError, match="namespace"):
        CheckpointLocation.from_job_uri("s3://bucket/only")


@pytest.mark.parametrize(
    ("key", "kind", "relative"),
    [
        pytest.param("ckpt/rl/grpo/latest.json", KeyKind.POINTER, "", id="pointer"),
        pytest.param("ckpt/rl/grpo/attempts/a000002.json", KeyKind.MARKER, "", id="marker"),
        pytest.param("ckpt/rl/grpo/attempts/junk", KeyKind.OTHER, "", id="junk-marker"),
        pytest.param(
            "ckpt/rl/grpo/v000000000010-a000001/manifest.json",
            KeyKind.VERSION_OBJECT,
            "manifest.json",
            id="manifest",
        ),
        pytest.param(
            "ckpt/rl/grpo/v000000000010-a000001/model/__0_0.distcp",
            KeyKind.VERSION_OBJECT,
            "model/__0_0.distcp",
            id="nested-shard",
        ),
        pytest.param("ckpt/rl/grpo/v10-a1/x", KeyKind.OTHER, "", id="bad-version"),
        pytest.param("ckpt/rl/other/latest.json", KeyKind.OTHER, "", id="other-job"),
        pytest.param("ckpt/rl/grpo-2/latest.json", KeyKind.OTHER, "", id="job-name-prefix"),
    ],
)
def test_parse_key(key: str, kind: KeyKind, relative: str) -> None:
    parsed = LOC.parse_key(key)
    assert parsed.kind is kind
    assert parsed.relative == relative


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("", id="empty"),
        pytest.param("/abs", id="leading-slash"),
        pytest.param("a//b", id="empty-segment"),
        pytest.param("../x", id="dotdot"),
        pytest.param("a/./b", id="dot"),
        pytest.param("manifest.json", id="reserved"),
        pytest.param("a b", id="space"),
    ],
)
def test_bad_shard_keys(key: str) -> None:
    with pytest.raises(ValueError):
        check_shard_key(key)


def test_resume_env() -> None:
    assert resume_env(LOC, VersionId(1200, 3)) == {
        "RLJOB_RESUME_URI": "s3://bucket/ckpt/rl/grpo/v000000001200-a000003/",
        "RLJOB_RESUME_STEP": "1200",
        "RLJOB_RESUME_VERSION": "v000000001200-a000003",
    }
