"""A Prometheus that does not answer in time costs a health round one timeout, not one per
queued query: once a query times out, the round's queries still waiting for a slot end with
the same error without being sent."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from rljob.adapters.metrics import PrometheusSource, SourceError, SourceUnavailable
from rljob.health.profiles import Signal
from tests.unit.test_metrics_sources import matrix, serve

SIGNALS = [Signal(f"s{i}", f"metric_{i}") for i in range(8)]
TIMEOUT = 0.3


async def test_a_round_against_a_silent_source_ends_after_one_timeout() -> None:
    release = asyncio.Event()
    received: list[str] = []

    async def silent(request: web.Request) -> web.Response:
        received.append(await request.text())
        await release.wait()
        return web.json_response(matrix())

    async with serve({"/api/v1/query": silent}) as url:
        source = PrometheusSource(url, timeout=TIMEOUT, concurrency=2)
        started = time.monotonic()
        collected = await source.collect(
            {signal: {"ns1": {"a"}} for signal in SIGNALS}, lookback=30, at=1.0
        )
        elapsed = time.monotonic() - started
        release.set()
        await source.close()
    # Four slots' worth of queries would take 4 x TIMEOUT; the queued six never went out.
    assert elapsed < 2 * TIMEOUT
    assert len(received) == 2
    for answer in collected.values():
        assert isinstance(answer, SourceUnavailable) and "no answer within" in str(answer)


async def test_a_query_the_source_rejects_does_not_end_the_round() -> None:
    async def picky(request: web.Request) -> web.Response:
        if "metric_0" in await request.text():
            return web.json_response({"status": "error", "error": "bad"}, status=400)
        return web.json_response(matrix())

    async with serve({"/api/v1/query": picky}) as url:
        source = PrometheusSource(url, timeout=TIMEOUT, concurrency=2)
        collected = await source.collect(
            {signal: {"ns1": {"a"}} for signal in SIGNALS}, lookback=30, at=1.0
        )
        await source.close()
    assert isinstance(collected[SIGNALS[0]], SourceError)
    assert all(collected[signal] == {} for signal in SIGNALS[1:])
