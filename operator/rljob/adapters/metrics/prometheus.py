"""The Prometheus source: the HTTP API at a base URL.

One instant query with a range vector per signal for every pod of every due job of one source,
`{__name__="m", namespace=~"ns1|ns2", pod=~"p1|p2"}[45s]`, so samples carry their real scrape
timestamps rather than the query time. Queries go out as POST forms: the selector of a few
thousand pods does not fit in a URL. The start-up backfill uses one /api/v1/query_range per
signal. Every query is bounded (a timeout, a cap on the body) and counted in
rljob_health_queries_total{source,signal,outcome}.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from rljob.adapters.metrics.base import (
    Collected,
    HttpSource,
    Queries,
    Rejects,
    Selectors,
    SignalData,
    SourceError,
    SourceKind,
    SourceTimeout,
    SourceUnavailable,
    read_bounded,
    shorten,
    status_error,
    wanted_pods,
)
from rljob.adapters.metrics.promql import (
    form_body,
    parse_matrix,
    range_selector,
    series_selector,
)
from rljob.health.profiles import Signal
from rljob.observability import HEALTH_QUERIES, HEALTH_QUERY_SECONDS

MAX_BODY_BYTES = 32 * 1024 * 1024
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
DEFAULT_TIMEOUT = 10.0
DEFAULT_QUERY_CONCURRENCY = 4
TOKEN_TTL = 60.0
# Prometheus refuses range queries of more than 11,000 points per series.
MAX_RANGE_POINTS = 10_000

TokenProvider = Callable[[], Awaitable[str | None]]


class PrometheusSource(HttpSource):
    """The Prometheus HTTP API at `url` (the base URL, without /api/v1)."""

    kind: SourceKind = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        bearer_token: str | None = None,
        token_provider: TokenProvider | None = None,
        pod_label: str = "pod",
        namespace_label: str = "namespace",
        timeout: float = DEFAULT_TIMEOUT,
        max_body: int = MAX_BODY_BYTES,
        concurrency: int = DEFAULT_QUERY_CONCURRENCY,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.pod_label = pod_label
        self.namespace_label = namespace_label
        self.timeout = timeout
        self.max_body = max_body
        self._bearer_token = bearer_token
        self._token_provider = token_provider
        self._token_read_at = -math.inf
        self._concurrency = max(1, concurrency)
        self._semaphore: asyncio.Semaphore | None = None
        self._adopt(session)

    @property
    def supports_history(self) -> bool:
        return True

    # ---------------------------------------------------------------- queries

    async def raw_samples(
        self, signal: Signal, selectors: Selectors, lookback: float, at: float | None = None
    ) -> SignalData:
        """One instant query of `signal` over the last `lookback` seconds (before `at`, default
        now) for all pods of `selectors`: each pod's series with their scrape timestamps."""
        if not wanted_pods(selectors):
            return {}
        form = {"query": range_selector(signal, selectors, lookback, *self._labels)}
        if at is not None:
            form["time"] = f"{at:.3f}"
        return await self._query("/api/v1/query", form, signal, selectors)

    async def range_samples(
        self, signal: Signal, selectors: Selectors, start: float, end: float, step: float
    ) -> SignalData:
        """One range query of `signal` from `start` to `end` every `step` seconds (widened so
        that no series has more than MAX_RANGE_POINTS points) for all pods of `selectors`."""
        if not wanted_pods(selectors) or not end > start:
            return {}
        step = max(step, (end - start) / MAX_RANGE_POINTS, 0.001)
        form = {
            "query": series_selector(signal, selectors, *self._labels),
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:.3f}",
        }
        return await self._query("/api/v1/query_range", form, signal, selectors)

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        """One instant query per signal."""
        return await self._each(
            queries, lambda signal, pods: self.raw_samples(signal, pods, lookback, at)
        )

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        """One range query per signal."""
        return await self._each(
            queries, lambda signal, pods: self.range_samples(signal, pods, start, end, step)
        )

    # ---------------------------------------------------------------- internals

    @property
    def _labels(self) -> tuple[str, str]:
        return self.pod_label, self.namespace_label

    async def _each(
        self, queries: Queries, query: Callable[[Signal, Selectors], Awaitable[SignalData]]
    ) -> Collected:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._concurrency)
        semaphore = self._semaphore

        timed_out: list[SourceTimeout] = []

        async def one(signal: Signal) -> SignalData | SourceError:
            async with semaphore:
                if timed_out:  # a slow source: the round costs one timeout, not one per slot
                    return timed_out[0]
                try:
                    return await query(signal, queries[signal])
                except SourceTimeout as error:
                    timed_out.append(error)
                    return error
                except SourceError as error:
                    return error

        signals = list(queries)
        answers = await asyncio.gather(*(one(signal) for signal in signals))
        return dict(zip(signals, answers, strict=True))

    async def _query(
        self, path: str, form: dict[str, str], signal: Signal, selectors: Selectors
    ) -> SignalData:
        outcome = "error"
        started = time.monotonic()
        rejects = Rejects(self.kind)
        try:
            payload = await self._post(path, form)
            data = parse_matrix(payload, selectors, rejects, *self._labels, signal=signal)
            outcome = "ok"
            return data
        except SourceUnavailable:
            outcome = "unavailable"
            raise
        finally:
            rejects.flush()
            HEALTH_QUERIES.labels(source=self.kind, signal=signal.name, outcome=outcome).inc()
            HEALTH_QUERY_SECONDS.labels(source=self.kind).observe(time.monotonic() - started)

    async def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", **self.headers}
        token = await self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _token(self) -> str | None:
        provider = self._token_provider
        if provider is None or time.monotonic() - self._token_read_at < TOKEN_TTL:
            return self._bearer_token
        try:
            self._bearer_token = await provider()
        except Exception as error:
            raise SourceUnavailable(shorten(f"bearer token unavailable: {error}")) from error
        self._token_read_at = time.monotonic()
        return self._bearer_token

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    async def _post(self, path: str, form: dict[str, str]) -> object:
        headers = {**await self._headers(), "Content-Type": FORM_CONTENT_TYPE}
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with self._client().post(
                self.url + path,
                data=form_body(form),
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                body = await read_bounded(response, self.max_body)
                if response.status != 200:
                    raise status_error(response.status, body)
                if response.content_type != "application/json":
                    raise SourceError("the answer's content type is not application/json")
        except TimeoutError as error:
            raise SourceTimeout(f"no answer within {self.timeout:g}s") from error
        except aiohttp.ClientError as error:
            raise SourceUnavailable(shorten(f"{type(error).__name__}: {error}")) from error
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as error:
            raise SourceError(shorten(f"malformed JSON: {error}")) from error
