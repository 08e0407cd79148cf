"""A bounded number of reconcile passes at once, handed out by urgency: a job whose user waits
(a new or changed spec, a deletion) goes before the repair of a running one, and both before
the periodic resync. controller-runtime's priority queue orders its work the same way and for
the same reason (v0.20.0, designs/priorityqueue.md: a full resync or a restart otherwise
delays every new or changed object behind all the others); within an urgency, first come first
served."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from enum import IntEnum

from rljob.observability import RECONCILE_QUEUE_SECONDS


class Urgency(IntEnum):
    """Lower goes first."""

    USER = 0  # the spec is not yet observed (new or changed) or the job is being deleted
    EVENT = 1  # something changed: a child, a finding, a requeue the last pass asked for
    RESYNC = 2  # nothing is known to have changed: the periodic resync, a takeover


class PassSlots:
    """At most `limit` holders at once; a freed slot goes to the most urgent waiter."""

    def __init__(self, limit: int) -> None:
        self._free = max(1, limit)
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def slot(self, urgency: Urgency, woken_at: float) -> AsyncIterator[None]:
        """Holds a slot for the block. `woken_at` (monotonic): when the job first asked for
        this pass, so the queue's wait is measured from the wake, not from here."""
        await self._acquire(urgency)
        RECONCILE_QUEUE_SECONDS.labels(urgency.name.lower()).observe(
            max(0.0, time.monotonic() - woken_at)
        )
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, urgency: Urgency) -> None:
        if self._free > 0:  # a slot is free only while nobody waits (_release hands it on)
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (int(urgency), next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # granted, then cancelled before it ran: hand the slot on
            raise

    def _release(self) -> None:
        while self._waiters:
            *_, granted = heapq.heappop(self._waiters)
            if not granted.done():  # a cancelled waiter is skipped here, not searched for
                granted.set_result(None)
                return
        self._free += 1
