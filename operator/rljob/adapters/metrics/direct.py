"""The direct source: scraping each pod's metrics page.

One GET of each pod's page per collection, whatever the number of signals, with bounded
concurrency; lines are prefiltered by metric name before prometheus_client's parser sees them
(a full parse of a vLLM page costs ~14 ms; the kept lines are a few dozen). Samples are
timestamped with the scrape time. Unparsable lines, NaN and infinite values and duplicated
series are dropped and tallied.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import aiohttp
import structlog
from prometheus_client.parser import text_string_to_metric_families

from rljob.adapters.metrics.base import (
    Collected,
    HttpSource,
    PodKey,
    Queries,
    Rejects,
    SignalData,
    SourceError,
    SourceKind,
    SourceUnavailable,
    finite,
    read_bounded,
    reject_duplicate,
    shorten,
    status_error,
    wanted_pods,
)
from rljob.health.profiles import Labels, Series, Signal
from rljob.observability import HEALTH_QUERIES, HEALTH_QUERY_SECONDS

log = structlog.get_logger("rljob.metrics")

MAX_PAGE_BYTES = 16 * 1024 * 1024
# Sample lines of the wanted metrics parsed per pod page: a vLLM page has a few dozen, a pod
# with many data-parallel engines a few hundred; a hostile page is cut here.
MAX_PAGE_LINES = 10_000
DEFAULT_SCRAPE_TIMEOUT = 5.0
DEFAULT_SCRAPE_CONCURRENCY = 64
_PAGE_TYPES = ("text/plain", "application/openmetrics-text")

# A pod's page URL, or several (a trainer pod's SDK page and its colocated engines' page).
AddressResolver = Callable[[str, str], "str | Sequence[str] | None"]


def prefilter(text: str, names: Collection[str]) -> list[str]:
    """The sample lines of a metrics page whose name starts with one of `names` (comments and
    every other metric dropped) - before any parsing."""
    prefixes = tuple(names)
    if not prefixes:
        return []
    # Lines end at "\n" only, as the exposition format says: splitlines() would also break a
    # line at a "\r" or "\u2028" inside a label value, which needs no escaping there.
    return [line for line in text.split("\n") if line.startswith(prefixes)]


def page_samples(
    text: str, names: Collection[str], rejects: Rejects
) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of a page's samples named as one of `names`: prefiltered, at most
    MAX_PAGE_LINES lines parsed (a page of millions of matching lines costs no more)."""
    lines = prefilter(text, names)
    if len(lines) > MAX_PAGE_LINES:
        rejects.add("too_many_lines", len(lines) - MAX_PAGE_LINES)
        lines = lines[:MAX_PAGE_LINES]
    return _parse_lines(lines, names, rejects)


def _parse_lines(
    lines: list[str], names: Collection[str], rejects: Rejects
) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of the samples named exactly as one of `names`. A page the parser
    rejects is parsed again line by line, dropping the bad lines."""
    samples: list[tuple[str, dict[str, str], float]] = []
    try:
        families = list(text_string_to_metric_families("\n".join(lines) + "\n"))
    except Exception:  # the parser raises ValueError, IndexError, ... on garbage
        families = []
        for line in lines:
            try:
                families.extend(text_string_to_metric_families(line + "\n"))
            except Exception:
                rejects.add("unparsable_line")
    for family in families:
        for sample in family.samples:
            if sample.name in names:
                samples.append((sample.name, dict(sample.labels), float(sample.value)))
    return samples


@dataclass(frozen=True, slots=True)
class _Page:
    t: float
    samples: list[tuple[str, dict[str, str], float]]


class DirectSource(HttpSource):
    """Scrapes each pod's metrics page; `resolver(namespace, pod)` gives its URL (or
    host:port, for /metrics), or several whose samples are merged (a pod is an error only when
    none answers). Samples are timestamped with the scrape time; there is no history to
    backfill from."""

    kind: SourceKind = "direct"

    def __init__(
        self,
        resolver: AddressResolver,
        *,
        timeout: float = DEFAULT_SCRAPE_TIMEOUT,
        concurrency: int = DEFAULT_SCRAPE_CONCURRENCY,
        max_body: int = MAX_PAGE_BYTES,
        clock: Callable[[], float] = time.time,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.resolver = resolver
        self.timeout = timeout
        self.max_body = max_body
        self._clock = clock
        self._concurrency = max(1, concurrency)
        self._adopt(session)

    @property
    def supports_history(self) -> bool:
        return False

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        return {signal: {} for signal in queries}

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        """One scrape of each pod any signal asks for; each signal gets its own pods' series."""
        wanted = {signal: wanted_pods(selectors) for signal, selectors in queries.items()}
        pods = sorted(set().union(*wanted.values()))
        unique = list(queries)
        if not pods:
            return {signal: {} for signal in unique}
        names = {signal.metric for signal in unique}
        semaphore = asyncio.Semaphore(self._concurrency)
        rejects = Rejects(self.kind)

        async def one(pod: PodKey) -> _Page | SourceError:
            async with semaphore:
                return await self.scrape(pod, names, rejects)

        try:
            pages = await asyncio.gather(*(one(pod) for pod in pods))
        finally:
            rejects.flush()
        errors = [page for page in pages if isinstance(page, SourceError)]
        if len(errors) == len(pages):
            error = SourceUnavailable(
                f"no pod page could be scraped ({len(pages)} tried): {errors[0]}"
            )
            return {signal: error for signal in unique}
        collected: Collected = {}
        for signal in unique:
            data: SignalData = {}
            for pod, page in zip(pods, pages, strict=True):
                if isinstance(page, SourceError) or pod not in wanted[signal]:
                    continue
                series = _page_series(signal, page, rejects)
                if series:
                    data[pod] = series
            collected[signal] = data
        rejects.flush()
        return collected

    async def scrape(
        self, pod: PodKey, names: Collection[str], rejects: Rejects | None = None
    ) -> _Page | SourceError:
        """One pod's page, prefiltered to `names` and parsed, or the error it ended in."""
        own = rejects is None
        rejects = rejects or Rejects(self.kind)
        outcome = "error"
        started = time.monotonic()
        try:
            urls = _urls(self.resolver(*pod))
            if not urls:
                outcome = "unresolved"
                return SourceUnavailable(f"no address for pod {pod[0]}/{pod[1]}")
            pages, errors = await self._fetch_all(urls)
            t = self._clock()
            if not pages:
                raise errors[0]
            samples = [s for text in pages for s in page_samples(text, names, rejects)]
            outcome = "ok"
            return _Page(t, samples)
        except SourceUnavailable as error:
            outcome = "unavailable"
            return error
        except SourceError as error:
            return error
        finally:
            if own:
                rejects.flush()
            HEALTH_QUERIES.labels(source=self.kind, signal="page", outcome=outcome).inc()
            HEALTH_QUERY_SECONDS.labels(source=self.kind).observe(time.monotonic() - started)

    async def _fetch_all(self, urls: list[str]) -> tuple[list[str], list[SourceError]]:
        """A pod's pages one after the other (its own and its engines'), and the errors of those
        that failed."""
        pages: list[str] = []
        errors: list[SourceError] = []
        for url in urls:
            try:
                pages.append(await self._fetch(url))
            except SourceError as error:
                errors.append(error)
        return pages, errors

    async def _fetch(self, url: str) -> str:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        headers = {"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
        try:
            async with self._client().get(
                url, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                body = await read_bounded(response, self.max_body)
                if response.status != 200:
                    raise status_error(response.status, body)
                if not response.content_type.startswith(_PAGE_TYPES):
                    raise SourceError("the answer's content type is not text/plain")
                return body.decode("utf-8", "replace")
        except TimeoutError as error:
            raise SourceUnavailable(f"no answer within {self.timeout:g}s from {url}") from error
        except aiohttp.ClientError as error:
            raise SourceUnavailable(shorten(f"{url}: {type(error).__name__}: {error}")) from error


def _urls(resolved: str | Sequence[str] | None) -> list[str]:
    """The resolver's answer as full URLs (a bare host:port serves /metrics)."""
    found = [resolved] if isinstance(resolved, str) else list(resolved or ())
    return [url if "://" in url else f"http://{url}/metrics" for url in found]


def _page_series(signal: Signal, page: _Page, rejects: Rejects) -> list[Series]:
    series: list[Series] = []
    values: dict[Labels, float] = {}
    conflicting: set[Labels] = set()
    for name, labels, value in page.samples:
        if name != signal.metric or not signal.matches(labels):
            continue
        key = tuple(sorted(labels.items()))
        if key in values:
            differs = not _same_value(value, values[key])
            reject_duplicate(key, differs, conflicting, rejects)
            continue
        values[key] = value
    for key, value in values.items():
        if key in conflicting:
            continue
        if not finite(value, rejects):
            continue
        series.append(Series(key, ((page.t, value),)))
    return series


def _same_value(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
