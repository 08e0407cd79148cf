"""The verifier helper: each request is timed into the histogram the operator reads, errors are
counted, and the queue depth comes back down however a request ends, across threads and
asyncio tasks."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

import pytest

from rljob.api.durations import parse_duration
from rljob.api.spec import VerifierLatency
from rljob.health.profiles import VERIFIER
from rljob.sdk.verifier import BUCKETS, VerifierExporter
from tests.unit.sdk.exposition import FakeClock, Scrape, scrape

DURATION = "rljob_verifier_request_duration_seconds"
ERRORS = "rljob_verifier_request_errors_total"
DEPTH = "rljob_verifier_queue_depth"
# Safety net for a broken helper, not a timing assertion: the waits return as soon as all are in.
DEADLOCK = 30.0


def exporter(clock: Callable[[], float] | None = None) -> VerifierExporter:
    return VerifierExporter(serve=False, clock=clock or FakeClock())


def totals(parsed: Scrape) -> tuple[float | None, float | None, float | None]:
    """(requests, errors, depth) as a scrape shows them."""
    return parsed.value(f"{DURATION}_count"), parsed.value(ERRORS), parsed.value(DEPTH)


def test_the_series_are_the_ones_the_operator_reads() -> None:
    verifier = exporter()
    with verifier.request():
        pass
    parsed = scrape(verifier.registry)
    assert (VERIFIER.duration_buckets, VERIFIER.errors_total) == (f"{DURATION}_bucket", ERRORS)
    assert {VERIFIER.duration_buckets, ERRORS, DEPTH} <= parsed.names("rljob_verifier_")
    kinds = [parsed.types[name] for name in (DURATION, "rljob_verifier_request_errors", DEPTH)]
    assert kinds == ["histogram", "counter", "gauge"]
    bounds = set(parsed.labelled(VERIFIER.duration_buckets, VERIFIER.bound_label))
    assert {"+Inf", "10.0", "80.0"} <= bounds
    # A p99 over the highest finite bound reads as that bound: they must reach past the default.
    assert max(BUCKETS) > parse_duration(VerifierLatency().p99)


def test_durations_land_in_their_buckets() -> None:
    clock = FakeClock()
    verifier = exporter(clock)
    for seconds in (0.003, 0.3, 12.0, 100.0):
        with verifier.request():
            clock.advance(seconds)
    parsed = scrape(verifier.registry)
    buckets = parsed.labelled(f"{DURATION}_bucket", "le")
    picked = {le: buckets[le] for le in ("0.005", "0.25", "0.5", "10.0", "20.0", "80.0", "+Inf")}
    assert picked == {
        "0.005": 1.0,
        "0.25": 1.0,
        "0.5": 2.0,
        "10.0": 2.0,
        "20.0": 3.0,
        "80.0": 3.0,
        "+Inf": 4.0,
    }
    assert parsed.value(f"{DURATION}_sum") == pytest.approx(112.303)


class RefusedError(Exception):
    pass


def _raise_refused(_: object) -> None:
    raise RefusedError


def _mark_failed(request: object) -> None:
    request.failed()  # type: ignore[attr-defined]


def _raise_keyboard_interrupt(_: object) -> None:
    raise KeyboardInterrupt


# What happens inside the block; whether it is an error; the exception that leaves, if any.
ENDINGS = [
    pytest.param(lambda _: None, 0.0, None, id="success"),
    pytest.param(_raise_refused, 1.0, RefusedError, id="exception"),
    pytest.param(_mark_failed, 1.0, None, id="marked-failed"),
    pytest.param(_raise_keyboard_interrupt, 0.0, KeyboardInterrupt, id="interrupted-no-error"),
]


@pytest.mark.parametrize(("body", "errors", "raised"), ENDINGS)
def test_a_request_is_counted_and_dequeued_however_it_ends(
    body: Callable[[object], None], errors: float, raised: type[BaseException] | None
) -> None:
    verifier = exporter()
    expected = pytest.raises(raised) if raised else contextlib.nullcontext()
    with expected, verifier.request() as request:
        assert scrape(verifier.registry).value(DEPTH) == 1.0
        body(request)
    assert totals(scrape(verifier.registry)) == (1.0, errors, 0.0)


def test_a_request_is_entered_once() -> None:
    verifier = exporter()
    request = verifier.request()
    with request, pytest.raises(RuntimeError, match="entered once"), request:
        pass
    assert totals(scrape(verifier.registry)) == (1.0, 0.0, 0.0)


def test_depth_counts_requests_in_flight_across_threads() -> None:
    verifier, workers = exporter(), 8
    all_in = threading.Barrier(workers + 1, timeout=DEADLOCK)
    release = threading.Event()

    def serve(index: int) -> None:
        with verifier.request():
            all_in.wait()
            release.wait(DEADLOCK)
            if index % 2:
                raise RefusedError

    def run(index: int) -> None:
        with contextlib.suppress(RefusedError):
            serve(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    all_in.wait()
    assert scrape(verifier.registry).value(DEPTH) == workers
    release.set()
    for thread in threads:
        thread.join(DEADLOCK)
    assert totals(scrape(verifier.registry)) == (workers, workers / 2, 0.0)


async def test_depth_counts_requests_in_flight_across_tasks() -> None:
    verifier, workers = exporter(), 8
    entered, all_in, release = [0], asyncio.Event(), asyncio.Event()

    async def serve(index: int) -> None:
        async with verifier.request():
            entered[0] += 1
            if entered[0] == workers:
                all_in.set()
            await release.wait()
            if index % 2:
                raise RefusedError

    tasks = [asyncio.create_task(serve(i)) for i in range(workers)]
    await asyncio.wait_for(all_in.wait(), DEADLOCK)
    assert scrape(verifier.registry).value(DEPTH) == workers
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(r, RefusedError) for r in results) == workers / 2
    assert totals(scrape(verifier.registry)) == (workers, workers / 2, 0.0)


async def test_cancelled_tasks_leave_the_queue_without_counting_as_errors() -> None:
    verifier, workers = exporter(), 4
    entered, all_in = [0], asyncio.Event()

    async def serve() -> None:
        async with verifier.request():
            entered[0] += 1
            if entered[0] == workers:
                all_in.set()
            await asyncio.Event().wait()  # until cancelled

    tasks = [asyncio.create_task(serve()) for _ in range(workers)]
    await asyncio.wait_for(all_in.wait(), DEADLOCK)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert totals(scrape(verifier.registry)) == (workers, 0.0, 0.0)


async def test_the_decorator_times_sync_and_async_functions() -> None:
    clock = FakeClock()
    verifier = exporter(clock)

    @verifier.timed
    def check(answer: int) -> float:
        clock.advance(2.0)
        if answer < 0:
            raise RefusedError
        return 1.0

    @verifier.timed
    async def check_async(answer: int) -> float:
        clock.advance(3.0)
        if answer < 0:
            raise RefusedError
        return 0.5

    assert (check(1), await check_async(1)) == (1.0, 0.5)
    with pytest.raises(RefusedError):
        check(-1)
    with pytest.raises(RefusedError):
        await check_async(-1)
    assert (check.__name__, check_async.__name__) == ("check", "check_async")
    parsed = scrape(verifier.registry)
    assert totals(parsed) == (4.0, 2.0, 0.0)
    assert parsed.value(f"{DURATION}_sum") == 10.0
