"""The bounded reconcile slots: a freed slot goes to the most urgent waiter, first come first
served within an urgency; a waiter that gives up never holds a slot; the event loop's lag is
recorded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from rljob.runtime.loop_lag import watch_loop_lag
from rljob.runtime.pass_slots import PassSlots, Urgency
from rljob.runtime.workers import user_waits

E, R, U = Urgency.EVENT, Urgency.RESYNC, Urgency.USER


async def _served_order(arrivals: list[tuple[str, Urgency]], limit: int = 1) -> list[str]:
    """Holds every slot, queues `arrivals` in order, then frees the slots: who ran, in order."""
    slots, order = PassSlots(limit), []
    release = asyncio.Event()

    async def holder() -> None:
        async with slots.slot(R, time.monotonic()):
            await release.wait()

    async def waiter(name: str, urgency: Urgency) -> None:
        async with slots.slot(urgency, time.monotonic()):
            order.append(name)
            await asyncio.sleep(0)

    holders = [asyncio.create_task(holder()) for _ in range(limit)]
    await asyncio.sleep(0)
    waiters = [asyncio.create_task(waiter(name, u)) for name, u in arrivals]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*holders, *waiters)
    return order


@pytest.mark.parametrize(
    ("arrivals", "served"),
    [
        pytest.param([("a", R), ("b", E), ("c", U)], ["c", "b", "a"], id="most-urgent-first"),
        pytest.param([("a", E), ("b", E), ("c", E)], ["a", "b", "c"], id="fifo-within-urgency"),
        pytest.param(
            [("r1", R), ("e1", E), ("r2", R), ("u1", U), ("e2", E)],
            ["u1", "e1", "e2", "r1", "r2"],
            id="mixed",
        ),
    ],
)
async def test_a_freed_slot_goes_to_the_most_urgent_waiter(
    arrivals: list[tuple[str, Urgency]], served: list[str]
) -> None:
    assert await _served_order(arrivals) == served


async def test_a_waiter_that_gives_up_never_keeps_a_slot() -> None:
    slots = PassSlots(1)
    release, ran = asyncio.Event(), []

    async def hold() -> None:
        async with slots.slot(R, time.monotonic()):
            await release.wait()

    async def run(name: str) -> None:
        async with slots.slot(E, time.monotonic()):
            ran.append(name)

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    cancelled_waiting = asyncio.create_task(run("gave-up-waiting"))
    cancelled_granted = asyncio.create_task(run("gave-up-when-granted"))
    survivor = asyncio.create_task(run("survivor"))
    await asyncio.sleep(0)
    cancelled_waiting.cancel()
    release.set()
    await asyncio.sleep(0)  # the holder leaves and grants the next live waiter, queued behind us
    assert holder.done()
    cancelled_granted.cancel()  # granted, cancelled before it ran
    await asyncio.wait_for(survivor, 5)
    for task in (cancelled_waiting, cancelled_granted):
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert ran == ["survivor"]
    async with asyncio.timeout(5):  # every slot was given back: a new holder gets one at once
        async with slots.slot(R, time.monotonic()):
            pass


@pytest.mark.parametrize(
    ("body", "waits"),
    [
        pytest.param({"metadata": {"generation": 1}}, True, id="new-job"),
        pytest.param(
            {"metadata": {"generation": 3}, "status": {"observedGeneration": 2}}, True, id="edited"
        ),
        pytest.param(
            {"metadata": {"generation": 2}, "status": {"observedGeneration": 2}}, False, id="seen"
        ),
        pytest.param(
            {
                "metadata": {"generation": 2, "deletionTimestamp": "2026-11-30T00:00:00Z"},
                "status": {"observedGeneration": 2},
            },
            True,
            id="deleting",
        ),
    ],
)
def test_a_user_waits_on_an_unobserved_spec_or_a_deletion(
    body: dict[str, Any], waits: bool
) -> None:
    assert user_waits(body) is waits


async def test_the_loop_lag_is_recorded_when_work_holds_the_loop() -> None:
    def slow_readings() -> float:
        buckets = "rljob_event_loop_lag_seconds_bucket"
        fast = REGISTRY.get_sample_value(buckets, {"le": "0.025"}) or 0.0
        return (REGISTRY.get_sample_value("rljob_event_loop_lag_seconds_count") or 0.0) - fast

    before = slow_readings()
    watcher = asyncio.create_task(watch_loop_lag(period=0.01))
    await asyncio.sleep(0)  # the watcher takes its first reading's due time
    time.sleep(0.1)  # noqa: ASYNC251 - holds the loop on purpose: the lag under test
    async with asyncio.timeout(5):
        while slow_readings() == before:  # noqa: ASYNC110 - polls a metric, not an event
            await asyncio.sleep(0.01)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    assert slow_readings() == before + 1
