"""The in-memory S3 answers the checkpoint store and the SDK writer the way S3 does: pages and
tokens, conditional writes, multipart uploads, and the faults of S3-compatible stores (lagging,
failing and slow listings, denied upload listings, refused deletes, late zombie writes)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from rljob.adapters.checkpoints import Checkpoints
from rljob.api import parse_rljob
from rljob.checkpoint_protocol.errors import (
    CommitRefused,
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.checkpoints.lineage import Lineage
from tests.unit.model.s3 import (
    FakeClients,
    FakeS3,
    begin_version,
    store,
    version_keys,
    write_version,
)
from tests.unit.reconcile.world import T0, example_body

BUCKET = "ckpt"
LOCATION = CheckpointLocation.from_uri(f"s3://{BUCKET}/runs", "rl", "demo")


def fresh(max_keys: int = 1000) -> FakeS3:
    return FakeS3([BUCKET], max_keys=max_keys)


def marker(attempt: int, resumed_from_step: int | None) -> AttemptMarker:
    return AttemptMarker(
        job="demo", namespace="rl", attempt=attempt, started_at=T0,
        resumed_from_step=resumed_from_step,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("keys", "max_keys", "start_after", "listed", "pages"),
    [
        pytest.param(7, 3, None, 7, 3, id="three-pages"),
        pytest.param(6, 3, None, 6, 2, id="exactly-two-pages"),
        pytest.param(7, 1000, None, 7, 1, id="one-page"),
        pytest.param(7, 3, "runs/k3", 3, 1, id="start-after-a-key"),
        pytest.param(0, 3, None, 0, 1, id="empty-prefix"),
    ],
)
def test_listings_page_in_key_order(
    keys: int, max_keys: int, start_after: str | None, listed: int, pages: int
) -> None:
    s3 = fresh(max_keys)
    for i in reversed(range(keys)):
        s3.put_object(Bucket=BUCKET, Key=f"runs/k{i}", Body=b"x" * i)
    s3.put_object(Bucket=BUCKET, Key="other/k", Body=b"x")
    found = store(s3, LOCATION).list_objects("runs/", start_after)
    assert [o.key for o in found] == sorted(o.key for o in found)
    assert len(found) == listed
    assert sum(1 for op, _ in s3.calls if op == "list_objects_v2") == pages


@pytest.mark.parametrize(
    ("conditional", "existing", "if_match", "outcome"),
    [
        pytest.param(True, False, None, "written", id="create-if-absent"),
        pytest.param(True, True, None, "refused", id="create-if-absent-but-present"),
        pytest.param(True, True, "right", "written", id="replace-if-match"),
        pytest.param(True, True, "wrong", "refused", id="replace-if-match-stale"),
        pytest.param(False, True, None, "written", id="conditions-unsupported-dropped"),
    ],
)
def test_conditional_writes(
    conditional: bool, existing: bool, if_match: str | None, outcome: str
) -> None:
    s3 = fresh()
    s3.conditional_writes = conditional
    adapter = store(s3, LOCATION)
    etag = adapter.put_bytes("runs/doc", b"old") if existing else None
    match = {"right": etag, "wrong": '"0"', None: None}[if_match]
    try:
        adapter.put_bytes("runs/doc", b"new", if_none_match=match is None, if_match=match)
        result = "written"
    except PreconditionFailed:
        result = "refused"
    assert result == outcome
    assert adapter.get_bytes("runs/doc") == (b"new" if outcome == "written" else b"old")
    assert adapter.probe_capabilities(force=True).conditional_writes == conditional


@pytest.mark.parametrize(
    ("lag", "listings_missing"),
    [
        pytest.param(0, 0, id="consistent"),
        pytest.param(1, 1, id="missing-from-one-listing"),
        pytest.param(3, 3, id="missing-from-three-listings"),
    ],
)
def test_a_lagging_listing_shows_a_new_key_after_a_bounded_number_of_listings(
    lag: int, listings_missing: int
) -> None:
    s3 = fresh()
    adapter = store(s3, LOCATION)
    s3.lag_writes(lag)
    adapter.put_bytes("runs/new", b"x")
    s3.lag_writes(0)
    adapter.put_bytes("runs/old", b"x")
    shown = [["runs/new" in [o.key for o in adapter.list_objects("runs/")]] for _ in range(5)]
    assert shown == [[False]] * listings_missing + [[True]] * (5 - listings_missing)
    assert adapter.get_bytes("runs/new") == b"x", "reads after writes are consistent"


def test_a_lagging_key_beyond_the_page_keeps_its_lag() -> None:
    s3 = fresh(max_keys=1)
    adapter = store(s3, LOCATION)
    adapter.put_bytes("runs/a", b"x")
    adapter.put_bytes("runs/b", b"x")
    s3.lag_writes(1)
    adapter.put_bytes("runs/c", b"x")
    first_page = s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/")
    assert [c["Key"] for c in first_page["Contents"]] == ["runs/a"]
    assert [o.key for o in adapter.list_objects("runs/")] == ["runs/a", "runs/b"], "c missing"
    assert [o.key for o in adapter.list_objects("runs/")] == ["runs/a", "runs/b", "runs/c"]


Fault = Callable[[FakeS3], None]


def _failing(s3: FakeS3) -> None:
    s3.fail_listings(code="InternalError", status=500)


def _throttled(s3: FakeS3) -> None:
    s3.fail_listings(code="SlowDown", status=503)


def _slow(s3: FakeS3) -> None:
    s3.time_out_listings()


def _denied(s3: FakeS3) -> None:
    s3.fail_listings(code="AccessDenied", status=403)


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        pytest.param(_failing, StoreUnavailable, id="internal-error"),
        pytest.param(_throttled, StoreUnavailable, id="slow-down"),
        pytest.param(_slow, StoreUnavailable, id="read-timeout"),
        pytest.param(_denied, StoreAccessDenied, id="access-denied"),
    ],
)
def test_a_failing_listing_fails_once(fault: Fault, error: type[StoreError]) -> None:
    s3 = fresh()
    adapter = store(s3, LOCATION)
    fault(s3)
    with pytest.raises(error):
        adapter.list_objects("runs/")
    assert adapter.list_objects("runs/") == []


def test_denied_upload_listing_and_refused_deletes() -> None:
    s3 = fresh()
    adapter = store(s3, LOCATION)
    adapter.put_bytes("runs/kept", b"x")
    adapter.put_bytes("runs/gone", b"x")
    s3.locked.add("runs/kept")
    deleted, failed = adapter.delete_keys(["runs/kept", "runs/gone"])
    assert (deleted, [f.key for f in failed]) == (["runs/gone"], ["runs/kept"])
    s3.deny_multipart_listing = True
    with pytest.raises(StoreAccessDenied):
        adapter.list_uploads()


def test_multipart_uploads_list_page_and_abort() -> None:
    s3 = fresh(max_keys=2)
    ids = [
        s3.create_multipart_upload(Bucket=BUCKET, Key=f"runs/u{i}")["UploadId"] for i in range(3)
    ]
    part = s3.upload_part(Bucket=BUCKET, Key="runs/u0", UploadId=ids[0], PartNumber=1, Body=b"ab")
    parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
    done = s3.complete_multipart_upload(
        Bucket=BUCKET, Key="runs/u0", UploadId=ids[0], MultipartUpload=parts
    )
    assert done["ETag"].endswith('-1"')
    adapter = store(s3, LOCATION)
    pending = adapter.list_uploads("runs/")
    assert sorted(u.key for u in pending) == ["runs/u1", "runs/u2"]
    adapter.abort_upload("runs/u1", ids[1])
    adapter.abort_upload("runs/u1", ids[1])  # a second abort: already gone, quietly
    assert [u.key for u in adapter.list_uploads("runs/")] == ["runs/u2"]
    assert adapter.get_bytes("runs/u0") == b"ab"


@pytest.mark.parametrize(
    ("write", "valid", "eligible_in_attempt_2"),
    [
        pytest.param("complete", True, True, id="complete-version"),
        pytest.param("shards-only", False, True, id="incomplete-version"),
        pytest.param("late-zombie", True, False, id="late-commit-of-a-superseded-attempt"),
    ],
)
def test_versions_as_the_sdk_writes_them(
    write: str, valid: bool, eligible_in_attempt_2: bool
) -> None:
    s3 = fresh()
    adapter = store(s3, LOCATION)
    adapter.write_marker(marker(1, None))
    pending = begin_version(s3, LOCATION, 200, 1, zombie=write == "late-zombie")
    if write == "complete":
        pending.commit()
    adapter.write_marker(marker(2, 100 if write == "late-zombie" else 200))
    if write == "late-zombie":
        with pytest.raises(CommitRefused):
            begin_version(s3, LOCATION, 300, 1).commit()  # the SDK's own check refuses
        pending.commit()
    version = VersionId(200, 1)
    keys = version_keys(s3, LOCATION, version)
    assert (LOCATION.manifest_key(version) in keys) == (write != "shards-only")
    assert adapter.validate(version).valid == valid
    lineage = Lineage.from_markers(adapter.read_markers().values())
    assert lineage.eligible(version) == eligible_in_attempt_2


def test_write_version_moves_the_pointer_and_is_discovered() -> None:
    s3 = fresh()
    adapter = store(s3, LOCATION)
    adapter.write_marker(marker(1, None))
    for step in (100, 200):
        write_version(s3, LOCATION, step, 1)
    pointer = adapter.read_pointer()
    assert pointer is not None and pointer[0].version == "v000000000200-a000001"
    chosen = adapter.discover(Lineage(1, {1: None})).chosen
    assert chosen is not None and chosen.version == VersionId(200, 1)


async def test_the_operator_reaches_the_fake_through_its_client_cache() -> None:
    s3 = FakeS3(["rljob-demo"])
    checkpoints = Checkpoints()
    checkpoints._clients = FakeClients(s3)
    job = parse_rljob(example_body())
    start = await checkpoints.start_attempt(job, 1, dt.datetime.now(dt.UTC))
    assert start.attempt == 1 and start.resumed_from is None
    assert s3.keys("rljob-demo") == ["checkpoints/rl/grpo-demo/attempts/a000001.json"]
