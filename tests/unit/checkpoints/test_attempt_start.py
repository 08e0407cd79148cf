"""The operator's attempt start against an in-memory store: gather (read-only, re-listing a
version found broken) -> plan -> marker -> retention. A listing that misses a shard once never
costs the newest good checkpoint, and retention's trouble never blocks an attempt."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.adapters.checkpoints import Checkpoints, endpoint_from_spec, status_capabilities
from rljob.api import RLJob, StoreCapabilities, parse_rljob
from rljob.checkpoint_protocol.errors import StoreError
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.s3 import Capabilities, StoreCredentials, StoreEndpoint
from rljob.checkpoints.attempt_plan import plan_attempt_start

from ._build import NOW, v
from .fake_s3 import FakeClients, FakeS3, client_error, denied, read_timeout

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rljob-demo.yaml"


def job(**checkpoint: Any) -> RLJob:
    """The demo job (keep 3, incompleteGrace 10m) with checkpoint fields overridden."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="rl", uid="uid-1", generation=1)
    body["spec"]["checkpoint"].update(checkpoint)
    return parse_rljob(body)


def setup(fake: FakeS3, **checkpoint: Any) -> tuple[Checkpoints, RLJob, CheckpointLocation]:
    cps = Checkpoints(default=StoreEndpoint("http://fake"), clients=FakeClients(fake))
    rljob = job(**checkpoint)
    location = cps.location(rljob)
    assert location is not None
    return cps, rljob, location


def names(fake: FakeS3, location: CheckpointLocation, version: VersionId) -> list[str]:
    prefix = location.version_prefix(version)
    return sorted(k[len(prefix) :] for k in fake.objects if k.startswith(prefix))


async def two_versions(
    fake: FakeS3, *, missing: tuple[str, ...] = (), age: timedelta = timedelta(minutes=1)
) -> tuple[Checkpoints, RLJob, CheckpointLocation]:
    """Attempt 1 started and saved v100, then v200 (`missing`: shards v200 never got)."""
    cps, rljob, location = setup(fake)
    await cps.start_attempt(rljob, 1, NOW - timedelta(hours=2))
    fake.write_version(location, v(100, 1), age=timedelta(hours=1))
    fake.write_version(location, v(200, 1), age=age, missing=missing)
    return cps, rljob, location


async def test_a_shard_missing_from_one_listing_costs_nothing() -> None:
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake)
    fake.hidden = {location.shard_key(v(200, 1), "model.pt")}  # not yet in the listing
    start = await cps.start_attempt(rljob, 2, NOW)
    assert start.resumed_from is not None and start.resumed_from.version == v(200, 1).name
    assert (start.problem, start.retention_problem) == ("", "")
    assert names(fake, location, v(200, 1)) == ["manifest.json", "model.pt"]
    assert fake.deleted == []


async def test_the_pointers_version_missing_from_one_listing_is_still_resumed_from() -> None:
    """latest.json names v200, but the discovery listing lags and shows none of its keys: it
    is a candidate all the same, listed again, and chosen (not scratch, not v100)."""
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake)
    store = cps.store(rljob)
    assert store is not None
    assert store.store.write_pointer(v(200, 1))
    prefix = location.version_prefix(v(200, 1))
    fake.hidden = {k for k in fake.objects if k.startswith(prefix)}
    start = await cps.start_attempt(rljob, 2, NOW)
    assert start.resumed_from is not None and start.resumed_from.version == v(200, 1).name
    assert fake.deleted == []


async def test_a_version_broken_in_every_listing_is_skipped_but_kept_as_evidence() -> None:
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake, missing=("optim.pt",))
    inputs = await cps.gather_attempt(rljob, 2, None, NOW)
    assert [len(c.verdicts) for c in inputs.candidates] == [3, 1]  # listed 3 times, bounded
    start = await cps.start_attempt(rljob, 2, NOW)
    assert start.resumed_from is not None and start.resumed_from.version == v(100, 1).name
    assert "missing shard optim.pt (in 3 listings)" in start.problem
    assert [e.reason for e in start.events] == ["CheckpointFallback", "Resuming"]
    assert names(fake, location, v(200, 1)) == ["manifest.json", "model.pt"]

    # Attempt 3, still within incompleteGrace of v200's manifest: still kept as evidence.
    await cps.start_attempt(rljob, 3, NOW + timedelta(minutes=5))
    assert names(fake, location, v(200, 1)) == ["manifest.json", "model.pt"]
    # Attempt 4, past it: fenced and broken, it goes.
    await cps.start_attempt(rljob, 4, NOW + timedelta(minutes=30))
    assert names(fake, location, v(200, 1)) == []


def full_listing_times_out(params: dict[str, Any]) -> Exception | None:
    """Only the listing of every version (retention's) times out; discovery lists after the
    pointer."""
    everything = params["Prefix"].endswith("/v") and not params.get("StartAfter")
    return read_timeout(params) if everything else None


@pytest.mark.parametrize(
    ("operation", "fault", "says"),
    [
        pytest.param(
            "list_multipart_uploads", denied, "AccessDenied", id="multipart-listing-denied"
        ),
        pytest.param(
            "list_objects_v2",
            full_listing_times_out,
            "list_objects_v2",
            id="full-listing-times-out",
        ),
    ],
)
async def test_retention_trouble_never_blocks_an_attempt(
    operation: str, fault: Any, says: str
) -> None:
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake)
    fake.put_object(Key=location.pointer_key, Body=b'{"version": "v000000000200-a000001"}')
    fake.faults[operation] = fault
    start = await cps.start_attempt(rljob, 2, NOW)
    assert start.resumed_from is not None and start.resumed_from.version == v(200, 1).name
    assert says in start.retention_problem
    assert location.marker_key(2) in fake.objects
    assert fake.deleted == []


async def test_a_retry_keeps_the_journaled_choice() -> None:
    fake = FakeS3()
    cps, rljob, _ = await two_versions(fake)
    inputs = await cps.gather_attempt(rljob, 2, v(100, 1).name, NOW)
    plan = plan_attempt_start(inputs)
    assert plan.chosen is not None and plan.chosen.version == v(100, 1)
    assert plan.marker.resumed_from_version == v(100, 1).name
    assert plan.retention.deleted_versions == []  # v200 is newer than the resume point


async def test_a_retried_start_keeps_its_marker_choice() -> None:
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake)
    first = await cps.start_attempt(rljob, 2, NOW)
    fake.write_version(location, v(300, 1), age=timedelta(0))  # a zombie's save, after
    again = await cps.start_attempt(rljob, 2, NOW + timedelta(minutes=1))
    assert first.resumed_from is not None and again.resumed_from is not None
    assert again.resumed_from.version == first.resumed_from.version == v(200, 1).name


async def test_gather_writes_no_protocol_object() -> None:
    fake = FakeS3()
    cps, rljob, _ = await two_versions(fake)
    before = dict(fake.objects)
    await cps.gather_attempt(rljob, 2, None, NOW)
    assert fake.objects == before and fake.deleted == []


async def test_an_unreachable_store_raises_before_anything_is_written() -> None:
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake)
    fake.faults["list_objects_v2"] = lambda kw: client_error("ServiceUnavailable", 503)
    with pytest.raises(StoreError):
        await cps.gather_attempt(rljob, 2, None, NOW)
    assert location.marker_key(2) not in fake.objects


async def test_a_refused_delete_is_reported_not_raised() -> None:
    fake = FakeS3()
    cps, rljob, location = await two_versions(fake)
    for step in (300, 400, 500):
        fake.write_version(location, v(step, 1))
    plan = plan_attempt_start(await cps.gather_attempt(rljob, 2, None, NOW))
    assert plan.retention.deleted_versions == [v(100, 1), v(200, 1)]  # beyond keep=3
    fake.faults["delete_objects"] = denied
    assert "AccessDenied" in await cps.apply_retention(rljob, plan.retention)
    fake.faults["delete_objects"] = lambda kw: client_error("ServiceUnavailable", 503)
    assert "ServiceUnavailable" in await cps.apply_retention(rljob, plan.retention)
    assert names(fake, location, v(100, 1)) == ["manifest.json", "model.pt"]
    del fake.faults["delete_objects"]
    assert await cps.apply_retention(rljob, plan.retention) == ""
    assert names(fake, location, v(100, 1)) == []


@pytest.mark.parametrize(
    ("checkpoint", "url", "region", "style"),
    [
        pytest.param({"addressingStyle": "virtual"}, None, None, "virtual", id="aws"),
        pytest.param(
            {"endpoint": "http://minio:9000", "region": "eu-1", "addressingStyle": "path"},
            "http://minio:9000",
            "eu-1",
            "path",
            id="private-endpoint",
        ),
    ],
)
def test_the_adapter_turns_the_spec_into_the_protocols_endpoint(
    checkpoint: dict[str, Any], url: str | None, region: str | None, style: str
) -> None:
    # The protocol knows no RLJob types: the adapter converts spec.checkpoint.
    spec = job(**checkpoint).spec.checkpoint
    assert spec is not None
    credentials = StoreCredentials("id", "secret")
    endpoint = endpoint_from_spec(spec, credentials=credentials)
    assert endpoint == StoreEndpoint(url, region, style, credentials)


def test_the_adapter_records_a_probe_as_the_status_type() -> None:
    probed = Capabilities(conditional_writes=True, probed_at=NOW)
    assert status_capabilities(probed) == StoreCapabilities(conditional_writes=True, probed_at=NOW)
