"""Versioned checkpoints against a real S3-compatible server (versitygw): the SDK, discovery,
validation, lineage, retention and failure handling."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import json
import math
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from rljob.checkpoint_protocol.errors import (
    ChecksumMismatch,
    CommitRefused,
    PreconditionFailed,
    StoreUnavailable,
)
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId, resume_env
from rljob.checkpoint_protocol.models import AttemptMarker, Manifest, Pointer
from rljob.checkpoint_protocol.s3 import StoreEndpoint
from rljob.checkpoint_protocol.s3.transport import READ_TIMEOUT
from rljob.checkpoint_protocol.validity import Problem
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.s3 import AsyncCheckpointStore, OperatorStore, cli
from rljob.dev.processes import free_ports
from rljob.dev.s3server import S3Server
from rljob.sdk import CheckpointReader, CheckpointWriter, resolve_resume
from tests.integration.s3_fixtures import (  # noqa: F401 - fixtures
    S3Bucket,
    private_s3_fixture,
    s3_bucket_fixture,
    s3_server_fixture,
)

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
NOW = datetime.now(UTC)


def marker(location: CheckpointLocation, attempt: int, resumed: int | None) -> AttemptMarker:
    return AttemptMarker(
        job=location.job,
        namespace=location.namespace,
        job_uid="uid-test",
        attempt=attempt,
        started_at=datetime.now(UTC),
        resumed_from_step=resumed,
    )


def writer(
    s3: S3Bucket, location: CheckpointLocation, attempt: int, **kw: object
) -> CheckpointWriter:
    return CheckpointWriter.from_env(s3.env(location, attempt), **kw)  # type: ignore[arg-type]


def save(w: CheckpointWriter, step: int, shards: dict[str, bytes] | None = None) -> Manifest:
    shards = (
        {"model/rank0.pt": f"weights@{step}".encode(), "state.json": b"{}"}
        if shards is None
        else shards
    )
    with w.version(step, policy_generation=step) as version:
        for key, data in shards.items():
            version.write_bytes(key, data)
    assert version.manifest is not None
    return version.manifest


# -- the server -------------------------------------------------------------------------------


def test_every_listener_is_on_loopback(s3_server: S3Server) -> None:
    assert s3_server.pid is not None
    process = psutil.Process(s3_server.pid)
    sockets = [*process.net_connections(kind="inet")]
    for child in process.children(recursive=True):
        sockets += child.net_connections(kind="inet")
    listening = [c for c in sockets if c.status == psutil.CONN_LISTEN]
    assert [(c.laddr.ip, c.laddr.port) for c in listening] == [("127.0.0.1", s3_server.port)]
    udp = [c for c in sockets if c.type == socket.SOCK_DGRAM]
    assert all(c.laddr.ip == "127.0.0.1" for c in udp), udp


def test_s3_features_the_protocol_relies_on(s3_bucket: S3Bucket) -> None:
    store = s3_bucket.store(page_size=3)
    base = store.location.base
    for i in range(10):
        store.put_bytes(f"{base}k{i:02d}", b"x" * i)
    # ListObjectsV2 with StartAfter and pagination (page size 3)
    pages = list(store.list_pages(base, start_after=f"{base}k03"))
    assert [len(p) for p in pages] == [3, 3]
    assert [o.key[-3:] for p in pages for o in p] == [f"k{i:02d}" for i in range(4, 10)]
    assert [o.size for p in pages for o in p] == list(range(4, 10))
    # conditional PutObject
    with pytest.raises(PreconditionFailed):
        store.put_bytes(f"{base}k01", b"new", if_none_match=True)
    assert store.get_bytes(f"{base}k01") == b"x"
    etag = store.get_object(f"{base}k02")[1]  # type: ignore[index]
    with pytest.raises(PreconditionFailed):
        store.put_bytes(f"{base}k02", b"cas", if_match='"not-the-etag"')
    store.put_bytes(f"{base}k02", b"cas", if_match=etag)
    assert store.get_bytes(f"{base}k02") == b"cas"
    assert store.probe_capabilities(force=True).conditional_writes is True
    # DeleteObjects, including a key that does not exist
    deleted, failed = store.delete_keys([f"{base}k00", f"{base}k01", f"{base}nope"])
    assert not failed and len(deleted) == 3
    assert store.get_bytes(f"{base}k00") is None
    # multipart upload, ListMultipartUploads, AbortMultipartUpload
    client = s3_bucket.client
    upload = client.create_multipart_upload(Bucket=s3_bucket.name, Key=f"{base}stale")
    client.upload_part(
        Bucket=s3_bucket.name,
        Key=f"{base}stale",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"p",
    )
    uploads = store.list_uploads()
    assert [(u.key, u.upload_id) for u in uploads] == [(f"{base}stale", upload["UploadId"])]
    assert uploads[0].initiated is not None
    store.abort_upload(f"{base}stale", upload["UploadId"])
    store.abort_upload(f"{base}stale", upload["UploadId"])  # again: already gone is fine
    assert store.list_uploads() == []


# -- SDK round trip ---------------------------------------------------------------------------


def test_round_trip_through_the_sdk(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    w = writer(s3_bucket, location, 1, multipart_threshold=6 * MiB, part_size=5 * MiB)
    big = bytes(range(256)) * (12 * MiB // 256 + 7)  # 12 MiB + a bit: 3 parts
    small_file = tmp_path / "rank1.pt"
    small_file.write_bytes(b"rank one weights")
    with w.version(1200, policy_generation=1199, metadata={"epoch": 3}) as version:
        version.write_stream("model/rank0.pt", io.BytesIO(big))
        version.write_file("model/rank1.pt", small_file)
        version.write_bytes("train_state.json", b'{"step": 1200}')
        version.write_bytes("empty", b"")
        assert store.get_bytes(location.manifest_key(version.version)) is None  # not yet
    manifest = version.manifest
    assert manifest is not None and manifest.version == VersionId(1200, 1)
    assert {s.key: s.size for s in manifest.shards} == {
        "empty": 0,
        "model/rank0.pt": len(big),
        "model/rank1.pt": 16,
        "train_state.json": 14,
    }
    assert manifest.job_uid == "uid-test" and manifest.metadata == {"epoch": 3}
    pointer = store.read_pointer()
    assert pointer is not None and pointer[0].version_id == VersionId(1200, 1)
    assert store.list_uploads() == []  # the multipart upload completed

    # the operator discovers it and injects the resume variables into the next attempt
    discovery = store.discover(Lineage(1, {1: None}))
    assert discovery.selection.version == VersionId(1200, 1) and not discovery.selection.skipped
    resume = resolve_resume(resume_env(location, VersionId(1200, 1)))
    assert resume is not None and resume.step == 1200
    reader = CheckpointReader(location, resume.version, endpoint=s3_bucket.endpoint)
    files = reader.download(tmp_path / "restore")
    assert sorted(p.relative_to(tmp_path / "restore").as_posix() for p in files) == [
        "empty",
        "model/rank0.pt",
        "model/rank1.pt",
        "train_state.json",
    ]
    assert (tmp_path / "restore/model/rank0.pt").read_bytes() == big
    assert reader.read_bytes("train_state.json") == b'{"step": 1200}'

    # same size, different content: only the checksum can tell
    store.put_bytes(location.shard_key(resume.version, "model/rank1.pt"), b"RANK ONE WEIGHTS")
    with pytest.raises(ChecksumMismatch, match=r"model/rank1\.pt: sha256"):
        CheckpointReader(location, resume.version, endpoint=s3_bucket.endpoint).download(
            tmp_path / "again", shards=["model/rank1.pt"]
        )
    assert not (tmp_path / "again/model/rank1.pt").exists()


def test_resolve_resume_without_variables_is_a_fresh_start() -> None:
    assert resolve_resume({}) is None
    with pytest.raises(ValueError, match="does not match"):
        resolve_resume(
            {
                "RLJOB_RESUME_URI": "s3://ckpt/rl/j/v000000000010-a000001/",
                "RLJOB_RESUME_STEP": "20",
            }
        )


def test_a_committed_version_cannot_be_committed_again(s3_bucket: S3Bucket) -> None:
    location = s3_bucket.location()
    w = writer(s3_bucket, location, 1)
    save(w, 10)
    with pytest.raises(CommitRefused, match="already committed"):
        save(w, 10)


# -- crash and broken versions ----------------------------------------------------------------


def test_a_crash_between_shards_and_manifest_is_never_resumed_from(s3_bucket: S3Bucket) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    w = writer(s3_bucket, location, 1)
    save(w, 10)

    class CrashError(Exception):
        pass

    with pytest.raises(CrashError), w.version(20) as version:
        version.write_bytes("model/rank0.pt", b"half of it")
        raise CrashError
    assert store.get_bytes(location.shard_key(VersionId(20, 1), "model/rank0.pt")) is not None
    assert store.get_bytes(location.manifest_key(VersionId(20, 1))) is None

    discovery = store.discover(Lineage(1, {1: None}))
    assert discovery.selection.version == VersionId(10, 1)
    assert [(v.version, v.reason) for v in discovery.selection.skipped] == [
        (VersionId(20, 1), "incomplete: no manifest")
    ]
    pointer = store.read_pointer()
    assert pointer is not None and pointer[0].version_id == VersionId(10, 1)


@pytest.mark.parametrize(
    ("damage", "problem", "reason"),
    [
        pytest.param(
            "corrupt", Problem.CORRUPT_MANIFEST, "corrupt manifest: ", id="corrupt-manifest"
        ),
        pytest.param(
            "missing", Problem.MISSING_SHARD, "missing shard model/rank0.pt", id="missing-shard"
        ),
        pytest.param(
            "truncated",
            Problem.TRUNCATED_SHARD,
            "truncated shard model/rank0.pt: size 4 != 15",
            id="truncated-shard",
        ),
    ],
)
def test_a_broken_newest_version_falls_back_with_the_reason(
    s3_bucket: S3Bucket, damage: str, problem: Problem, reason: str
) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    w = writer(s3_bucket, location, 1)
    save(w, 10)
    save(w, 20, {"model/rank0.pt": b"weights@step-20", "state.json": b"{}"})
    newest = VersionId(20, 1)
    shard = location.shard_key(newest, "model/rank0.pt")
    if damage == "corrupt":
        store.put_bytes(location.manifest_key(newest), b'{"formatVersion": 1, "job": ')
    elif damage == "missing":
        store.delete_keys([shard])
    else:
        store.put_bytes(shard, b"weig")

    discovery = store.discover(Lineage(1, {1: None}))
    selection = discovery.selection
    assert selection.version == VersionId(10, 1)
    assert [v.problem for v in selection.skipped] == [problem]
    assert selection.skipped[0].reason.startswith(reason)
    assert selection.message().startswith(f"v000000000020-a000001: {reason}")
    assert selection.message().endswith("fell back to v000000000010-a000001")
    # the CLI tells the same story
    assert store.validate(newest).reason == selection.skipped[0].reason


# -- the zombie -------------------------------------------------------------------------------


def test_a_zombie_is_never_resumed_from_nor_counted(s3_bucket: S3Bucket) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    first = writer(s3_bucket, location, 1)
    for step in (80, 90, 100):
        save(first, step)

    # the operator starts attempt 2 from step 100; attempt 1 lives on as a zombie
    store.write_marker(marker(location, 2, 100))
    with pytest.raises(CommitRefused, match="attempt 2 has started"):
        save(first, 140)
    # ...but a zombie that checked before the marker existed still commits step 150 and moves
    # the pointer
    zombie = writer(s3_bucket, location, 1, check_newer_attempt=False)
    save(zombie, 150)
    pointer = store.read_pointer()
    assert pointer is not None and pointer[0].version_id == VersionId(150, 1)

    lineage = Lineage.from_markers(store.read_markers().values())
    assert lineage.current_attempt == 2
    discovery = store.discover(lineage)
    assert discovery.selection.version == VersionId(100, 1)
    assert discovery.pointer_note.startswith("pointer v000000000150-a000001 ignored")
    assert VersionId(150, 1) not in [v.version for v in discovery.selection.skipped]

    # attempt 2 saves; the pointer moves past the zombie's (a newer attempt wins)
    second = writer(s3_bucket, location, 2)
    save(second, 110)
    pointer = store.read_pointer()
    assert pointer is not None and pointer[0].version_id == VersionId(110, 2)
    # and the zombie can no longer move it back
    save(zombie, 160)
    pointer = store.read_pointer()
    assert pointer is not None and pointer[0].version_id == VersionId(110, 2)
    assert store.discover(lineage).selection.version == VersionId(110, 2)

    # retention with keep=2: the zombie's versions take no slot and are deleted
    plan = store.plan_retention(
        lineage, keep=2, incomplete_grace=timedelta(hours=1), in_use=[VersionId(100, 1)]
    )
    assert plan.kept == (VersionId(110, 2), VersionId(100, 1))
    assert sorted(plan.deleted_versions) == [
        VersionId(80, 1),
        VersionId(90, 1),
        VersionId(140, 1),  # the refused commit left its shards: incomplete, attempt finished
        VersionId(150, 1),
        VersionId(160, 1),
    ]
    result = store.apply_retention(plan)
    assert result.ok, result.message()
    left = store.list_versions()
    assert sorted(left) == [VersionId(100, 1), VersionId(110, 2)]
    assert all(objs.complete for objs in left.values())


# -- retention --------------------------------------------------------------------------------


def test_retention_deletes_what_it_should_and_nothing_eligible(s3_bucket: S3Bucket) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    first = writer(s3_bucket, location, 1)
    for step in (10, 20, 30):
        save(first, step)
    with pytest.raises(RuntimeError), first.version(35) as half:  # crashed mid-save
        half.write_bytes("model/rank0.pt", b"partial")
        raise RuntimeError
    store.write_marker(marker(location, 2, 30))
    second = writer(s3_bucket, location, 2)
    for step in (40, 50, 60, 70):
        save(second, step)
    with pytest.raises(RuntimeError), second.version(80) as live:  # being written right now
        live.write_bytes("model/rank0.pt", b"in progress")
        raise RuntimeError
    client = s3_bucket.client
    stale = client.create_multipart_upload(
        Bucket=s3_bucket.name, Key=location.shard_key(VersionId(25, 1), "big")
    )
    fresh = client.create_multipart_upload(
        Bucket=s3_bucket.name, Key=location.shard_key(VersionId(80, 2), "big")
    )
    lineage = Lineage.from_markers(store.read_markers().values())
    other_job = s3_bucket.store(s3_bucket.location(job="other"))
    save(CheckpointWriter(other_job.location, 1, endpoint=s3_bucket.endpoint), 5)

    plan = store.plan_retention(
        lineage, keep=3, incomplete_grace=timedelta(hours=1), in_use=[VersionId(30, 1)]
    )
    assert plan.kept == (VersionId(70, 2), VersionId(60, 2), VersionId(50, 2), VersionId(30, 1))
    assert sorted(plan.deleted_versions) == [
        VersionId(10, 1),
        VersionId(20, 1),
        VersionId(35, 1),  # incomplete, attempt 1 is finished
        VersionId(40, 2),
    ]
    assert [v for v, _ in plan.left] == [VersionId(80, 2)]
    assert plan.left[0][1].endswith("may still be in progress")
    assert [a.upload_id for a in plan.aborts] == [stale["UploadId"]]
    result = store.apply_retention(plan)
    assert result.ok and len(result.aborted) == 1
    assert sorted(store.list_versions()) == [
        VersionId(30, 1),
        VersionId(50, 2),
        VersionId(60, 2),
        VersionId(70, 2),
        VersionId(80, 2),
    ]
    assert [u.upload_id for u in store.list_uploads()] == [fresh["UploadId"]]
    assert len(other_job.list_versions()) == 1  # another job's prefix is never touched

    # once the job is over, the half-written version and its upload go too
    plan = store.plan_retention(
        lineage, keep=3, incomplete_grace=timedelta(hours=1), in_use=[VersionId(30, 1)], live=False
    )
    assert plan.deleted_versions == [VersionId(80, 2)]
    assert store.apply_retention(plan).ok
    assert store.list_uploads() == []


def test_a_refused_delete_is_reported_not_raised(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    w = writer(s3_bucket, location, 1)
    for step in (10, 20):
        save(w, step)
    plan = store.plan_retention(Lineage(1, {1: None}), keep=1, incomplete_grace=timedelta(hours=1))
    assert plan.deleted_versions == [VersionId(10, 1)]
    # a second gateway over the same data, read-only: deletes are refused (as object lock or a
    # missing permission would)
    readonly = S3Server(
        tmp_path,
        s3_bucket.server.binary.parent,
        free_ports(1)[0],
        data_dir=s3_bucket.server.data_dir,
        secret_key=s3_bucket.server.secret_key,
        extra_args=["--readonly"],
        name="versitygw-readonly",
    )
    readonly.start()
    try:
        ro_store = OperatorStore(location, readonly.store_endpoint())
        result = ro_store.apply_retention(plan)
    finally:
        readonly.stop()
    assert not result.ok
    assert result.failed[0].key == location.manifest_key(VersionId(10, 1))
    assert result.message().startswith(
        f"could not delete {location.manifest_key(VersionId(10, 1))}"
    )
    # the manifest delete failed, so its shards were not touched: the version is still whole
    assert store.validate(VersionId(10, 1)).valid


# -- markers ----------------------------------------------------------------------------------


def test_markers_continue_attempt_numbers(s3_bucket: S3Bucket) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    assert store.next_attempt() == 1
    store.write_marker(marker(location, 1, None))
    store.write_marker(marker(location, 2, 10))
    assert store.write_marker(marker(location, 2, 10)).resumed_from_step == 10  # retried write
    other_uid = dataclasses.replace(marker(location, 2, 10), job_uid="another-job")
    with pytest.raises(PreconditionFailed, match="already exists"):
        store.write_marker(other_uid)
    # a new RLJob of the old name (new uid, new store instance) continues from the highest marker
    fresh = s3_bucket.store(location)
    assert fresh.next_attempt() == 3
    assert sorted(fresh.read_markers()) == [1, 2]


# -- discovery among 10,000 versions ----------------------------------------------------------

VERSIONS = 10_000
STEP = 10


@pytest.fixture(scope="module")
def many_versions(s3_server: S3Server) -> Iterator[S3Bucket]:
    """10,000 committed versions of attempt 1 (one tiny manifest each), steps 10..100,000."""
    from tests.integration.s3_fixtures import bucket_name

    bucket = S3Bucket(s3_server, bucket_name("many-versions"))
    s3_server.create_bucket(bucket.name)
    location = bucket.location()
    client = s3_server.client()
    created = datetime.now(UTC)

    def put(i: int) -> None:
        version = VersionId((i + 1) * STEP, 1)
        body = Manifest(
            job=location.job,
            namespace=location.namespace,
            attempt=1,
            step=version.step,
            created_at=created,
        ).to_json()
        client.put_object(Bucket=bucket.name, Key=location.manifest_key(version), Body=body)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(put, range(VERSIONS)))
    print(f"created {VERSIONS} versions in {time.monotonic() - started:.1f}s")
    store = bucket.store(location)
    store.write_marker(marker(location, 1, None))
    yield bucket


def _counted_store(bucket: S3Bucket) -> tuple[OperatorStore, list[str]]:
    """A store with a private client whose HTTP requests are recorded."""
    store = bucket.store(bucket.location(), private_client=True)
    sent: list[str] = []
    store.client.meta.events.register(
        "before-send.s3.*", lambda request, **_: sent.append(f"{request.method} {request.url}")
    )
    return store, sent


def _pages(keys: int) -> int:
    return max(1, math.ceil(keys / 1000))


@pytest.mark.parametrize(
    ("pointer_step", "expected_requests"),
    [
        pytest.param(VERSIONS * STEP, 3, id="pointer-fresh"),
        pytest.param(VERSIONS * STEP - 2_500 * STEP, 3 + _pages(2_500), id="pointer-stale-2500"),
    ],
)
def test_discovery_requests_among_10000_versions(
    many_versions: S3Bucket, pointer_step: int, expected_requests: int
) -> None:
    location = many_versions.location()
    many_versions.store(location).put_bytes(
        location.pointer_key, Pointer.to(VersionId(pointer_step, 1)).to_json()
    )
    store, sent = _counted_store(many_versions)
    discovery = store.discover(Lineage(1, {1: None}))
    print(f"discovery: {discovery.requests} requests (bound {expected_requests}): {sent}")
    assert discovery.selection.version == VersionId(VERSIONS * STEP, 1)
    assert discovery.requests == len(sent) <= expected_requests, sent
    assert not discovery.full_scan


def test_discovery_ignores_a_pointer_from_a_superseded_attempt(many_versions: S3Bucket) -> None:
    location = many_versions.location()
    setup = many_versions.store(location)
    # attempt 2 resumed from step 50,000 and saved twice; attempt 1 (a zombie) kept writing up to
    # step 100,000 and its pointer is the newest
    resumed = VERSIONS * STEP // 2
    setup.write_marker(marker(location, 2, resumed))
    second = CheckpointWriter(location, 2, endpoint=many_versions.endpoint)
    for step in (resumed + 5, resumed + 15):
        save(second, step)
    setup.put_bytes(location.pointer_key, Pointer.to(VersionId(VERSIONS * STEP, 1)).to_json())
    lineage = Lineage.from_markers(setup.read_markers().values())
    newest = VersionId(resumed + 15, 2)
    try:
        _discover_past_the_zombie_pointer(many_versions, lineage, newest)
    finally:  # leave the module's bucket as the other tests expect it
        attempt_2 = [
            o.key
            for v in (VersionId(resumed + 5, 2), newest)
            for o in setup.list_objects(location.version_prefix(v))
        ]
        setup.delete_keys([location.marker_key(2), *attempt_2])


def _discover_past_the_zombie_pointer(
    many_versions: S3Bucket, lineage: Lineage, newest: VersionId
) -> None:
    resumed = VERSIONS * STEP // 2
    # keys from the resume step on: attempt 1's 5,000 manifests plus attempt 2's 2 x 3 objects
    after_resume = VERSIONS // 2 + 1 + 6

    # with status.checkpoint.history (the operator's normal case)
    store, sent = _counted_store(many_versions)
    discovery = store.discover(lineage, history=[VersionId(resumed + 5, 2), newest])
    print(f"with history: {discovery.requests} requests, {discovery.pointer_note}")
    assert discovery.selection.version == newest
    assert discovery.pointer == VersionId(VERSIONS * STEP, 1)
    assert "ignored" in discovery.pointer_note and "attempt 2 resumed from step 50000" in (
        discovery.pointer_note
    )
    assert discovery.requests == len(sent) <= 3 + _pages(after_resume - 4)

    # without history: the listing starts at the step attempt 2 resumed from
    store, sent = _counted_store(many_versions)
    discovery = store.discover(lineage)
    print(f"without history: {discovery.requests} requests from {discovery.start_after}")
    assert discovery.selection.version == newest
    assert discovery.requests == len(sent) <= 3 + _pages(after_resume)
    assert not discovery.full_scan


# -- the store unavailable --------------------------------------------------------------------


async def test_store_down_raises_store_unavailable_and_deletes_nothing(
    private_s3: S3Bucket,
) -> None:
    location = private_s3.location()
    store = private_s3.store(location)
    store.write_marker(marker(location, 1, None))
    w = writer(private_s3, location, 1)
    for step in (10, 20, 30):
        save(w, step)
    lineage = Lineage(1, {1: None})
    plan = store.plan_retention(lineage, keep=1, incomplete_grace=timedelta(0))
    assert len(plan.deletions) == 2
    before = sorted(private_s3.all_keys())

    private_s3.server.stop()
    timeout = 20.0
    astore = AsyncCheckpointStore(store, timeout=timeout)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    try:
        for call in (
            lambda: astore.discover(lineage),
            lambda: astore.plan_retention(lineage, keep=1, incomplete_grace=timedelta(0)),
            lambda: astore.apply_retention(plan),
            lambda: astore.write_marker(marker(location, 2, 30)),
            astore.read_markers,
        ):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await call()
            assert time.monotonic() - started < timeout
    finally:
        tick_task.cancel()
    assert ticks > 10  # the event loop kept running while the store was down

    private_s3.server.start()
    assert sorted(private_s3.all_keys()) == before  # nothing deleted


async def test_a_hung_store_times_out_without_blocking_the_loop(private_s3: S3Bucket) -> None:
    # a listener that accepts connections and never answers
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        endpoint = StoreEndpoint(
            url=f"http://127.0.0.1:{hung.getsockname()[1]}",
            region="us-east-1",
            addressing_style="path",
            credentials=private_s3.endpoint.credentials,
        )
        store = OperatorStore(private_s3.location(), endpoint)
        astore = AsyncCheckpointStore(store, timeout=1.0)
        started = time.monotonic()
        probe = asyncio.create_task(asyncio.sleep(0.2))
        with pytest.raises(StoreUnavailable, match="no answer within 1s"):
            await astore.discover(Lineage(1, {1: None}))
        elapsed = time.monotonic() - started
        # without the deadline the read would wait for boto's READ_TIMEOUT: a loaded machine may
        # add seconds to the 1s deadline, but never that many
        assert probe.done() and 0.9 < elapsed < READ_TIMEOUT / 2
    finally:
        hung.close()  # the worker thread's read fails now and it finishes


# -- capabilities and the CLI -----------------------------------------------------------------


def test_capability_probe_is_cached_per_endpoint(s3_bucket: S3Bucket) -> None:
    store = s3_bucket.store(private_client=True)
    caps = store.probe_capabilities()
    assert caps.conditional_writes is True and caps.probed_at is not None
    used = store.requests
    assert store.probe_capabilities() == caps
    assert store.requests == used
    assert not [k for k in s3_bucket.all_keys() if ".rljob-probe" in k]


def test_cli(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    location = s3_bucket.location()
    store = s3_bucket.store(location)
    store.write_marker(marker(location, 1, None))
    w = writer(s3_bucket, location, 1)
    save(w, 10)
    save(w, 20)
    store.delete_keys([location.shard_key(VersionId(20, 1), "state.json")])
    for name, value in s3_bucket.server.env().items():
        monkeypatch.setenv(name, value)
    job_uri = f"s3://{s3_bucket.name}/{location.base}"

    def run(*argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(list(argv), out=out, err=err)
        return code, out.getvalue() + err.getvalue()

    code, text = run("ls", job_uri)
    assert code == 0
    assert "v000000000020-a000001" in text and "committed" in text and "current attempt: 1" in text
    code, text = run("ls", job_uri, "--json")
    assert code == 0 and [v["version"] for v in json.loads(text)["versions"]] == [
        "v000000000020-a000001",
        "v000000000010-a000001",
    ]
    code, text = run("show", location.version_uri(VersionId(10, 1)))
    assert code == 0 and "step / attempt:    10 / 1" in text and "state:             valid" in text
    code, text = run("validate", location.version_uri(VersionId(20, 1)))
    assert code == 1 and "missing shard state.json" in text
    code, text = run("validate", job_uri)
    assert code == 0 and "fell back to v000000000010-a000001" in text
    code, text = run("validate", job_uri, "--all", "--json")
    assert code == 1 and [v["valid"] for v in json.loads(text)] == [False, True]
    code, text = run("ls", "s3://no-such-bucket-rljob/rl/grpo")
    assert code == 2 and "NoSuchBucket" in text
    digest = hashlib.sha256(b"{}").hexdigest()
    code, text = run("show", location.version_uri(VersionId(10, 1)), "--json")
    assert code == 0 and digest in text


# -- the bed's server --------------------------------------------------------------------------


def test_a_server_whose_port_was_taken_after_it_was_picked_moves_to_another(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    """Free ports are free only when picked: a concurrent process that binds one first made
    versitygw exit ("address already in use") and a CI run fail. A first start moves on."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    server = S3Server(tmp_path, s3_bucket.server.binary.parent, port, name="versitygw-moved")
    try:
        server.start()
        assert server.port != port
        server.create_bucket("moved")
    finally:
        server.stop()
        taken.close()
