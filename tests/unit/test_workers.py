"""Per-job workers: passes of one job never overlap, a burst of wake-ups collapses, a failing
pass is retried, and a forgotten job stops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from rljob.runtime.workers import RESYNC_JITTER, JobWorkers


def _body(uid: str, name: str = "job") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": "ns", "name": name}}


async def _until(predicate: Any, limit: float = 5.0) -> None:
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - polls a plain predicate, not an event
            await asyncio.sleep(0.01)


async def test_passes_of_one_job_never_overlap_and_bursts_collapse() -> None:
    running, overlaps, passes = 0, 0, 0
    release = asyncio.Event()

    async def slow_pass(_: dict[str, Any]) -> None:
        nonlocal running, overlaps, passes
        running += 1
        overlaps = max(overlaps, running)
        await release.wait()
        passes += 1
        running -= 1

    workers = JobWorkers(slow_pass)
    workers.submit(_body("a"))
    await _until(lambda: running == 1)
    for _ in range(50):
        workers.wake(("ns", "job"))
    release.set()
    await _until(lambda: passes >= 2)
    await asyncio.sleep(0.05)
    assert (overlaps, passes) == (1, 2)
    await workers.stop()


async def test_at_most_max_passes_of_different_jobs_run_at_once() -> None:
    running, most = 0, 0
    release = asyncio.Event()

    async def slow_pass(_: dict[str, Any]) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    workers = JobWorkers(slow_pass, max_passes=3)
    for i in range(10):
        workers.submit(_body(f"uid-{i}", f"job-{i}"))
    await _until(lambda: running == 3)
    await asyncio.sleep(0.05)
    assert most == 3
    release.set()
    await _until(lambda: running == 0)
    assert most == 3
    await workers.stop()


async def test_a_new_job_passes_ahead_of_the_passes_already_waiting() -> None:
    """One slot, held; nine seen jobs wait for their passes; a new job arrives last and runs
    first, because its user waits (controller-runtime's priority queue does the same)."""
    release, order = asyncio.Event(), []

    async def held_pass(body: dict[str, Any]) -> None:
        order.append(body["metadata"]["name"])
        await release.wait()

    workers = JobWorkers(held_pass, max_passes=1)
    seen = {"generation": 1}
    for i in range(10):
        body = _body(f"uid-{i}", f"seen-{i}")
        workers.submit(
            {**body, "metadata": {**body["metadata"], **seen}, "status": {"observedGeneration": 1}}
        )
    await _until(lambda: order == ["seen-0"])
    fresh = _body("uid-new", "new")
    workers.submit({**fresh, "metadata": {**fresh["metadata"], **seen}})
    await asyncio.sleep(0.05)
    release.set()
    await _until(lambda: len(order) == 11)
    assert order[:2] == ["seen-0", "new"]
    await workers.stop()


@pytest.mark.parametrize(
    ("draw", "expected"),
    [("lowest", 300.0), ("highest", 300.0 * (1 + RESYNC_JITTER))],
    ids=["never-sooner-than-the-period", "at-most-a-tenth-later"],
)
def test_resyncs_spread_over_a_tenth_of_the_period(draw: str, expected: float) -> None:
    def pick(low: float, high: float) -> float:
        return low if draw == "lowest" else high

    async def no_pass(_: dict[str, Any]) -> None:
        return None

    workers = JobWorkers(no_pass, resync_seconds=300.0, uniform=pick)
    assert workers.resync_delay() == pytest.approx(expected)


async def test_failing_pass_is_retried_and_forgotten_job_stops() -> None:
    calls = 0

    async def flaky(_: dict[str, Any]) -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("API down")
        return None

    workers = JobWorkers(flaky, max_error_backoff=0.05)
    workers.submit(_body("b"))
    await _until(lambda: calls >= 2)
    workers.forget(_body("b"))
    assert len(workers) == 0
    workers.wake(("ns", "job"))
    await asyncio.sleep(0.05)
    assert calls == 2
    await workers.stop()


async def test_requeue_delay_triggers_another_pass_without_events() -> None:
    calls = 0

    async def requeue(_: dict[str, Any]) -> float:
        nonlocal calls
        calls += 1
        return 0.01

    workers = JobWorkers(requeue)
    workers.submit(_body("c"))
    await _until(lambda: calls >= 3)
    await workers.stop()


async def test_a_pass_reads_the_body_without_its_managed_fields() -> None:
    seen: list[dict[str, Any]] = []

    async def record(body: dict[str, Any]) -> None:
        seen.append(body)

    workers = JobWorkers(record)
    body = _body("c")
    body["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    workers.submit(body)
    await _until(lambda: len(seen) == 1)
    refreshed = _body("c")
    refreshed["metadata"] |= {"resourceVersion": "2", "managedFields": [{"manager": "rljob"}]}
    workers.refresh(refreshed)
    workers.wake(("ns", "job"))
    await _until(lambda: len(seen) == 2)
    assert [b["metadata"] for b in seen] == [
        {"uid": "c", "namespace": "ns", "name": "job"},
        {"uid": "c", "namespace": "ns", "name": "job", "resourceVersion": "2"},
    ]
    assert "managedFields" in body["metadata"]  # the caller's body is not changed
    await workers.stop()


async def test_a_pass_gets_its_own_copy_of_the_stored_body() -> None:
    """Kept as compact JSON between passes (a decoded body is several times larger); what a
    pass changes in its copy never reaches the next pass."""
    seen: list[dict[str, Any]] = []

    async def scribble(body: dict[str, Any]) -> None:
        seen.append({**body, "metadata": dict(body["metadata"])})
        body["metadata"]["name"] = "changed by a pass"

    workers = JobWorkers(scribble)
    workers.submit(_body("d") | {"status": {"phase": "Running", "roles": {"rollout": {}}}})
    await _until(lambda: len(seen) == 1)
    workers.wake(("ns", "job"))
    await _until(lambda: len(seen) == 2)
    assert (
        seen[0]
        == seen[1]
        == _body("d") | {"status": {"phase": "Running", "roles": {"rollout": {}}}}
    )
    workers.forget_uid("d")
    assert (len(workers), workers.uids()) == (0, [])
    workers.wake(("ns", "job"))  # its name is no longer routed
    await workers.stop()


def _wakes(cause: str) -> float:
    return REGISTRY.get_sample_value("rljob_reconcile_wakes_total", {"cause": cause}) or 0.0


async def test_every_pass_is_counted_by_what_asked_for_it() -> None:
    passes = 0

    async def once_then_requeue(_: dict[str, Any]) -> float | None:
        nonlocal passes
        passes += 1
        return 0.01 if passes == 2 else None

    causes = ("rljob", "finding", "requeue", "resync")
    before = {cause: _wakes(cause) for cause in causes}
    workers = JobWorkers(once_then_requeue, resync_seconds=0.05)
    workers.submit(_body("w"))
    await _until(lambda: passes == 1)
    workers.wake(("ns", "job"), "finding")
    await _until(lambda: passes >= 4)  # the finding's pass, its requeue, then a resync
    await workers.stop()
    counted = {cause: _wakes(cause) - before[cause] for cause in causes}
    assert counted["rljob"] == counted["finding"] == counted["requeue"] == 1
    assert counted["resync"] >= 1


@pytest.mark.parametrize(
    ("settled", "event_version", "passes"),
    [
        pytest.param(True, "2", 1, id="the-echo-of-a-settled-write-runs-no-pass"),
        pytest.param(False, "2", 2, id="the-echo-of-a-write-with-steps-after-it-runs-one"),
        pytest.param(True, "3", 2, id="a-write-by-anyone-else-runs-one"),
    ],
)
async def test_the_echo_of_our_own_settled_write_wakes_no_pass(
    settled: bool, event_version: str, passes: int
) -> None:
    """A pass that wrote status and had nothing left to do would only decide the same again
    when its write comes back through the watch."""
    seen: list[dict[str, Any]] = []
    workers: JobWorkers

    async def write_once(body: dict[str, Any]) -> None:
        seen.append(body)
        if len(seen) == 1:
            written = _body("e")
            written["metadata"]["resourceVersion"] = "2"
            workers.refresh(written, settled=settled)

    workers = JobWorkers(write_once)
    workers.submit(_body("e"))
    await _until(lambda: len(seen) == 1)
    echoes = _wakes("own_write")
    event = _body("e")
    event["metadata"]["resourceVersion"] = event_version
    workers.submit(event)
    await _until(lambda: len(seen) == passes)
    await asyncio.sleep(0.05)  # a pass the echo wrongly woke would have run by now
    assert len(seen) == passes
    assert _wakes("own_write") - echoes == (1 if passes == 1 else 0)
    await workers.stop()
