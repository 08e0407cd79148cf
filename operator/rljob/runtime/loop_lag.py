"""How late the event loop runs a timer: the operator's one measure of work that holds the loop
(a long parse, a collection, a burst of passes). Everything the operator does waits behind it."""

from __future__ import annotations

import asyncio

from rljob.observability import EVENT_LOOP_LAG

LAG_PERIOD = 1.0  # seconds between two readings


async def watch_loop_lag(period: float = LAG_PERIOD) -> None:
    """Records, every `period`, how much later than asked a sleep of the loop returned."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)
        EVENT_LOOP_LAG.observe(max(0.0, loop.time() - due))
