"""What a verifier server exports around each verification, the series the operator's
VerifierSlow detector reads (rljob.health.profiles: the `_bucket` series of
`rljob_verifier_request_duration_seconds`, label `le`, and `rljob_verifier_request_errors_total`)
plus `rljob_verifier_queue_depth`, the requests accepted and not yet finished:

    verifier = VerifierExporter()                  # serves /metrics on RLJOB_METRICS_PORT or 9100

    with verifier.request():                       # in a thread
        reward = run_tests(sample)

    async with verifier.request():                 # or in a coroutine
        reward = await sandbox.run(sample)

    @verifier.timed                                # or around a function, sync or async
    async def verify(sample): ...

An exception escaping the block is an error (counted, then re-raised); `request.failed()` counts
one without raising (a sandbox that answered "timed out"). Cancellation (asyncio.CancelledError,
KeyboardInterrupt) is not an error. Every request is observed in the histogram, errors too, so
errors over requests is an error rate; the depth is decremented however the block ends.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from rljob.sdk.progress import METRICS_PORT_ENV

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

# The verifier role's metrics port in docs/writing-an-rljob.md, when RLJOB_METRICS_PORT is unset.
DEFAULT_PORT = 9100
DURATION = "rljob_verifier_request_duration_seconds"
# prometheus_client adds `_total`: rljob_verifier_request_errors_total, the name the operator reads.
ERRORS = "rljob_verifier_request_errors"
QUEUE_DEPTH = "rljob_verifier_queue_depth"
# prometheus_client's defaults stop at 10 s, the default p99 bound (spec.health.verifierLatency):
# a p99 above the highest finite bound reads as that bound, so these go on to 80 s (as the
# simulated verifiers' do).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)

P = ParamSpec("P")
R = TypeVar("R")


class Request:
    """One verification: a context manager, sync or async, used once."""

    def __init__(self, exporter: VerifierExporter) -> None:
        self._exporter = exporter
        self._started: float | None = None
        self._failed = False

    def failed(self) -> None:
        """Counts this request as an error even though no exception leaves the block."""
        self._failed = True

    def __enter__(self) -> Request:
        if self._started is not None:
            raise RuntimeError("a Request is entered once; call request() for each verification")
        self._started = self._exporter.accept()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._started is not None, "exited without entering"
        failed = self._failed or isinstance(error, Exception)
        self._exporter.finish(self._started, failed=failed)

    async def __aenter__(self) -> Request:
        return self.__enter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(kind, error, traceback)


class VerifierExporter:
    """The verifier's series in `registry` (a new one if None), served on `port` (else
    RLJOB_METRICS_PORT, else 9100) unless `serve` is False. `clock` times requests
    (time.perf_counter by default; tests pass a fake). Thread-safe: prometheus_client's metrics
    take their own locks, none held across the verification, so coroutines never block on them
    for long."""

    def __init__(
        self,
        port: int | None = None,
        registry: CollectorRegistry | None = None,
        *,
        serve: bool = True,
        buckets: tuple[float, ...] = BUCKETS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        # Imported here: the SDK requires boto3 only, and a verifier that exports metrics has it.
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            start_http_server,
        )

        self.registry = registry or CollectorRegistry()
        self._clock = clock
        self._duration = Histogram(
            DURATION,
            "Seconds per verification request, errors included.",
            buckets=buckets,
            registry=self.registry,
        )
        self._errors = Counter(ERRORS, "Verification requests that failed.", registry=self.registry)
        self._depth = Gauge(
            QUEUE_DEPTH, "Requests accepted and not yet finished.", registry=self.registry
        )
        if serve:
            start_http_server(
                port or int(os.environ.get(METRICS_PORT_ENV, DEFAULT_PORT)), registry=self.registry
            )

    def request(self) -> Request:
        """A context manager (`with` or `async with`) around one verification."""
        return Request(self)

    def accept(self) -> float:
        """A request was accepted: one more in the queue; returns its start time."""
        self._depth.inc()
        return self._clock()

    def finish(self, started: float, *, failed: bool = False) -> None:
        """The request accepted at `started` is done: observed, counted if failed, dequeued."""
        try:
            self._duration.observe(max(0.0, self._clock() - started))
            if failed:
                self._errors.inc()
        finally:
            self._depth.dec()

    def timed(self, function: Callable[P, R]) -> Callable[P, R]:
        """Decorates a verification function, plain or `async def`, with request()."""
        if inspect.iscoroutinefunction(function):
            coroutine = cast(Callable[P, Awaitable[Any]], function)

            @functools.wraps(function)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with self.request():
                    return await coroutine(*args, **kwargs)

            return cast(Callable[P, R], run_async)

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with self.request():
                return function(*args, **kwargs)

        return run


__all__ = ["BUCKETS", "DURATION", "ERRORS", "QUEUE_DEPTH", "Request", "VerifierExporter"]
